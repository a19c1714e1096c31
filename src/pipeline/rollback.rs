//! rollback: a failed deployment leaves the previous generation serving. Every container
//! the deployment created (all its services', by the journal and by label) is removed and
//! every container `stop_old` stopped is started again.

use super::outcome::Undone;
use super::records::{Candidate, OldGeneration, RollbackIntent, RolledBack, own_intent};
use super::{EngineRun, PipelineError, Step, StepError, error_chain};
use crate::store::{StepRecord, StepState};

impl RolledBack {
    fn summary(&self) -> String {
        let mut parts = Vec::new();
        if self.removed_candidates.is_empty() {
            parts.push("no candidate container to remove".to_owned());
        } else {
            parts.push(format!(
                "removed candidate {}",
                short(&self.removed_candidates)
            ));
        }
        if !self.restarted.is_empty() {
            parts.push(format!(
                "restarted previous generation {}",
                short(&self.restarted)
            ));
        }
        parts.extend(self.warnings.iter().cloned());
        parts.join("; ")
    }
}

fn short(ids: &[String]) -> String {
    ids.iter()
        .map(|i| i.chars().take(12).collect::<String>())
        .collect::<Vec<_>>()
        .join(", ")
}

impl EngineRun<'_> {
    /// The second half of an undo on this engine, after the strategy's revert (`reverted`:
    /// the route version that serves the previous generation again): the rollback, and
    /// what it left. `Err`: the database is away.
    pub(super) async fn roll_back_after(
        &self,
        reverted: Option<i64>,
    ) -> Result<Undone, PipelineError> {
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
                ..Undone::failed_rollback(&e)
            }),
        }
    }

    /// Undoes a failed deployment: removes every container of this deployment (by the
    /// journal and by label) and starts the generation `stop_old` stopped. Does nothing once
    /// `switch` succeeded: then the new generation is the one serving.
    async fn rollback(&self, reverted: Option<i64>) -> Result<RolledBack, PipelineError> {
        let steps = self.target_steps().await?;
        if reverted.is_none()
            && own_step(&steps, Step::Switch).is_some_and(|r| r.state == StepState::Succeeded)
        {
            return Ok(RolledBack {
                warnings: vec!["new generation already switched; nothing rolled back".into()],
                ..Default::default()
            });
        }
        let intent = self.rollback_intent(&steps, reverted).await?;
        if intent.candidates.is_empty()
            && intent.restore.is_empty()
            && own_step(&steps, Step::Rollback).is_none()
        {
            return Ok(RolledBack::default());
        }
        self.observed_step(Step::Rollback, intent, |plan: RollbackIntent| {
            self.roll_back(plan)
        })
        .await
    }

    /// What this deployment created (every service's `create`, and every container
    /// labelled with it) and what it stopped, read from its journal. An entry that does not
    /// decode fails the rollback loudly: guessing "nothing to restore" would leave the app
    /// down while the record says all is well.
    async fn rollback_intent(
        &self,
        steps: &[StepRecord],
        reverted: Option<i64>,
    ) -> Result<RollbackIntent, PipelineError> {
        let mut candidates: Vec<String> = Vec::new();
        for r in steps.iter().filter(|r| r.step == Step::Create) {
            if let Some(v) = r.result.clone() {
                candidates.push(
                    serde_json::from_value::<Candidate>(v)
                        .map_err(|e| PipelineError::journal(Step::Create, "result", e))?
                        .id,
                );
            }
        }
        let dep = self.dep.id.to_string();
        let labelled = self
            .engine()
            .managed_containers(Some(&self.app.name), Some(&dep))
            .await
            .map_err(|e| PipelineError::Failed {
                step: Step::Rollback,
                source: e.into(),
            })?;
        for c in labelled {
            if !candidates.contains(&c.id) {
                candidates.push(c.id);
            }
        }
        let restore: Vec<String> = match own_step(steps, Step::StopOld) {
            // After a revert the previous generation already runs and serves.
            _ if reverted.is_some() => vec![],
            Some(r) => own_intent::<OldGeneration>(&r.intent)
                .map_err(|e| PipelineError::journal(Step::StopOld, "intent", e))?
                .map(|old| old.running)
                .unwrap_or_default(),
            None => vec![],
        };
        Ok(RollbackIntent {
            candidates,
            restore,
            after_route: reverted,
        })
    }

    /// The rollback's effect: wait for the reverted route, remove the candidates (keeping
    /// the first one's last log lines), start the stopped generation. A failure of one
    /// container is a warning: the others are still undone.
    async fn roll_back(&self, plan: RollbackIntent) -> Result<RolledBack, StepError> {
        let mut out = RolledBack::default();
        if let Some(version) = plan.after_route {
            self.proxy_applied(version).await?;
        }
        for id in &plan.candidates {
            if out.logs.is_none() {
                match self.engine().logs_tail(id, 30).await {
                    Ok(l) if !l.is_empty() => out.logs = Some(self.redact(&l)),
                    Ok(_) => {}
                    Err(e) => out
                        .warnings
                        .push(format!("read candidate {id}'s logs: {}", error_chain(&e))),
                }
            }
            match self.engine().remove_container(id).await {
                Ok(_) => out.removed_candidates.push(id.clone()),
                Err(e) => out
                    .warnings
                    .push(format!("remove candidate {id}: {}", error_chain(&e))),
            }
        }
        for id in &plan.restore {
            match self
                .engine()
                .start_container(id)
                .await
                .map_err(|e| self.hide_paths(e))
            {
                Ok(()) => out.restarted.push(id.clone()),
                Err(e) => out.warnings.push(format!(
                    "restart previous generation {id}: {}",
                    error_chain(&e)
                )),
            }
        }
        Ok(out)
    }
}

/// The generation's own record of `step` (its own steps are keyed by the empty service).
fn own_step(steps: &[StepRecord], step: Step) -> Option<&StepRecord> {
    steps
        .iter()
        .find(|r| r.step == step && r.service.is_empty())
}
