//! JFrog Artifactory platform webhooks, domain `docker`: `{"domain": "docker",
//! "event_type": "pushed", "data": {"image_name", "tag", "sha256"}, "jpd_origin"}`. The
//! digest is bare hex (the manifest file's sha256, which is the manifest digest).

use serde::Deserialize;

use super::{Malformed, Parsed, PushEvent, host_of_url, is_digest, malformed};

#[derive(Deserialize)]
struct Body {
    domain: String,
    event_type: String,
    data: Option<Data>,
    jpd_origin: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    image_name: Option<String>,
    tag: Option<String>,
    sha256: Option<String>,
}

pub fn parse(json: &[u8]) -> Result<Parsed, Malformed> {
    let b: Body = serde_json::from_slice(json).map_err(|e| malformed("invalid payload", e))?;
    if b.domain != "docker" {
        return Ok(Parsed::nothing(
            None,
            format!(
                "domain `{}` is not docker",
                b.domain.chars().take(40).collect::<String>()
            ),
        ));
    }
    let data = b
        .data
        .ok_or_else(|| Malformed("an event without data".into()))?;
    let repository = data.image_name.unwrap_or_default();
    if b.event_type != "pushed" {
        return Ok(Parsed::events(
            None,
            vec![PushEvent::ignored(
                repository,
                format!(
                    "event `{}` is not a push",
                    b.event_type.chars().take(40).collect::<String>()
                ),
            )],
        ));
    }
    let digest = data
        .sha256
        .map(|hex| format!("sha256:{}", hex.to_ascii_lowercase()))
        .filter(|d| is_digest(d));
    let host = b.jpd_origin.as_deref().and_then(host_of_url);
    Ok(Parsed::events(
        None,
        vec![PushEvent::push(host, repository, data.tag, digest)],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_hex_digest_gets_its_algorithm() {
        let body = format!(
            r#"{{"domain":"docker","event_type":"pushed","subscription_key":"k","jpd_origin":"https://acme.jfrog.io",
            "source":"jfrog/admin","data":{{"repo_key":"docker-local","event_type":"pushed","path":"demo/web/main/manifest.json",
            "name":"manifest.json","sha256":"{h}","size":1,"image_name":"demo/web","tag":"main",
            "platforms":[{{"architecture":"amd64","os":"linux"}}]}}}}"#,
            h = "F".repeat(64)
        );
        let p = parse(body.as_bytes()).unwrap();
        let e = &p.events[0];
        assert_eq!(e.digest, Some(format!("sha256:{}", "f".repeat(64))));
        assert_eq!(e.registry.as_deref(), Some("acme.jfrog.io"));
        assert_eq!(e.repository, "demo/web");
        let deleted = body.replace(
            "\"event_type\":\"pushed\",\"subscription",
            "\"event_type\":\"deleted\",\"subscription",
        );
        assert!(
            parse(deleted.as_bytes()).unwrap().events[0]
                .ignore
                .is_some()
        );
        let npm = parse(br#"{"domain":"artifact","event_type":"deployed"}"#).unwrap();
        assert!(npm.events.is_empty());
    }
}
