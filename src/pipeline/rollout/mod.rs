//! A rollout across several engines: one deployment, one resolved digest, each engine's
//! container steps journaled under its own target.
//!
//! resolve (once, for all engines), then batch by batch: every engine of a batch runs the
//! same pinned steps of the app's strategy up to and including `switch` (`recreate`), or
//! up to the end of its soak (`blue-green`, each engine behind its own `pier proxy
//! --target`); the next batch starts only when the whole batch got there. The first
//! failure stops the rollout, and every engine it touched goes back to what it served
//! before (`undo.rs`), journaled like any step. Only when every engine switched is any old
//! generation retired, so an undo always has one to go back to.
//!
//! A crash anywhere resumes from the journal: an engine whose steps are recorded replays
//! them without doing anything twice, so no engine is deployed twice.

use std::sync::Arc;

use super::blue_green::Served;
use super::records::{Candidate, OldGeneration, ReachIntent, Reached};
use super::refusal::Refusal;
use super::{Outcome, PipelineError, Prepared, Run, Step, error_chain};
use crate::config::Strategy;
use crate::registry::Resolved;
use crate::store::DeploymentState;
use crate::target::Target;

mod undo;

/// What one engine reached in its part of the rollout.
enum Up {
    /// The digest already serves there, healthy: nothing to do on that engine.
    AlreadyServing(String),
    /// `recreate`: the new generation serves; the old one is stopped, not yet removed.
    Switched {
        all: Vec<Candidate>,
        old: OldGeneration,
        note: String,
    },
    /// `blue-green`: the new generation serves through the proxy and passed its soak.
    Routed(Served),
}

impl<'a> Run<'a> {
    /// The same deployment, on another engine.
    fn on(&self, target: &'a Target) -> Run<'a> {
        Run {
            ctx: self.ctx,
            owner: self.owner,
            dep: self.dep,
            app: self.app,
            import: None,
            service: self.service,
            target,
            multi_target: true,
        }
    }

    pub(super) async fn rollout(&self, targets: &[&'a Arc<Target>]) -> Outcome {
        let shared = async {
            let resolved = self.resolve().await?;
            if let Some(note) = self.skip_quarantined(&resolved.digest).await? {
                return Ok(Err(note));
            }
            // Issue 25: checked once, for every engine, before any engine pulls.
            self.signature(&resolved).await?;
            let others = self.resolve_services(&resolved).await?;
            Ok(Ok((resolved, others)))
        };
        let (resolved, others) = match shared.await {
            Ok(Ok(r)) => r,
            Ok(Err(note)) => {
                return self
                    .finish(DeploymentState::Cancelled, &note, None, None)
                    .await;
            }
            Err(PipelineError::Store(e)) => return Outcome::Abandoned(error_chain(&e)),
            Err(e) => return self.fail(e).await,
        };
        // Every engine answers before any changes: one that is down (past the retry
        // budget) fails the rollout with every engine still on what it served.
        let runs: Vec<Run<'a>> = targets.iter().map(|t| self.on(t)).collect();
        let reached = futures_util::future::join_all(runs.iter().map(|r| r.reach())).await;
        for (run, r) in runs.iter().zip(reached) {
            match r {
                Ok(()) => {}
                Err(PipelineError::Store(e)) => return Outcome::Abandoned(error_chain(&e)),
                Err(e) => {
                    let reason = format!("engine {} failed: {}", run.target.name, error_chain(&e));
                    let outcome = format!("failed: {reason}; no engine was changed");
                    return self
                        .finish(DeploymentState::Failed, &outcome, Some(&reason), None)
                        .await;
                }
            }
        }
        let size = self.app.rollout.batch.size(targets.len());
        let mut switched: Vec<(Run<'a>, Up)> = Vec::new();
        for (i, batch) in targets.chunks(size).enumerate() {
            if i > 0 && !self.app.rollout.pause.is_zero() {
                self.pause_between_batches().await;
            }
            let runs: Vec<Run<'a>> = batch.iter().map(|t| self.on(t)).collect();
            let ups =
                futures_util::future::join_all(runs.iter().map(|r| r.up(&resolved, &others))).await;
            let mut failed: Vec<(Run<'a>, PipelineError)> = Vec::new();
            for (run, up) in runs.into_iter().zip(ups) {
                match up {
                    Ok(up) => switched.push((run, up)),
                    Err(PipelineError::Store(e)) => return Outcome::Abandoned(error_chain(&e)),
                    Err(e) => failed.push((run, e)),
                }
            }
            if !failed.is_empty() {
                return self.stop_rollout(failed, &switched).await;
            }
        }
        self.retire_everywhere(&resolved, &switched).await
    }

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
            target: self.target.name.clone(),
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

    /// One engine's part: the strategy's steps on this engine, up to where every engine
    /// must be before any retires.
    async fn up(&self, resolved: &Resolved, others: &[Resolved]) -> Result<Up, PipelineError> {
        if !self.dep.trigger.is_operator()
            && let Some(note) = self.already_running(&resolved.digest, others).await?
        {
            return Ok(Up::AlreadyServing(note));
        }
        self.pull(resolved).await?;
        let image = self.verify(resolved).await?;
        let images = self.pull_services(others, &image).await?;
        let Prepared::Candidate {
            candidate,
            services: images,
            ..
        } = self
            .contain_and_create(resolved.clone(), image.clone(), images)
            .await?
        else {
            unreachable!("contain_and_create always makes a candidate")
        };
        if self.app.strategy == Strategy::BlueGreen {
            // The config gives a blue-green app no further services.
            let served = self.serve_blue_green(resolved, &image, candidate).await?;
            return Ok(Up::Routed(served));
        }
        let services = self.create_services(&images).await?;
        let all: Vec<Candidate> = std::iter::once(candidate.clone())
            .chain(services.iter().cloned())
            .collect();
        let refs: Vec<&Candidate> = all.iter().collect();
        let old = self.stop_old(&refs).await?;
        self.start(&candidate).await?;
        self.start_services(&services).await?;
        let probe = self.health(&candidate, &image, None).await?;
        self.services_health(&services, &images).await?;
        self.switch(resolved, &candidate).await?;
        Ok(Up::Switched {
            all,
            old,
            note: format!("{}: {} ({probe})", self.target.name, candidate.name),
        })
    }

    /// Every engine switched: each retires its old generation; the deployment succeeds.
    async fn retire_everywhere(&self, resolved: &Resolved, done: &[(Run<'a>, Up)]) -> Outcome {
        let mut notes = Vec::new();
        for (run, up) in done {
            let (note, retired) = match up {
                Up::AlreadyServing(note) => {
                    notes.push(format!("{}: {note}", run.target.name));
                    continue;
                }
                Up::Switched { all, old, note } => {
                    let refs: Vec<&Candidate> = all.iter().collect();
                    (
                        note.clone(),
                        run.retire(&refs, old).await.map(|r| r.warnings),
                    )
                }
                Up::Routed(served) => (
                    format!("{}: {}", run.target.name, served.note),
                    run.retire_served(served).await,
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
        self.finish(DeploymentState::Succeeded, &outcome, None, None)
            .await
    }
}
