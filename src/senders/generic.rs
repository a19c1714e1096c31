//! The `generic` source: any sender that signs its body, either with HMAC-SHA256 in a
//! header (`mode = "hmac"`) or as Standard Webhooks (`mode = "standard-webhooks"`), and
//! sends `{"repository": "...", "tag": "...", "digest": "sha256:..." (optional),
//! "id": "..." (optional)}`. A Standard Webhooks sender may wrap that object in its usual
//! envelope, `{"type": "image.pushed", "timestamp": "...", "data": {...}}`.

use axum::http::HeaderMap;
use serde::Deserialize;

pub use super::is_digest;
use super::{
    CheckError, Incoming, Malformed, Need, Parsed, PushEvent, Rejected, Sender, Settings,
    SourceMode, SourceView, Spec, malformed, request, split_host, verify,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    /// `demo/web`, or with its registry host: `127.0.0.1:5000/demo/web`.
    repository: String,
    tag: String,
    digest: Option<String>,
    id: Option<String>,
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    kind: String,
    data: serde_json::Value,
}

/// Event types of a Standard Webhooks envelope that mean "an image was pushed".
const PUSH_TYPES: &[&str] = &["image.pushed", "image.push", "push"];

fn parse(mode: SourceMode, headers: &HeaderMap, json: &[u8]) -> Result<Parsed, Malformed> {
    if mode == SourceMode::StandardWebhooks {
        let id = headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let value: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| malformed("invalid body", e))?;
        if value.get("data").is_some() && value.get("type").is_some() {
            let envelope: Envelope =
                serde_json::from_value(value).map_err(|e| malformed("invalid envelope", e))?;
            if !PUSH_TYPES.contains(&envelope.kind.as_str()) {
                return Ok(Parsed::nothing(
                    id,
                    format!(
                        "event type `{}` is not a push",
                        envelope.kind.chars().take(60).collect::<String>()
                    ),
                ));
            }
            let body: Body =
                serde_json::from_value(envelope.data).map_err(|e| malformed("invalid data", e))?;
            return Ok(Parsed::events(id, vec![event(body)?]));
        }
        let body: Body = serde_json::from_value(value).map_err(|e| malformed("invalid body", e))?;
        return Ok(Parsed::events(id, vec![event(body)?]));
    }
    let b: Body = serde_json::from_slice(json).map_err(|e| malformed("invalid body", e))?;
    Ok(Parsed::events(None, vec![event(b)?]))
}

fn event(b: Body) -> Result<PushEvent, Malformed> {
    if b.repository.is_empty() || b.tag.is_empty() {
        return Err(Malformed("repository and tag must not be empty".into()));
    }
    if let Some(d) = &b.digest
        && !is_digest(d)
    {
        return Err(Malformed("`digest` is not a sha256 digest".into()));
    }
    let (registry, repository) = split_host(&b.repository);
    let mut e = PushEvent::push(registry, repository, Some(b.tag), b.digest);
    e.event_id = b.id;
    Ok(e)
}

/// Any sender that signs its body: HMAC-SHA256 in a header of the user's choice
/// (`mode = "hmac"`, the default), or Standard Webhooks (`mode = "standard-webhooks"`).
pub(crate) struct Generic;

/// Where `mode = "hmac"` looks for the signature unless `signature_header` says otherwise.
const SIGNATURE: &str = "X-Pier-Signature";

const STANDARD_HEADERS: [&str; 3] = ["webhook-id", "webhook-timestamp", "webhook-signature"];

impl Sender for Generic {
    fn name(&self) -> &'static str {
        "generic"
    }

    fn check(&self, spec: &Spec<'_>) -> Result<Settings, CheckError> {
        let modes = [SourceMode::Hmac, SourceMode::StandardWebhooks];
        let mode = spec.mode(self.name(), SourceMode::Hmac, &modes)?;
        spec.credentials(self.name(), Need::Optional, Need::Required)?;
        let keys = match mode {
            SourceMode::StandardWebhooks => spec.standard_webhooks_keys()?,
            _ => spec.raw_keys(),
        };
        // Standard Webhooks fixes its headers; only plain HMAC lets the user choose.
        if mode != SourceMode::Hmac {
            spec.fixed_signature_header(self.name())?;
        }
        spec.no_access_method(self.name())?;
        Ok(Settings {
            signature_header: spec.signature_header_or(SIGNATURE),
            ..Settings::new(mode, keys)
        })
    }

    fn credential_headers<'a>(&self, source: &SourceView<'a>) -> Vec<&'a str> {
        let mut names = vec![source.signature_header];
        if source.mode == SourceMode::StandardWebhooks {
            names.extend(STANDARD_HEADERS);
        }
        names
    }

    fn check_head(
        &self,
        source: &SourceView<'_>,
        headers: &HeaderMap,
        _path_token: Option<&str>,
    ) -> Result<(), Rejected> {
        request::optional_token_in(source, headers, "authorization")
    }

    fn check_signature(
        &self,
        source: &SourceView<'_>,
        req: Incoming<'_>,
        signed: &[u8],
        now: i64,
    ) -> Result<(), Rejected> {
        if source.mode != SourceMode::StandardWebhooks {
            return request::sha256_hex_in(source, req, source.signature_header, signed);
        }
        let [id, timestamp, signature] = STANDARD_HEADERS.map(|h| req.header(h));
        verify::standard_webhooks(
            verify::StandardHeaders {
                id,
                timestamp,
                signature,
            },
            source.keys,
            source.tolerance.as_secs() as i64,
            now,
            signed,
        )
    }

    fn parse(
        &self,
        source: &SourceView<'_>,
        headers: &HeaderMap,
        json: &[u8],
    ) -> Result<Parsed, Malformed> {
        parse(source.mode, headers, json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hmac(body: &[u8]) -> Result<Vec<PushEvent>, Malformed> {
        parse(SourceMode::Hmac, &HeaderMap::new(), body).map(|p| p.events)
    }

    #[test]
    fn repository_may_carry_its_host() {
        let ev = hmac(br#"{"repository":"127.0.0.1:5000/demo/web","tag":"main"}"#).unwrap();
        assert_eq!(ev[0].registry.as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(ev[0].repository, "demo/web");
        let ev = hmac(br#"{"repository":"demo/web","tag":"main","id":"x"}"#).unwrap();
        assert_eq!(ev[0].registry, None);
        assert_eq!(ev[0].event_id.as_deref(), Some("x"));
    }

    #[test]
    fn bad_bodies_say_why() {
        assert!(hmac(br#"{"repository":"demo/web"}"#).is_err());
        assert!(hmac(br#"{"repository":"demo/web","tag":"main","digest":"md5:1"}"#).is_err());
        assert!(hmac(br#"{"repository":"demo/web","tag":"main","extra":1}"#).is_err());
    }

    #[test]
    fn a_standard_webhooks_envelope_is_read_and_its_id_is_the_delivery_id() {
        let mut h = HeaderMap::new();
        h.insert("webhook-id", "msg_1".parse().unwrap());
        let p = parse(
            SourceMode::StandardWebhooks,
            &h,
            br#"{"type":"image.pushed","timestamp":"2026-01-01T00:00:00Z","data":{"repository":"demo/web","tag":"main"}}"#,
        )
        .unwrap();
        assert_eq!(p.delivery_id.as_deref(), Some("msg_1"));
        assert_eq!(p.events[0].tag.as_deref(), Some("main"));
        let other = parse(
            SourceMode::StandardWebhooks,
            &h,
            br#"{"type":"image.deleted","data":{}}"#,
        )
        .unwrap();
        assert!(other.events.is_empty());
        assert!(other.reason.unwrap().contains("image.deleted"));
    }
}
