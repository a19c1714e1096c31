//! How a run ends: `finish` records the final state; `fail` rolls back (after a blue-green
//! revert when the switch happened), quarantines a digest that failed its health, and says
//! loudly when the rollback itself could not do its work.

use super::{Outcome, PipelineError, Run, Step, error_chain};
use crate::config::Strategy;
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
                metrics::counter!("pier_deployments_finished_total", "app" => self.app.name.clone(), "state" => state.as_str()).increment(1);
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
        // Blue-green, after the switch: the previous generation serves again first.
        let reverted = match self.app.strategy {
            Strategy::BlueGreen => match self.revert().await {
                Ok(v) => v,
                Err(PipelineError::Store(e)) => return Outcome::Abandoned(error_chain(&e)),
                Err(e) => {
                    let cause = error_chain(&e);
                    tracing::error!(alert = true, error = %cause,
                        "ALERT: switching back to the previous generation failed");
                    let outcome = format!("failed; REVERT FAILED ({cause}); check the app");
                    return self
                        .finish(DeploymentState::Failed, &outcome, Some(&reason), None)
                        .await;
                }
            },
            Strategy::Recreate => None,
        };
        if let PipelineError::Failed {
            step: step @ (Step::Health | Step::Soak),
            ..
        } = &error
            && let Some(digest) = self.resolved_digest().await
        {
            let why = format!("failed its {step} in deployment {}", self.dep.id);
            if let Err(e) = self
                .store_retry(|| {
                    self.ctx
                        .store
                        .quarantine(&self.app.name, &digest, &why, self.dep.id)
                })
                .await
            {
                return Outcome::Abandoned(error_chain(&e));
            }
        }
        let (logs, rollback_note) = match self.rollback(reverted).await {
            Ok(r) => (r.logs.clone(), r.summary()),
            Err(PipelineError::Store(e)) => return Outcome::Abandoned(error_chain(&e)),
            Err(e) => {
                let cause = error_chain(&e);
                tracing::error!(alert = true, error = %cause,
                    "ALERT: rollback failed; the previous generation may not be running");
                (None, format!("ROLLBACK FAILED ({cause}); check the app"))
            }
        };
        let (state, outcome) = match (&error, reverted) {
            (PipelineError::Stopped { step, by }, _) => (
                DeploymentState::Cancelled,
                format!("stopped before {step} as {by} asked; {rollback_note}"),
            ),
            (_, Some(_)) => (
                DeploymentState::RolledBack,
                format!("rolled back to the previous generation; {rollback_note}"),
            ),
            (_, None) => (DeploymentState::Failed, format!("failed; {rollback_note}")),
        };
        self.finish(state, &outcome, Some(&reason), logs.as_deref())
            .await
    }
}
