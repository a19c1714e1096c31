//! What is refused before any step, whatever the plan, and the admin policy that every
//! effect on an engine checks again right before it acts. A refusal here is journaled as a
//! failure at `resolve`, since nothing was done.

use super::plan::Placed;
use super::refusal::Refusal;
use super::{MAX_ATTEMPTS, PipelineError, Run, Step, StepError};

/// A refusal before any step, journaled at `resolve`.
fn refuse(source: StepError) -> PipelineError {
    PipelineError::Failed {
        step: Step::Resolve,
        source,
    }
}

impl<P: Placed> Run<'_, P> {
    pub(super) fn admit(&self) -> Result<(), PipelineError> {
        if self.dep.attempt > MAX_ATTEMPTS {
            return Err(PipelineError::GaveUp(self.dep.attempt - 1));
        }
        if self.dep.image != self.app.image {
            // Queued for one repository, configured for another now: deploying either would
            // surprise someone. The next push or a redeploy uses the new config.
            return Err(refuse(
                Refusal::ImageChanged {
                    queued: self.dep.image.clone(),
                    follows: self.app.image.clone(),
                }
                .into(),
            ));
        }
        // Host paths the policy (as reloaded) no longer allows, or a config file that is not
        // a regular file: the deployment fails before it pulls or makes anything.
        self.policy_check().map_err(refuse)
    }

    /// [`Self::admit`], for a plan that cannot load an archive into its targets (`why`
    /// says which): a `pier import` is refused too.
    pub(super) fn admit_without_import(&self, why: Refusal) -> Result<(), PipelineError> {
        self.admit()?;
        match self.import {
            Some(_) => Err(refuse(why.into())),
            None => Ok(()),
        }
    }

    /// The admin policy as the live config says now, applied to this app's host paths.
    /// Called at the start of a run and inside every effect that mutates the engine.
    pub(super) fn policy_check(&self) -> Result<(), StepError> {
        let live = self.ctx.live.load();
        if live.app(&self.app.name).is_none() {
            return Err(Refusal::AppRemoved {
                app: self.app.name.to_string(),
            }
            .into());
        }
        live.policy
            .check(&self.app.name, &self.app.contained)
            .map_err(|r| Refusal::Policy(r).into())
    }
}
