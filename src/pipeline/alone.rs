//! The plan on one engine, with either strategy ([`Replace`] says which): resolve,
//! signature (an app that must be signed), pull, verify (or a `pier import`'s archive
//! loaded instead), every further service's image, the app's network, volumes, candidate
//! and shared networks; then the strategy's steps up to serving, then retire.
//!
//! Its undo, from the journal: the strategy's revert (blue-green switches the route back),
//! then the rollback (every container the deployment made removed, what it stopped started
//! again).

use super::outcome::{Done, Undone};
use super::replace::{Images, Replace};
use super::{EngineRun, Outcome, PipelineError, error_chain};

/// One engine, replaced by strategy `S`.
pub(super) struct Alone<S>(pub S);

/// What the front of the plan left, or why there is nothing to do.
enum Prepared {
    /// A quarantined digest, or the one that already serves: the deployment ends here.
    Skip(Done),
    /// Every image of the generation, on the engine.
    Images(Images),
}

impl<S: Replace> Alone<S> {
    pub(super) async fn run(&self, run: &EngineRun<'_>) -> Outcome {
        if let Err(e) = run.admit() {
            return run.fail(&e, || self.undo(run)).await;
        }
        match self.forward(run).await {
            Ok(done) => run.finish_done(done).await,
            Err(PipelineError::Store(e)) => Outcome::Abandoned(error_chain(&e)),
            Err(e) => run.fail(&e, || self.undo(run)).await,
        }
    }

    async fn forward(&self, run: &EngineRun<'_>) -> Result<Done, PipelineError> {
        let images = match run.prepare().await? {
            Prepared::Skip(done) => return Ok(done),
            Prepared::Images(images) => images,
        };
        let resolved = images.resolved.clone();
        let made = run.make_candidate(images, self.0.publishing()).await?;
        let serving = self.0.serve(run, made).await?;
        let warnings = self.0.retire(run, &serving).await?;
        let mut note = self.0.said_alone(&serving, &resolved);
        if !warnings.is_empty() {
            note.push_str(&format!("; retire warnings: {}", warnings.join("; ")));
        }
        Ok(Done::Succeeded(note))
    }

    /// Puts the engine back on what served before the deployment, read from its journal,
    /// so that a replay after a crash undoes exactly what was done: the strategy's revert
    /// first, then the rollback (nothing to roll back once `switch` succeeded without a
    /// revert). `Err`: the database is away.
    async fn undo(&self, run: &EngineRun<'_>) -> Result<Undone, PipelineError> {
        let reverted = match self.0.revert(run).await {
            Ok(v) => v,
            Err(e @ PipelineError::Store(_)) => return Err(e),
            Err(e) => return Ok(Undone::failed_revert(&e)),
        };
        run.roll_back_after(reverted).await
    }
}

impl EngineRun<'_> {
    /// resolve, then (unless the digest is quarantined or already serves) pull and verify
    /// every image of the generation: the same for either strategy.
    async fn prepare(&self) -> Result<Prepared, PipelineError> {
        if let Some(import) = &self.import {
            // An app that must be signed loads no archive (nothing would check it).
            self.refuse_unsigned_import(&import.archive).await?;
            // Loaded and checked (id, platform, labels) in `resolve`: no pull, no verify.
            let (resolved, image) = self.load_archive(import).await?;
            let others = self.resolve_services(&resolved).await?;
            let services = self.pull_services(&others, &image).await?;
            return Ok(Prepared::Images(Images {
                resolved,
                image,
                services,
            }));
        }
        let resolved = self.resolve().await?;
        if let Some(note) = self.skip_quarantined(&resolved.digest).await? {
            return Ok(Prepared::Skip(Done::Skipped(note)));
        }
        // Every image of the generation is named before anything is pulled: the no-op
        // check compares each service's digest with what serves.
        let others = self.resolve_services(&resolved).await?;
        if !self.dep.trigger.is_operator()
            && let Some(note) = self.already_running(&resolved.digest, &others).await?
        {
            return Ok(Prepared::Skip(Done::Succeeded(note)));
        }
        // Before anything is pulled: an app that must be signed runs only a digest a
        // trusted key signed (a no-op for one that need not be).
        self.signature(&resolved).await?;
        // Every image pulled and verified before any container is created.
        self.pull(&resolved).await?;
        let image = self.verify(&resolved).await?;
        let services = self.pull_services(&others, &image).await?;
        Ok(Prepared::Images(Images {
            resolved,
            image,
            services,
        }))
    }
}
