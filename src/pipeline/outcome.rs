//! How a run ends: `finish` records the final state; `fail` quarantines a digest that
//! failed its health, has the plan undo the engine's part, and says loudly when the undo
//! itself could not do its work.

use super::plan::Placed;
use super::{Outcome, PipelineError, Run, error_chain};
use crate::store::DeploymentState;

/// How a run's steps ended without failing. Typed, so that no caller reads the state from
/// the outcome's words.
pub(super) enum Done {
    /// The generation serves the digest (newly, or it already did); the outcome says how.
    Succeeded(String),
    /// A quarantined digest that a push or the poller asked for: not deployed, and not a
    /// failure either (the deployment is cancelled, and says why).
    Skipped(String),
}

impl<P: Placed> Run<'_, P> {
    pub(super) async fn finish(
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
                metrics::counter!("pier_deployments_finished_total", "app" => self.app.name.to_string(), "state" => state.as_str()).increment(1);
                tracing::info!(%state, outcome, error, "deployment finished");
                Outcome::Finished(state)
            }
            Err(e) => Outcome::Abandoned(error_chain(&e)),
        }
    }

    /// Records steps that ended without failing.
    pub(super) async fn finish_done(&self, done: Done) -> Outcome {
        let (state, outcome) = match done {
            Done::Succeeded(outcome) => (DeploymentState::Succeeded, outcome),
            Done::Skipped(outcome) => (DeploymentState::Cancelled, outcome),
        };
        self.finish(state, &outcome, None, None).await
    }

    /// A failed deployment leaves the running service as it was: `undo` (the plan's) puts
    /// back what served, after the digest is quarantined if its health failed, and the
    /// record says why, with the candidate's last log lines. An undo that cannot do its
    /// work is said loudly: the deployment fails with that reason and the log carries an
    /// alert, never a quiet "done".
    pub(super) async fn fail<F, Fut>(&self, error: &PipelineError, undo: F) -> Outcome
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Undone, PipelineError>>,
    {
        let reason = error_chain(error);
        tracing::warn!(error = %reason, "deployment failed; rolling back");
        if let Err(e) = self.quarantine_failed(error).await {
            return Outcome::Abandoned(error_chain(&e));
        }
        let undone = match undo().await {
            Ok(u) => u,
            Err(e) => return Outcome::Abandoned(error_chain(&e)),
        };
        let (state, outcome) = match (error, undone.rolled_back()) {
            (PipelineError::Stopped { step, by }, _) => (
                DeploymentState::Cancelled,
                format!("stopped before {step} as {by} asked; {}", undone.note),
            ),
            (_, true) => (
                DeploymentState::RolledBack,
                format!("rolled back to the previous generation; {}", undone.note),
            ),
            (_, false) => (DeploymentState::Failed, format!("failed; {}", undone.note)),
        };
        self.finish(state, &outcome, Some(&reason), undone.logs.as_deref())
            .await
    }
}

/// What undoing one target's part left. `Err` beside it (in an undo's result) means the
/// database is away: the next holder undoes from the journal.
#[derive(Default)]
pub(super) struct Undone {
    /// Blue-green: the route version that serves the previous generation again.
    pub reverted: Option<i64>,
    pub note: String,
    /// The candidate's last log lines, redacted.
    pub logs: Option<String>,
    /// A swarm service runs its previous spec again.
    pub restored: bool,
}

#[derive(Clone, Copy)]
enum UndoStep {
    Revert,
    Rollback,
}

impl Undone {
    pub(super) fn note(note: &str) -> Self {
        Undone {
            note: note.to_owned(),
            ..Undone::default()
        }
    }

    /// The previous generation serves again because of this undo: the deployment
    /// ends `rolled_back`, not `failed`.
    fn rolled_back(&self) -> bool {
        self.reverted.is_some() || self.restored
    }

    /// Switching traffic back failed: said loudly.
    pub(super) fn failed_revert(e: &PipelineError) -> Self {
        Undone::failed(UndoStep::Revert, e)
    }

    /// Removing what the deployment made, or starting what it stopped, failed: said loudly.
    pub(super) fn failed_rollback(e: &PipelineError) -> Self {
        Undone::failed(UndoStep::Rollback, e)
    }

    fn failed(step: UndoStep, e: &PipelineError) -> Self {
        let cause = error_chain(e);
        let what = match step {
            UndoStep::Revert => {
                tracing::error!(alert = true, error = %cause,
                    "ALERT: switching back to the previous generation failed");
                "REVERT"
            }
            UndoStep::Rollback => {
                tracing::error!(alert = true, error = %cause,
                    "ALERT: rollback failed; the previous generation may not be running");
                "ROLLBACK"
            }
        };
        Undone {
            note: format!("{what} FAILED ({cause}); check the app"),
            ..Undone::default()
        }
    }
}
