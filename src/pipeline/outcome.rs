//! How a run ends: `finish` records the final state; `fail` quarantines a digest that
//! failed its health, undoes the engine's part (after a blue-green revert when the switch
//! happened), and says loudly when the undo itself could not do its work.

use super::{Outcome, PipelineError, Run, Step, error_chain};
use crate::config::{Strategy, TargetKind};
use crate::store::DeploymentState;

impl Run<'_> {
    /// The digest this run resolved, from its journal (the deployment row read at claim
    /// time may predate the resolve).
    pub(super) async fn resolved_digest(&self) -> Option<String> {
        let rec = self
            .store_retry(|| {
                self.ctx
                    .store
                    .step(self.dep.id, Step::Resolve, self.lane(Step::Resolve))
            })
            .await
            .ok()??;
        rec.result?.get("digest")?.as_str().map(str::to_owned)
    }

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

    /// A failed deployment leaves the running service as it was: the candidate is removed
    /// and the old generation started again, and the record says why, with the candidate's
    /// last log lines. A rollback that cannot do its work is said loudly: the deployment
    /// fails with that reason and the log carries an alert, never a quiet "done".
    pub(super) async fn fail(&self, error: PipelineError) -> Outcome {
        let reason = error_chain(&error);
        tracing::warn!(error = %reason, "deployment failed; rolling back");
        if let Err(e) = self.quarantine_failed(&error).await {
            return Outcome::Abandoned(error_chain(&e));
        }
        let undone = match self.target.kind {
            TargetKind::Swarm => self.undo_service(&error).await,
            TargetKind::Engine => self.undo().await,
        };
        let undone = match undone {
            Ok(u) => u,
            Err(e) => return Outcome::Abandoned(error_chain(&e)),
        };
        let (state, outcome) = match (&error, undone.rolled_back()) {
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

    /// Puts this run's engine back on what served before the deployment, read from its
    /// journal, so that a replay after a crash (or a rollout that gave up) undoes exactly
    /// what was done. Blue-green switches the route back first; an engine of a rollout
    /// that switched goes back to its previous generation, or to serving nothing of the app
    /// if it was new there; otherwise the candidate goes and what `stop_old` stopped starts
    /// again. An undo that cannot do its work is said loudly (an alert, the note in
    /// capitals). `Err`: the database is away, so the next holder undoes from the journal.
    pub(super) async fn undo(&self) -> Result<Undone, PipelineError> {
        let reverted = match self.app.strategy {
            Strategy::BlueGreen => match self.revert().await {
                Ok(v) => v,
                Err(e @ PipelineError::Store(_)) => return Err(e),
                Err(e) => return Ok(Undone::failed(UndoStep::Revert, &e)),
            },
            Strategy::Recreate => None,
        };
        let switched = match reverted {
            None if self.multi_target => self.switched_here().await?,
            _ => false,
        };
        if switched {
            return match self.revert_to_previous().await {
                Ok(note) => Ok(Undone {
                    note,
                    ..Undone::default()
                }),
                Err(e @ PipelineError::Store(_)) => Err(e),
                Err(e) => Ok(Undone::failed(UndoStep::Revert, &e)),
            };
        }
        match self.rollback(reverted).await {
            Ok(r) => Ok(Undone {
                reverted,
                note: r.summary(),
                logs: r.logs,
                restored: false,
            }),
            Err(e @ PipelineError::Store(_)) => Err(e),
            Err(e) => Ok(Undone {
                reverted,
                ..Undone::failed(UndoStep::Rollback, &e)
            }),
        }
    }

    /// A digest that failed its health check or soak is quarantined for the app: a push
    /// or the poller does not deploy it again. `Err`: the database is away.
    pub(super) async fn quarantine_failed(
        &self,
        error: &PipelineError,
    ) -> Result<(), PipelineError> {
        let step = match error {
            PipelineError::Failed {
                step: step @ (Step::Health | Step::Soak),
                ..
            } => step,
            // A rollout whose tasks failed (not one that could not place them).
            PipelineError::Failed {
                step: step @ Step::Converge,
                source: super::StepError::Rollout(f),
            } if f.tasks_failed() => step,
            _ => return Ok(()),
        };
        let Some(digest) = self.resolved_digest().await else {
            return Ok(());
        };
        let on = match self.multi_target {
            true => format!(" on engine {}", self.target.name),
            false => String::new(),
        };
        let why = format!("failed its {step}{on} in deployment {}", self.dep.id);
        self.store_retry(|| {
            self.ctx
                .store
                .quarantine(&self.app.name, &digest, &why, self.dep.id)
        })
        .await
    }
}

/// What undoing one engine's part left.
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
