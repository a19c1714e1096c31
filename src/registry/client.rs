//! Pier's own registry client, only what a resolve needs: GET one manifest (with the
//! Bearer token dance or Basic credentials), every request under three deadlines, every
//! body under a cap, redirects few and on http(s) only. oci-client's `pull_manifest_raw`
//! reads any body whole and only bounds each read, so a registry that trickles held a step
//! past its retry budget and one that sent 256 MiB took Pier to 525 MiB.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use bytes::Bytes;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use reqwest::{Response, StatusCode, Url};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use tokio::time::Instant;

use super::RegistryError;
use super::body::{ReadError, read_capped};
use super::headers::{Challenge, parse_challenges, parse_retry_after};
use crate::config::RegistryLimits;

/// Every manifest kind Pier can resolve: an index (OCI or Docker list) or an image manifest.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// Hops followed per request: enough for a registry behind a CDN or a moved host; a loop
/// ends here instead of at the deadline.
pub(crate) const MAX_REDIRECTS: usize = 5;
/// Token answers are a JSON object with a JWT or two: a few KiB.
const MAX_TOKEN_BYTES: usize = 256 << 10;
/// An error answer is read only to tell "manifest unknown" from other refusals.
const MAX_ERROR_BYTES: usize = 64 << 10;
/// Registry-supplied text kept in an error (journaled, shown on the page).
const MAX_QUOTED: usize = 200;

/// One registry host as Pier talks to it.
pub struct Endpoint {
    /// The host as apps' images name it (`127.0.0.1:5000`, `docker.io`): for messages.
    host: String,
    /// `scheme://api-host`, without a trailing slash.
    base: String,
    insecure: bool,
    http: reqwest::Client,
    limits: RegistryLimits,
    basic: Option<HeaderValue>,
}

/// What one resolve learned from the registry's first challenge, reused for its other
/// requests (an index, then the platform manifest) so the token dance happens once.
#[derive(Default)]
pub struct Session {
    authorization: Option<HeaderValue>,
}

/// A manifest's bytes, and the digest of exactly those bytes.
pub(crate) struct Manifest {
    pub body: Bytes,
    pub digest: String,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct RedirectRefused(String);

fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        // `previous` holds every URL requested so far, the first one included.
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(RedirectRefused(format!(
                "more than {MAX_REDIRECTS} redirects"
            )));
        }
        let from_https = attempt
            .previous()
            .last()
            .is_some_and(|u| u.scheme() == "https");
        match attempt.url().scheme() {
            "https" => attempt.follow(),
            // A downgrade would send the request (and any token a later hop earns) in clear.
            "http" if !from_https => attempt.follow(),
            "http" => attempt.error(RedirectRefused(
                "a redirect from https to http was refused".into(),
            )),
            other => {
                let scheme = quote(other);
                attempt.error(RedirectRefused(format!(
                    "a redirect to a `{scheme}:` URL was refused (only http and https are followed)"
                )))
            }
        }
    })
}

/// Registry-supplied text for an error message: printable, one line, short.
fn quote(text: &str) -> String {
    let mut out: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_QUOTED)
        .collect();
    if text.chars().count() > MAX_QUOTED {
        out.push('…');
    }
    out
}

fn secs(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

impl Endpoint {
    pub(crate) fn new(
        host: &str,
        insecure: bool,
        basic: Option<(&str, &str)>,
        limits: RegistryLimits,
    ) -> Self {
        // Docker Hub's API lives on another host than the one image names use.
        let api_host = if host == "docker.io" || host == "index.docker.io" {
            "registry-1.docker.io"
        } else {
            host
        };
        let scheme = if insecure { "http" } else { "https" };
        let http = crate::runtime::with_shared_tls(reqwest::Client::builder())
            .user_agent(concat!("pier/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(limits.connect_timeout)
            // Between two reads; the whole answer has its own deadline on top.
            .read_timeout(limits.first_byte_timeout)
            .redirect(redirect_policy())
            .build()
            .expect("the registry HTTP client builds with the process's TLS provider");
        let basic = basic.map(|(user, pass)| {
            let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
            let mut v = HeaderValue::from_str(&format!("Basic {b64}"))
                .expect("base64 is a valid header value");
            v.set_sensitive(true);
            v
        });
        Self {
            host: host.to_owned(),
            base: format!("{scheme}://{api_host}"),
            insecure,
            http,
            limits,
            basic,
        }
    }

    /// GETs `repo`'s manifest `reference` (a tag or a digest) and checks its digest: that
    /// of the bytes read, equal to the digest asked for and to `Docker-Content-Digest`.
    /// `shown` names the reference in errors.
    pub(crate) async fn manifest(
        &self,
        session: &mut Session,
        repo: &str,
        reference: &str,
        shown: &str,
    ) -> Result<Manifest, RegistryError> {
        let (body, announced) = self
            .get(
                session,
                repo,
                &format!("manifests/{reference}"),
                MANIFEST_TYPES,
                shown,
            )
            .await?;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
        if reference.contains(':') && reference != digest {
            return Err(invalid(
                shown,
                format!("the content's digest is {digest}, not the one asked for"),
            ));
        }
        if let Some(a) = announced.filter(|a| a.starts_with("sha256:"))
            && a != digest
        {
            return Err(invalid(
                shown,
                format!(
                    "Docker-Content-Digest {} does not match the content's digest {digest}",
                    quote(&a)
                ),
            ));
        }
        Ok(Manifest { body, digest })
    }

    /// GETs the blob `digest` (a sha256 digest) of `repo`, under the manifest cap, and
    /// checks that its bytes are that digest: a signature's payload is believed only as
    /// the bytes its layer names.
    pub(crate) async fn blob(
        &self,
        session: &mut Session,
        repo: &str,
        digest: &str,
        shown: &str,
    ) -> Result<Bytes, RegistryError> {
        let (body, _) = self
            .get(session, repo, &format!("blobs/{digest}"), "*/*", shown)
            .await?;
        let got = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
        if got != digest {
            return Err(invalid(
                shown,
                format!("the blob's content is {got}, not the digest asked for"),
            ));
        }
        Ok(body)
    }

    /// GETs the OCI 1.1 referrers index of `digest` in `repo`. A registry without the
    /// referrers API answers 404: [`RegistryError::ManifestUnknown`].
    pub(crate) async fn referrers(
        &self,
        session: &mut Session,
        repo: &str,
        digest: &str,
        shown: &str,
    ) -> Result<Bytes, RegistryError> {
        let (body, _) = self
            .get(
                session,
                repo,
                &format!("referrers/{digest}"),
                OCI_INDEX,
                shown,
            )
            .await?;
        Ok(body)
    }

    /// One GET of `/v2/<repo>/<path>`, with the token dance on a 401, every deadline and
    /// the manifest cap: the body and the `Docker-Content-Digest` it was announced with.
    async fn get(
        &self,
        session: &mut Session,
        repo: &str,
        path: &str,
        accept: &'static str,
        shown: &str,
    ) -> Result<(Bytes, Option<String>), RegistryError> {
        let url = format!("{}/v2/{repo}/{path}", self.base);
        let get = |auth: Option<&HeaderValue>| {
            let mut req = self.http.get(&url).header(ACCEPT, accept);
            if let Some(a) = auth {
                req = req.header(AUTHORIZATION, a.clone());
            }
            req
        };
        let mut deadline = Instant::now() + self.limits.timeout;
        let mut resp = self
            .send(get(session.authorization.as_ref()), deadline, shown)
            .await?;
        if resp.status() == StatusCode::UNAUTHORIZED {
            let auth = self.answer_challenge(&resp, repo, shown).await?;
            session.authorization = Some(auth);
            deadline = Instant::now() + self.limits.timeout;
            resp = self
                .send(get(session.authorization.as_ref()), deadline, shown)
                .await?;
        }
        if !resp.status().is_success() {
            return Err(self.refusal(resp, shown, deadline).await);
        }
        let announced = resp
            .headers()
            .get("docker-content-digest")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let body = self
            .read(resp, self.limits.max_manifest_bytes, deadline, shown)
            .await?;
        Ok((body, announced))
    }

    /// Sends `req`; its answer's head must arrive within the first-byte timeout and before
    /// `deadline`.
    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        deadline: Instant,
        shown: &str,
    ) -> Result<Response, RegistryError> {
        let wait = self
            .limits
            .first_byte_timeout
            .min(deadline.saturating_duration_since(Instant::now()));
        match tokio::time::timeout(wait, req.send()).await {
            Err(_) => Err(self.unreachable(format!("no answer within {}", secs(wait)))),
            Ok(Err(e)) => Err(self.transport(e, shown)),
            Ok(Ok(resp)) => Ok(resp),
        }
    }

    async fn read(
        &self,
        resp: Response,
        limit: usize,
        deadline: Instant,
        shown: &str,
    ) -> Result<Bytes, RegistryError> {
        read_capped(resp, limit, deadline)
            .await
            .map_err(|e| match e {
                ReadError::TooLarge => RegistryError::TooLarge {
                    reference: shown.to_owned(),
                    limit,
                },
                ReadError::Deadline(got) => self.unreachable(format!(
                    "the answer was not complete within {} ({got} bytes arrived)",
                    secs(self.limits.timeout)
                )),
                ReadError::Http(e) => self.transport(e, shown),
            })
    }

    fn unreachable(&self, message: String) -> RegistryError {
        RegistryError::Unreachable {
            host: self.host.clone(),
            message,
        }
    }

    /// A failed exchange: a refused redirect or an unusable `Location` is the registry's
    /// standing answer (permanent); anything else is the network (transient).
    fn transport(&self, e: reqwest::Error, shown: &str) -> RegistryError {
        if e.is_redirect() || e.is_builder() {
            return invalid(shown, deepest_cause(&e, "redirect refused"));
        }
        self.unreachable(deepest_cause(&e, failure_kind(&e)))
    }

    /// A non-2xx answer, classified: what is worth retrying (5xx, 429 with its wish) and
    /// what is not (unknown, refused, anything else the registry means).
    async fn refusal(&self, resp: Response, shown: &str, deadline: Instant) -> RegistryError {
        let status = resp.status();
        match status {
            StatusCode::NOT_FOUND => RegistryError::ManifestUnknown {
                reference: shown.to_owned(),
            },
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => RegistryError::Unauthorized {
                host: self.host.clone(),
                reference: shown.to_owned(),
            },
            StatusCode::TOO_MANY_REQUESTS => RegistryError::RateLimited {
                host: self.host.clone(),
                retry_after: resp
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| parse_retry_after(v, SystemTime::now())),
            },
            s if s.is_server_error() => self.unreachable(format!("HTTP {}", s.as_u16())),
            // Only a redirect the client would not even try ends here (a `Location` that is
            // no http URL, such as `file:///etc/passwd`): the same refusal as the policy's.
            s if s.is_redirection() => {
                let scheme = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|l| Url::parse(l).ok())
                    .map(|u| u.scheme().to_owned());
                let message = match scheme {
                    Some(scheme) if scheme != "http" && scheme != "https" => format!(
                        "redirect refused: a redirect to a `{}:` URL was refused (only http \
                         and https are followed)",
                        quote(&scheme)
                    ),
                    _ => format!(
                        "redirect refused: HTTP {} without a usable Location",
                        s.as_u16()
                    ),
                };
                invalid(shown, message)
            }
            s => {
                // Distribution answers some unknowns with 400 and an error code.
                let codes = match read_capped(resp, MAX_ERROR_BYTES, deadline).await {
                    Ok(body) => error_codes(&body),
                    Err(_) => Vec::new(),
                };
                if codes
                    .iter()
                    .any(|c| matches!(c.as_str(), "MANIFEST_UNKNOWN" | "NAME_UNKNOWN"))
                {
                    return RegistryError::ManifestUnknown {
                        reference: shown.to_owned(),
                    };
                }
                let detail = if codes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", quote(&codes.join(", ")))
                };
                invalid(
                    shown,
                    format!("the registry answered HTTP {}{detail}", s.as_u16()),
                )
            }
        }
    }

    /// The `Authorization` to retry with after a 401: a Bearer token from the challenge's
    /// realm, or the configured Basic credentials.
    async fn answer_challenge(
        &self,
        resp: &Response,
        repo: &str,
        shown: &str,
    ) -> Result<HeaderValue, RegistryError> {
        let challenges: Vec<Challenge> = resp
            .headers()
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(parse_challenges)
            .collect();
        if let Some(bearer) = challenges.iter().find(|c| c.scheme == "bearer") {
            return self.token(bearer, repo, shown).await;
        }
        match &self.basic {
            Some(basic) if challenges.iter().any(|c| c.scheme == "basic") => Ok(basic.clone()),
            _ => Err(RegistryError::Unauthorized {
                host: self.host.clone(),
                reference: shown.to_owned(),
            }),
        }
    }

    /// The token dance: GET the realm with the challenge's service and scope (and the
    /// Basic credentials, if any), under the same deadlines and a cap of its own.
    async fn token(
        &self,
        challenge: &Challenge,
        repo: &str,
        shown: &str,
    ) -> Result<HeaderValue, RegistryError> {
        let realm = challenge
            .param("realm")
            .ok_or_else(|| invalid(shown, "a Bearer challenge without a realm"))?;
        let mut url = Url::parse(realm).map_err(|_| {
            invalid(
                shown,
                format!("the token realm `{}` is no URL", quote(realm)),
            )
        })?;
        // Credentials go to the realm: never in clear unless the registry itself is.
        match url.scheme() {
            "https" => {}
            "http" if self.insecure => {}
            other => {
                return Err(invalid(
                    shown,
                    format!(
                        "the token realm is a `{}:` URL; only https (or http for an insecure \
                         registry) is used",
                        quote(other)
                    ),
                ));
            }
        }
        let default_scope = format!("repository:{repo}:pull");
        {
            let mut q = url.query_pairs_mut();
            if let Some(service) = challenge.param("service") {
                q.append_pair("service", service);
            }
            q.append_pair("scope", challenge.param("scope").unwrap_or(&default_scope));
        }
        let mut req = self.http.get(url);
        if let Some(basic) = &self.basic {
            req = req.header(AUTHORIZATION, basic.clone());
        }
        let deadline = Instant::now() + self.limits.timeout;
        let resp = self.send(req, deadline, shown).await?;
        if !resp.status().is_success() {
            return Err(match self.refusal(resp, shown, deadline).await {
                // The realm does not know the manifest; it refused the credentials.
                RegistryError::ManifestUnknown { .. } | RegistryError::Invalid { .. } => {
                    RegistryError::Unauthorized {
                        host: self.host.clone(),
                        reference: shown.to_owned(),
                    }
                }
                other => other,
            });
        }
        let body = self.read(resp, MAX_TOKEN_BYTES, deadline, shown).await?;
        #[derive(Deserialize)]
        struct TokenAnswer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|_| invalid(shown, "the token realm's answer is not a token"))?;
        let token = answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| invalid(shown, "the token realm's answer holds no token"))?;
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| invalid(shown, "the token realm's token is no valid header value"))?;
        value.set_sensitive(true);
        Ok(value)
    }
}

fn invalid(reference: &str, message: impl Into<String>) -> RegistryError {
    RegistryError::Invalid {
        reference: reference.to_owned(),
        message: message.into(),
    }
}

/// `errors[].code` of a Distribution error body.
fn error_codes(body: &[u8]) -> Vec<String> {
    #[derive(Deserialize)]
    struct Envelope {
        #[serde(default)]
        errors: Vec<Entry>,
    }
    #[derive(Deserialize)]
    struct Entry {
        code: Option<String>,
    }
    serde_json::from_slice::<Envelope>(body)
        .map(|e| {
            e.errors
                .into_iter()
                .filter_map(|e| e.code)
                .take(5)
                .collect()
        })
        .unwrap_or_default()
}

/// reqwest's own message carries the URL, and a redirect's target is the registry's
/// choice: keep the kind and the innermost cause (Pier's own wording for a refused
/// redirect), never a URL.
/// What kind of network failure a reqwest error is, in words for the journal.
pub(super) fn failure_kind(e: &reqwest::Error) -> &'static str {
    if e.is_connect() {
        "connection refused or unreachable"
    } else if e.is_timeout() {
        "timed out"
    } else {
        "request failed"
    }
}

/// `kind: innermost cause`: reqwest's own message carries the URL, its innermost cause is
/// short and stable.
pub(super) fn deepest_cause(e: &reqwest::Error, kind: &str) -> String {
    let mut cause = None;
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause = Some(s.to_string());
        source = s.source();
    }
    match cause {
        Some(c) => format!("{kind}: {}", quote(&c)),
        None => kind.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_text_in_errors_is_one_short_line() {
        assert_eq!(quote("a\nb\x1b[31m"), "ab[31m");
        let long = "x".repeat(1000);
        assert_eq!(quote(&long).chars().count(), MAX_QUOTED + 1);
    }

    #[test]
    fn only_distribution_error_codes_are_read() {
        assert_eq!(
            error_codes(br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"x"}]}"#),
            ["MANIFEST_UNKNOWN"]
        );
        assert!(error_codes(b"<html>").is_empty());
    }
}
