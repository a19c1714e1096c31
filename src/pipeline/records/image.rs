//! The image's steps: `resolve` (a tag, a pinned digest, or an imported archive),
//! `signature`, `pull` and `verify`.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::registry::Resolved;

/// `resolve` of the app's own image: a tag to look up, or a pinned digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ResolveIntent {
    pub image: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
    pub platform: String,
}

/// `resolve` of a further service; `from_deployment` names the deployment whose journal
/// gave a pinned digest. Also reads a primary's [`ResolveIntent`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ServiceResolveIntent {
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_deployment: Option<Uuid>,
    pub platform: String,
}

/// `resolve` of a `pier import`: the archive to load and the image id it must hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ImportIntent {
    pub archive: String,
    pub image_id: String,
    pub platform: String,
}

/// The result of an import's `resolve`: the archive's image, loaded and checked, standing
/// for both a resolve and a verify.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Loaded {
    pub resolved: Resolved,
    pub image: VerifiedImage,
}

/// `pull` and `verify`: `repo@sha256:…`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ImageIntent {
    pub reference: String,
}

/// `verify`'s result: the engine's image that is exactly the digest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct VerifiedImage {
    pub image_id: String,
    pub has_healthcheck: bool,
}

/// What `signature` checks: the subject, and what may sign it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SignatureIntent {
    /// `repo@sha256:…` that must be signed: the image manifest, or the index it came from.
    pub subject: String,
    /// When the subject is an index: the platform manifest that will be pulled, which must
    /// be one of the index's entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// The keys accepted, `SHA256:… (trust ci)`.
    pub keys: Vec<String>,
    /// Annotations each trust entry requires, `ci: env=prod`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub annotations: Vec<String>,
}

/// `signature`'s result: which key signed what runs.
pub(crate) type Signed = crate::signature::Verified;
