//! Cosign signatures, verified against the keys an operator trusts, before an image is
//! pulled. Pure: the registry client fetches what cosign stored ([`Envelope`]s), this
//! module decides. Both places cosign writes are read:
//! - the legacy format: a `sha256-<hex>.sig` tag whose layers are simple-signing payloads,
//!   each with its base64 signature in the `dev.cosignproject.cosign/signature` annotation;
//! - cosign 3's sigstore bundles (v0.3), attached as OCI 1.1 referrers: a DSSE envelope
//!   around an in-toto statement whose subject is the digest, predicate type
//!   `https://sigstore.dev/cosign/sign/v1`.
//!
//! A signature counts only if a trusted key verifies it AND what it signed names exactly the
//! digest being deployed (and the repository, where the format says one), with the
//! annotations its trust entry requires. Key-based signatures only: a keyless one (a Fulcio
//! certificate) is reported as such, never trusted.

mod bundle;
mod error;
mod key;
mod opened;
mod simple;
mod verify;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use bundle::SIGN_PREDICATE;
pub use key::{Fingerprint, KeyError, PublicKey};
pub use verify::{Finding, Rejected, verify};

/// One `[[trust]]` entry that covers an app: its keys, and what its signatures must carry.
#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub keys: Vec<PublicKey>,
    /// Annotations the signed payload must carry, with exactly these values.
    pub annotations: BTreeMap<String, String>,
}

/// What an app's images must be signed by: any one of its rules, fully.
#[derive(Debug, Clone)]
pub struct Policy {
    pub rules: Vec<Rule>,
    /// How long the `signature` step waits for a signature to appear when none is there
    /// at all (CI pushes the image, then signs it): the push's webhook often comes first.
    pub wait: std::time::Duration,
}

impl Policy {
    /// Every key of every rule, once each, as `SHA256:… (trust ci)`.
    pub(crate) fn keys(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.rules {
            for k in &r.keys {
                let s = format!("{} (trust {})", k.fingerprint(), r.name);
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        out
    }
}

/// What is being deployed: the digest a signature must name, in which repository.
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    /// `sha256:…`: the image manifest, or for an index the index that was signed.
    pub digest: &'a str,
    /// The app's image (its registry and repository).
    pub image: &'a crate::domain::image::ImageName,
}

/// Where cosign stored a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// A layer of the `sha256-<hex>.sig` tag.
    SigTag,
    /// A sigstore bundle attached as an OCI referrer (cosign 3).
    Bundle,
}

impl Format {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Format::SigTag => "cosign signature in the .sig tag",
            Format::Bundle => "sigstore bundle (OCI referrer)",
        }
    }
}

/// One signature as the registry holds it, read but not yet believed.
#[derive(Debug, Clone)]
pub enum Envelope {
    /// A `.sig` layer: the payload blob's bytes and the layer's annotations.
    SigTag {
        payload: Bytes,
        annotations: BTreeMap<String, String>,
    },
    /// A referrer's bundle layer, as bytes (JSON).
    Bundle { json: Bytes, referrer: String },
}

/// A signature that passed: which key made it, under which trust entry, found where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verified {
    /// `SHA256:…` of the key.
    pub key: String,
    pub algorithm: String,
    pub trust: String,
    pub format: Format,
    /// The digest the signature named.
    pub signed: String,
}

/// What a signature says, once its signature is known to be good.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Claim {
    /// What it signed: each digest with the annotations signed for it.
    subjects: Vec<Signed>,
    /// The repository it names, if the format names one (`docker-reference`).
    reference: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Signed {
    /// `sha256:…`.
    digest: String,
    annotations: BTreeMap<String, String>,
}
