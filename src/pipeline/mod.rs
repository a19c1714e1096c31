//! The journaled deployment pipeline, strategy `recreate`:
//! resolve, pull, verify, create, stop_old, start, health, switch, retire.
//! On failure before `switch`: rollback (remove the candidate, start the old generation).

mod container;
mod health;

pub use health::probe_client;
mod image;
mod journal;

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::config::AppConfig;
use crate::engine::{Engine, EngineError};
use crate::registry::{Platform, Registry, RegistryError};
use crate::store::{Deployment, DeploymentState, Store, StoreError, Trigger};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Resolve,
    Pull,
    Verify,
    Create,
    StopOld,
    Start,
    Health,
    Switch,
    Retire,
    Rollback,
}

impl Step {
    pub const ALL: [Step; 10] = [
        Step::Resolve,
        Step::Pull,
        Step::Verify,
        Step::Create,
        Step::StopOld,
        Step::Start,
        Step::Health,
        Step::Switch,
        Step::Retire,
        Step::Rollback,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Resolve => "resolve",
            Step::Pull => "pull",
            Step::Verify => "verify",
            Step::Create => "create",
            Step::StopOld => "stop_old",
            Step::Start => "start",
            Step::Health => "health",
            Step::Switch => "switch",
            Step::Retire => "retire",
            Step::Rollback => "rollback",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A step failed for good: roll back (a no-op when nothing was changed yet).
    #[error("{step}: {reason}")]
    Failed { step: Step, reason: String },
    /// The step's recorded intent differs from what it would do now (config changed
    /// between a crash and the restart): never silently swap parameters.
    #[error("{step}: conflict: the journal recorded {recorded} but the step would now do {now}")]
    Conflict {
        step: Step,
        recorded: Value,
        now: Value,
    },
    #[error("journal: {0}")]
    Journal(String),
    /// Claimed this many times without finishing (each run died): a deployment that kills
    /// its worker must not do so forever.
    #[error("gave up after {0} attempts, each interrupted before the deployment finished")]
    GaveUp(i32),
    /// The database is gone for longer than we wait, or the lease is lost: stop here,
    /// touch nothing; the journal lets the next holder resume.
    #[error(transparent)]
    Store(StoreError),
}

/// Errors of the registry or the engine inside a step, before being tied to the step.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("{0}")]
    Check(String),
}

impl StepError {
    pub fn is_transient(&self) -> bool {
        match self {
            StepError::Registry(e) => e.is_transient(),
            StepError::Engine(e) => e.is_transient(),
            StepError::Check(_) => false,
        }
    }
}

/// What everything a pipeline run needs, shared by all workers of a process.
pub struct Context {
    pub store: Store,
    pub engine: Engine,
    pub registry: Registry,
    pub platform: Platform,
    /// Health probes' HTTP client, built once: building one loads TLS roots, which costs
    /// far more than a probe.
    pub http: reqwest::Client,
    /// How long journal writes wait for an unavailable database before giving up.
    pub store_patience: Duration,
    /// Transient registry and engine errors are retried until this much time has passed.
    pub retry_budget: Duration,
}

pub struct Run<'a> {
    ctx: &'a Context,
    /// The lease holder this run writes as: the worker that claimed the deployment.
    owner: &'a str,
    dep: &'a Deployment,
    app: &'a AppConfig,
}

/// How a run ended.
#[derive(Debug)]
pub enum Outcome {
    Finished(DeploymentState),
    /// The lease was lost or the database stayed away: the run stopped without deciding.
    Abandoned(String),
}

/// Claims of one deployment before it is failed instead of resumed again.
pub const MAX_ATTEMPTS: i32 = 5;

/// Runs (or resumes) one claimed deployment to a final state.
pub async fn run(ctx: &Context, owner: &str, dep: &Deployment, app: &AppConfig) -> Outcome {
    let run = Run {
        ctx,
        owner,
        dep,
        app,
    };
    if dep.attempt > MAX_ATTEMPTS {
        return run.fail(PipelineError::GaveUp(dep.attempt - 1)).await;
    }
    if dep.image != app.image {
        // Queued for one repository, configured for another now: deploying either would
        // surprise someone. The next push or a redeploy uses the new config.
        return run
            .fail(PipelineError::Failed {
                step: Step::Resolve,
                reason: format!(
                    "conflict: queued for {} but the app now follows {}",
                    dep.image, app.image
                ),
            })
            .await;
    }
    match run.steps().await {
        Ok(outcome) => {
            run.finish(DeploymentState::Succeeded, &outcome, None, None)
                .await
        }
        Err(PipelineError::Store(e)) => Outcome::Abandoned(e.to_string()),
        Err(e) => run.fail(e).await,
    }
}

impl Run<'_> {
    fn is_manual(&self) -> bool {
        self.dep.trigger == Trigger::Manual.as_str()
            || self.dep.trigger == Trigger::Rollback.as_str()
    }

    async fn steps(&self) -> Result<String, PipelineError> {
        let resolved = self.resolve().await?;
        if !self.is_manual()
            && let Some(note) = self.already_running(&resolved.digest).await?
        {
            return Ok(note);
        }
        self.pull(&resolved).await?;
        let image = self.verify(&resolved).await?;
        let candidate = self.create(&resolved, &image).await?;
        let old = self.stop_old(&candidate).await?;
        self.start(&candidate).await?;
        let probe = self.health(&candidate).await?;
        self.switch(&resolved, &candidate).await?;
        let retired = self.retire(&candidate, &old).await?;
        let mut note = format!(
            "{} is running in {} ({probe})",
            resolved.digest, candidate.name
        );
        if !retired.warnings.is_empty() {
            note.push_str(&format!(
                "; retire warnings: {}",
                retired.warnings.join("; ")
            ));
        }
        Ok(note)
    }

    /// A webhook for the digest that already serves, healthy, is a no-op: it succeeds at
    /// once and says so, instead of restarting a healthy service.
    async fn already_running(&self, digest: &str) -> Result<Option<String>, PipelineError> {
        if self
            .ctx
            .store
            .step(self.dep.id, Step::Pull.as_str())
            .await
            .ok()
            .flatten()
            .is_some()
        {
            return Ok(None);
        }
        let current = self
            .store_retry(|| self.ctx.store.generation(&self.app.name))
            .await?;
        let Some(current) = current.filter(|g| g.digest == digest) else {
            return Ok(None);
        };
        match self
            .ctx
            .engine
            .inspect_container(&current.container_id)
            .await
        {
            Ok(Some(c)) if c.running => Ok(Some(format!(
                "no-op: {digest} already runs in {} (deployment {})",
                c.name, current.deployment_id
            ))),
            _ => Ok(None),
        }
    }

    async fn finish(
        &self,
        state: DeploymentState,
        outcome: &str,
        error: Option<&str>,
        logs: Option<&str>,
    ) -> Outcome {
        let res = self
            .store_retry(|| {
                self.ctx
                    .store
                    .finish(self.dep.id, self.owner, state, outcome, error, logs)
            })
            .await;
        match res {
            Ok(()) => {
                metrics::counter!("pier_deployments_finished_total", "app" => self.app.name.clone(), "state" => state.as_str()).increment(1);
                tracing::info!(deployment = %self.dep.id, app = %self.app.name, %state, outcome, error, "deployment finished");
                Outcome::Finished(state)
            }
            Err(e) => Outcome::Abandoned(e.to_string()),
        }
    }

    /// A failed deployment leaves the running service as it was: the candidate is removed
    /// and the old generation started again, and the record says why, with the candidate's
    /// last log lines.
    async fn fail(&self, error: PipelineError) -> Outcome {
        let reason = error.to_string();
        tracing::warn!(deployment = %self.dep.id, app = %self.app.name, error = %reason, "deployment failed; rolling back");
        let (logs, rollback_note) = match self.rollback().await {
            Ok(r) => (r.logs.clone(), r.summary()),
            Err(PipelineError::Store(e)) => return Outcome::Abandoned(e.to_string()),
            Err(e) => (None, format!("rollback failed: {e}")),
        };
        let outcome = format!("failed; {rollback_note}");
        self.finish(
            DeploymentState::Failed,
            &outcome,
            Some(&reason),
            logs.as_deref(),
        )
        .await
    }

    /// Ties a step error to its step, records it in the journal, and decides the retry:
    /// transient errors are retried by the caller while the budget lasts.
    async fn failed(&self, step: Step, e: StepError) -> PipelineError {
        let reason = e.to_string();
        if let Err(store) = self.fail_step(step, &reason).await {
            return store;
        }
        PipelineError::Failed { step, reason }
    }

    /// Retries an idempotent side effect on transient errors, with exponential backoff
    /// capped at 5 s, until the retry budget is spent; permanent errors return at once.
    async fn retrying<T, F, Fut>(&self, step: Step, mut op: F) -> Result<T, StepError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StepError>>,
    {
        let deadline = tokio::time::Instant::now() + self.ctx.retry_budget;
        let mut delay = Duration::from_millis(200);
        loop {
            match op().await {
                Err(e) if e.is_transient() && tokio::time::Instant::now() + delay < deadline => {
                    tracing::warn!(deployment = %self.dep.id, %step, error = %e, retry_in = ?delay, "transient failure; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                other => return other,
            }
        }
    }
}
