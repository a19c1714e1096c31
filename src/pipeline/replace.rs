//! How one engine's generation is replaced: the strategy axis. `recreate.rs` and
//! `blue_green/` each implement [`Replace`]; the plan on one engine (`alone.rs`) and a
//! rollout across several (`rollout/`) run a strategy's steps through it, so neither plan
//! matches on the strategy. What a step does differently on one engine of several (its
//! crash point's name, what `switch` keeps for a revert) it reads from its run's
//! `TargetSet`, not from the strategy.
//!
//! Also here: what every strategy does on an engine before its own steps (the candidate
//! made, [`EngineRun::make_candidate`]) and the no-op check that may spare it all.

use super::container::Publishing;
use super::plan::Placed;
use super::records::{Candidate, Resolved, VerifiedImage};
use super::service_images::ServiceImage;
use super::{EngineRun, PipelineError, Step, error_chain};

/// Every image of a generation, resolved, pulled and verified on an engine.
pub(super) struct Images {
    pub resolved: Resolved,
    pub image: VerifiedImage,
    /// Every further service's image, in config order (see `service_images.rs`).
    pub services: Vec<ServiceImage>,
}

/// What every strategy starts from on an engine: the candidate created, with the app's
/// network, volumes and shared networks, and the images of the generation.
pub(super) struct Made {
    pub resolved: Resolved,
    pub image: VerifiedImage,
    pub candidate: Candidate,
    /// Every further service's image, in config order (see `service_images.rs`).
    pub services: Vec<ServiceImage>,
}

/// A strategy: how a new generation takes over from the old one on one engine.
pub(super) trait Replace {
    /// One engine's new generation serving, its old one stopped or kept but not yet
    /// removed, so that an undo still has it.
    type Serving;

    /// Where the app's candidate publishes its ports: recreate on their fixed addresses,
    /// blue-green on ephemeral loopback ports that only the proxy sends clients to.
    fn publishing(&self) -> Publishing;

    /// From the created candidate to serving.
    async fn serve(&self, run: &EngineRun<'_>, made: Made) -> Result<Self::Serving, PipelineError>;

    /// The old generation removed once the new one serves (on every engine of a
    /// rollout): its warnings; trouble here never fails the deployment.
    async fn retire(
        &self,
        run: &EngineRun<'_>,
        serving: &Self::Serving,
    ) -> Result<Vec<String>, PipelineError>;

    /// The first half of an undo: traffic back on what served before, where this
    /// strategy moved it (blue-green's route), before the containers are undone. The route
    /// version that serves the previous generation again; `None` when nothing moved.
    async fn revert(&self, run: &EngineRun<'_>) -> Result<Option<i64>, PipelineError>;

    /// What serves, in the deployment's outcome, on the app's one engine.
    fn said_alone(&self, serving: &Self::Serving, resolved: &Resolved) -> String;

    /// What serves on `target`, one engine of a rollout.
    fn said_among(&self, serving: &Self::Serving, target: &str) -> String;
}

impl EngineRun<'_> {
    /// Before any container of the app exists: its network and its owned volumes; then
    /// the candidate (its ports published as `publishing` says), and the shared networks
    /// it joins.
    pub(super) async fn make_candidate(
        &self,
        images: Images,
        publishing: Publishing,
    ) -> Result<Made, PipelineError> {
        let Images {
            resolved,
            image,
            services,
        } = images;
        // Every service's secrets are readable (an `age:` file decrypts and holds its
        // key) before anything of the generation is made.
        self.check_secrets().await?;
        self.network().await?;
        let volumes = self.volumes().await?;
        let candidate = self.create(&resolved, publishing, &volumes).await?;
        self.connect(&candidate).await?;
        Ok(Made {
            resolved,
            image,
            candidate,
            services,
        })
    }

    /// A webhook for the digest that already serves, healthy, is a no-op: it succeeds at
    /// once and says so, instead of restarting a healthy service. Once `pull` is in the
    /// journal the deployment is under way and is finished, not skipped.
    pub(super) async fn already_running(
        &self,
        digest: &str,
        others: &[Resolved],
    ) -> Result<Option<String>, PipelineError> {
        let pulled = self
            .store_retry(|| {
                self.ctx
                    .store
                    .step(self.dep.id, Step::Pull, self.lane(Step::Pull))
            })
            .await?;
        if pulled.is_some() {
            return Ok(None);
        }
        let current = self
            .store_retry(|| {
                self.ctx
                    .store
                    .generation(&self.app.name, self.target.name())
            })
            .await?;
        let Some(current) = current.filter(|g| g.digest == digest) else {
            return Ok(None);
        };
        match self.engine().inspect_container(&current.container_id).await {
            Ok(Some(c)) if c.running => {
                // Every further service must run too: one added to the config since, or one
                // whose container is gone, makes this push a deployment.
                if !self.services_running(current.deployment_id, others).await {
                    return Ok(None);
                }
                Ok(Some(format!(
                    "no-op: {digest} already runs in {} (deployment {})",
                    c.name, current.deployment_id
                )))
            }
            Ok(_) => Ok(None),
            Err(e) => {
                // Not knowing is not "running": deploy it again rather than claim a no-op.
                tracing::warn!(error = %error_chain(&e), "cannot inspect the serving container; deploying anyway");
                Ok(None)
            }
        }
    }
}
