//! The journal protocol every step follows: intent committed before the side effect,
//! result after it; a replay sees what was recorded and never swaps parameters.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{PipelineError, Run, Step};
use crate::store::{StepState, StoreError};

/// Where a step stands when the pipeline reaches it.
pub enum Begun<T> {
    /// First time: the intent is now recorded; do the side effect.
    Fresh,
    /// A crash (or lost lease) interrupted it: the recorded intent is the plan; check the
    /// engine's real state and finish it without doing anything twice.
    Resumed(Value),
    /// It finished before; here is its recorded result.
    Done(T),
}

/// How a replayed step's recorded intent is compared with the one computed now.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum IntentCheck {
    /// Derived from config and the deployment: any difference is a conflict.
    Strict,
    /// Observed from the engine when first run (which containers were serving): the
    /// recorded one is the plan, whatever the engine shows now.
    Recorded,
}

impl Run<'_> {
    pub(super) async fn begin<T: DeserializeOwned>(
        &self,
        step: Step,
        intent: &impl Serialize,
        check: IntentCheck,
    ) -> Result<Begun<T>, PipelineError> {
        let intent = serde_json::to_value(intent).expect("intents serialize");
        let recorded = self
            .store_retry(|| self.ctx.store.step(self.dep.id, step.as_str()))
            .await?;
        let Some(rec) = recorded else {
            self.store_retry(|| {
                self.ctx.store.step_begin(
                    self.dep.id,
                    self.owner,
                    step.as_str(),
                    &intent,
                    self.dep.attempt,
                )
            })
            .await?;
            crate::faults::crash_point(step.as_str(), "before");
            return Ok(Begun::Fresh);
        };
        if check == IntentCheck::Strict && rec.intent != intent {
            return Err(PipelineError::Conflict {
                step,
                recorded: rec.intent,
                now: intent,
            });
        }
        match rec.state() {
            StepState::Succeeded => {
                let result = rec.result.unwrap_or(Value::Null);
                serde_json::from_value(result)
                    .map(Begun::Done)
                    .map_err(|e| PipelineError::Journal(format!("{step} result: {e}")))
            }
            StepState::Failed => Err(PipelineError::Failed {
                step,
                reason: rec.error.unwrap_or_else(|| "failed".into()),
            }),
            StepState::Started => {
                self.store_retry(|| {
                    self.ctx.store.step_replay(
                        self.dep.id,
                        self.owner,
                        step.as_str(),
                        self.dep.attempt,
                    )
                })
                .await?;
                tracing::info!(deployment = %self.dep.id, %step, "resuming interrupted step");
                crate::faults::crash_point(step.as_str(), "before");
                Ok(Begun::Resumed(rec.intent))
            }
        }
    }

    pub(super) async fn succeed(
        &self,
        step: Step,
        result: &impl Serialize,
    ) -> Result<(), PipelineError> {
        let result = serde_json::to_value(result).expect("results serialize");
        self.store_retry(|| {
            self.ctx
                .store
                .step_succeed(self.dep.id, self.owner, step.as_str(), &result)
        })
        .await?;
        crate::faults::crash_point(step.as_str(), "after");
        Ok(())
    }

    pub(super) async fn fail_step(&self, step: Step, reason: &str) -> Result<(), PipelineError> {
        self.store_retry(|| {
            self.ctx
                .store
                .step_fail(self.dep.id, self.owner, step.as_str(), reason)
        })
        .await
    }

    /// Journal writes wait out a database outage (with backoff) instead of abandoning a
    /// half-done step; a lost lease ends the run at once, since another worker owns it.
    pub(super) async fn store_retry<T, F, Fut>(&self, mut op: F) -> Result<T, PipelineError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let mut delay = std::time::Duration::from_millis(100);
        let deadline = tokio::time::Instant::now() + self.ctx.store_patience;
        loop {
            match op().await {
                Err(e) if e.is_unavailable() && tokio::time::Instant::now() < deadline => {
                    tracing::warn!(deployment = %self.dep.id, error = %e, "database unavailable; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(std::time::Duration::from_secs(2));
                }
                other => return other.map_err(PipelineError::Store),
            }
        }
    }
}
