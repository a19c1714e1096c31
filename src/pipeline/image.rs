//! resolve, pull, verify: from a tag to a local image that is exactly the pinned digest.

use serde::{Deserialize, Serialize};

use super::journal::{Begun, IntentCheck};
use super::{PipelineError, Run, Step, StepError};
use std::time::Duration;

use crate::registry::{RegistryError, Resolved, Wanted};

/// How long a resolve waits for the tag to name the digest the sender said it pushed.
const SETTLE: Duration = Duration::from_secs(3);

#[derive(Serialize)]
struct ResolveIntent<'a> {
    image: &'a str,
    tag: Option<&'a str>,
    digest: Option<&'a str>,
    platform: String,
}

#[derive(Serialize)]
struct ImageIntent<'a> {
    reference: &'a str,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerifiedImage {
    pub image_id: String,
    pub has_healthcheck: bool,
}

impl Run<'_> {
    pub(super) fn reference(&self, r: &Resolved) -> String {
        format!("{}@{}", self.app.image, r.digest)
    }

    /// Resolved once and journaled: a replay uses the recorded digest even if the tag
    /// moved since, so a deployment never changes its digest midway.
    pub(super) async fn resolve(&self) -> Result<Resolved, PipelineError> {
        let pinned = self
            .dep
            .pinned
            .then_some(self.dep.claimed_digest.as_deref())
            .flatten();
        let intent = ResolveIntent {
            image: &self.app.image,
            tag: if pinned.is_some() {
                None
            } else {
                self.dep.requested_tag.as_deref()
            },
            digest: pinned,
            platform: self.ctx.platform.to_string(),
        };
        let resolved = match self
            .begin::<Resolved>(Step::Resolve, &intent, IntentCheck::Strict)
            .await?
        {
            Begun::Done(r) => r,
            Begun::Fresh | Begun::Resumed(_) => {
                let wanted = match (pinned, self.dep.requested_tag.as_deref()) {
                    (Some(d), _) => Wanted::Digest(d),
                    (None, Some(t)) => Wanted::Tag(t),
                    (None, None) => Wanted::Tag(&self.app.tag),
                };
                let res = self
                    .retrying(Step::Resolve, || async {
                        Ok(self.resolve_settled(wanted.clone()).await?)
                    })
                    .await;
                let r = match res {
                    Ok(r) => r,
                    Err(e) => return Err(self.failed(Step::Resolve, e).await),
                };
                self.succeed(Step::Resolve, &r).await?;
                r
            }
        };
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
    /// for a short while. Any other digest means the tag moved on: that is deployed.
    async fn resolve_settled(&self, wanted: Wanted<'_>) -> Result<Resolved, RegistryError> {
        let claim = self
            .dep
            .claimed_digest
            .as_deref()
            .filter(|_| !self.dep.pinned);
        let serving = match claim {
            Some(_) => self
                .ctx
                .store
                .generation(&self.app.name)
                .await
                .ok()
                .flatten()
                .map(|g| g.digest),
            None => None,
        };
        let deadline = tokio::time::Instant::now() + SETTLE;
        let mut delay = Duration::from_millis(20);
        loop {
            let r = self
                .ctx
                .registry
                .resolve(self.app, wanted.clone(), &self.ctx.platform)
                .await?;
            let stale = claim.is_some_and(|c| {
                r.digest != c
                    && r.index_digest.as_deref() != Some(c)
                    && serving.as_deref() == Some(r.digest.as_str())
            });
            let agrees = !stale;
            if agrees || tokio::time::Instant::now() + delay > deadline {
                if !agrees {
                    tracing::info!(deployment = %self.dep.id, claimed = ?claim, resolved = %r.digest,
                        "the tag still names the serving digest, not the one the sender pushed");
                }
                return Ok(r);
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(500));
        }
    }

    pub(super) async fn pull(&self, r: &Resolved) -> Result<(), PipelineError> {
        let reference = self.reference(r);
        let intent = ImageIntent {
            reference: &reference,
        };
        if let Begun::Done(()) = self
            .begin::<()>(Step::Pull, &intent, IntentCheck::Strict)
            .await?
        {
            return Ok(());
        }
        let creds = self.ctx.registry.credentials(self.app.registry_host());
        let res = self
            .retrying(Step::Pull, || async {
                Ok(self
                    .ctx
                    .engine
                    .pull(&self.app.image, &r.digest, creds.clone())
                    .await?)
            })
            .await;
        if let Err(e) = res {
            return Err(self.failed(Step::Pull, e).await);
        }
        self.succeed(Step::Pull, &()).await
    }

    /// The engine's own record of the image must name the resolved digest, and the image
    /// must be for this engine's platform: what runs is what was resolved, nothing else.
    pub(super) async fn verify(&self, r: &Resolved) -> Result<VerifiedImage, PipelineError> {
        let reference = self.reference(r);
        let intent = ImageIntent {
            reference: &reference,
        };
        if let Begun::Done(v) = self
            .begin::<VerifiedImage>(Step::Verify, &intent, IntentCheck::Strict)
            .await?
        {
            return Ok(v);
        }
        let res = self
            .retrying(Step::Verify, || async {
                let image = match self.ctx.engine.image(&reference).await? {
                    Some(image) => image,
                    // Removed since the pull (a prune, an operator): pull it again, once.
                    None => {
                        let creds = self.ctx.registry.credentials(self.app.registry_host());
                        self.ctx.engine.pull(&self.app.image, &r.digest, creds).await?;
                        self.ctx.engine.image(&reference).await?.ok_or_else(|| {
                            StepError::Check(format!("{reference} is not in the engine after the pull"))
                        })?
                    }
                };
                if !image.repo_digests.iter().any(|d| d == &reference) {
                    return Err(StepError::Check(format!(
                        "digest mismatch: the engine's image {} has repo digests [{}], not {reference}",
                        image.id,
                        image.repo_digests.join(", ")
                    )));
                }
                let want = &self.ctx.platform;
                if image.platform.os != want.os || image.platform.architecture != want.architecture {
                    return Err(StepError::Check(format!(
                        "platform mismatch: image is {}, engine runs {want}",
                        image.platform
                    )));
                }
                Ok(VerifiedImage {
                    image_id: image.id,
                    has_healthcheck: image.has_healthcheck,
                })
            })
            .await;
        match res {
            Ok(v) => {
                self.succeed(Step::Verify, &v).await?;
                Ok(v)
            }
            Err(e) => Err(self.failed(Step::Verify, e).await),
        }
    }
}
