//! Blue-green's undo of a switch: `revert` puts the previous generation back behind the
//! route (started again if it was stopped, proven healthy), route and generation in one
//! transaction, before the rollback removes the candidate.

use std::time::Duration;

use crate::pipeline::plan::Placed;
use crate::pipeline::records::{RevertIntent, Reverted, Switched};
use crate::pipeline::refusal::Refusal;
use crate::pipeline::{EngineRun, PipelineError, Step};
use crate::store::{GenerationSwitch, RouteWrite, StepState};

impl EngineRun<'_> {
    /// After a failed soak (or a failure between the switch and the end): the previous
    /// generation is started again if needed, proven healthy, and made to serve, route and
    /// generation in one transaction. `None` when there is nothing to switch back to.
    pub(super) async fn revert(&self) -> Result<Option<i64>, PipelineError> {
        let steps = self.target_steps().await?;
        let switch = steps
            .iter()
            .find(|s| s.step == Step::Switch && s.state == StepState::Succeeded);
        let Some(switch) = switch else {
            return Ok(None);
        };
        let switched: Switched = serde_json::from_value(switch.result.clone().unwrap_or_default())
            .map_err(|e| PipelineError::journal(Step::Switch, "result", e))?;
        let Some(prev) = switched.previous else {
            return Ok(None);
        };
        let intent = RevertIntent { to: prev.clone() };
        let version = self
            .store_retry(|| self.ctx.store.next_route_version())
            .await?;
        let probe_path = self.app.health.as_ref().map(|h| h.path.clone());
        // The previous generation's address is known only once it runs again (a restarted
        // container may get another ephemeral port): the route is built from the step's
        // result and written with it, in one transaction.
        let back_to = |r: &Reverted| {
            Some(GenerationSwitch {
                app: self.app.name.to_string(),
                forget: false,
                target: self.target.name().to_owned(),
                generation: Some((prev.deployment, prev.digest.clone(), prev.container.clone())),
                route: Some(RouteWrite {
                    version: r.version,
                    upstream: r.upstream.clone(),
                    container_id: prev.container.clone(),
                    deployment_id: prev.deployment,
                    standby: None,
                }),
            })
        };
        let reverted: Reverted = self
            .switching_step(Step::Revert, &intent, back_to, || async {
                self.engine()
                    .start_container(&prev.container)
                    .await
                    .map_err(|e| self.hide_paths(e))?;
                let bound = self
                    .engine()
                    .published(&prev.container, self.app.port())
                    .await?
                    .ok_or(Refusal::PreviousWithoutPort)?;
                if let Some(path) = &probe_path {
                    let probe =
                        self.http_probe(bound, path, Duration::from_secs(30), Default::default());
                    self.wait_healthy(&probe, &prev.container).await?;
                }
                Ok(Reverted {
                    upstream: bound.to_string(),
                    version,
                })
            })
            .await?;
        Ok(Some(reverted.version))
    }
}
