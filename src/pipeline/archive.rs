//! `pier import`: the `resolve` step of an imported deployment verifies its archive's own
//! bytes (config and layer digests, platform: [`crate::archive`]), loads what it verified
//! into the engine and checks what the engine then holds (the expected image id, the
//! platform, no Pier labels) before anything is created; `pull` and `verify` have nothing
//! left to do. A mismatch fails the deployment with nothing made: the loaded image is only
//! an image.

use std::path::Path;

use super::records::{ImportIntent, Loaded, VerifiedImage};
use super::refusal::{Refusal, reserved_labels_claimed};
use super::{EngineRun, PipelineError, Step, StepError};
use crate::registry::Resolved;
use crate::store::Import;

impl EngineRun<'_> {
    pub(super) async fn load_archive(
        &self,
        import: &Import,
    ) -> Result<(Resolved, VerifiedImage), PipelineError> {
        let Some(digest) = self.dep.claimed_digest.clone() else {
            return Err(PipelineError::Failed {
                step: Step::Resolve,
                source: Refusal::ImportWithoutImageId.into(),
            });
        };
        let platform = import
            .platform
            .clone()
            .unwrap_or_else(|| self.ctx.platform.to_string());
        let intent = ImportIntent {
            archive: import.archive.clone(),
            image_id: digest.clone(),
            platform: platform.clone(),
        };
        let loaded: Loaded = self
            .step(Step::Resolve, &intent, || {
                self.load_verified(&import.archive, &digest, &platform)
            })
            .await?;
        let r = loaded.resolved.clone();
        self.store_retry(|| {
            self.ctx
                .store
                .set_resolved(self.dep.id, self.owner, &r.digest, &r.platform)
        })
        .await?;
        Ok((loaded.resolved, loaded.image))
    }

    /// The resolve step's effect: the archive's own bytes verified, loaded, and what the
    /// engine then holds checked against the expected image id, platform and labels.
    async fn load_verified(
        &self,
        archive: &str,
        digest: &str,
        platform: &str,
    ) -> Result<Loaded, StepError> {
        let (digest, platform) = (digest.to_owned(), platform.to_owned());
        let path = Path::new(archive);
        if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            return Err(Refusal::ArchiveMissing.into());
        }
        // The archive's own bytes first, whatever the engine already holds: an
        // image id found on the engine proves nothing about what the file holds.
        let wanted = crate::archive::Wanted {
            image_id: digest.clone(),
            platform: platform.clone(),
        };
        let verified = crate::archive::verify(path, &wanted)
            .await
            .map_err(Refusal::from)?;
        let said = self
            .engine()
            .load_archive(&verified, self.ctx.pull_timeout)
            .await?;
        let Some(image) = self.engine().image(&digest).await? else {
            return Err(Refusal::ArchiveHolds {
                holds: said,
                digest,
            }
            .into());
        };
        if image.id != digest {
            return Err(Refusal::ImageId {
                id: image.id,
                digest,
            }
            .into());
        }
        let found = image.platform.to_string();
        let wanted_os_arch = |p: &str| p.split('/').take(2).collect::<Vec<_>>().join("/");
        if wanted_os_arch(&found) != wanted_os_arch(&platform) {
            return Err(Refusal::ArchivePlatform {
                found,
                expected: platform,
            }
            .into());
        }
        let claimed = reserved_labels_claimed(&image.labels);
        if !claimed.is_empty() {
            return Err(Refusal::ReservedLabels { labels: claimed }.into());
        }
        Ok(Loaded {
            resolved: Resolved {
                digest: crate::domain::Digest::parse(&digest).map_err(Refusal::from)?,
                index_digest: None,
                media_type: "archive".into(),
                platform: found,
            },
            image: VerifiedImage {
                image_id: image.id,
                has_healthcheck: image.has_healthcheck,
            },
        })
    }
}
