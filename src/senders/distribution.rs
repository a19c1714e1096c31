//! CNCF Distribution (registry:2, v3) notifications: `{"events": [...]}` envelopes.

use serde::Deserialize;

use axum::http::HeaderMap;

use super::{
    CheckError, Incoming, Malformed, Need, Parsed, PushEvent, Rejected, Sender, Settings,
    SourceMode, SourceView, Spec, request,
};

const MEDIA_TYPES: &[&str] = &[
    "application/vnd.docker.distribution.events.v1+json",
    "application/vnd.docker.distribution.events.v2+json",
    "application/json",
];

const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
];

#[derive(Deserialize)]
struct Envelope {
    events: Vec<Event>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    id: Option<String>,
    action: String,
    target: Option<Target>,
    request: Option<Request>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Target {
    media_type: Option<String>,
    digest: Option<String>,
    repository: Option<String>,
    url: Option<String>,
    tag: Option<String>,
}

#[derive(Deserialize)]
struct Request {
    host: Option<String>,
}

fn parse(body: &[u8]) -> Result<Vec<PushEvent>, Malformed> {
    let envelope: Envelope = serde_json::from_slice(body)
        .map_err(|e| Malformed(format!("not an event envelope: {e}")))?;
    Ok(envelope.events.into_iter().map(normalize).collect())
}

fn normalize(e: Event) -> PushEvent {
    let target = e.target.unwrap_or(Target {
        media_type: None,
        digest: None,
        repository: None,
        url: None,
        tag: None,
    });
    let host = e
        .request
        .and_then(|r| r.host)
        .or_else(|| target.url.as_deref().and_then(host_of_url));
    let is_manifest = target
        .media_type
        .as_deref()
        .is_some_and(|m| MANIFEST_TYPES.contains(&m));
    let ignore = if e.action != "push" {
        Some(format!("action `{}` is not a push", e.action))
    } else if !is_manifest {
        Some(format!(
            "not a manifest push (media type {})",
            target.media_type.as_deref().unwrap_or("none")
        ))
    } else if target.tag.as_deref().is_none_or(str::is_empty) {
        Some("manifest pushed by digest, without a tag".to_owned())
    } else {
        None
    };
    PushEvent {
        event_id: e.id,
        registry: host,
        repository: target.repository.unwrap_or_default(),
        tag: target.tag.filter(|t| !t.is_empty()),
        digest: target.digest,
        ignore,
    }
}

fn host_of_url(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    Some(rest.split('/').next()?.to_owned())
}

/// CNCF Distribution: no signature of its own, only static `endpoints[].headers`. Pier
/// takes a token in `Authorization`, an HMAC in a header a proxy adds, or both; never
/// neither.
pub(crate) struct Distribution;

impl Sender for Distribution {
    fn name(&self) -> &'static str {
        "distribution"
    }

    fn check(&self, spec: &Spec<'_>) -> Result<Settings, CheckError> {
        let mode = spec.mode(self.name(), SourceMode::Hmac, &[])?;
        spec.credentials(self.name(), Need::Optional, Need::Optional)?;
        if spec.tokens.is_empty() && spec.secrets.is_empty() {
            return Err(CheckError::NeedsTokenOrSecret(self.name()));
        }
        spec.no_access_method(self.name())?;
        Ok(Settings {
            signature_header: spec.signature_header_or(super::check::DEFAULT_SIGNATURE_HEADER),
            ..Settings::new(mode, spec.raw_keys())
        })
    }

    fn credential_headers<'a>(&self, source: &SourceView<'a>) -> Vec<&'a str> {
        vec![source.signature_header]
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
        _now: i64,
    ) -> Result<(), Rejected> {
        if source.keys.is_empty() {
            return Ok(());
        }
        request::sha256_hex_in(source, req, source.signature_header, signed)
    }

    fn media_types(&self) -> &'static [&'static str] {
        MEDIA_TYPES
    }

    fn parse(
        &self,
        _source: &SourceView<'_>,
        _headers: &HeaderMap,
        json: &[u8],
    ) -> Result<Parsed, Malformed> {
        Ok(Parsed::events(None, parse(json)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(events: &str) -> Vec<u8> {
        format!(r#"{{"events":[{events}]}}"#).into_bytes()
    }

    #[test]
    fn a_tagged_manifest_push_is_an_event_with_tag_digest_and_host() {
        let body = envelope(
            r#"{"id":"e1","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json",
            "digest":"sha256:aa","repository":"demo/web","url":"http://127.0.0.1:5000/v2/demo/web/manifests/sha256:aa",
            "tag":"main"},"request":{"host":"127.0.0.1:5000"}}"#,
        );
        let ev = parse(&body).unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].ignore, None);
        assert_eq!(ev[0].tag.as_deref(), Some("main"));
        assert_eq!(ev[0].digest.as_deref(), Some("sha256:aa"));
        assert_eq!(ev[0].registry.as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(ev[0].event_id.as_deref(), Some("e1"));
    }

    #[test]
    fn blobs_pulls_and_digest_only_pushes_are_ignored_with_a_reason() {
        let body = envelope(
            r#"{"id":"b","action":"push","target":{"mediaType":"application/octet-stream","digest":"sha256:bb","repository":"demo/web"}},
               {"id":"p","action":"pull","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:cc","repository":"demo/web","tag":"main"}},
               {"id":"d","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:dd","repository":"demo/web"}}"#,
        );
        let ev = parse(&body).unwrap();
        assert!(ev[0].ignore.as_deref().unwrap().contains("not a manifest"));
        assert!(ev[1].ignore.as_deref().unwrap().contains("not a push"));
        assert!(ev[2].ignore.as_deref().unwrap().contains("by digest"));
    }

    #[test]
    fn garbage_is_malformed() {
        assert!(parse(b"{\"events\": 3}").is_err());
        assert!(parse(b"not json").is_err());
    }
}
