//! Gitea and Forgejo package events. They report the PUT reference lower-cased
//! (`package.version`) and no digest; the image is `HOST/OWNER/NAME`, its host the one of
//! the package's `html_url`.

use axum::http::HeaderMap;
use serde::Deserialize;

use super::{Malformed, Parsed, PushEvent, host_of_url, malformed};
use crate::config::SourceKind;

#[derive(Deserialize)]
struct Body {
    action: Option<String>,
    package: Option<Package>,
}

#[derive(Deserialize)]
struct Package {
    owner: Option<Owner>,
    #[serde(rename = "type")]
    kind: Option<String>,
    name: Option<String>,
    version: Option<String>,
    html_url: Option<String>,
}

#[derive(Deserialize)]
struct Owner {
    login: Option<String>,
}

pub fn parse(kind: SourceKind, headers: &HeaderMap, json: &[u8]) -> Result<Parsed, Malformed> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let (event_header, delivery_header) = match kind {
        SourceKind::Forgejo => ("x-forgejo-event", "x-forgejo-delivery"),
        _ => ("x-gitea-event", "x-gitea-delivery"),
    };
    let event = header(event_header).or_else(|| header("x-gitea-event"));
    let delivery = header(delivery_header)
        .or_else(|| header("x-gitea-delivery"))
        .map(str::to_owned);
    match event {
        Some("package") => {}
        Some(other) => {
            return Ok(Parsed::nothing(
                delivery,
                format!(
                    "event `{}` is not a package event",
                    other.chars().take(40).collect::<String>()
                ),
            ));
        }
        None => return Err(Malformed(format!("missing {event_header} header"))),
    }
    let body: Body = serde_json::from_slice(json).map_err(|e| malformed("invalid payload", e))?;
    let pkg = body
        .package
        .ok_or_else(|| Malformed("no `package` in a package event".into()))?;
    let owner = pkg.owner.and_then(|o| o.login).unwrap_or_default();
    let name = pkg.name.unwrap_or_default();
    let repository = if owner.is_empty() || name.is_empty() {
        String::new()
    } else {
        format!("{owner}/{name}").to_ascii_lowercase()
    };
    let action = body.action.unwrap_or_default();
    if action != "created" {
        return Ok(Parsed::events(
            delivery,
            vec![PushEvent::ignored(
                repository,
                format!("action `{action}` is not a push"),
            )],
        ));
    }
    let package_type = pkg.kind.unwrap_or_default();
    if package_type != "container" {
        return Ok(Parsed::events(
            delivery,
            vec![PushEvent::ignored(
                repository,
                format!("package type `{package_type}` is not a container"),
            )],
        ));
    }
    let host = pkg.html_url.as_deref().and_then(host_of_url);
    Ok(Parsed::events(
        delivery,
        vec![PushEvent::push(host, repository, pkg.version, None)],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"action":"created","package":{"id":7,"owner":{"login":"Demo"},
        "type":"container","name":"web","version":"v1.2-rc",
        "html_url":"https://git.example.com/Demo/-/packages/container/web/v1.2-rc"}}"#;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_container_package_is_a_push_of_owner_slash_name_on_the_html_host() {
        let h = headers(&[("x-gitea-event", "package"), ("x-gitea-delivery", "g-1")]);
        let p = parse(SourceKind::Gitea, &h, BODY.as_bytes()).unwrap();
        assert_eq!(p.delivery_id.as_deref(), Some("g-1"));
        let e = &p.events[0];
        assert_eq!(e.registry.as_deref(), Some("git.example.com"));
        assert_eq!(e.repository, "demo/web");
        assert_eq!(e.tag.as_deref(), Some("v1.2-rc"));
        assert_eq!(e.ignore, None);
    }

    #[test]
    fn forgejo_reads_its_own_headers() {
        let h = headers(&[
            ("x-forgejo-event", "package"),
            ("x-forgejo-delivery", "f-1"),
        ]);
        let p = parse(SourceKind::Forgejo, &h, BODY.as_bytes()).unwrap();
        assert_eq!(p.delivery_id.as_deref(), Some("f-1"));
        assert_eq!(p.events[0].ignore, None);
    }

    #[test]
    fn deletions_digest_pushes_and_other_events_deploy_nothing() {
        let h = headers(&[("x-gitea-event", "package")]);
        let deleted = BODY.replace("created", "deleted");
        let p = parse(SourceKind::Gitea, &h, deleted.as_bytes()).unwrap();
        assert!(p.events[0].ignore.as_deref().unwrap().contains("deleted"));
        let by_digest = BODY.replace("\"v1.2-rc\"", &format!("\"sha256:{}\"", "b".repeat(64)));
        let p = parse(SourceKind::Gitea, &h, by_digest.as_bytes()).unwrap();
        assert!(p.events[0].ignore.as_deref().unwrap().contains("by digest"));
        let push = headers(&[("x-gitea-event", "push")]);
        assert!(
            parse(SourceKind::Gitea, &push, b"{}")
                .unwrap()
                .events
                .is_empty()
        );
        assert!(parse(SourceKind::Gitea, &HeaderMap::new(), b"{}").is_err());
    }
}
