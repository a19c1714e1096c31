//! Harbor webhooks, in its "Default" format (`{"type": "PUSH_ARTIFACT", "event_data": ...}`)
//! and its CloudEvents format (structured mode, `application/cloudevents+json`,
//! `{"specversion": "1.0", "type": "harbor.artifact.pushed", "data": ...}`).

use axum::http::HeaderMap;
use serde::Deserialize;

use super::{
    CheckError, Malformed, Need, Parsed, PushEvent, Rejected, Sender, Settings, SourceMode,
    SourceView, Spec, is_digest, malformed, request, split_host,
};

const MEDIA_TYPES: &[&str] = &["application/json", "application/cloudevents+json"];

/// A cap on the resources read from one event; Harbor sends one per artifact.
const MAX_RESOURCES: usize = 64;

#[derive(Deserialize)]
struct Default {
    #[serde(rename = "type")]
    kind: String,
    event_data: Option<EventData>,
}

#[derive(Deserialize)]
struct CloudEvent {
    specversion: String,
    id: Option<String>,
    #[serde(rename = "type")]
    kind: String,
    data: Option<EventData>,
}

#[derive(Deserialize)]
struct EventData {
    #[serde(default)]
    resources: Vec<Resource>,
    repository: Option<Repository>,
}

#[derive(Deserialize)]
struct Resource {
    digest: Option<String>,
    tag: Option<String>,
    resource_url: Option<String>,
}

#[derive(Deserialize)]
struct Repository {
    repo_full_name: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
}

fn parse(_headers: &HeaderMap, json: &[u8]) -> Result<Parsed, Malformed> {
    let value: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| malformed("invalid payload", e))?;
    let (delivery, kind, data, is_push) = if value.get("specversion").is_some() {
        let ce: CloudEvent =
            serde_json::from_value(value).map_err(|e| malformed("invalid CloudEvent", e))?;
        if ce.specversion != "1.0" {
            return Err(Malformed("unsupported CloudEvents specversion".into()));
        }
        let push = ce.kind == "harbor.artifact.pushed";
        (ce.id, ce.kind, ce.data, push)
    } else {
        let d: Default =
            serde_json::from_value(value).map_err(|e| malformed("invalid Harbor event", e))?;
        let push = d.kind == "PUSH_ARTIFACT";
        (None, d.kind, d.event_data, push)
    };
    if !is_push {
        return Ok(Parsed::nothing(
            delivery,
            format!(
                "event `{}` is not a push",
                kind.chars().take(60).collect::<String>()
            ),
        ));
    }
    let data = data.ok_or_else(|| Malformed("a push event without data".into()))?;
    let repo = data.repository.as_ref();
    let full_name = repo
        .and_then(|r| r.repo_full_name.clone())
        .or_else(|| {
            let r = repo?;
            Some(format!(
                "{}/{}",
                r.namespace.as_deref()?,
                r.name.as_deref()?
            ))
        })
        .unwrap_or_default();
    if data.resources.len() > MAX_RESOURCES {
        return Err(Malformed("too many resources in one event".into()));
    }
    let events = data
        .resources
        .into_iter()
        .map(|r| {
            // `HOST/NS/REPO:TAG` or `HOST/NS/REPO@sha256:...`: only the host is taken from it.
            let host = r.resource_url.as_deref().and_then(|u| split_host(u).0);
            // An untagged artifact's `tag` is its digest.
            let tag = r.tag.filter(|t| !is_digest(t));
            let digest = r.digest.filter(|d| is_digest(d));
            PushEvent::push(host, full_name.clone(), tag, digest)
        })
        .collect();
    Ok(Parsed::events(delivery, events))
}

/// Harbor: no signature, an optional "Auth Header" sent verbatim, which Pier requires.
pub(crate) struct Harbor;

impl Sender for Harbor {
    fn name(&self) -> &'static str {
        "harbor"
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

    fn media_types(&self) -> &'static [&'static str] {
        MEDIA_TYPES
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

    fn digest() -> String {
        format!("sha256:{}", "c".repeat(64))
    }

    #[test]
    fn the_default_format_names_repository_tag_digest_and_host() {
        let body = format!(
            r#"{{"type":"PUSH_ARTIFACT","occur_at":1700000000,"operator":"admin","event_data":
            {{"resources":[{{"digest":"{d}","tag":"main","resource_url":"harbor.example.com/demo/web:main"}}],
            "repository":{{"date_created":1,"name":"web","namespace":"demo","repo_full_name":"demo/web","repo_type":"private"}}}}}}"#,
            d = digest()
        );
        let p = parse(&HeaderMap::new(), body.as_bytes()).unwrap();
        assert_eq!(p.delivery_id, None);
        let e = &p.events[0];
        assert_eq!(
            (
                e.registry.as_deref(),
                e.repository.as_str(),
                e.tag.as_deref()
            ),
            (Some("harbor.example.com"), "demo/web", Some("main"))
        );
        assert_eq!(e.digest, Some(digest()));
    }

    #[test]
    fn the_cloudevents_format_carries_an_id_and_a_dotted_type() {
        let body = format!(
            r#"{{"specversion":"1.0","id":"ce-1","source":"/projects/1/webhook/policies/2","type":"harbor.artifact.pushed",
            "datacontenttype":"application/json","time":"2026-01-01T00:00:00Z","operator":"admin",
            "data":{{"resources":[{{"digest":"{d}","tag":"main","resource_url":"harbor.example.com/demo/web:main"}}],
            "repository":{{"name":"web","namespace":"demo","repo_full_name":"demo/web"}}}}}}"#,
            d = digest()
        );
        let p = parse(&HeaderMap::new(), body.as_bytes()).unwrap();
        assert_eq!(p.delivery_id.as_deref(), Some("ce-1"));
        assert_eq!(p.events[0].ignore, None);
        let pulled = body.replace("harbor.artifact.pushed", "harbor.artifact.pulled");
        let p = parse(&HeaderMap::new(), pulled.as_bytes()).unwrap();
        assert!(p.events.is_empty() && p.reason.unwrap().contains("pulled"));
    }

    #[test]
    fn scans_and_untagged_artifacts_deploy_nothing() {
        let p = parse(
            &HeaderMap::new(),
            br#"{"type":"SCANNING_COMPLETED","event_data":{}}"#,
        )
        .unwrap();
        assert!(p.events.is_empty());
        let body = format!(
            r#"{{"type":"PUSH_ARTIFACT","event_data":{{"resources":[{{"digest":"{d}","tag":"{d}"}}],
            "repository":{{"repo_full_name":"demo/web"}}}}}}"#,
            d = digest()
        );
        let p = parse(&HeaderMap::new(), body.as_bytes()).unwrap();
        assert!(p.events[0].ignore.is_some());
    }
}
