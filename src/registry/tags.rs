//! `GET /v2/<name>/tags/list`: the tags of a repository, for the poller of glob and range
//! apps. Bounded everywhere: a deadline per request, a byte cap per page, a page cap per
//! listing, so a registry that trickles or floods cannot hold the poller or its memory.

use std::time::Duration;

use serde::Deserialize;

use super::RegistryError;
use crate::config::{AppConfig, RegistryConfig};

/// Tags asked for per page (`?n=`); registries may send fewer and a `Link` to the next.
const PAGE_SIZE: usize = 1000;
/// Most pages followed: 20 000 tags. A repository with more is listed in part, and says so.
const MAX_PAGES: usize = 20;
/// Most bytes of one page (1000 tags of 128 characters, quoted, fit with room to spare).
const MAX_PAGE_BYTES: usize = 1 << 20;
/// One request, headers and body, from send to the last byte.
const REQUEST_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub(crate) enum TagsError {
    /// 429: wait at least `retry_after` (when the registry says) before asking again.
    #[error("registry {host} rate-limits tag listing")]
    RateLimited {
        host: String,
        retry_after: Option<Duration>,
    },
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// The repository's tags, in the registry's order, at most `MAX_PAGES * PAGE_SIZE`.
pub(crate) struct TagList {
    pub tags: Vec<String>,
    /// The listing stopped at the page cap; more tags exist.
    pub truncated: bool,
}

pub struct TagLister {
    http: reqwest::Client,
    registries: Vec<RegistryConfig>,
}

#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct Token {
    token: Option<String>,
    access_token: Option<String>,
}

impl TagLister {
    pub fn new(registries: &[RegistryConfig]) -> Self {
        let http = crate::runtime::with_shared_tls(reqwest::Client::builder())
            .connect_timeout(Duration::from_secs(5))
            .timeout(REQUEST_DEADLINE)
            // A redirect could carry credentials to another host; registries answer here.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            http,
            registries: registries.to_vec(),
        }
    }

    fn base(&self, host: &str) -> String {
        let insecure = self.registries.iter().any(|r| r.host == host && r.insecure);
        format!("{}://{host}", if insecure { "http" } else { "https" })
    }

    fn basic(&self, host: &str) -> Option<(String, String)> {
        let r = self.registries.iter().find(|r| r.host == host)?;
        Some((
            r.username.clone()?,
            r.password.as_ref()?.expose().to_owned(),
        ))
    }

    /// Every tag of the app's repository, following `Link: <…>; rel="next"` up to the caps.
    pub(crate) async fn list(&self, app: &AppConfig) -> Result<TagList, TagsError> {
        let host = app.registry_host();
        let base = self.base(host);
        let mut url = format!("{base}/v2/{}/tags/list?n={PAGE_SIZE}", app.repository());
        let mut bearer: Option<String> = None;
        let mut tags = Vec::new();
        for _ in 0..MAX_PAGES {
            let (page, next) = self.page(host, &url, &mut bearer, app).await?;
            tags.extend(page);
            match next {
                // Only a relative link or one on the same origin: a listing never leads
                // the poller (and its credentials) to another host.
                Some(n) if n.starts_with('/') => url = format!("{base}{n}"),
                Some(n) if n.starts_with(&format!("{base}/")) => url = n,
                _ => {
                    return Ok(TagList {
                        tags,
                        truncated: false,
                    });
                }
            }
        }
        Ok(TagList {
            tags,
            truncated: true,
        })
    }

    async fn page(
        &self,
        host: &str,
        url: &str,
        bearer: &mut Option<String>,
        app: &AppConfig,
    ) -> Result<(Vec<String>, Option<String>), TagsError> {
        let unreachable = |message: String| RegistryError::Unreachable {
            host: host.to_owned(),
            message,
        };
        let mut retried_with_token = false;
        loop {
            let mut req = self.http.get(url);
            req = match (&*bearer, self.basic(host)) {
                (Some(t), _) => req.bearer_auth(t),
                (None, Some((u, p))) => req.basic_auth(u, Some(p)),
                (None, None) => req,
            };
            let resp = req.send().await.map_err(|e| unreachable(without_url(&e)))?;
            let status = resp.status().as_u16();
            match status {
                200 => {}
                401 if !retried_with_token => {
                    let challenge = resp
                        .headers()
                        .get(reqwest::header::WWW_AUTHENTICATE)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    match challenge.as_deref().and_then(parse_bearer_challenge) {
                        Some(ch) => {
                            *bearer = Some(self.token(host, &ch, app).await?);
                            retried_with_token = true;
                            continue;
                        }
                        None => return Err(unauthorized(host, app).into()),
                    }
                }
                401 | 403 => return Err(unauthorized(host, app).into()),
                404 => {
                    return Err(RegistryError::ManifestUnknown {
                        reference: format!("{}/{} (tags)", host, app.repository()),
                    }
                    .into());
                }
                429 => {
                    return Err(TagsError::RateLimited {
                        host: host.to_owned(),
                        retry_after: resp
                            .headers()
                            .get(reqwest::header::RETRY_AFTER)
                            .and_then(|v| v.to_str().ok())
                            .and_then(parse_retry_after),
                    });
                }
                s if s >= 500 => return Err(unreachable(format!("HTTP {s}")).into()),
                s => {
                    return Err(RegistryError::Invalid {
                        reference: format!("{}/{}", host, app.repository()),
                        message: format!("tag list answered HTTP {s}"),
                    }
                    .into());
                }
            }
            let next = resp
                .headers()
                .get(reqwest::header::LINK)
                .and_then(|v| v.to_str().ok())
                .and_then(next_link);
            let body = read_capped(resp, MAX_PAGE_BYTES, host).await?;
            let page: Page = serde_json::from_slice(&body).map_err(|e| RegistryError::Invalid {
                reference: format!("{}/{}", host, app.repository()),
                message: format!("tag list: {e}"),
            })?;
            return Ok((page.tags.unwrap_or_default(), next));
        }
    }

    /// A pull token for the repository, from the realm the registry named.
    async fn token(
        &self,
        host: &str,
        ch: &BearerChallenge,
        app: &AppConfig,
    ) -> Result<String, TagsError> {
        let scope = ch
            .scope
            .clone()
            .unwrap_or_else(|| format!("repository:{}:pull", app.repository()));
        let mut req = self.http.get(&ch.realm).query(&[("scope", scope.as_str())]);
        if let Some(service) = &ch.service {
            req = req.query(&[("service", service.as_str())]);
        }
        if let Some((u, p)) = self.basic(host) {
            req = req.basic_auth(u, Some(p));
        }
        let resp = req.send().await.map_err(|e| RegistryError::Unreachable {
            host: host.to_owned(),
            message: without_url(&e),
        })?;
        if !resp.status().is_success() {
            return Err(unauthorized(host, app).into());
        }
        let body = read_capped(resp, 64 << 10, host).await?;
        let t: Token = serde_json::from_slice(&body).map_err(|_| unauthorized(host, app))?;
        t.token
            .or(t.access_token)
            .ok_or_else(|| unauthorized(host, app).into())
    }
}

fn unauthorized(host: &str, app: &AppConfig) -> RegistryError {
    RegistryError::Unauthorized {
        host: host.to_owned(),
        reference: format!("{}/{}", host, app.repository()),
    }
}

/// The body, refused past `cap` bytes without reading further: a registry that floods
/// cannot hold the poller's memory.
async fn read_capped(
    mut resp: reqwest::Response,
    cap: usize,
    host: &str,
) -> Result<Vec<u8>, RegistryError> {
    let too_large = || RegistryError::AnswerTooLarge {
        host: host.to_owned(),
        cap,
    };
    if resp.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| RegistryError::Unreachable {
        host: host.to_owned(),
        message: without_url(&e),
    })? {
        if body.len() + chunk.len() > cap {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[derive(Debug, PartialEq, Eq)]
struct BearerChallenge {
    realm: String,
    service: Option<String>,
    scope: Option<String>,
}

/// `Bearer realm="https://auth.example/token",service="registry",scope="repository:a:pull"`.
fn parse_bearer_challenge(header: &str) -> Option<BearerChallenge> {
    let rest = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))?;
    let mut realm = None;
    let mut service = None;
    let mut scope = None;
    // Values are quoted and may hold commas (a scope list): split on `",` boundaries.
    let mut s = rest.trim();
    while let Some((key, after)) = s.split_once('=') {
        let key = key.trim().trim_start_matches(',').trim();
        let after = after.trim_start();
        let (value, tail) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (&q[..end], &q[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        match key {
            "realm" => realm = Some(value.to_owned()),
            "service" => service = Some(value.to_owned()),
            "scope" => scope = Some(value.to_owned()),
            _ => {}
        }
        s = tail;
    }
    let realm = realm.filter(|r| r.starts_with("https://") || r.starts_with("http://"))?;
    Some(BearerChallenge {
        realm,
        service,
        scope,
    })
}

/// `Link: </v2/a/tags/list?n=1000&last=x>; rel="next"` → the URL.
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params.contains("rel=\"next\"").then(|| {
            url.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned()
        })
    })
}

/// `Retry-After` in seconds (the HTTP-date form is treated as absent: the backoff still
/// applies). Capped at an hour, so a hostile header cannot park the poller for days.
pub(crate) fn parse_retry_after(v: &str) -> Option<Duration> {
    v.trim()
        .parse::<u64>()
        .ok()
        .map(|s| Duration::from_secs(s.min(3600)))
}

fn without_url(e: &reqwest::Error) -> String {
    super::client::deepest_cause(e, super::client::failure_kind(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_gives_realm_service_and_scope() {
        let c = parse_bearer_challenge(
            r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:a/b:pull""#,
        )
        .unwrap();
        assert_eq!(c.realm, "https://ghcr.io/token");
        assert_eq!(c.service.as_deref(), Some("ghcr.io"));
        assert_eq!(c.scope.as_deref(), Some("repository:a/b:pull"));
        assert!(parse_bearer_challenge("Basic realm=\"x\"").is_none());
        assert!(parse_bearer_challenge("Bearer realm=\"file:///etc\"").is_none());
    }

    #[test]
    fn the_next_page_comes_from_the_link_header() {
        assert_eq!(
            next_link(r#"</v2/a/tags/list?n=2&last=b>; rel="next""#).as_deref(),
            Some("/v2/a/tags/list?n=2&last=b")
        );
        assert_eq!(next_link(r#"</x>; rel="prev""#), None);
    }

    #[test]
    fn retry_after_is_seconds_and_capped() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("999999"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
