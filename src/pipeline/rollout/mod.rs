//! A rollout across several engines: one deployment, one resolved digest, each engine's
//! container steps journaled under its own target.
//!
//! resolve (once, for all engines), then batch by batch: every engine of a batch runs the
//! same pinned steps of the app's strategy ([`Replace`]) up to serving: through `switch`
//! (`recreate`), or to the end of its soak (`blue-green`, each engine behind its own
//! `pier proxy --target`); the next batch starts only when the whole batch got there. The
//! first failure stops the rollout, and every engine it touched goes back to what it
//! served before (`undo.rs`), journaled like any step. Only when every engine switched is
//! any old generation retired, so an undo always has one to go back to.
//!
//! A crash anywhere resumes from the journal: an engine whose steps are recorded replays
//! them without doing anything twice, so no engine is deployed twice.

use super::plan::{EngineTarget, Placed, TargetSet};
use super::records::{ReachIntent, Reached, Resolved};
use super::refusal::Refusal;
use super::replace::{Images, Replace};
use super::{Claimed, EngineRun, Outcome, PipelineError, Step, error_chain};
use crate::store::DeploymentState;

mod undo;

/// A rollout across `engines`, in config order, each replacing its generation by `S`.
pub(super) struct Rollout<'t, S> {
    engines: Vec<EngineTarget<'t>>,
    replace: S,
}

/// What one engine reached in its part of the rollout.
enum Up<T> {
    /// The digest already serves there, healthy: nothing to do on that engine.
    AlreadyServing(String),
    /// The new generation serves there; the old one is not yet removed.
    Serving(T),
}

/// The deployment's own steps, once for every engine.
enum Shared {
    /// A quarantined digest: nothing is deployed anywhere.
    Skipped(String),
    /// The digest, and every further service's image.
    Resolved(Resolved, Vec<Resolved>),
}

/// The engines that got to serving, with what each reached, in the order they got there.
type Switched<'a, T> = Vec<(EngineRun<'a>, Up<T>)>;

impl<'t, S: Replace> Rollout<'t, S> {
    pub(super) fn new(engines: Vec<EngineTarget<'t>>, replace: S) -> Self {
        Rollout { engines, replace }
    }

    /// The deployment on each of `engines`.
    fn runs(claimed: &Claimed<'t>, engines: &[EngineTarget<'t>]) -> Vec<EngineRun<'t>> {
        engines
            .iter()
            .map(|t| claimed.on(*t, TargetSet::Several))
            .collect()
    }

    pub(super) async fn run(&self, claimed: &Claimed<'t>) -> Outcome {
        // The deployment's own rows (its resolve, its end) are written by the first engine's
        // run, as one engine's deployment writes them.
        let first = claimed.on(self.engines[0], TargetSet::Several);
        if let Err(e) = first.admit_without_import(Refusal::ImportOnSeveral) {
            return self.abort(claimed, &first, e).await;
        }
        let (resolved, others) = match Self::shared(&first).await {
            Ok(Shared::Resolved(resolved, others)) => (resolved, others),
            Ok(Shared::Skipped(note)) => {
                return first
                    .finish(DeploymentState::Cancelled, &note, None, None)
                    .await;
            }
            Err(PipelineError::Store(e)) => return Outcome::Abandoned(error_chain(&e)),
            Err(e) => return first.fail(&e, || self.undo_engine(&first)).await,
        };
        if let Some(unreached) = Self::reach_all(&first, &Self::runs(claimed, &self.engines)).await
        {
            return unreached;
        }
        self.batches(claimed, &first, &resolved, &others).await
    }

    /// resolve, the quarantine, the signature (checked once, for every engine, before any
    /// engine pulls) and every further service's image, named once for all engines.
    async fn shared(first: &EngineRun<'_>) -> Result<Shared, PipelineError> {
        let resolved = first.resolve().await?;
        if let Some(note) = first.skip_quarantined(&resolved.digest).await? {
            return Ok(Shared::Skipped(note));
        }
        first.signature(&resolved).await?;
        let others = first.resolve_services(&resolved).await?;
        Ok(Shared::Resolved(resolved, others))
    }

    /// Every engine answers before any changes: one that is down (past the retry budget)
    /// fails the rollout with every engine still on what it served. `Some`: it ended here.
    async fn reach_all(first: &EngineRun<'_>, runs: &[EngineRun<'_>]) -> Option<Outcome> {
        let reached = futures_util::future::join_all(runs.iter().map(|r| r.reach())).await;
        for (run, r) in runs.iter().zip(reached) {
            match r {
                Ok(()) => {}
                Err(PipelineError::Store(e)) => return Some(Outcome::Abandoned(error_chain(&e))),
                Err(e) => {
                    let reason =
                        format!("engine {} failed: {}", run.target.name(), error_chain(&e));
                    let outcome = format!("failed: {reason}; no engine was changed");
                    let ended = first
                        .finish(DeploymentState::Failed, &outcome, Some(&reason), None)
                        .await;
                    return Some(ended);
                }
            }
        }
        None
    }

    /// Batch by batch, each engine of a batch at once, up to serving; the first failure
    /// stops the rollout and undoes it, otherwise every engine retires its old generation.
    async fn batches(
        &self,
        claimed: &Claimed<'t>,
        first: &EngineRun<'t>,
        resolved: &Resolved,
        others: &[Resolved],
    ) -> Outcome {
        let size = first.app.rollout.batch.size(self.engines.len());
        let mut switched: Switched<'t, S::Serving> = Vec::new();
        for (i, batch) in self.engines.chunks(size).enumerate() {
            if i > 0 && !first.app.rollout.pause.is_zero() {
                first.pause_between_batches().await;
            }
            let runs = Self::runs(claimed, batch);
            let ups =
                futures_util::future::join_all(runs.iter().map(|r| self.up(r, resolved, others)))
                    .await;
            let mut failed: Vec<(EngineRun<'t>, PipelineError)> = Vec::new();
            for (run, up) in runs.into_iter().zip(ups) {
                match up {
                    Ok(up) => switched.push((run, up)),
                    Err(PipelineError::Store(e)) => return Outcome::Abandoned(error_chain(&e)),
                    Err(e) => failed.push((run, e)),
                }
            }
            if !failed.is_empty() {
                return self.stop(first, failed, &switched).await;
            }
        }
        self.retire_everywhere(first, resolved, &switched).await
    }

    /// One engine's part: the strategy's steps on this engine, up to where every engine
    /// must be before any retires.
    async fn up(
        &self,
        run: &EngineRun<'_>,
        resolved: &Resolved,
        others: &[Resolved],
    ) -> Result<Up<S::Serving>, PipelineError> {
        if !run.dep.trigger.is_operator()
            && let Some(note) = run.already_running(&resolved.digest, others).await?
        {
            return Ok(Up::AlreadyServing(note));
        }
        run.pull(resolved).await?;
        let image = run.verify(resolved).await?;
        let services = run.pull_services(others, &image).await?;
        let images = Images {
            resolved: resolved.clone(),
            image,
            services,
        };
        let made = run
            .make_candidate(images, self.replace.publishing())
            .await?;
        Ok(Up::Serving(self.replace.serve(run, made).await?))
    }

    /// Every engine switched: each retires its old generation; the deployment succeeds.
    async fn retire_everywhere(
        &self,
        first: &EngineRun<'_>,
        resolved: &Resolved,
        done: &Switched<'_, S::Serving>,
    ) -> Outcome {
        let mut notes = Vec::new();
        for (run, up) in done {
            let (note, retired) = match up {
                Up::AlreadyServing(note) => {
                    notes.push(format!("{}: {note}", run.target.name()));
                    continue;
                }
                Up::Serving(serving) => (
                    self.replace.said_among(serving, run.target.name()),
                    self.replace.retire(run, serving).await,
                ),
            };
            // The new generation serves everywhere: a leftover old container is a warning,
            // not a reason to undo the rollout.
            match retired {
                Ok(w) if w.is_empty() => notes.push(note),
                Ok(w) => notes.push(format!("{note}; retire: {}", w.join("; "))),
                Err(PipelineError::Store(e)) => return Outcome::Abandoned(error_chain(&e)),
                Err(e) => notes.push(format!("{note}; retire failed: {}", error_chain(&e))),
            }
        }
        let outcome = format!(
            "{} is running on {} engines: {}",
            resolved.digest,
            done.len(),
            notes.join("; ")
        );
        first
            .finish(DeploymentState::Succeeded, &outcome, None, None)
            .await
    }
}

impl EngineRun<'_> {
    /// The rollout's `pause` before the next batch, cut short by an operator's stop (its
    /// NOTIFY on `pier_live`): the next step's boundary then stops the rollout and undoes
    /// it, rather than an hour-long pause later. Bounded by the pause; without a listener
    /// it is the plain pause, and the stop is honoured after it.
    async fn pause_between_batches(&self) {
        let until = tokio::time::Instant::now() + self.app.rollout.pause;
        let me = self.dep.id.to_string();
        let stopped = || async {
            matches!(
                self.ctx.store.stop_requested(self.dep.id).await,
                Ok(Some(_))
            )
        };
        let mut listener = match self
            .ctx
            .store
            .own_listener(crate::store::Channel::Live)
            .await
        {
            Ok(l) => l,
            Err(_) => return tokio::time::sleep_until(until).await,
        };
        // A request made before the listener listened.
        if stopped().await {
            return;
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return,
                msg = listener.try_recv() => match msg {
                    Ok(Some(n)) if n.payload() == me && stopped().await => return,
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return tokio::time::sleep_until(until).await,
                },
            }
        }
    }

    /// `reach` on this run's engine: it answers (an unreachable engine retried as any
    /// transient error is, within the retry budget) and runs the platform the digest was
    /// resolved for. One digest serves every engine, so an engine of another platform
    /// would run a manifest not meant for it: refused before anything is pulled.
    async fn reach(&self) -> Result<(), PipelineError> {
        let intent = ReachIntent {
            target: self.target.name().to_owned(),
        };
        let started = std::time::Instant::now();
        let _: Reached = self
            .step(Step::Reach, &intent, || async {
                let platform = self.engine().platform().await?;
                if platform != self.ctx.platform {
                    return Err(Refusal::PlatformSplit {
                        engine: platform.to_string(),
                        rollout: self.ctx.platform.to_string(),
                    }
                    .into());
                }
                Ok(Reached {
                    waited_ms: started.elapsed().as_millis() as u64,
                })
            })
            .await?;
        Ok(())
    }
}
