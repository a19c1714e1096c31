//! Azure Container Registry's classic webhook: ONE event object per request (not an
//! envelope), its fields those of a Distribution event: `{"id", "action", "target":
//! {"repository", "tag", "digest"}, "request": {"host"}}`.

use serde::Deserialize;

use axum::http::HeaderMap;

use super::{
    CheckError, Malformed, Need, Parsed, PushEvent, Rejected, Sender, Settings, SourceMode,
    SourceView, Spec, is_digest, malformed, request,
};

#[derive(Deserialize)]
struct Event {
    id: Option<String>,
    action: String,
    target: Option<Target>,
    request: Option<Request>,
}

#[derive(Deserialize)]
struct Target {
    repository: Option<String>,
    tag: Option<String>,
    digest: Option<String>,
}

#[derive(Deserialize)]
struct Request {
    host: Option<String>,
}

fn parse(json: &[u8]) -> Result<Parsed, Malformed> {
    let e: Event = serde_json::from_slice(json).map_err(|e| malformed("invalid event", e))?;
    if e.action == "ping" {
        return Ok(Parsed::nothing(e.id, "ping"));
    }
    let target = e.target;
    let repository = target
        .as_ref()
        .and_then(|t| t.repository.clone())
        .unwrap_or_default();
    if e.action != "push" {
        return Ok(Parsed::events(
            e.id,
            vec![PushEvent::ignored(
                repository,
                format!(
                    "action `{}` is not a push",
                    e.action.chars().take(40).collect::<String>()
                ),
            )],
        ));
    }
    let target = target.ok_or_else(|| Malformed("a push without a target".into()))?;
    let event = PushEvent::push(
        e.request.and_then(|r| r.host),
        repository,
        target.tag,
        target.digest.filter(|d| is_digest(d)),
    );
    Ok(Parsed::events(e.id, vec![event]))
}

/// An Azure Container Registry webhook: it cannot sign, so a token in a custom
/// `Authorization` header is required.
pub(crate) struct Acr;

impl Sender for Acr {
    fn name(&self) -> &'static str {
        "acr"
    }

    fn check(&self, spec: &Spec<'_>) -> Result<Settings, CheckError> {
        let mode = spec.mode(self.name(), SourceMode::Token, &[])?;
        spec.credentials(self.name(), Need::Required, Need::Refused)?;
        spec.no_extras(self.name())?;
        Ok(Settings::new(mode, spec.raw_keys()))
    }

    fn check_head(
        &self,
        source: &SourceView<'_>,
        headers: &HeaderMap,
        _path_token: Option<&str>,
    ) -> Result<(), Rejected> {
        request::token_in(source, headers, "authorization")
    }

    fn parse(
        &self,
        _source: &SourceView<'_>,
        _headers: &HeaderMap,
        json: &[u8],
    ) -> Result<Parsed, Malformed> {
        parse(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_push_event_is_read() {
        let body = format!(
            r#"{{"id":"a-1","timestamp":"2026-01-01T00:00:00Z","action":"push",
            "target":{{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","size":524,
            "digest":"sha256:{}","length":524,"repository":"demo/web","tag":"main"}},
            "request":{{"id":"r","host":"demo.azurecr.io","method":"PUT","useragent":"docker"}}}}"#,
            "e".repeat(64)
        );
        let p = parse(body.as_bytes()).unwrap();
        assert_eq!(p.delivery_id.as_deref(), Some("a-1"));
        assert_eq!(p.events[0].registry.as_deref(), Some("demo.azurecr.io"));
        assert_eq!(p.events[0].ignore, None);
    }

    #[test]
    fn pings_deletes_and_envelopes() {
        assert_eq!(
            parse(br#"{"id":"p","action":"ping"}"#)
                .unwrap()
                .reason
                .as_deref(),
            Some("ping")
        );
        let del =
            parse(br#"{"id":"d","action":"delete","target":{"repository":"demo/web"}}"#).unwrap();
        assert!(del.events[0].ignore.is_some());
        assert!(parse(br#"{"events":[]}"#).is_err());
    }
}
