//! How a rollout across engines stops: every engine it touched goes back to what it served
//! before, each from its own journal ([`Rollout::undo_engine`]), newest first, so that a
//! crash during the undo (or a rollout that gave up after its attempts) undoes exactly what
//! was done and nothing twice. A rollout whose old generations were already being retired
//! is past the point of return: every engine switched, and the undo would have nothing to
//! go back to.

use super::{Rollout, Switched, Up};
use crate::pipeline::outcome::Undone;
use crate::pipeline::plan::Placed;
use crate::pipeline::records::{
    Candidate, GenerationRef, OldGeneration, RevertToIntent, RevertedTo, own_intent,
};
use crate::pipeline::refusal::Refusal;
use crate::pipeline::replace::Replace;
use crate::pipeline::{Claimed, EngineRun, Outcome, PipelineError, Step, error_chain};
use crate::store::{DeploymentState, GenerationSwitch, StepState};

impl RevertedTo {
    fn summary(&self, to: bool) -> String {
        match to {
            true => format!(
                "back on the previous generation (restarted {}, removed {})",
                self.restarted.len(),
                self.removed.len()
            ),
            false => format!(
                "serves nothing of the app again, as before the rollout (removed {})",
                self.removed.len()
            ),
        }
    }
}

impl<'t, S: Replace> Rollout<'t, S> {
    /// The first failure of a batch ends the rollout: the failed engines undo their part as
    /// a one-engine deployment does, then every engine that switched goes back to what it
    /// served before, newest first.
    pub(super) async fn stop(
        &self,
        first: &EngineRun<'_>,
        failed: Vec<(EngineRun<'t>, PipelineError)>,
        switched: &Switched<'t, S::Serving>,
    ) -> Outcome {
        let mut reasons = Vec::new();
        for (run, error) in &failed {
            reasons.push(format!(
                "engine {} failed: {}",
                run.target.name(),
                error_chain(error)
            ));
            if let Err(e) = run.quarantine_failed(error).await {
                return Outcome::Abandoned(error_chain(&e));
            }
        }
        let touched = failed.iter().map(|(run, _)| run).chain(
            switched
                .iter()
                .rev()
                .filter(|(_, up)| !matches!(up, Up::AlreadyServing(_)))
                .map(|(run, _)| run),
        );
        let stopped = failed
            .iter()
            .all(|(_, e)| matches!(e, PipelineError::Stopped { .. }));
        let state = match stopped {
            true => DeploymentState::Cancelled,
            false => DeploymentState::Failed,
        };
        self.undo_engines(first, touched, state, &reasons.join("; "))
            .await
    }

    /// A rollout refused before its first step on this attempt (it gave up after its
    /// attempts, or the config changed under it): every engine whose journal holds more
    /// than `reach` is undone from it.
    pub(super) async fn abort(
        &self,
        claimed: &Claimed<'t>,
        first: &EngineRun<'_>,
        error: PipelineError,
    ) -> Outcome {
        let reason = error_chain(&error);
        let runs = Self::runs(claimed, &self.engines);
        let mut touched = Vec::new();
        for run in &runs {
            let steps = match run.target_steps().await {
                Ok(s) => s,
                Err(e) => return Outcome::Abandoned(error_chain(&e)),
            };
            if steps.iter().any(|s| s.step == Step::Retire) {
                let outcome = format!(
                    "failed: {reason}; every engine had switched to the new generation and \
                     engine {} was retiring its old one: nothing rolled back",
                    run.target.name()
                );
                return first
                    .finish(DeploymentState::Failed, &outcome, Some(&reason), None)
                    .await;
            }
            if steps.iter().any(|s| s.step != Step::Reach) {
                touched.push(run);
            }
        }
        let state = match error {
            PipelineError::Stopped { .. } => DeploymentState::Cancelled,
            _ => DeploymentState::Failed,
        };
        // Newest first: the engines in reverse config order, as batches ran in order.
        self.undo_engines(first, touched.into_iter().rev(), state, &reason)
            .await
    }

    async fn undo_engines<'r>(
        &self,
        first: &EngineRun<'_>,
        runs: impl Iterator<Item = &'r EngineRun<'t>>,
        state: DeploymentState,
        reason: &str,
    ) -> Outcome
    where
        't: 'r,
    {
        let mut notes = Vec::new();
        let mut logs = None;
        for run in runs {
            match self.undo_engine(run).await {
                Ok(u) => {
                    logs = logs.or(u.logs);
                    notes.push(format!("{}: {}", run.target.name(), u.note));
                }
                Err(e) => return Outcome::Abandoned(error_chain(&e)),
            }
        }
        let outcome = match notes.is_empty() {
            true => format!("failed: {reason}; no engine was changed"),
            false => format!("failed: {reason}; {}", notes.join("; ")),
        };
        first
            .finish(state, &outcome, Some(reason), logs.as_deref())
            .await
    }

    /// Puts one engine back on what it served before the deployment, from its journal:
    /// the strategy's revert first (blue-green's route back to its previous generation);
    /// an engine that switched with nothing for the strategy to revert goes back to its
    /// previous generation, or to serving nothing of the app if it was new there;
    /// otherwise the candidate goes and what `stop_old` stopped starts again. An undo that
    /// cannot do its work is said loudly. `Err`: the database is away.
    pub(super) async fn undo_engine(&self, run: &EngineRun<'_>) -> Result<Undone, PipelineError> {
        let reverted = match self.replace.revert(run).await {
            Ok(v) => v,
            Err(e @ PipelineError::Store(_)) => return Err(e),
            Err(e) => return Ok(Undone::failed_revert(&e)),
        };
        if reverted.is_none() && run.switched_here().await? {
            return match run.revert_to_previous().await {
                Ok(note) => Ok(Undone::note(&note)),
                Err(e @ PipelineError::Store(_)) => Err(e),
                Err(e) => Ok(Undone::failed_revert(&e)),
            };
        }
        run.roll_back_after(reverted).await
    }
}

impl EngineRun<'_> {
    /// Whether this engine's `switch` happened: then undoing it is a `revert`.
    async fn switched_here(&self) -> Result<bool, PipelineError> {
        let steps = self.target_steps().await?;
        Ok(steps.iter().any(|s| {
            s.step == Step::Switch && s.service.is_empty() && s.state == StepState::Succeeded
        }))
    }

    /// `revert` on an engine that switched: its candidates are stopped and removed, the
    /// containers `stop_old` stopped are started again, and the engine's serving
    /// generation is what `switch` replaced (none: the app was new there, and its
    /// generation and route go), in the step's own transaction. Everything is read from
    /// the journal, so a replay computes the same intent.
    async fn revert_to_previous(&self) -> Result<String, PipelineError> {
        let intent = self.revert_intent().await?;
        let back = |_: &RevertedTo| {
            Some(GenerationSwitch {
                app: self.app.name.to_string(),
                target: self.target.name().to_owned(),
                generation: intent
                    .to
                    .as_ref()
                    .map(|g| (g.deployment, g.digest.clone(), g.container.clone())),
                forget: intent.to.is_none(),
                route: None,
            })
        };
        let reverted = self
            .switching_step(Step::Revert, &intent, back, || async {
                let mut out = RevertedTo::default();
                // The candidate holds the app's host port: it goes before the old one starts.
                for id in &intent.remove {
                    self.engine().remove_container(id).await?;
                    out.removed.push(id.clone());
                }
                for id in &intent.restart {
                    self.engine()
                        .start_container(id)
                        .await
                        .map_err(|e| self.hide_paths(e))?;
                    out.restarted.push(id.clone());
                }
                for id in &intent.restart {
                    match self.engine().inspect_container(id).await? {
                        Some(c) if c.running => {}
                        _ => {
                            return Err(Refusal::PreviousNotRunning { id: id.clone() }.into());
                        }
                    }
                }
                Ok(out)
            })
            .await?;
        Ok(reverted.summary(intent.to.is_some()))
    }

    /// What `revert` undoes, from this engine's journal: what `switch` replaced, every
    /// container this deployment created (each service's `create`), and what `stop_old`
    /// stopped.
    async fn revert_intent(&self) -> Result<RevertToIntent, PipelineError> {
        let steps = self.target_steps().await?;
        let own = |step: Step| {
            steps
                .iter()
                .filter(move |s| s.step == step && s.state == StepState::Succeeded)
        };
        let to = own(Step::Switch)
            .find(|s| s.service.is_empty())
            .and_then(|s| s.result.as_ref()?.get("previous").cloned())
            .filter(|v| !v.is_null())
            .map(serde_json::from_value::<GenerationRef>)
            .transpose()
            .map_err(|e| PipelineError::journal(Step::Switch, "result", e))?;
        let mut remove = Vec::new();
        for s in own(Step::Create) {
            if let Some(v) = s.result.clone() {
                let c: Candidate = serde_json::from_value(v)
                    .map_err(|e| PipelineError::journal(Step::Create, "result", e))?;
                remove.push(c.id);
            }
        }
        let mut restart = Vec::new();
        for s in own(Step::StopOld) {
            let old = own_intent::<OldGeneration>(&s.intent)
                .map_err(|e| PipelineError::journal(Step::StopOld, "intent", e))?;
            restart.extend(old.into_iter().flat_map(|o| o.running));
        }
        Ok(RevertToIntent {
            to,
            remove,
            restart,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::records::SwitchedTo;

    #[test]
    fn a_switched_to_record_names_the_generation_a_revert_puts_back() {
        let previous = GenerationRef {
            deployment: uuid::Uuid::nil(),
            digest: "sha256:aa".into(),
            container: "c1".into(),
        };
        let rec = SwitchedTo {
            container: "c2".into(),
            name: "web-2".into(),
            previous: Some(previous.clone()),
        };
        let v = serde_json::to_value(&rec).unwrap();
        let back: GenerationRef = serde_json::from_value(v["previous"].clone()).unwrap();
        assert_eq!(back, previous);
    }
}
