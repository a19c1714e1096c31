//! The journaled deployment pipeline. A claimed deployment follows one plan, picked once
//! from where the app runs and how a version is replaced (`plan.rs`):
//!
//! - on one engine (`alone.rs`): resolve, signature (an app that must be signed), pull,
//!   verify, network, volumes, create and connect (every service), then the strategy's
//!   steps: `recreate.rs` (stop_old, start, health, switch) or `blue_green/` (start beside
//!   the old one, health, switch the proxy's route, drain, soak), then retire; on failure
//!   the strategy's revert and a rollback of what the deployment made and stopped;
//! - across several engines (`rollout/`): the same steps engine by engine, batch by
//!   batch, each engine undone from its own journal when one fails;
//! - on a Swarm manager (`swarm/`): the service's spec updated and its rollout watched;
//!   on failure Swarm's rollback.
//!
//! Every step runs through one runner (`journal.rs`): intent committed before the side
//! effect, crash points before and after it, transient errors retried with one backoff,
//! the result or the failure journaled. A step is the intent it computes (a type in
//! `records/`) and the side effect it does; nothing else.

// The plans, one picked per deployment, each with its forward steps and its undo.
mod alone;
mod plan;
mod rollout;
mod swarm;

// The strategies a plan on engines replaces a generation by.
mod blue_green;
mod recreate;
mod replace;

// The steps: resolve and signature on any target, the rest on an engine.
mod archive;
mod contained;
mod container;
mod health;
mod image;
mod rollback;
mod secret_files;
mod service_images;
mod services;
mod signature;

// What every run shares: its admission, its journal and records, how it ends.
mod admit;
mod journal;
mod outcome;
mod quarantine;
pub(crate) mod records;
pub(crate) mod redact;
mod refusal;

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
use crate::store::{Deployment, DeploymentState, Import, Store, StoreError};
use alone::Alone;
use blue_green::BlueGreen;
use plan::{EngineTarget, Plan, SwarmTarget, TargetSet};
use recreate::Recreate;
use refusal::Refusal;
use rollout::Rollout;

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
    /// A swarm rollout that did not converge, with the tasks' errors.
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
    /// Decrypts apps' `age:` secrets, read at each deployment (`secret_files.rs`).
    pub age_identity: Option<crate::config::Secret>,
    /// The engine host's directory under which each container's secret files live.
    pub secrets_dir: std::path::PathBuf,
    /// `pier proxy`'s admin endpoint, which blue-green deploys wait on.
    pub proxy_admin: std::net::SocketAddr,
    /// The config as reloaded: its `[policy]` is read again before every engine change.
    pub live: crate::config::LiveConfig,
}

/// One claimed deployment on one target: what every step of it reads. A plan makes one
/// for its target (a rollout, one per engine), and a further service's steps run on one
/// of their own ([`EngineRun::for_service`]).
struct Run<'a, T> {
    ctx: &'a Context,
    /// The lease holder this run writes as: the worker that claimed the deployment.
    owner: &'a str,
    dep: &'a Deployment,
    app: &'a AppConfig,
    /// `pier import`: the archive loaded instead of a pull.
    import: Option<Import>,
    /// Whose steps these are: the journal key and crash point name (`create@worker`).
    service: ServiceName<'a>,
    /// Where the steps run and are journaled; its type says what can run there.
    target: T,
    /// Whether the deployment crosses several engines: then crash points name the engine.
    targets: TargetSet,
}

/// A run whose steps make containers on an engine.
type EngineRun<'a> = Run<'a, EngineTarget<'a>>;
/// A run whose steps write a Swarm service.
type SwarmRun<'a> = Run<'a, SwarmTarget<'a>>;

impl<'a> EngineRun<'a> {
    /// The engine this run's container steps run on.
    fn engine(&self) -> &'a Engine {
        self.target.engine()
    }
}

impl<'a> SwarmRun<'a> {
    /// The Swarm manager this run writes the service to.
    fn manager(&self) -> &'a Engine {
        self.target.manager()
    }
}

/// Whose steps a run journals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServiceName<'a> {
    /// The app's own service; the generation's steps (stop_old, switch, retire) too.
    Primary,
    /// A further service of the app (`[apps.services.<name>]`, see `services.rs`).
    Named(&'a str),
}

impl<'a> ServiceName<'a> {
    /// Its journal key: empty for the primary service.
    fn key(self) -> &'a str {
        match self {
            ServiceName::Primary => "",
            ServiceName::Named(name) => name,
        }
    }
}

/// A deployment as a worker claimed it, before its plan puts it on a target.
struct Claimed<'a> {
    ctx: &'a Context,
    owner: &'a str,
    dep: &'a Deployment,
    app: &'a AppConfig,
    import: Option<Import>,
}

impl<'a> Claimed<'a> {
    /// The deployment's primary service, on `target`.
    fn on<T>(&self, target: T, targets: TargetSet) -> Run<'a, T> {
        Run {
            ctx: self.ctx,
            owner: self.owner,
            dep: self.dep,
            app: self.app,
            import: self.import.clone(),
            service: ServiceName::Primary,
            target,
            targets,
        }
    }
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

/// Runs (or resumes) one claimed deployment to a final state, by the plan its app's
/// strategy and targets pick: the one place that tells the plans apart.
pub(crate) async fn run(ctx: &Context, owner: &str, dep: &Deployment, app: &AppConfig) -> Outcome {
    let plan = match Plan::pick(app, &ctx.targets) {
        Ok(plan) => plan,
        // Not this process's to decide: another one (restarted with the target) may run it.
        Err(e) => return Outcome::Abandoned(e.to_string()),
    };
    let import = match journal::store_retry(ctx, || ctx.store.import_of(dep.id)).await {
        Ok(import) => import,
        Err(e) => return Outcome::Abandoned(error_chain(&e)),
    };
    let claimed = Claimed {
        ctx,
        owner,
        dep,
        app,
        import,
    };
    match plan {
        Plan::Recreate(t) => Alone(Recreate).run(&claimed.on(t, TargetSet::One)).await,
        Plan::BlueGreen(t) => Alone(BlueGreen).run(&claimed.on(t, TargetSet::One)).await,
        Plan::RolloutRecreate(all) => Rollout::new(all, Recreate).run(&claimed).await,
        Plan::RolloutBlueGreen(all) => Rollout::new(all, BlueGreen).run(&claimed).await,
        Plan::Swarm(t) => swarm::run(&claimed.on(t, TargetSet::One)).await,
    }
}
