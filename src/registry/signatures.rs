//! Where cosign stores the signatures of a digest, read through the same bounded client as
//! manifests (every request under the registry's deadlines, every body under its
//! `max_manifest` cap, every blob checked against its digest), and a bounded number of
//! each: a registry that floods a signature tag with layers or referrers costs Pier a few
//! requests, not a loop.
//! - `sha256-<hex>.sig`: cosign 1 and 2; an image manifest whose simple-signing layers
//!   are the payloads, each with its signature in the layer's annotations.
//! - OCI 1.1 referrers of the digest (the API, or the `sha256-<hex>` fallback tag where a
//!   registry lacks it): cosign 3's sigstore bundles, one per referrer manifest.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::client::Session;
use super::{Registry, RegistryError, invalid, is_sha256_digest};
use crate::config::AppConfig;
use crate::signature::{Envelope, SIGN_PREDICATE};

const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const BUNDLE_PREFIX: &str = "application/vnd.dev.sigstore.bundle";
const PREDICATE_ANNOTATION: &str = "dev.sigstore.bundle.predicateType";
/// Signature layers of one `.sig` manifest looked at (cosign appends one per signing).
const MAX_LAYERS: usize = 16;
/// Referrers of one digest looked at.
const MAX_REFERRERS: usize = 16;

/// Which of cosign's two places to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    SigTag,
    Referrers,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Shape {
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
    subject: Option<Descriptor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    artifact_type: Option<String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

impl Registry {
    /// The signatures stored for `digest` (of the app's repository) at `place`; an empty
    /// list when there are none there.
    pub(crate) async fn signatures(
        &self,
        app: &AppConfig,
        digest: &str,
        place: Place,
    ) -> Result<Vec<Envelope>, RegistryError> {
        let repo = app.repository();
        let host = app.registry_host();
        let Some(hex) = digest
            .strip_prefix("sha256:")
            .filter(|_| is_sha256_digest(digest))
        else {
            return Err(invalid(
                &format!("{host}/{repo}@{digest}"),
                "not a sha256 digest",
            ));
        };
        let mut session = Session::default();
        match place {
            Place::SigTag => self.sig_tag(app, &mut session, hex).await,
            Place::Referrers => self.referrers(app, &mut session, digest, hex).await,
        }
    }

    async fn sig_tag(
        &self,
        app: &AppConfig,
        session: &mut Session,
        hex: &str,
    ) -> Result<Vec<Envelope>, RegistryError> {
        let (host, repo) = (app.registry_host(), app.repository());
        let endpoint = self.endpoint(host);
        let tag = format!("sha256-{hex}.sig");
        let shown = format!("{host}/{repo}:{tag}");
        let m = match endpoint.manifest(session, repo, &tag, &shown).await {
            Ok(m) => m,
            Err(RegistryError::ManifestUnknown { .. }) => return Ok(vec![]),
            Err(e) => return Err(e),
        };
        let shape: Shape = serde_json::from_slice(&m.body).map_err(|e| invalid(&shown, e))?;
        let mut out = Vec::new();
        for layer in shape
            .layers
            .into_iter()
            .filter(|l| l.media_type == SIMPLE_SIGNING && is_sha256_digest(&l.digest))
            .take(MAX_LAYERS)
        {
            let blob_shown = format!("{host}/{repo}@{} (a layer of {tag})", layer.digest);
            let payload = endpoint
                .blob(session, repo, &layer.digest, &blob_shown)
                .await?;
            out.push(Envelope::SigTag {
                payload,
                annotations: layer.annotations,
            });
        }
        Ok(out)
    }

    async fn referrers(
        &self,
        app: &AppConfig,
        session: &mut Session,
        digest: &str,
        hex: &str,
    ) -> Result<Vec<Envelope>, RegistryError> {
        let (host, repo) = (app.registry_host(), app.repository());
        let endpoint = self.endpoint(host);
        let shown = format!("{host}/{repo}@{digest} (its referrers)");
        let index = match endpoint.referrers(session, repo, digest, &shown).await {
            Ok(body) => body,
            // No referrers API here: the fallback tag the OCI spec names instead.
            Err(RegistryError::ManifestUnknown { .. } | RegistryError::Invalid { .. }) => {
                let tag = format!("sha256-{hex}");
                let tag_shown = format!("{host}/{repo}:{tag}");
                match endpoint.manifest(session, repo, &tag, &tag_shown).await {
                    Ok(m) => m.body,
                    Err(RegistryError::ManifestUnknown { .. }) => return Ok(vec![]),
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let index: Shape = serde_json::from_slice(&index).map_err(|e| invalid(&shown, e))?;
        let mut out = Vec::new();
        for r in index
            .manifests
            .into_iter()
            .filter(|r| is_sha256_digest(&r.digest))
            .filter(|r| {
                r.artifact_type
                    .as_deref()
                    .is_none_or(|t| t.starts_with(BUNDLE_PREFIX))
            })
            // Cosign 3 attaches attestations as bundles too, and says which is which: those
            // are not fetched (nor can a flood of them crowd the signatures out).
            .filter(|r| {
                r.annotations
                    .get(PREDICATE_ANNOTATION)
                    .is_none_or(|p| p == SIGN_PREDICATE)
            })
            .take(MAX_REFERRERS)
        {
            let r_shown = format!("{host}/{repo}@{} (a referrer of {digest})", r.digest);
            let m = endpoint
                .manifest(session, repo, &r.digest, &r_shown)
                .await?;
            let shape: Shape = serde_json::from_slice(&m.body).map_err(|e| invalid(&r_shown, e))?;
            // A referrer of another digest (the fallback tag is anyone's to write) is not
            // a signature of this one.
            if shape.subject.as_ref().map(|s| s.digest.as_str()) != Some(digest) {
                continue;
            }
            let Some(layer) = shape
                .layers
                .into_iter()
                .find(|l| l.media_type.starts_with(BUNDLE_PREFIX) && is_sha256_digest(&l.digest))
            else {
                continue;
            };
            let json = endpoint
                .blob(session, repo, &layer.digest, &r_shown)
                .await?;
            out.push(Envelope::Bundle {
                json,
                referrer: r.digest,
            });
        }
        Ok(out)
    }

    /// The manifests the index `digest` lists: a platform manifest deployed under a signed
    /// index must be one of them.
    pub(crate) async fn index_entries(
        &self,
        app: &AppConfig,
        digest: &str,
    ) -> Result<Vec<String>, RegistryError> {
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
        let shape: Shape = serde_json::from_slice(&m.body).map_err(|e| invalid(&shown, e))?;
        Ok(shape.manifests.into_iter().map(|d| d.digest).collect())
    }
}
