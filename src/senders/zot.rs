//! Zot's events extension: CloudEvents in binary mode. The event's attributes are
//! `Ce-*` headers, the body is the data: `{"name", "reference", "digest", "mediaType",
//! "manifest"}`. No registry host anywhere: the source's `registry` supplies it.

use axum::http::HeaderMap;
use serde::Deserialize;

use super::{
    CheckError, Malformed, Need, Parsed, PushEvent, RegistryRule, Rejected, Sender, Settings,
    SourceMode, SourceView, Spec, is_digest, malformed, request,
};

#[derive(Deserialize)]
struct Data {
    name: Option<String>,
    reference: Option<String>,
    digest: Option<String>,
}

fn parse(headers: &HeaderMap, json: &[u8]) -> Result<Parsed, Malformed> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    if header("ce-specversion") != Some("1.0") {
        return Err(Malformed("missing Ce-Specversion: 1.0".into()));
    }
    let id = header("ce-id").map(str::to_owned);
    let kind = header("ce-type").ok_or_else(|| Malformed("missing Ce-Type header".into()))?;
    if kind != "zotregistry.image.updated" {
        return Ok(Parsed::nothing(
            id,
            format!(
                "event `{}` is not a push",
                kind.chars().take(60).collect::<String>()
            ),
        ));
    }
    let data: Data = serde_json::from_slice(json).map_err(|e| malformed("invalid data", e))?;
    let event = PushEvent::push(
        None,
        data.name.unwrap_or_default(),
        data.reference,
        data.digest.filter(|d| is_digest(d)),
    );
    Ok(Parsed::events(id, vec![event]))
}

/// Zot: no signature, a sink's `Authorization` header, and no host in its events.
pub(crate) struct Zot;

impl Sender for Zot {
    fn name(&self) -> &'static str {
        "zot"
    }

    fn check(&self, spec: &Spec<'_>) -> Result<Settings, CheckError> {
        let mode = spec.mode(self.name(), SourceMode::Token, &[])?;
        spec.credentials(self.name(), Need::Required, Need::Refused)?;
        spec.no_extras(self.name())?;
        let no_host = CheckError::NoRegistryHost(self.name());
        Ok(Settings::new(mode, spec.raw_keys()).registry(RegistryRule::Required(no_host)))
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
        headers: &HeaderMap,
        json: &[u8],
    ) -> Result<Parsed, Malformed> {
        parse(headers, json)
    }

    /// One body for every push of the same digest.
    fn body_is_unique(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(kind: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("ce-specversion", "1.0".parse().unwrap());
        h.insert("ce-id", "z-1".parse().unwrap());
        h.insert("ce-source", "zotregistry.dev".parse().unwrap());
        h.insert("ce-type", kind.parse().unwrap());
        h
    }

    #[test]
    fn an_image_update_is_a_push_of_name_and_reference() {
        let body = format!(
            r#"{{"name":"demo/web","reference":"main","digest":"sha256:{}","mediaType":"application/vnd.oci.image.manifest.v1+json","manifest":"{{}}"}}"#,
            "d".repeat(64)
        );
        let p = parse(&headers("zotregistry.image.updated"), body.as_bytes()).unwrap();
        assert_eq!(p.delivery_id.as_deref(), Some("z-1"));
        assert_eq!(p.events[0].repository, "demo/web");
        assert_eq!(p.events[0].tag.as_deref(), Some("main"));
        assert_eq!(p.events[0].registry, None);
    }

    #[test]
    fn other_types_and_missing_attributes() {
        let p = parse(&headers("zotregistry.image.deleted"), b"{}").unwrap();
        assert!(p.events.is_empty());
        assert!(parse(&HeaderMap::new(), b"{}").is_err());
    }
}
