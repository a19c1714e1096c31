//! Docker Hub's repository webhook: `{"push_data": {"tag", "pushed_at"}, "repository":
//! {"repo_name"}}`. It names no host (the source's `registry`, `docker.io` by default)
//! and no digest (resolved from the registry, as always).

use serde::Deserialize;

use axum::http::HeaderMap;

use super::{
    CheckError, Malformed, Need, Parsed, PushEvent, RegistryRule, Rejected, Sender, Settings,
    SourceMode, SourceView, Spec, malformed, verify,
};

#[derive(Deserialize)]
struct Body {
    push_data: PushData,
    repository: Repository,
}

#[derive(Deserialize)]
struct PushData {
    tag: Option<String>,
}

#[derive(Deserialize)]
struct Repository {
    repo_name: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
}

fn parse(json: &[u8]) -> Result<Parsed, Malformed> {
    let b: Body = serde_json::from_slice(json).map_err(|e| malformed("invalid payload", e))?;
    let repo = b
        .repository
        .repo_name
        .or_else(|| {
            Some(format!(
                "{}/{}",
                b.repository.namespace?, b.repository.name?
            ))
        })
        .unwrap_or_default();
    Ok(Parsed::events(
        None,
        vec![PushEvent::push(None, repo, b.push_data.tag, None)],
    ))
}

/// Docker Hub: no secret, no signature, no header option. The token is the URL's last
/// segment, so it must be long and URL-safe.
pub(crate) struct DockerHub;

impl Sender for DockerHub {
    fn name(&self) -> &'static str {
        "dockerhub"
    }

    fn check(&self, spec: &Spec<'_>) -> Result<Settings, CheckError> {
        let mode = spec.mode(self.name(), SourceMode::Token, &[])?;
        spec.credentials(self.name(), Need::Required, Need::Refused)?;
        spec.url_tokens()?;
        spec.no_extras(self.name())?;
        let hub = RegistryRule::Default("docker.io");
        Ok(Settings::new(mode, spec.raw_keys()).registry(hub))
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_names_repository_and_tag_only() {
        let body = br#"{"callback_url":"https://registry.hub.docker.com/u/demo/web/hook/x/",
            "push_data":{"pushed_at":1700000000,"pusher":"demo","tag":"main"},
            "repository":{"name":"web","namespace":"demo","repo_name":"demo/web","status":"Active"}}"#;
        let p = parse(body).unwrap();
        assert_eq!(p.events[0].repository, "demo/web");
        assert_eq!(p.events[0].tag.as_deref(), Some("main"));
        assert_eq!(
            (p.events[0].registry.as_ref(), p.events[0].digest.as_ref()),
            (None, None)
        );
        assert!(parse(br#"{"repository":{}}"#).is_err());
    }
}
