//! GitHub (ghcr.io) `package` and `registry_package` events. GitHub fires one delivery per
//! manifest: the tagged one (an index, or a single-platform image) names the tag, the
//! platform manifests of a multi-platform push come untagged and deploy nothing.

use axum::http::HeaderMap;
use serde::Deserialize;

use super::verify::{self, Algorithm};
use super::{
    CheckError, FORM, Incoming, Malformed, Need, Parsed, PushEvent, Rejected, Sender, Settings,
    SourceMode, SourceView, Spec, host_of_url, is_digest, malformed, split_host,
};

#[derive(Deserialize)]
struct Body {
    action: Option<String>,
    package: Option<Package>,
    registry_package: Option<Package>,
}

#[derive(Deserialize)]
struct Package {
    name: Option<String>,
    namespace: Option<String>,
    package_type: Option<String>,
    ecosystem: Option<String>,
    owner: Option<Owner>,
    package_version: Option<Version>,
    registry: Option<RegistryInfo>,
}

#[derive(Deserialize)]
struct Owner {
    login: Option<String>,
}

#[derive(Deserialize)]
struct RegistryInfo {
    url: Option<String>,
}

#[derive(Deserialize)]
struct Version {
    name: Option<String>,
    version: Option<String>,
    package_url: Option<String>,
    container_metadata: Option<ContainerMetadata>,
}

#[derive(Deserialize)]
struct ContainerMetadata {
    tag: Option<TagInfo>,
}

#[derive(Deserialize)]
struct TagInfo {
    name: Option<String>,
    digest: Option<String>,
}

const CONTAINER_TYPES: &[&str] = &["container", "docker"];

fn parse(headers: &HeaderMap, json: &[u8]) -> Result<Parsed, Malformed> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let delivery = header("x-github-delivery").map(str::to_owned);
    match header("x-github-event") {
        Some("package" | "registry_package") => {}
        Some("ping") => return Ok(Parsed::nothing(delivery, "ping")),
        Some(other) => {
            return Ok(Parsed::nothing(
                delivery,
                format!(
                    "event `{}` is not a package event",
                    other.chars().take(40).collect::<String>()
                ),
            ));
        }
        None => return Err(Malformed("missing X-GitHub-Event header".into())),
    }
    let body: Body = serde_json::from_slice(json).map_err(|e| malformed("invalid payload", e))?;
    let Some(mut pkg) = body.package.or(body.registry_package) else {
        return Err(Malformed("no `package` in a package event".into()));
    };
    let name = pkg.name.clone().unwrap_or_default();
    let action = body.action.unwrap_or_default();
    if !matches!(action.as_str(), "published" | "updated") {
        return Ok(Parsed::events(
            delivery,
            vec![PushEvent::ignored(
                name,
                format!("action `{action}` is not a publish"),
            )],
        ));
    }
    let kind = pkg
        .package_type
        .as_deref()
        .or(pkg.ecosystem.as_deref())
        .unwrap_or("")
        .to_ascii_lowercase();
    if !CONTAINER_TYPES.contains(&kind.as_str()) {
        return Ok(Parsed::events(
            delivery,
            vec![PushEvent::ignored(
                name,
                format!("package type `{kind}` is not a container"),
            )],
        ));
    }
    let Some(version) = pkg.package_version.take() else {
        return Err(Malformed("no `package_version` in a package event".into()));
    };
    let tag_info = version.container_metadata.and_then(|m| m.tag);
    let tag = tag_info.as_ref().and_then(|t| t.name.clone());
    let digest = tag_info
        .and_then(|t| t.digest)
        .or(version.name)
        .or(version.version)
        .filter(|d| is_digest(d));
    let (registry, repository) = image_of(version.package_url.as_deref(), pkg, name);
    let mut event = PushEvent::push(registry, repository, tag, digest);
    if event.tag.is_none() && event.ignore.is_some() {
        event.ignore = Some("untagged manifest (a platform of a multi-platform push)".into());
    }
    Ok(Parsed::events(delivery, vec![event]))
}

/// The registry host and repository of a package: from its `package_url`
/// (`ghcr.io/OWNER/NAME:TAG`, with a bare trailing `:` when untagged), else from its
/// namespace (or owner), its name and its registry's URL.
fn image_of(package_url: Option<&str>, pkg: Package, name: String) -> (Option<String>, String) {
    match package_url {
        Some(url) if !url.is_empty() => {
            let without_digest = url.split('@').next().unwrap_or(url);
            let last_slash = without_digest.rfind('/').unwrap_or(0);
            let repo_part = match without_digest[last_slash..].find(':') {
                Some(colon) => &without_digest[..last_slash + colon],
                None => without_digest,
            };
            split_host(repo_part)
        }
        _ => {
            let owner = pkg
                .namespace
                .or(pkg.owner.and_then(|o| o.login))
                .unwrap_or_default();
            let host = pkg
                .registry
                .and_then(|r| r.url)
                .and_then(|u| host_of_url(&u));
            (host, format!("{owner}/{name}").to_ascii_lowercase())
        }
    }
}

/// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256>`, required.
pub(crate) struct GitHub;

const SIGNATURE: &str = "x-hub-signature-256";

impl Sender for GitHub {
    fn name(&self) -> &'static str {
        "github"
    }

    fn check(&self, spec: &Spec<'_>) -> Result<Settings, CheckError> {
        let mode = spec.mode(self.name(), SourceMode::Hmac, &[])?;
        spec.credentials(self.name(), Need::Refused, Need::Required)?;
        spec.no_extras(self.name())?;
        Ok(Settings::new(mode, spec.raw_keys()))
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
        verify::hmac_hex(
            given,
            Some("sha256="),
            Algorithm::Sha256,
            source.keys,
            signed,
        )
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
        parse(headers, json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(event: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-github-event", event.parse().unwrap());
        h.insert("x-github-delivery", "d-1".parse().unwrap());
        h
    }

    fn body(top: &str, tag: &str, url: &str) -> Vec<u8> {
        format!(
            r#"{{"action":"published","{top}":{{"name":"web","namespace":"demo","package_type":"CONTAINER",
            "package_version":{{"name":"sha256:{d}","package_url":"{url}",
            "container_metadata":{{"tag":{{"name":"{tag}","digest":"sha256:{d}"}}}}}},
            "registry":{{"url":"https://ghcr.io/demo"}}}}}}"#,
            d = "a".repeat(64)
        )
        .into_bytes()
    }

    #[test]
    fn both_event_names_read_the_tag_digest_and_host_from_the_package_url() {
        for top in ["package", "registry_package"] {
            let p = parse(&headers(top), &body(top, "main", "ghcr.io/demo/web:main")).unwrap();
            assert_eq!(p.delivery_id.as_deref(), Some("d-1"));
            let e = &p.events[0];
            assert_eq!(e.ignore, None);
            assert_eq!(e.registry.as_deref(), Some("ghcr.io"));
            assert_eq!(e.repository, "demo/web");
            assert_eq!(e.tag.as_deref(), Some("main"));
            assert!(e.digest.as_deref().is_some_and(is_digest));
        }
    }

    #[test]
    fn an_untagged_platform_manifest_is_ignored() {
        let p = parse(
            &headers("package"),
            &body("package", "", "ghcr.io/demo/web:"),
        )
        .unwrap();
        assert_eq!(p.events[0].repository, "demo/web");
        assert!(p.events[0].ignore.as_deref().unwrap().contains("untagged"));
    }

    #[test]
    fn pings_other_events_and_other_package_types_deploy_nothing() {
        let p = parse(&headers("ping"), b"{}").unwrap();
        assert_eq!(p.reason.as_deref(), Some("ping"));
        let p = parse(&headers("push"), b"{}").unwrap();
        assert!(p.events.is_empty());
        let npm = String::from_utf8(body("package", "main", "x"))
            .unwrap()
            .replace("CONTAINER", "npm");
        let p = parse(&headers("package"), npm.as_bytes()).unwrap();
        assert!(p.events[0].ignore.as_deref().unwrap().contains("npm"));
        assert!(parse(&headers("package"), b"[]").is_err());
    }
}
