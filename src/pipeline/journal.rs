//! The journal protocol, and the one runner every step goes through: intent committed
//! before the side effect, result after it, crash points on both sides, one backoff for
//! transient errors. A replay sees what was recorded and never swaps parameters.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::Instrument;

use super::plan::{Placed, TargetSet};
use super::records::{StopRequest, Unobserved};
use super::{Context, PipelineError, Run, ServiceName, Step, StepError, error_chain};

use crate::backoff::{Backoff, retry, retry_hinted};
use crate::store::{GenerationSwitch, Lane, StepRecord, StepState, StoreError};

/// Where a step stands when the pipeline reaches it.
enum Begun<T> {
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
enum IntentCheck {
    /// Derived from config and the deployment: any difference is a conflict.
    Strict,
    /// Observed from the engine when first run (which containers were serving): the
    /// recorded one is the plan, whatever the engine shows now.
    Recorded,
}

impl<P: Placed> Run<'_, P> {
    /// A step's crash point: `create`, `create@worker` for a further service's, and with
    /// `#edge-1` appended for an engine's step in a rollout across several engines.
    fn point(&self, step: Step) -> String {
        let mut point = step.as_str().to_owned();
        if let ServiceName::Named(name) = self.service {
            point.push('@');
            point.push_str(name);
        }
        if self.targets == TargetSet::Several && !step.is_shared() {
            point.push('#');
            point.push_str(self.target.name());
        }
        point
    }

    /// The span every log line of `step` is written in.
    fn span(&self, step: Step) -> tracing::Span {
        tracing::info_span!("step", %step, service = self.service.key(), target = %self.target.name())
    }

    /// Where `step`'s journal entry belongs: this run's service, and this run's engine
    /// unless the step is the whole deployment's.
    pub(super) fn lane(&self, step: Step) -> Lane<'_> {
        Lane {
            service: self.service.key(),
            target: if step.is_shared() {
                ""
            } else {
                self.target.name()
            },
        }
    }

    /// Runs a step whose intent follows from the config and the deployment. A replay
    /// whose intent differs from the recorded one is a conflict.
    pub(super) async fn step<I, T, F, Fut>(
        &self,
        step: Step,
        intent: &I,
        effect: F,
    ) -> Result<T, PipelineError>
    where
        I: Serialize,
        T: Serialize + DeserializeOwned,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StepError>>,
    {
        self.switching_step(step, intent, |_: &T| None, effect)
            .await
    }

    /// Like [`Run::step`]; its success also applies `change(result)` (the app's serving
    /// generation, the proxy's route) in the same transaction as the step's result, so the
    /// two can never disagree, whenever the process dies.
    pub(super) async fn switching_step<I, T, C, F, Fut>(
        &self,
        step: Step,
        intent: &I,
        change: C,
        effect: F,
    ) -> Result<T, PipelineError>
    where
        I: Serialize,
        T: Serialize + DeserializeOwned,
        C: Fn(&T) -> Option<GenerationSwitch>,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StepError>>,
    {
        let span = self.span(step);
        async {
            match self.begin::<T>(step, intent, IntentCheck::Strict).await? {
                Begun::Done(t) => Ok(t),
                Begun::Fresh | Begun::Resumed(_) => self.effect(step, &change, effect).await,
            }
        }
        .instrument(span)
        .await
    }

    /// Runs a step whose intent was observed on the engine (what served when it began):
    /// a replay follows the recorded plan, whatever the engine shows now.
    pub(super) async fn observed_step<I, T, F, Fut>(
        &self,
        step: Step,
        observed: I,
        effect: F,
    ) -> Result<T, PipelineError>
    where
        I: Serialize + DeserializeOwned + Clone,
        T: Serialize + DeserializeOwned,
        F: Fn(I) -> Fut,
        Fut: Future<Output = Result<T, StepError>>,
    {
        let span = self.span(step);
        async {
            let plan = match self
                .begin::<T>(step, &observed, IntentCheck::Recorded)
                .await?
            {
                Begun::Done(t) => return Ok(t),
                Begun::Fresh => observed,
                Begun::Resumed(recorded) => serde_json::from_value(recorded)
                    .map_err(|e| PipelineError::journal(step, "intent", e))?,
            };
            self.effect(step, &|_: &T| None, || effect(plan.clone()))
                .await
        }
        .instrument(span)
        .await
    }

    /// The side effect, retried while transient, then its result (or failure) journaled.
    async fn effect<T, C, F, Fut>(
        &self,
        step: Step,
        change: &C,
        effect: F,
    ) -> Result<T, PipelineError>
    where
        T: Serialize,
        C: Fn(&T) -> Option<GenerationSwitch>,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StepError>>,
    {
        let started = std::time::Instant::now();
        let res = self.retrying(effect).await;
        let result = if res.is_ok() { "succeeded" } else { "failed" };
        metrics::histogram!("pier_step_duration_seconds", "step" => step.as_str(), "result" => result)
            .record(started.elapsed().as_secs_f64());
        match res {
            Ok(t) => {
                self.succeed(step, &t, change(&t).as_ref()).await?;
                Ok(t)
            }
            Err(e) => Err(self.failed(step, e).await),
        }
    }

    async fn begin<T: DeserializeOwned>(
        &self,
        step: Step,
        intent: &impl Serialize,
        check: IntentCheck,
    ) -> Result<Begun<T>, PipelineError> {
        let intent = serde_json::to_value(intent).expect("intents serialize");
        let recorded = self
            .store_retry(|| self.ctx.store.step(self.dep.id, step, self.lane(step)))
            .await?;
        let Some(rec) = recorded else {
            // A step boundary: an operator's stop is honoured here, before anything of this
            // step is done, through the failure path (the previous generation keeps
            // serving). The journal records the step it stopped at.
            if step.stoppable()
                && let Some(by) = self
                    .store_retry(|| self.ctx.store.stop_requested(self.dep.id))
                    .await?
            {
                return Err(self.stopped(step, by).await);
            }
            self.store_retry(|| {
                self.ctx.store.step_begin(
                    self.dep.id,
                    self.owner,
                    step,
                    self.lane(step),
                    &intent,
                    self.dep.attempt,
                )
            })
            .await?;
            crate::faults::crash_point(&self.point(step), "before");
            return Ok(Begun::Fresh);
        };
        // A stop journaled before the process died ends as the stop it was (its record
        // holds who asked, not the step's intent: it is no conflict).
        if rec.state == StepState::Failed
            && let Ok(stop) = serde_json::from_value::<StopRequest>(rec.intent.clone())
        {
            return Err(PipelineError::Stopped {
                step,
                by: stop.stop_requested_by,
            });
        }
        if check == IntentCheck::Strict && rec.intent != intent {
            return Err(PipelineError::Conflict {
                step,
                recorded: rec.intent,
                now: intent,
            });
        }
        match rec.state {
            StepState::Succeeded => {
                let result = rec.result.unwrap_or(Value::Null);
                serde_json::from_value(result)
                    .map(Begun::Done)
                    .map_err(|e| PipelineError::journal(step, "result", e))
            }
            StepState::Failed => Err(PipelineError::Failed {
                step,
                source: StepError::Recorded(rec.error.unwrap_or_else(|| "failed".into())),
            }),
            StepState::Started => {
                self.store_retry(|| {
                    self.ctx.store.step_replay(
                        self.dep.id,
                        self.owner,
                        step,
                        self.lane(step),
                        self.dep.attempt,
                    )
                })
                .await?;
                tracing::info!("resuming interrupted step");
                crate::faults::crash_point(&self.point(step), "before");
                Ok(Begun::Resumed(rec.intent))
            }
        }
    }

    async fn succeed(
        &self,
        step: Step,
        result: &impl Serialize,
        switch: Option<&GenerationSwitch>,
    ) -> Result<(), PipelineError> {
        let result = serde_json::to_value(result).expect("results serialize");
        self.store_retry(|| {
            self.ctx.store.step_succeed(
                self.dep.id,
                self.owner,
                step,
                self.lane(step),
                &result,
                switch,
            )
        })
        .await?;
        crate::faults::crash_point(&self.point(step), "after");
        Ok(())
    }

    /// Journals `step` as begun and failed because an operator asked to stop.
    async fn stopped(&self, step: Step, by: String) -> PipelineError {
        let intent = serde_json::to_value(StopRequest {
            stop_requested_by: by.clone(),
        })
        .expect("intents serialize");
        let res = self
            .store_retry(|| {
                self.ctx.store.step_begin(
                    self.dep.id,
                    self.owner,
                    step,
                    self.lane(step),
                    &intent,
                    self.dep.attempt,
                )
            })
            .await;
        if let Err(e) = res {
            return e;
        }
        tracing::info!(%by, "stop requested; stopping before this step");
        self.failed(step, StepError::Stopped(by.clone())).await;
        PipelineError::Stopped { step, by }
    }

    /// Ties a step error to its step and journals it, with its whole chain of causes.
    async fn failed(&self, step: Step, e: StepError) -> PipelineError {
        let reason = error_chain(&e);
        let res = self
            .store_retry(|| {
                self.ctx
                    .store
                    .step_fail(self.dep.id, self.owner, step, self.lane(step), &reason)
            })
            .await;
        match res {
            Ok(()) => PipelineError::Failed { step, source: e },
            Err(store) => store,
        }
    }

    /// An error while observing, before the step's intent exists: journal the step as
    /// begun and failed so that the timeline shows where it stopped.
    pub(super) async fn failed_before_begin(&self, step: Step, e: StepError) -> PipelineError {
        if let Err(p) = self
            .begin::<Value>(step, &Unobserved {}, IntentCheck::Recorded)
            .await
        {
            return p;
        }
        self.failed(step, e).await
    }

    /// The journal entries of this run's engine, every service's, oldest first: what a
    /// rollback or revert on this engine reads, never another engine's.
    pub(super) async fn target_steps(&self) -> Result<Vec<StepRecord>, PipelineError> {
        let all = self
            .store_retry(|| self.ctx.store.steps(self.dep.id))
            .await?;
        Ok(all
            .into_iter()
            .filter(|r| r.target == self.target.name())
            .collect())
    }

    /// Journal writes wait out a database outage (with backoff) instead of abandoning a
    /// half-done step; a lost lease ends the run at once, since another worker owns it.
    pub(super) async fn store_retry<T, F, Fut>(&self, op: F) -> Result<T, PipelineError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        store_retry(self.ctx, op)
            .await
            .map_err(PipelineError::Store)
    }

    /// Retries an idempotent side effect on transient errors, with backoff capped at 5 s
    /// (longer only when a registry's `Retry-After` asks for it), until the retry budget is
    /// spent; permanent errors return at once.
    pub(super) async fn retrying<T, F, Fut>(&self, op: F) -> Result<T, StepError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StepError>>,
    {
        let backoff = Backoff::outage().within(self.ctx.retry_budget);
        retry_hinted(
            backoff,
            StepError::is_transient,
            StepError::retry_after,
            |e, delay| tracing::warn!(error = %error_chain(e), retry_in = ?delay, "transient failure; retrying"),
            op,
        )
        .await
    }
}

/// A database call retried while the database is unavailable, within the store's patience.
pub(super) async fn store_retry<R, F, Fut>(ctx: &Context, op: F) -> Result<R, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R, StoreError>>,
{
    let backoff = Backoff::store_write().within(ctx.store_patience);
    retry(
        backoff,
        StoreError::is_unavailable,
        |e, _| tracing::warn!(error = %error_chain(e), "database unavailable; retrying"),
        op,
    )
    .await
}
