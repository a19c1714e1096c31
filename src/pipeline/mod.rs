//! The journaled deployment pipeline, strategy `recreate`:
//! resolve, signature (an app that must be signed), pull, verify, create (every service), stop_old, start (every service), health
//! (every service), switch, retire.
//! On failure before `switch`: rollback (remove the candidate, start the old generation).
//!
//! Every step runs through one runner (`journal.rs`): intent committed before the side
//! effect, crash points before and after it, transient errors retried with one backoff,
//! the result or the failure journaled. A step is the intent it computes and the side
//! effect it does; nothing else.

mod archive;
mod blue_green;
mod contained;
mod container;
mod health;
mod image;
mod journal;
mod outcome;
mod plan;
pub(crate) mod records;
mod redact;
mod refusal;
mod rollback;
mod rollout;
mod service_images;
mod services;
mod signature;
mod swarm;

pub use health::probe_client;

use std::time::Duration;

use serde_json::Value;

use crate::config::AppConfig;
use crate::domain::Platform;
use crate::engine::{Engine, EngineError};
use crate::error::error_chain;
use crate::registry::{Registry, RegistryError};
pub use crate::store::Lane;
pub use crate::store::Step;
use crate::store::{Deployment, DeploymentState, Store, StoreError};
use refusal::Refusal;

#[derive(Debug, thiserror::Error)]
pub(crate) enum PipelineError {
    /// A step failed for good: roll back (a no-op when nothing was changed yet).
    #[error("{step}: {source}")]
    Failed { step: Step, source: StepError },
    /// The step's recorded intent differs from what it would do now (config changed
    /// between a crash and the restart): never silently swap parameters.
    #[error("{step}: conflict: the journal recorded {recorded} but the step would now do {now}")]
    Conflict {
        step: Step,
        recorded: Value,
        now: Value,
    },
    /// A journal entry this run depends on does not decode: never guess what it said.
    #[error("journal: the {what} of step {step} does not decode")]
    Journal {
        step: Step,
        what: &'static str,
        source: serde_json::Error,
    },
    /// Claimed this many times without finishing (each run died): a deployment that kills
    /// its worker must not do so forever.
    #[error("gave up after {0} attempts, each interrupted before the deployment finished")]
    GaveUp(i32),
    /// An operator asked to stop the deployment; it stopped before `step`, which the
    /// journal records as failed with who asked.
    #[error("{step}: stopped before this step, as {by} asked")]
    Stopped { step: Step, by: String },
    /// The database is gone for longer than we wait, or the lease is lost: stop here,
    /// touch nothing; the journal lets the next holder resume.
    #[error(transparent)]
    Store(StoreError),
}

impl PipelineError {
    fn journal(step: Step, what: &'static str, source: serde_json::Error) -> Self {
        PipelineError::Journal { step, what, source }
    }
}

/// Errors of the registry or the engine inside a step, before being tied to the step.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StepError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A record a step keeps beside the journal (a volume's owner).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A check that no retry can change (`refusal.rs` lists them all).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// One service of a generation failed: the error names it, since a generation has
    /// several.
    #[error("service `{service}`: {source}")]
    InService {
        service: String,
        source: Box<StepError>,
    },
    /// A failure journaled by an earlier run, replayed as it was recorded.
    #[error("{0}")]
    Recorded(String),
    /// An operator's stop request, journaled at the step it stopped before.
    #[error("stopped before this step, as {0} asked")]
    Stopped(String),
    /// A swarm rollout that did not converge (issue 24), with the tasks' errors.
    #[error(transparent)]
    Rollout(swarm::RolloutFailure),
}

impl StepError {
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            StepError::Registry(e) => e.is_transient(),
            StepError::Engine(e) => e.is_transient(),
            StepError::Store(e) => e.is_unavailable(),
            StepError::InService { source, .. } => source.is_transient(),
            StepError::Refused(_)
            | StepError::Recorded(_)
            | StepError::Stopped(_)
            | StepError::Rollout(_) => false,
        }
    }

    /// The least a retry must wait, when the peer said so (a registry's `Retry-After`).
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            StepError::Registry(e) => e.retry_after(),
            _ => None,
        }
    }
}

/// What everything a pipeline run needs, shared by all workers of a process.
pub(crate) struct Context {
    pub store: Store,
    /// Every engine apps run on, by target name.
    pub targets: crate::target::Targets,
    pub registry: Registry,
    pub platform: Platform,
    /// Health probes' HTTP client, built once: building one loads TLS roots, which costs
    /// far more than a probe.
    pub http: reqwest::Client,
    /// How long journal writes wait for an unavailable database before giving up.
    pub store_patience: Duration,
    /// Transient registry and engine errors are retried until this much time has passed.
    pub retry_budget: Duration,
    /// One pull or archive load as a whole (`[server] pull_timeout`).
    pub pull_timeout: Duration,
    /// This installation's key for the journaled hash of env values (see `create`).
    pub env_key: Vec<u8>,
    /// `pier proxy`'s admin endpoint, which blue-green deploys wait on.
    pub proxy_admin: std::net::SocketAddr,
    /// The config as reloaded: its `[policy]` is read again before every engine change.
    pub live: crate::config::LiveConfig,
}

pub(crate) struct Run<'a> {
    ctx: &'a Context,
    /// The lease holder this run writes as: the worker that claimed the deployment.
    owner: &'a str,
    dep: &'a Deployment,
    app: &'a AppConfig,
    /// `pier import`: the archive loaded instead of a pull.
    import: Option<crate::store::Import>,
    /// The journal key of the service this run's steps are for: empty for the primary
    /// service and the generation's own steps (see `services.rs`).
    service: &'a str,
    /// The engine this run's container steps run on and are journaled for.
    target: &'a crate::target::Target,
    /// The deployment crosses several engines: crash points name the engine.
    multi_target: bool,
}

/// How a run ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    Finished(DeploymentState),
    /// The lease was lost or the database stayed away: the run stopped without deciding.
    Abandoned(String),
}

/// Claims of one deployment before it is failed instead of resumed again.
pub const MAX_ATTEMPTS: i32 = 5;

/// Runs (or resumes) one claimed deployment to a final state.
pub(crate) async fn run(ctx: &Context, owner: &str, dep: &Deployment, app: &AppConfig) -> Outcome {
    let plan = match plan::Plan::pick(app, &ctx.targets) {
        Ok(plan) => plan,
        // Not this process's to decide: another one (restarted with the target) may run it.
        Err(e) => return Outcome::Abandoned(e.to_string()),
    };
    let mut run = Run {
        ctx,
        owner,
        dep,
        app,
        import: None,
        service: "",
        target: plan.first(),
        multi_target: plan.crosses_engines(),
    };
    match run.store_retry(|| ctx.store.import_of(dep.id)).await {
        Ok(import) => run.import = import,
        Err(PipelineError::Store(e)) => return Outcome::Abandoned(error_chain(&e)),
        Err(e) => return Outcome::Abandoned(error_chain(&e)),
    }
    let run = run;
    if let Err(e) = run.admit() {
        return match plan {
            plan::Plan::Rollout(targets) => run.abort_rollout(&targets, e).await,
            _ => run.fail(e).await,
        };
    }
    let done = match plan {
        plan::Plan::Recreate(_) => run.steps().await,
        plan::Plan::BlueGreen(_) => run.steps_blue_green().await,
        plan::Plan::Rollout(targets) => return run.rollout(&targets).await,
        plan::Plan::Swarm(_) => run.steps_swarm().await,
    };
    match done {
        Ok(done) => {
            let (state, outcome) = done.ended();
            run.finish(state, &outcome, None, None).await
        }
        Err(PipelineError::Store(e)) => Outcome::Abandoned(error_chain(&e)),
        Err(e) => run.fail(e).await,
    }
}

impl Run<'_> {
    /// What is refused before any step, whatever the plan: journaled as a failure at
    /// `resolve`, since nothing was done.
    fn admit(&self) -> Result<(), PipelineError> {
        let refuse = |source| PipelineError::Failed {
            step: Step::Resolve,
            source,
        };
        if self.dep.attempt > MAX_ATTEMPTS {
            return Err(PipelineError::GaveUp(self.dep.attempt - 1));
        }
        if self.dep.image != self.app.image {
            // Queued for one repository, configured for another now: deploying either would
            // surprise someone. The next push or a redeploy uses the new config.
            return Err(refuse(
                Refusal::ImageChanged {
                    queued: self.dep.image.clone(),
                    follows: self.app.image.clone(),
                }
                .into(),
            ));
        }
        // Host paths the policy (as reloaded) no longer allows, or a config file that is not
        // a regular file: the deployment fails before it pulls or makes anything.
        self.policy_check().map_err(refuse)?;
        if self.target.kind == crate::config::TargetKind::Swarm && self.import.is_some() {
            return Err(refuse(Refusal::ImportOnSwarm.into()));
        }
        if self.multi_target && self.import.is_some() {
            return Err(refuse(Refusal::ImportOnSeveral.into()));
        }
        Ok(())
    }
}

/// How a run's steps ended without failing. Typed, so that no caller reads the state from
/// the outcome's words.
pub(super) enum Done {
    /// The generation serves the digest (newly, or it already did); the outcome says how.
    Succeeded(String),
    /// A quarantined digest that a push or the poller asked for: not deployed, and not a
    /// failure either (the deployment is cancelled, and says why).
    Skipped(String),
}

impl Done {
    fn ended(self) -> (DeploymentState, String) {
        match self {
            Done::Succeeded(outcome) => (DeploymentState::Succeeded, outcome),
            Done::Skipped(outcome) => (DeploymentState::Cancelled, outcome),
        }
    }
}

/// What both strategies do before a candidate runs, or why there is nothing to do.
enum Prepared {
    /// A quarantined digest, or the one that already serves: the deployment ends here.
    Skip(Done),
    Candidate {
        resolved: crate::registry::Resolved,
        image: records::VerifiedImage,
        candidate: records::Candidate,
        /// Every further service's image, in config order (see `service_images.rs`).
        services: Vec<service_images::ServiceImage>,
    },
}

impl Run<'_> {
    /// The engine this run's container steps run on.
    fn engine(&self) -> &Engine {
        &self.target.engine
    }

    /// resolve, then (unless the digest is quarantined or already serves) pull, verify and
    /// create: the same for every strategy.
    async fn prepare(&self) -> Result<Prepared, PipelineError> {
        if let Some(import) = &self.import {
            // An app that must be signed loads no archive (nothing would check it).
            self.refuse_unsigned_import(&import.archive).await?;
            // Loaded and checked (id, platform, labels) in `resolve`: no pull, no verify.
            let (resolved, image) = self.load_archive(import).await?;
            let others = self.resolve_services(&resolved).await?;
            let services = self.pull_services(&others, &image).await?;
            return self.contain_and_create(resolved, image, services).await;
        }
        let resolved = self.resolve().await?;
        if let Some(note) = self.skip_quarantined(&resolved.digest).await? {
            return Ok(Prepared::Skip(Done::Skipped(note)));
        }
        // Every image of the generation is named before anything is pulled: the no-op
        // check compares each service's digest with what serves.
        let others = self.resolve_services(&resolved).await?;
        if !self.dep.trigger.is_operator()
            && let Some(note) = self.already_running(&resolved.digest, &others).await?
        {
            return Ok(Prepared::Skip(Done::Succeeded(note)));
        }
        // Before anything is pulled: an app that must be signed runs only a digest a
        // trusted key signed (a no-op for one that need not be).
        self.signature(&resolved).await?;
        // Every image pulled and verified before any container is created.
        self.pull(&resolved).await?;
        let image = self.verify(&resolved).await?;
        let services = self.pull_services(&others, &image).await?;
        self.contain_and_create(resolved, image, services).await
    }

    async fn contain_and_create(
        &self,
        resolved: crate::registry::Resolved,
        image: records::VerifiedImage,
        services: Vec<service_images::ServiceImage>,
    ) -> Result<Prepared, PipelineError> {
        // Before any container of the app exists: its network and its owned volumes.
        self.network().await?;
        self.volumes().await?;
        let candidate = self.create(&resolved).await?;
        self.connect(&candidate).await?;
        Ok(Prepared::Candidate {
            resolved,
            image,
            candidate,
            services,
        })
    }

    async fn steps(&self) -> Result<Done, PipelineError> {
        let (resolved, image, candidate, images) = match self.prepare().await? {
            Prepared::Skip(done) => return Ok(done),
            Prepared::Candidate {
                resolved,
                image,
                candidate,
                services,
            } => (resolved, image, candidate, services),
        };
        // One generation: every service is created before any is started, and every one is
        // healthy before the switch (see `services.rs`).
        let others = self.create_services(&images).await?;
        let all: Vec<&records::Candidate> = std::iter::once(&candidate).chain(&others).collect();
        let old = self.stop_old(&all).await?;
        self.start(&candidate).await?;
        self.start_services(&others).await?;
        let probe = self.health(&candidate, &image, None).await?;
        let services = self.services_health(&others, &images).await?;
        self.switch(&resolved, &candidate).await?;
        let retired = self.retire(&all, &old).await?;
        let mut note = format!(
            "{} is running in {} ({probe})",
            resolved.digest, candidate.name
        );
        if !services.is_empty() {
            note.push_str(&format!("; {}", services.join("; ")));
        }
        if !retired.warnings.is_empty() {
            note.push_str(&format!(
                "; retire warnings: {}",
                retired.warnings.join("; ")
            ));
        }
        Ok(Done::Succeeded(note))
    }

    /// A webhook for the digest that already serves, healthy, is a no-op: it succeeds at
    /// once and says so, instead of restarting a healthy service. Once `pull` is in the
    /// journal the deployment is under way and is finished, not skipped.
    async fn already_running(
        &self,
        digest: &str,
        others: &[crate::registry::Resolved],
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
            .store_retry(|| self.ctx.store.generation(&self.app.name, &self.target.name))
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
