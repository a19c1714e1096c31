//! Undoing a swarm deployment that failed: the service goes back to the spec that served
//! before it (Swarm's own rollback, which it may already have started), watched until
//! every replica runs it again; a service this deployment created is removed. Decided
//! from the journal's recorded plan and Swarm's records, so a replay after a crash undoes
//! exactly what was done. A rollback that does not converge is said loudly.

use super::watch::{self, Goal};
use crate::engine::{EngineError, LABEL_DEPLOYMENT, UpdateState};
use crate::pipeline::outcome::Undone;
use crate::pipeline::records::{Converged, ServiceRemoved, ServiceRollbackIntent, UpdatePlan};
use crate::pipeline::refusal::Refusal;
use crate::pipeline::{PipelineError, Step, StepError, SwarmRun};
use crate::store::StepState;

/// Log lines of the failed task kept with the deployment.
const LOG_LINES: usize = 40;

impl SwarmRun<'_> {
    /// `Err`: the database is away (the next holder undoes from the journal).
    pub(super) async fn undo_service(
        &self,
        error: &PipelineError,
    ) -> Result<Undone, PipelineError> {
        let logs = self.failed_task_logs(error).await;
        let undone = match self.undo_update().await {
            Ok(u) => u,
            Err(e @ PipelineError::Store(_)) => return Err(e),
            Err(e) => Undone::failed_rollback(&e),
        };
        Ok(Undone { logs, ..undone })
    }

    async fn undo_update(&self) -> Result<Undone, PipelineError> {
        let rec = self.update_record().await?;
        let Some(rec) = rec else {
            return Ok(Undone::note("the service was not changed"));
        };
        let plan: UpdatePlan = serde_json::from_value(rec.intent.clone())
            .map_err(|e| PipelineError::journal(Step::Update, "intent", e))?;
        if rec.state != StepState::Succeeded && !self.landed_now(&plan).await? {
            return Ok(Undone::note("the service was not changed"));
        }
        let Some(previous) = plan.previous.clone() else {
            let intent = ServiceRollbackIntent::Remove {
                remove: plan.service.clone(),
            };
            let _: ServiceRemoved = self
                .step(Step::Rollback, &intent, || async {
                    Ok(self.manager().remove_service(&plan.service).await?)
                })
                .await?;
            return Ok(Undone::note(&format!(
                "removed service {}, which this deployment had created",
                plan.service
            )));
        };
        let to = previous.deployment.clone().unwrap_or_default();
        let intent = ServiceRollbackIntent::To {
            service: plan.service.clone(),
            to_deployment: to.clone(),
        };
        let swarm = self.swarm()?;
        let goal = Goal {
            service: &plan.service,
            deployment: &to,
            replicas: None,
            settle: swarm.update.monitor,
            rollback: true,
        };
        let back: Converged = self
            .step(Step::Rollback, &intent, || async {
                self.ask_for_rollback(&plan.service).await?;
                watch::watch(self.manager(), &goal, swarm.rollout_timeout)
                    .await
                    .map_err(|e| match e {
                        watch::WatchError::Failed(f) => StepError::Rollout(f),
                        watch::WatchError::Engine(e) => StepError::Engine(e),
                    })
            })
            .await?;
        Ok(Undone {
            restored: true,
            ..Undone::note(&format!(
                "Swarm runs the previous spec ({}) again on {} task(s)",
                previous.image, back.running
            ))
        })
    }

    /// Whether the update landed, asked of Swarm (the journal has no result for it).
    async fn landed_now(&self, plan: &UpdatePlan) -> Result<bool, PipelineError> {
        let facts = self
            .retrying(|| async { Ok(self.manager().service(&plan.service).await?) })
            .await
            .map_err(|source| PipelineError::Failed {
                step: Step::Rollback,
                source,
            })?;
        let Some(f) = facts else {
            return Ok(false);
        };
        self.retrying(|| self.update_landed(&f))
            .await
            .map_err(|source| PipelineError::Failed {
                step: Step::Rollback,
                source,
            })
    }

    /// Asks Swarm to roll back unless the spec is no longer this deployment's (Swarm
    /// rolled back itself, or an earlier run asked) or a rollback is under way.
    async fn ask_for_rollback(&self, service: &str) -> Result<(), StepError> {
        let ours = self.dep.id.to_string();
        for _ in 0..super::update::UPDATE_TRIES {
            let Some(f) = self.manager().service(service).await? else {
                return Err(Refusal::ServiceGone {
                    name: service.to_owned(),
                }
                .into());
            };
            let rolling = matches!(
                f.update.state,
                UpdateState::RollbackStarted | UpdateState::RollbackCompleted
            );
            if f.label(LABEL_DEPLOYMENT) != Some(ours.as_str()) || rolling {
                return Ok(());
            }
            match self.manager().rollback_service(service).await {
                Ok(()) => return Ok(()),
                Err(EngineError::OutOfSequence { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Refusal::ServiceKeptChangingInRollback {
            name: service.to_owned(),
        }
        .into())
    }

    /// The last lines of the task that failed, redacted: what the deployment shows as
    /// the candidate's logs.
    async fn failed_task_logs(&self, error: &PipelineError) -> Option<String> {
        let PipelineError::Failed {
            source: StepError::Rollout(f),
            ..
        } = error
        else {
            return None;
        };
        let task = f.failed_task.as_deref()?;
        let text = self.manager().task_logs(task, LOG_LINES).await.ok()?;
        (!text.is_empty()).then(|| self.redact(&text))
    }
}
