//! The `generic` source: any sender that can sign its body with HMAC-SHA256 and send
//! `{"repository": "...", "tag": "...", "digest": "sha256:..." (optional), "id": "..." (optional)}`.

use serde::Deserialize;

use super::{Malformed, PushEvent};

pub const MEDIA_TYPES: &[&str] = &["application/json"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    /// `demo/web`, or with its registry host: `127.0.0.1:5000/demo/web`.
    repository: String,
    tag: String,
    digest: Option<String>,
    id: Option<String>,
}

pub fn parse(body: &[u8]) -> Result<Vec<PushEvent>, Malformed> {
    let b: Body =
        serde_json::from_slice(body).map_err(|e| Malformed(format!("invalid body: {e}")))?;
    if b.repository.is_empty() || b.tag.is_empty() {
        return Err(Malformed("repository and tag must not be empty".into()));
    }
    if let Some(d) = &b.digest
        && !is_digest(d)
    {
        return Err(Malformed(format!("`{d}` is not a sha256 digest")));
    }
    let (registry, repository) = split_host(&b.repository);
    Ok(vec![PushEvent {
        event_id: b.id,
        registry,
        repository,
        tag: Some(b.tag),
        digest: b.digest,
        ignore: None,
    }])
}

pub fn is_digest(d: &str) -> bool {
    d.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A first path segment with a dot, a colon or `localhost` is a registry host.
fn split_host(repo: &str) -> (Option<String>, String) {
    match repo.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (Some(first.to_owned()), rest.to_owned())
        }
        _ => (None, repo.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_may_carry_its_host() {
        let ev = parse(br#"{"repository":"127.0.0.1:5000/demo/web","tag":"main"}"#).unwrap();
        assert_eq!(ev[0].registry.as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(ev[0].repository, "demo/web");
        let ev = parse(br#"{"repository":"demo/web","tag":"main","id":"x"}"#).unwrap();
        assert_eq!(ev[0].registry, None);
        assert_eq!(ev[0].event_id.as_deref(), Some("x"));
    }

    #[test]
    fn bad_bodies_say_why() {
        assert!(parse(br#"{"repository":"demo/web"}"#).is_err());
        assert!(parse(br#"{"repository":"demo/web","tag":"main","digest":"md5:1"}"#).is_err());
        assert!(parse(br#"{"repository":"demo/web","tag":"main","extra":1}"#).is_err());
    }
}
