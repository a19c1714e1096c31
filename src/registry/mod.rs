//! Tag to digest, asked of the registry itself: a webhook's payload is only a hint.

mod platform;
pub mod tags;

use std::collections::HashMap;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::{Deserialize, Serialize};

use crate::config::{AppConfig, RegistryConfig};
pub use platform::Platform;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Network trouble or a 5xx: worth retrying.
    #[error("registry {host} unreachable: {message}")]
    Unreachable { host: String, message: String },
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
    #[error("{reference}: {message}")]
    Invalid { reference: String, message: String },
}

impl RegistryError {
    pub fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Unreachable { .. })
    }
}

/// What a tag (or a pinned digest) resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    /// The digest of the single-platform image manifest that will be pulled and run.
    pub digest: String,
    /// The index (manifest list) the digest was chosen from, if the reference named one.
    pub index_digest: Option<String>,
    pub media_type: String,
    pub platform: String,
}

/// Which manifest a deployment asks for.
#[derive(Debug, Clone)]
pub enum Wanted<'a> {
    Tag(&'a str),
    Digest(&'a str),
}

pub struct Registry {
    client: Client,
    auth: HashMap<String, RegistryAuth>,
}

const ACCEPT: &[&str] = &[
    oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE,
    oci_client::manifest::IMAGE_MANIFEST_LIST_MEDIA_TYPE,
    oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
    oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
];

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
    pub fn new(registries: &[RegistryConfig]) -> Self {
        let insecure: Vec<String> = registries
            .iter()
            .filter(|r| r.insecure)
            .map(|r| r.host.clone())
            .collect();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(insecure),
            connect_timeout: Some(Duration::from_secs(5)),
            read_timeout: Some(Duration::from_secs(30)),
            // Pier chooses the platform itself (the engine's), from the raw index.
            platform_resolver: None,
            ..Default::default()
        };
        let auth = registries
            .iter()
            .filter_map(|r| {
                let user = r.username.clone()?;
                let pass = r.password.as_ref()?.expose().to_owned();
                Some((r.host.clone(), RegistryAuth::Basic(user, pass)))
            })
            .collect();
        Self {
            client: Client::new(config),
            auth,
        }
    }

    fn auth_for(&self, host: &str) -> RegistryAuth {
        self.auth
            .get(host)
            .cloned()
            .unwrap_or(RegistryAuth::Anonymous)
    }

    /// Basic credentials for the engine's pull, if configured.
    pub fn credentials(&self, host: &str) -> Option<(String, String)> {
        match self.auth.get(host) {
            Some(RegistryAuth::Basic(u, p)) => Some((u.clone(), p.clone())),
            _ => None,
        }
    }

    /// Resolves to one platform manifest digest. For an index, the entry for `platform`
    /// is chosen and the index digest recorded beside it.
    pub async fn resolve(
        &self,
        app: &AppConfig,
        wanted: Wanted<'_>,
        platform: &Platform,
    ) -> Result<Resolved, RegistryError> {
        let host = app.registry_host().to_owned();
        let repo = app.repository().to_owned();
        let reference = match wanted {
            Wanted::Tag(t) => Reference::with_tag(host.clone(), repo.clone(), t.to_owned()),
            Wanted::Digest(d) => Reference::with_digest(host.clone(), repo.clone(), d.to_owned()),
        };
        let (body, digest) = self.fetch(&reference, &host).await?;
        let shape: ManifestShape =
            serde_json::from_slice(&body).map_err(|e| invalid(&reference, e))?;
        let Some(entries) = shape.manifests else {
            if shape.layers.is_none() {
                return Err(invalid(
                    &reference,
                    "neither an image manifest nor an index",
                ));
            }
            return Ok(Resolved {
                digest,
                index_digest: None,
                media_type: shape.media_type.unwrap_or_default(),
                platform: platform.to_string(),
            });
        };
        let chosen = platform::choose(
            entries
                .iter()
                .map(|e| (e.digest.as_str(), e.platform.as_ref())),
            platform,
        )
        .ok_or_else(|| RegistryError::NoPlatform {
            reference: reference.whole(),
            wanted: platform.to_string(),
            available: entries
                .iter()
                .filter_map(|e| e.platform.as_ref().map(|p| p.to_string()))
                .collect::<Vec<_>>()
                .join(", "),
        })?
        .to_owned();
        let child = Reference::with_digest(host.clone(), repo, chosen.clone());
        let (child_body, child_digest) = self.fetch(&child, &host).await?;
        let child_shape: ManifestShape =
            serde_json::from_slice(&child_body).map_err(|e| invalid(&child, e))?;
        if child_shape.manifests.is_some() || child_digest != chosen {
            return Err(invalid(&child, "index entry is not an image manifest"));
        }
        Ok(Resolved {
            digest: child_digest,
            index_digest: Some(digest),
            media_type: child_shape.media_type.unwrap_or_default(),
            platform: platform.to_string(),
        })
    }

    async fn fetch(
        &self,
        reference: &Reference,
        host: &str,
    ) -> Result<(bytes::Bytes, String), RegistryError> {
        self.client
            .pull_manifest_raw(reference, &self.auth_for(host), ACCEPT)
            .await
            .map_err(|e| classify(e, reference, host))
    }
}

fn invalid(reference: &Reference, e: impl std::fmt::Display) -> RegistryError {
    RegistryError::Invalid {
        reference: reference.whole(),
        message: e.to_string(),
    }
}

fn classify(e: OciDistributionError, reference: &Reference, host: &str) -> RegistryError {
    use oci_client::errors::OciErrorCode as C;
    let unknown = || RegistryError::ManifestUnknown {
        reference: reference.whole(),
    };
    let unreachable = |message: String| RegistryError::Unreachable {
        host: host.to_owned(),
        message,
    };
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => unknown(),
        OciDistributionError::RegistryError { envelope, .. } => {
            if envelope.errors.iter().any(|e| {
                matches!(
                    e.code,
                    C::ManifestUnknown | C::NameUnknown | C::NotFound | C::BlobUnknown
                )
            }) {
                unknown()
            } else if envelope
                .errors
                .iter()
                .any(|e| matches!(e.code, C::Unauthorized | C::Denied))
            {
                RegistryError::Unauthorized {
                    host: host.to_owned(),
                    reference: reference.whole(),
                }
            } else if envelope
                .errors
                .iter()
                .any(|e| matches!(e.code, C::Toomanyrequests))
            {
                unreachable("too many requests".into())
            } else {
                invalid(reference, format!("registry error: {envelope:?}"))
            }
        }
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => RegistryError::Unauthorized {
            host: host.to_owned(),
            reference: reference.whole(),
        },
        OciDistributionError::ServerError { code: 404, .. } => unknown(),
        OciDistributionError::ServerError { code, message, .. } if code >= 500 || code == 429 => {
            unreachable(format!("HTTP {code}: {message}"))
        }
        OciDistributionError::RequestError(e) => unreachable(without_url(&e)),
        OciDistributionError::IoError(e) => unreachable(e.to_string()),
        OciDistributionError::DigestError(e) => {
            invalid(reference, format!("digest does not match the content: {e}"))
        }
        other => invalid(reference, other),
    }
}

/// reqwest's messages carry the URL; registry URLs hold no secrets, but keep the message
/// short and stable for the journal.
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_connect() {
        "connection refused or unreachable"
    } else if e.is_timeout() {
        "timed out"
    } else {
        "request failed"
    };
    let mut cause = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    if cause.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {cause}")
    }
}
