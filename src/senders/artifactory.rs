//! JFrog Artifactory platform webhooks, domain `docker`: `{"domain": "docker",
//! "event_type": "pushed", "data": {"image_name", "tag", "sha256"}, "jpd_origin"}`. The
//! digest is bare hex (the manifest file's sha256, which is the manifest digest).
//!
//! Where the image lives depends on the source's Docker access method
//! ([`ArtifactoryAccess`]): `repo_key` is part of the repository path, part of the host,
//! or implied by the port. Matching by `image_name` alone would miss every push under
//! JFrog Cloud's default (the repository path).

use serde::Deserialize;

use axum::http::HeaderMap;

use super::verify::{self, Algorithm};
use super::{
    ArtifactoryAccess, CheckError, Incoming, Malformed, Need, Parsed, PushEvent, RegistryRule,
    Rejected, Sender, Settings, SourceMode, SourceView, Spec, host_of_url, is_digest, malformed,
    request,
};

#[derive(Deserialize)]
struct Body {
    domain: String,
    event_type: String,
    data: Option<Data>,
    jpd_origin: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    repo_key: Option<String>,
    image_name: Option<String>,
    tag: Option<String>,
    sha256: Option<String>,
}

fn parse(access: ArtifactoryAccess, json: &[u8]) -> Result<Parsed, Malformed> {
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
    let image_name = data.image_name.unwrap_or_default();
    let origin = b.jpd_origin.as_deref().and_then(host_of_url);
    let repo_key = data
        .repo_key
        .filter(|k| !k.is_empty() && !k.contains(['/', '.', ':']));
    let place = match (access, repo_key) {
        (ArtifactoryAccess::RepositoryPath, Some(key)) => {
            Ok((origin, format!("{key}/{image_name}")))
        }
        (ArtifactoryAccess::Subdomain, Some(key)) => {
            Ok((origin.map(|h| format!("{key}.{h}")), image_name))
        }
        // The source's `registry` (required with this method) supplies host and port.
        (ArtifactoryAccess::Port, _) => Ok((None, image_name)),
        (_, None) => Err(image_name),
    };
    let (host, repository) = match place {
        Ok(p) => p,
        Err(image_name) => {
            return Ok(Parsed::events(
                None,
                vec![PushEvent::ignored(
                    image_name,
                    "the event names no Artifactory repository (`repo_key`), which this \
                     source's access method needs to place the image"
                        .to_owned(),
                )],
            ));
        }
    };
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
    Ok(Parsed::events(
        None,
        vec![PushEvent::push(host, repository, data.tag, digest)],
    ))
}

/// Artifactory: `X-JFrog-Event-Auth` carries the secret verbatim (`mode = "token"`, the
/// default) or a hex HMAC-SHA256 of the body (`mode = "signing"`).
pub(crate) struct Artifactory;

const AUTH: &str = "x-jfrog-event-auth";

impl Sender for Artifactory {
    fn name(&self) -> &'static str {
        "artifactory"
    }

    fn check(&self, spec: &Spec<'_>) -> Result<Settings, CheckError> {
        let modes = [SourceMode::Token, SourceMode::Signing];
        let mode = spec.mode(self.name(), SourceMode::Token, &modes)?;
        let (tokens, secrets) = match mode {
            SourceMode::Signing => (Need::Refused, Need::Required),
            _ => (Need::Required, Need::Refused),
        };
        spec.credentials(self.name(), tokens, secrets)?;
        spec.fixed_signature_header(self.name())?;
        let access_method = spec.access_method.unwrap_or_default();
        let registry = match access_method {
            ArtifactoryAccess::Port => RegistryRule::Required(CheckError::PortNeedsRegistry),
            _ => RegistryRule::Optional,
        };
        Ok(Settings {
            access_method,
            ..Settings::new(mode, spec.raw_keys()).registry(registry)
        })
    }

    fn credential_headers<'a>(&self, _source: &SourceView<'a>) -> Vec<&'a str> {
        vec![AUTH]
    }

    fn check_head(
        &self,
        source: &SourceView<'_>,
        headers: &HeaderMap,
        _path_token: Option<&str>,
    ) -> Result<(), Rejected> {
        match source.mode {
            SourceMode::Signing => Ok(()),
            _ => request::token_in(source, headers, AUTH),
        }
    }

    fn check_signature(
        &self,
        source: &SourceView<'_>,
        req: Incoming<'_>,
        signed: &[u8],
        _now: i64,
    ) -> Result<(), Rejected> {
        match source.mode {
            SourceMode::Signing => verify::hmac_hex(
                req.header(AUTH),
                None,
                Algorithm::Sha256,
                source.keys,
                signed,
            ),
            _ => Ok(()),
        }
    }

    fn parse(
        &self,
        source: &SourceView<'_>,
        _headers: &HeaderMap,
        json: &[u8],
    ) -> Result<Parsed, Malformed> {
        parse(source.access_method, json)
    }

    /// One body for every push of the same digest.
    fn body_is_unique(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(hex: &str) -> String {
        format!(
            r#"{{"domain":"docker","event_type":"pushed","subscription_key":"k","jpd_origin":"https://acme.jfrog.io",
            "source":"jfrog/admin","data":{{"repo_key":"docker-local","event_type":"pushed","path":"demo/web/main/manifest.json",
            "name":"manifest.json","sha256":"{hex}","size":1,"image_name":"demo/web","tag":"main",
            "platforms":[{{"architecture":"amd64","os":"linux"}}]}}}}"#
        )
    }

    #[test]
    fn a_bare_hex_digest_gets_its_algorithm() {
        let body = body(&"F".repeat(64));
        let p = parse(ArtifactoryAccess::Port, body.as_bytes()).unwrap();
        let e = &p.events[0];
        assert_eq!(e.digest, Some(format!("sha256:{}", "f".repeat(64))));
        assert_eq!(e.repository, "demo/web");
        let deleted = body.replace(
            "\"event_type\":\"pushed\",\"subscription",
            "\"event_type\":\"deleted\",\"subscription",
        );
        assert!(
            parse(ArtifactoryAccess::Port, deleted.as_bytes())
                .unwrap()
                .events[0]
                .ignore
                .is_some()
        );
        let npm = parse(
            ArtifactoryAccess::Port,
            br#"{"domain":"artifact","event_type":"deployed"}"#,
        )
        .unwrap();
        assert!(npm.events.is_empty());
    }

    #[test]
    fn each_access_method_places_the_image_where_docker_pulls_it() {
        let body = body(&"a".repeat(64));
        let place = |access| {
            let e = parse(access, body.as_bytes()).unwrap().events.remove(0);
            (e.registry, e.repository)
        };
        assert_eq!(
            place(ArtifactoryAccess::RepositoryPath),
            (
                Some("acme.jfrog.io".to_owned()),
                "docker-local/demo/web".to_owned()
            )
        );
        assert_eq!(
            place(ArtifactoryAccess::Subdomain),
            (
                Some("docker-local.acme.jfrog.io".to_owned()),
                "demo/web".to_owned()
            )
        );
        assert_eq!(
            place(ArtifactoryAccess::Port),
            (None, "demo/web".to_owned())
        );
        // Without `repo_key` the path and subdomain methods cannot place it: ignored, said why.
        let keyless = body.replace("\"repo_key\":\"docker-local\",", "");
        let p = parse(ArtifactoryAccess::RepositoryPath, keyless.as_bytes()).unwrap();
        assert!(p.events[0].ignore.as_deref().unwrap().contains("repo_key"));
    }
}
