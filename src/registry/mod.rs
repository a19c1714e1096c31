//! Tag to digest, asked of the registry itself: a webhook's payload is only a hint.
//! Every request has a deadline and every manifest a size cap (`client.rs`), so a hostile
//! or slow registry fails a resolve within its budget instead of wedging the app.

mod body;
mod client;
mod headers;
mod signatures;
pub mod tags;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{AppConfig, RegistryConfig, RegistryLimits};
use crate::domain::{Digest, Platform};
use client::{Endpoint, Session};
pub use signatures::Place;

#[derive(Debug, thiserror::Error)]
pub(crate) enum RegistryError {
    /// Network trouble, a deadline passed, or a 5xx: worth retrying.
    #[error("registry {host} unreachable: {message}")]
    Unreachable { host: String, message: String },
    /// 429: worth retrying, not before the registry's `Retry-After`.
    #[error("registry {host} answered 429 Too Many Requests{}", after(retry_after))]
    RateLimited {
        host: String,
        retry_after: Option<Duration>,
    },
    #[error("manifest unknown: {reference}")]
    ManifestUnknown { reference: String },
    #[error("registry {host} refused the credentials for {reference}")]
    Unauthorized { host: String, reference: String },
    #[error("{reference} is an index with no manifest for {wanted} (it has: {available})")]
    NoPlatform {
        reference: String,
        wanted: String,
        available: String,
    },
    /// Bigger than the configured cap: Pier stopped reading at the cap.
    #[error(
        "{reference}: the manifest is larger than the {} cap (max_manifest); refused",
        size(*limit)
    )]
    TooLarge { reference: String, limit: usize },
    #[error("{reference}: {message}")]
    Invalid { reference: String, message: String },
    /// A tag list or token answer past its byte cap, not read further. Retried as a
    /// registry in trouble would be: the next page or token may fit.
    #[error("registry {host} unreachable: answer larger than {cap} bytes")]
    AnswerTooLarge { host: String, cap: usize },
}

fn after(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(" (Retry-After {}s)", d.as_secs()),
        None => String::new(),
    }
}

fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

impl RegistryError {
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            RegistryError::Unreachable { .. }
                | RegistryError::RateLimited { .. }
                | RegistryError::AnswerTooLarge { .. }
        )
    }

    /// How long the registry asked to be left alone, if it did.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            RegistryError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// What a tag (or a pinned digest) resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    /// The digest of the single-platform image manifest that will be pulled and run.
    pub digest: crate::domain::Digest,
    /// The index (manifest list) the digest was chosen from, if the reference named one.
    pub index_digest: Option<String>,
    pub media_type: String,
    pub platform: String,
}

/// Which manifest a deployment asks for.
#[derive(Debug, Clone)]
pub(crate) enum Wanted<'a> {
    Tag(&'a str),
    Digest(&'a str),
}

pub struct Registry {
    /// One per `[[registries]]` entry, by host.
    endpoints: HashMap<String, Arc<Endpoint>>,
    /// The server's limits, for a host without an entry (HTTPS, anonymous).
    defaults: RegistryLimits,
    /// Endpoints of hosts without an entry, made on first use: building a client loads the
    /// TLS roots, far more than a resolve should pay each time. Bounded by the apps' hosts.
    unlisted: Mutex<HashMap<String, Arc<Endpoint>>>,
    credentials: HashMap<String, (String, String)>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestShape {
    media_type: Option<String>,
    manifests: Option<Vec<IndexEntry>>,
    layers: Option<Vec<serde_json::Value>>,
}

#[derive(Deserialize)]
struct IndexEntry {
    digest: String,
    platform: Option<Platform>,
}

impl Registry {
    pub fn new(registries: &[RegistryConfig], defaults: RegistryLimits) -> Self {
        let credentials: HashMap<String, (String, String)> = registries
            .iter()
            .filter_map(|r| {
                let user = r.username.clone()?;
                let pass = r.password.as_ref()?.expose().to_owned();
                Some((r.host.clone(), (user, pass)))
            })
            .collect();
        let endpoints = registries
            .iter()
            .map(|r| {
                let basic = credentials
                    .get(&r.host)
                    .map(|(u, p)| (u.as_str(), p.as_str()));
                (
                    r.host.clone(),
                    Arc::new(Endpoint::new(&r.host, r.insecure, basic, r.limits)),
                )
            })
            .collect();
        Self {
            endpoints,
            defaults,
            unlisted: Mutex::default(),
            credentials,
        }
    }

    fn endpoint(&self, host: &str) -> Arc<Endpoint> {
        if let Some(e) = self.endpoints.get(host) {
            return e.clone();
        }
        let mut unlisted = self.unlisted.lock().unwrap_or_else(|e| e.into_inner());
        unlisted
            .entry(host.to_owned())
            .or_insert_with(|| Arc::new(Endpoint::new(host, false, None, self.defaults)))
            .clone()
    }

    /// Basic credentials for the engine's pull, if configured.
    pub(crate) fn credentials(&self, host: &str) -> Option<(String, String)> {
        self.credentials.get(host).cloned()
    }

    /// Resolves to one platform manifest digest. For an index, the entry for `platform`
    /// is chosen and the index digest recorded beside it.
    pub(crate) async fn resolve(
        &self,
        app: &AppConfig,
        wanted: Wanted<'_>,
        platform: &Platform,
    ) -> Result<Resolved, RegistryError> {
        let host = app.registry_host();
        let repo = app.repository();
        let endpoint = self.endpoint(host);
        let (reference, shown, well_formed) = match wanted {
            Wanted::Tag(t) => (t, format!("{host}/{repo}:{t}"), is_tag(t)),
            Wanted::Digest(d) => (d, format!("{host}/{repo}@{d}"), is_sha256_digest(d)),
        };
        if !well_formed {
            return Err(invalid(&shown, "not a valid tag or sha256 digest"));
        }
        let mut session = Session::default();
        let top = endpoint
            .manifest(&mut session, repo, reference, &shown)
            .await?;
        let shape: ManifestShape =
            serde_json::from_slice(&top.body).map_err(|e| invalid(&shown, e))?;
        let Some(entries) = shape.manifests else {
            if shape.layers.is_none() {
                return Err(invalid(&shown, "neither an image manifest nor an index"));
            }
            return Ok(Resolved {
                digest: Digest::parse(&top.digest).map_err(|e| invalid(&shown, e))?,
                index_digest: None,
                media_type: shape.media_type.unwrap_or_default(),
                platform: platform.to_string(),
            });
        };
        let chosen = crate::domain::platform::choose(
            entries
                .iter()
                .map(|e| (e.digest.as_str(), e.platform.as_ref())),
            platform,
        )
        .ok_or_else(|| RegistryError::NoPlatform {
            reference: shown.clone(),
            wanted: platform.to_string(),
            available: entries
                .iter()
                .filter_map(|e| e.platform.as_ref().map(|p| p.to_string()))
                .collect::<Vec<_>>()
                .join(", "),
        })?
        .to_owned();
        if !is_sha256_digest(&chosen) {
            return Err(invalid(
                &shown,
                "an index entry's digest is not a sha256 digest",
            ));
        }
        let child_shown = format!("{host}/{repo}@{chosen}");
        let child = endpoint
            .manifest(&mut session, repo, &chosen, &child_shown)
            .await?;
        let child_shape: ManifestShape =
            serde_json::from_slice(&child.body).map_err(|e| invalid(&child_shown, e))?;
        if child_shape.manifests.is_some() || child.digest != chosen {
            return Err(invalid(
                &child_shown,
                "index entry is not an image manifest",
            ));
        }
        Ok(Resolved {
            digest: Digest::parse(&child.digest).map_err(|e| invalid(&child_shown, e))?,
            index_digest: Some(top.digest),
            media_type: child_shape.media_type.unwrap_or_default(),
            platform: platform.to_string(),
        })
    }
}

impl Registry {
    /// The platforms the manifest `digest` serves, read again from the registry by
    /// digest (its bytes checked against it): an index's entries (attestations, which name
    /// no real platform, left out), or none for a single image manifest. `member`, the
    /// platform manifest a deployment resolved, must be one of the index's entries.
    pub(crate) async fn platforms(
        &self,
        app: &AppConfig,
        digest: &str,
        member: &str,
    ) -> Result<Vec<Platform>, RegistryError> {
        let (host, repo) = (app.registry_host(), app.repository());
        let shown = format!("{host}/{repo}@{digest}");
        if !is_sha256_digest(digest) {
            return Err(invalid(&shown, "not a sha256 digest"));
        }
        let mut session = Session::default();
        let m = self
            .endpoint(host)
            .manifest(&mut session, repo, digest, &shown)
            .await?;
        let shape: ManifestShape =
            serde_json::from_slice(&m.body).map_err(|e| invalid(&shown, e))?;
        let Some(entries) = shape.manifests else {
            if digest != member {
                return Err(invalid(&shown, format!("is not an index listing {member}")));
            }
            return Ok(vec![]);
        };
        if !entries.iter().any(|e| e.digest == member) {
            return Err(invalid(
                &shown,
                format!("the index no longer lists {member}"),
            ));
        }
        let mut platforms: Vec<Platform> = entries
            .into_iter()
            .filter_map(|e| e.platform)
            .filter(|p| p.os != "unknown" && p.architecture != "unknown")
            .collect();
        platforms.dedup();
        Ok(platforms)
    }
}

/// The OCI tag grammar, `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`: a tag from a webhook goes
/// into a URL path and must not be able to name another one.
fn is_tag(t: &str) -> bool {
    t.len() <= 128
        && t.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Only such a digest goes into a URL path: an index is the registry's word, and an entry
/// like `../../x` must not steer the next request.
fn is_sha256_digest(d: &str) -> bool {
    d.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn invalid(reference: &str, e: impl std::fmt::Display) -> RegistryError {
    RegistryError::Invalid {
        reference: reference.to_owned(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_and_network_trouble_are_retried_refusals_are_not() {
        let limited = RegistryError::RateLimited {
            host: "r".into(),
            retry_after: Some(Duration::from_secs(3)),
        };
        assert!(limited.is_transient());
        assert_eq!(limited.retry_after(), Some(Duration::from_secs(3)));
        assert!(limited.to_string().contains("Retry-After 3s"), "{limited}");
        let too_large = RegistryError::TooLarge {
            reference: "r/a:b".into(),
            limit: 4 << 20,
        };
        assert!(!too_large.is_transient());
        assert!(too_large.to_string().contains("4 MiB cap"), "{too_large}");
        assert!(
            !RegistryError::ManifestUnknown {
                reference: "x".into()
            }
            .is_transient()
        );
    }

    #[test]
    fn index_entries_must_be_plain_sha256_digests() {
        assert!(is_sha256_digest(&format!("sha256:{}", "a".repeat(64))));
        assert!(!is_sha256_digest("sha256:../../v2/x"));
        assert!(!is_sha256_digest(&format!("sha512:{}", "a".repeat(128))));
        assert!(is_tag("v1.2_rc-3") && is_tag("_x"));
        assert!(!is_tag("../x") && !is_tag("a/b") && !is_tag("") && !is_tag(&"a".repeat(129)));
    }
}
