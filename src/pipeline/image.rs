//! resolve, pull, verify: from a tag to a local image that is exactly the pinned digest.

use std::time::Duration;

use super::plan::Placed;
use super::records::{ImageIntent, ResolveIntent, VerifiedImage};
use super::refusal::{Refusal, reserved_labels_claimed};
use super::{EngineRun, PipelineError, Run, Step};
use crate::backoff::Backoff;

use crate::registry::{RegistryError, Resolved, Wanted};

/// How long a resolve waits for the tag to name the digest the sender said it pushed.
const SETTLE: Duration = Duration::from_secs(3);

impl EngineRun<'_> {
    pub(super) fn reference(&self, r: &Resolved) -> String {
        match self.import {
            // A loaded archive's image is known by its id only.
            Some(_) => r.digest.to_string(),
            None => format!("{}@{}", self.app.image, r.digest),
        }
    }

    pub(super) async fn pull(&self, r: &Resolved) -> Result<(), PipelineError> {
        let reference = self.reference(r);
        let intent = ImageIntent {
            reference: reference.clone(),
        };
        let creds = self.ctx.registry.credentials(self.app.registry_host());
        self.step(Step::Pull, &intent, || async {
            Ok(self
                .engine()
                .pull(
                    &self.app.image,
                    &r.digest,
                    creds.clone(),
                    self.ctx.pull_timeout,
                )
                .await?)
        })
        .await
    }

    /// The engine's own record of the image must name the resolved digest, and the image
    /// must be for this engine's platform: what runs is what was resolved, nothing else.
    pub(super) async fn verify(&self, r: &Resolved) -> Result<VerifiedImage, PipelineError> {
        let reference = self.reference(r);
        let intent = ImageIntent {
            reference: reference.clone(),
        };
        self.step(Step::Verify, &intent, || async {
            let image = match self.engine().image(&reference).await? {
                Some(image) => image,
                // Removed since the pull (a prune, an operator): pull it again, once.
                None => {
                    let creds = self.ctx.registry.credentials(self.app.registry_host());
                    self.engine()
                        .pull(&self.app.image, &r.digest, creds, self.ctx.pull_timeout)
                        .await?;
                    self.engine()
                        .image(&reference)
                        .await?
                        .ok_or_else(|| Refusal::NotPulled {
                            reference: reference.clone(),
                        })?
                }
            };
            let named = |d: &String| self.app.image_name.is_repo_digest(d, &r.digest);
            if !image.repo_digests.iter().any(named) {
                return Err(Refusal::RepoDigests {
                    image: image.id,
                    repo_digests: image.repo_digests,
                    reference: reference.clone(),
                }
                .into());
            }
            let claimed = reserved_labels_claimed(&image.labels);
            if !claimed.is_empty() {
                return Err(Refusal::ReservedLabels { labels: claimed }.into());
            }
            let want = &self.ctx.platform;
            if image.platform.os != want.os || image.platform.architecture != want.architecture {
                return Err(Refusal::Platform {
                    image: image.platform.to_string(),
                    engine: want.to_string(),
                }
                .into());
            }
            Ok(VerifiedImage {
                image_id: image.id,
                has_healthcheck: image.has_healthcheck,
            })
        })
        .await
    }
}

impl<P: Placed> Run<'_, P> {
    /// Resolved once and journaled: a replay uses the recorded digest even if the tag
    /// moved since, so a deployment never changes its digest midway.
    pub(super) async fn resolve(&self) -> Result<Resolved, PipelineError> {
        let pinned = self
            .dep
            .pinned
            .then_some(self.dep.claimed_digest.as_deref())
            .flatten();
        let intent = ResolveIntent {
            image: self.app.image.clone(),
            tag: if pinned.is_some() {
                None
            } else {
                self.dep.requested_tag.clone()
            },
            digest: pinned.map(str::to_owned),
            platform: self.ctx.platform.to_string(),
        };
        let wanted = match (pinned, self.dep.requested_tag.as_deref()) {
            (Some(d), _) => Wanted::Digest(d),
            (None, Some(t)) => Wanted::Tag(t),
            (None, None) => Wanted::Tag(&self.app.tag),
        };
        // What serves now, to tell a tag the registry has not moved yet from one that
        // moved on; read before the step so that a database error is not a registry one.
        let serving = self
            .store_retry(|| {
                self.ctx
                    .store
                    .generation(&self.app.name, self.target.name())
            })
            .await?
            .map(|g| g.digest);
        let resolved = self
            .step(Step::Resolve, &intent, || async {
                Ok(self
                    .resolve_settled(wanted.clone(), serving.as_deref())
                    .await?)
            })
            .await?;
        self.store_retry(|| {
            self.ctx.store.set_resolved(
                self.dep.id,
                self.owner,
                &resolved.digest,
                &resolved.platform,
            )
        })
        .await?;
        Ok(resolved)
    }

    /// Resolves, giving the registry a moment to agree with the sender. Distribution sends
    /// its notification when the manifest is stored, before the tag is moved to it, so a
    /// resolve right after a webhook can still see the previous digest: the one serving.
    /// While the tag names what serves instead of the digest the sender pushed, ask again
    /// for a short while (and while the tag does not exist yet). Any other digest means the
    /// tag moved on: that is deployed.
    async fn resolve_settled(
        &self,
        wanted: Wanted<'_>,
        serving: Option<&str>,
    ) -> Result<Resolved, RegistryError> {
        let claim = self
            .dep
            .claimed_digest
            .as_deref()
            .filter(|_| !self.dep.pinned);
        let mut settle =
            Backoff::new(Duration::from_millis(20), Duration::from_millis(500)).within(SETTLE);
        loop {
            let r = match self
                .ctx
                .registry
                .resolve(self.app, wanted.clone(), &self.ctx.platform)
                .await
            {
                Ok(r) => r,
                // The first push of a tag: its notification can come before the tag
                // exists at all. Not found yet, while a sender claims a digest, is the
                // same race as a stale answer; after the settle window it is final.
                Err(RegistryError::ManifestUnknown { .. })
                    if claim.is_some() && settle.wait().await =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            };
            let stale = claim.is_some_and(|c| {
                r.digest != c
                    && r.index_digest.as_deref() != Some(c)
                    && serving == Some(r.digest.as_str())
            });
            if !stale {
                return Ok(r);
            }
            if !settle.wait().await {
                tracing::info!(claimed = ?claim, resolved = %r.digest,
                    "the tag still names the serving digest, not the one the sender pushed");
                return Ok(r);
            }
        }
    }
}
