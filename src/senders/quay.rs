//! Quay's `repo_push` notification: `{"repository": "ns/name", "docker_url":
//! "host/ns/name", "updated_tags": [...]}`. No digest, no event id, and the same body for
//! every push of a tag.

use serde::Deserialize;

use axum::http::HeaderMap;

use super::{
    CheckError, Malformed, Need, Parsed, PushEvent, Rejected, Sender, Settings, SourceMode,
    SourceView, Spec, malformed, split_host, verify,
};

/// A cap on the tags read from one notification.
const MAX_TAGS: usize = 64;

#[derive(Deserialize)]
struct Body {
    repository: Option<String>,
    docker_url: Option<String>,
    updated_tags: Option<Vec<String>>,
}

fn parse(json: &[u8]) -> Result<Parsed, Malformed> {
    let b: Body = serde_json::from_slice(json).map_err(|e| malformed("invalid payload", e))?;
    let Some(tags) = b.updated_tags else {
        return Ok(Parsed::nothing(None, "not a repo_push notification"));
    };
    if tags.len() > MAX_TAGS {
        return Err(Malformed("too many updated_tags".into()));
    }
    let (host, from_url) = b
        .docker_url
        .as_deref()
        .map(split_host)
        .unwrap_or((None, String::new()));
    let repository = b.repository.unwrap_or(from_url);
    let events = tags
        .into_iter()
        .map(|t| PushEvent::push(host.clone(), repository.clone(), Some(t), None))
        .collect::<Vec<_>>();
    if events.is_empty() {
        return Ok(Parsed::nothing(None, "no tags updated"));
    }
    Ok(Parsed::events(None, events))
}

/// Quay: no signature and no header of its own: the token is the URL's last segment.
pub(crate) struct Quay;

impl Sender for Quay {
    fn name(&self) -> &'static str {
        "quay"
    }

    fn check(&self, spec: &Spec<'_>) -> Result<Settings, CheckError> {
        let mode = spec.mode(self.name(), SourceMode::Token, &[])?;
        spec.credentials(self.name(), Need::Required, Need::Refused)?;
        spec.url_tokens()?;
        spec.no_extras(self.name())?;
        Ok(Settings::new(mode, spec.raw_keys()))
    }

    fn check_head(
        &self,
        source: &SourceView<'_>,
        _headers: &HeaderMap,
        path_token: Option<&str>,
    ) -> Result<(), Rejected> {
        verify::tokens(path_token, &source.tokens)
    }

    fn parse(
        &self,
        _source: &SourceView<'_>,
        _headers: &HeaderMap,
        json: &[u8],
    ) -> Result<Parsed, Malformed> {
        parse(json)
    }

    fn token_in_path(&self) -> bool {
        true
    }

    /// One body for every push of a tag.
    fn body_is_unique(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_updated_tag_is_an_event_on_the_docker_url_host() {
        let body = br#"{"repository":"demo/web","namespace":"demo","name":"web",
            "docker_url":"quay.io/demo/web","homepage":"https://quay.io/repository/demo/web",
            "updated_tags":["main","v1"]}"#;
        let p = parse(body).unwrap();
        assert_eq!(p.events.len(), 2);
        assert_eq!(p.events[1].registry.as_deref(), Some("quay.io"));
        assert_eq!(p.events[1].tag.as_deref(), Some("v1"));
        let build = parse(br#"{"repository":"demo/web","build_id":"x"}"#).unwrap();
        assert!(build.events.is_empty());
    }
}
