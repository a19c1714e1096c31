//! Docker Hub's repository webhook: `{"push_data": {"tag", "pushed_at"}, "repository":
//! {"repo_name"}}`. It names no host (the source's `registry`, `docker.io` by default)
//! and no digest (resolved from the registry, as always).

use serde::Deserialize;

use super::{Malformed, Parsed, PushEvent, malformed};

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

pub fn parse(json: &[u8]) -> Result<Parsed, Malformed> {
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
