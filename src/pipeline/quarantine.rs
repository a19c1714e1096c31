//! The quarantine of an app's digests, both ways: a digest that failed its health check,
//! its soak or its tasks is quarantined when the deployment fails, and a push or the poller
//! asking for a quarantined digest is skipped before anything is pulled. An operator's
//! deploy of exactly that digest clears it. (A digest without a valid signature is
//! quarantined by the `signature` step itself, before its failure is journaled.)

use super::plan::{Placed, TargetSet};
use super::records::Resolved;
use super::{PipelineError, Run, Step, StepError};

impl<P: Placed> Run<'_, P> {
    /// `Some(why)` when the digest is quarantined for the app and this deployment must not
    /// deploy it; an operator's deploy of exactly it clears the quarantine instead.
    pub(super) async fn skip_quarantined(
        &self,
        digest: &str,
    ) -> Result<Option<String>, PipelineError> {
        if self.dep.trigger.is_operator() {
            let cleared = self
                .store_retry(|| self.ctx.store.clear_quarantine(&self.app.name, digest))
                .await?;
            if cleared {
                tracing::info!(%digest, "quarantine cleared by an operator's deploy");
            }
            return Ok(None);
        }
        // Quarantined by this very deployment (its soak failed, then Pier died): it is being
        // rolled back, and its replay must get there, not stop here.
        let q = self
            .store_retry(|| self.ctx.store.quarantined(&self.app.name, digest))
            .await?
            .filter(|q| q.deployment_id != Some(self.dep.id));
        Ok(q.map(|q| {
            format!(
                "skipped: {digest} is quarantined for {} ({}); deploy exactly this digest as an \
                 admin to clear it",
                self.app.name, q.reason
            )
        }))
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
                source: StepError::Rollout(f),
            } if f.tasks_failed() => step,
            _ => return Ok(()),
        };
        let Some(digest) = self.resolved_digest().await else {
            return Ok(());
        };
        let on = match self.targets {
            TargetSet::Several => format!(" on engine {}", self.target.name()),
            TargetSet::One => String::new(),
        };
        let why = format!("failed its {step}{on} in deployment {}", self.dep.id);
        self.store_retry(|| {
            self.ctx
                .store
                .quarantine(&self.app.name, &digest, &why, self.dep.id)
        })
        .await
    }

    /// The digest this run resolved, from its journal (the deployment row read at claim
    /// time may predate the resolve).
    async fn resolved_digest(&self) -> Option<String> {
        let rec = self
            .store_retry(|| {
                self.ctx
                    .store
                    .step(self.dep.id, Step::Resolve, self.lane(Step::Resolve))
            })
            .await
            .ok()??;
        let resolved: Resolved = serde_json::from_value(rec.result?).ok()?;
        Some(resolved.digest.to_string())
    }
}
