//! Gitea and Forgejo package events. They report the PUT reference lower-cased
//! (`package.version`) and no digest; the image is `HOST/OWNER/NAME`, its host the one of
//! the package's `html_url`.

use axum::http::HeaderMap;
use serde::Deserialize;

use std::borrow::Cow;

use super::verify::{self, Algorithm};
use super::{
    CheckError, FORM, Incoming, Malformed, Need, Parsed, PushEvent, Rejected, Sender, Settings,
    SourceMode, SourceView, Spec, form_payload, host_of_url, malformed, request,
};

/// Gitea, or its fork Forgejo: the same payload, each with its own header names (Forgejo
/// also sends Gitea's, which are read when its own are missing).
pub(crate) struct Family {
    name: &'static str,
    /// The bare hex HMAC-SHA256 of the JSON text.
    signature: &'static str,
    event: &'static str,
    delivery: &'static str,
}

pub(crate) static GITEA: Family = Family {
    name: "gitea",
    signature: "x-gitea-signature",
    event: "x-gitea-event",
    delivery: "x-gitea-delivery",
};

pub(crate) static FORGEJO: Family = Family {
    name: "forgejo",
    signature: "x-forgejo-signature",
    event: "x-forgejo-event",
    delivery: "x-forgejo-delivery",
};

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

fn parse(family: &Family, headers: &HeaderMap, json: &[u8]) -> Result<Parsed, Malformed> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let (event_header, delivery_header) = (family.event, family.delivery);
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

impl Sender for Family {
    fn name(&self) -> &'static str {
        self.name
    }

    fn check(&self, spec: &Spec<'_>) -> Result<Settings, CheckError> {
        let mode = spec.mode(self.name(), SourceMode::Hmac, &[])?;
        spec.credentials(self.name(), Need::Optional, Need::Required)?;
        spec.no_extras(self.name())?;
        Ok(Settings::new(mode, spec.raw_keys()))
    }

    fn credential_headers<'a>(&self, _source: &SourceView<'a>) -> Vec<&'a str> {
        vec![self.signature]
    }

    fn check_head(
        &self,
        source: &SourceView<'_>,
        headers: &HeaderMap,
        _path_token: Option<&str>,
    ) -> Result<(), Rejected> {
        request::optional_token_in(source, headers, "authorization")
    }

    /// They sign the JSON text, which a form-encoded delivery wraps in `payload`.
    fn signed_bytes<'a>(&self, req: Incoming<'a>) -> Result<Cow<'a, [u8]>, Rejected> {
        if !req.is_form() {
            return Ok(Cow::Borrowed(req.body));
        }
        form_payload(req.body)
            .map(Cow::Owned)
            .ok_or(Rejected::MissingSignature)
    }

    fn check_signature(
        &self,
        source: &SourceView<'_>,
        req: Incoming<'_>,
        signed: &[u8],
        _now: i64,
    ) -> Result<(), Rejected> {
        let given = req.header(self.signature);
        verify::hmac_hex(given, None, Algorithm::Sha256, source.keys, signed)
    }

    fn media_types(&self) -> &'static [&'static str] {
        &["application/json", FORM]
    }

    fn parse(
        &self,
        _source: &SourceView<'_>,
        headers: &HeaderMap,
        json: &[u8],
    ) -> Result<Parsed, Malformed> {
        parse(self, headers, json)
    }

    /// They store the PUT reference lower-cased.
    fn folds_tag_case(&self) -> bool {
        true
    }
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
        let p = parse(&GITEA, &h, BODY.as_bytes()).unwrap();
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
        let p = parse(&FORGEJO, &h, BODY.as_bytes()).unwrap();
        assert_eq!(p.delivery_id.as_deref(), Some("f-1"));
        assert_eq!(p.events[0].ignore, None);
    }

    #[test]
    fn deletions_digest_pushes_and_other_events_deploy_nothing() {
        let h = headers(&[("x-gitea-event", "package")]);
        let deleted = BODY.replace("created", "deleted");
        let p = parse(&GITEA, &h, deleted.as_bytes()).unwrap();
        assert!(p.events[0].ignore.as_deref().unwrap().contains("deleted"));
        let by_digest = BODY.replace("\"v1.2-rc\"", &format!("\"sha256:{}\"", "b".repeat(64)));
        let p = parse(&GITEA, &h, by_digest.as_bytes()).unwrap();
        assert!(p.events[0].ignore.as_deref().unwrap().contains("by digest"));
        let push = headers(&[("x-gitea-event", "push")]);
        assert!(parse(&GITEA, &push, b"{}").unwrap().events.is_empty());
        assert!(parse(&GITEA, &HeaderMap::new(), b"{}").is_err());
    }
}
