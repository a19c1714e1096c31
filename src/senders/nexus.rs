//! Sonatype Nexus Repository webhooks. A repository component event
//! (`X-Nexus-Webhook-Id: rm:repository:component`) names a docker image as
//! `component.name` and its tag as `component.version`; neither host nor port is in the
//! payload, so the source's `registry` supplies them.

use axum::http::HeaderMap;
use serde::Deserialize;

use super::verify::{self, Algorithm};
use super::{
    CheckError, Incoming, Malformed, Need, Parsed, PushEvent, RegistryRule, Rejected, Sender,
    Settings, SourceMode, SourceView, Spec, malformed,
};

#[derive(Deserialize)]
struct Body {
    action: String,
    component: Option<Component>,
}

#[derive(Deserialize)]
struct Component {
    format: Option<String>,
    name: Option<String>,
    version: Option<String>,
}

fn parse(headers: &HeaderMap, json: &[u8]) -> Result<Parsed, Malformed> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let delivery = header("x-nexus-webhook-delivery").map(str::to_owned);
    match header("x-nexus-webhook-id") {
        Some("rm:repository:component") => {}
        Some(other) => {
            return Ok(Parsed::nothing(
                delivery,
                format!(
                    "webhook `{}` is not a component event",
                    other.chars().take(40).collect::<String>()
                ),
            ));
        }
        None => return Err(Malformed("missing X-Nexus-Webhook-Id header".into())),
    }
    let b: Body = serde_json::from_slice(json).map_err(|e| malformed("invalid payload", e))?;
    let c = b
        .component
        .ok_or_else(|| Malformed("a component event without a component".into()))?;
    let name = c.name.unwrap_or_default();
    let format = c.format.unwrap_or_default();
    let reason = if format != "docker" {
        Some(format!("format `{format}` is not docker"))
    } else if !matches!(b.action.as_str(), "CREATED" | "UPDATED") {
        Some(format!("action `{}` is not a push", b.action))
    } else {
        None
    };
    let event = match reason {
        Some(r) => PushEvent::ignored(name, r.chars().take(80).collect::<String>()),
        None => PushEvent::push(None, name, c.version, None),
    };
    Ok(Parsed::events(delivery, vec![event]))
}

/// Nexus: a hex HMAC-SHA1 of the body in `X-Nexus-Webhook-Signature`, and no host.
pub(crate) struct Nexus;

const SIGNATURE: &str = "x-nexus-webhook-signature";

impl Sender for Nexus {
    fn name(&self) -> &'static str {
        "nexus"
    }

    fn check(&self, spec: &Spec<'_>) -> Result<Settings, CheckError> {
        let mode = spec.mode(self.name(), SourceMode::Hmac, &[])?;
        spec.credentials(self.name(), Need::Refused, Need::Required)?;
        spec.no_extras(self.name())?;
        let no_host = CheckError::NoRegistryHost(self.name());
        Ok(Settings::new(mode, spec.raw_keys()).registry(RegistryRule::Required(no_host)))
    }

    fn credential_headers<'a>(&self, _source: &SourceView<'a>) -> Vec<&'a str> {
        vec![SIGNATURE]
    }

    fn check_head(
        &self,
        _source: &SourceView<'_>,
        _headers: &HeaderMap,
        _path_token: Option<&str>,
    ) -> Result<(), Rejected> {
        Ok(())
    }

    fn check_signature(
        &self,
        source: &SourceView<'_>,
        req: Incoming<'_>,
        signed: &[u8],
        _now: i64,
    ) -> Result<(), Rejected> {
        let given = req.header(SIGNATURE);
        verify::hmac_hex(given, None, Algorithm::Sha1, source.keys, signed)
    }

    fn parse(
        &self,
        _source: &SourceView<'_>,
        headers: &HeaderMap,
        json: &[u8],
    ) -> Result<Parsed, Malformed> {
        parse(headers, json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(id: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-nexus-webhook-id", id.parse().unwrap());
        h.insert("x-nexus-webhook-delivery", "n-1".parse().unwrap());
        h
    }

    const BODY: &str = r#"{"timestamp":"2026-01-01T00:00:00.000+0000","nodeId":"N","initiator":"admin/127.0.0.1",
        "repositoryName":"docker-hosted","action":"CREATED","component":{"id":"c","componentId":"cid",
        "format":"docker","name":"demo/web","group":null,"version":"main"}}"#;

    #[test]
    fn a_docker_component_is_a_push_without_host() {
        let p = parse(&headers("rm:repository:component"), BODY.as_bytes()).unwrap();
        assert_eq!(p.delivery_id.as_deref(), Some("n-1"));
        assert_eq!(p.events[0].repository, "demo/web");
        assert_eq!(p.events[0].tag.as_deref(), Some("main"));
        assert_eq!(p.events[0].registry, None);
    }

    #[test]
    fn assets_deletions_and_other_formats_deploy_nothing() {
        assert!(
            parse(&headers("rm:repository:asset"), BODY.as_bytes())
                .unwrap()
                .events
                .is_empty()
        );
        let deleted = BODY.replace("CREATED", "DELETED");
        let p = parse(&headers("rm:repository:component"), deleted.as_bytes()).unwrap();
        assert!(p.events[0].ignore.is_some());
        let maven = BODY.replace("\"docker\"", "\"maven2\"");
        let p = parse(&headers("rm:repository:component"), maven.as_bytes()).unwrap();
        assert!(p.events[0].ignore.as_deref().unwrap().contains("maven2"));
    }
}
