//! `soak`: the new generation, serving, is watched for the route's `soak` before the old
//! one is retired; enough failed checks in a row fail the step, and the deployment's undo
//! switches traffic back.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::pipeline::records::{Candidate, Probe, SoakIntent, Soaked};
use crate::pipeline::refusal::Refusal;
use crate::pipeline::{EngineRun, PipelineError, Step, StepError};

/// How often the soak looks at the new generation.
const SOAK_EVERY: Duration = Duration::from_secs(1);

impl EngineRun<'_> {
    /// Watches the new generation for the route's `soak`: it must keep running, without
    /// restarts, and (with a health path) keep answering. `soak_failures` failed checks in
    /// a row fail the step, which switches traffic back.
    pub(super) async fn soak(
        &self,
        candidate: &Candidate,
        upstream: SocketAddr,
    ) -> Result<(), PipelineError> {
        let route = self.route().clone();
        let probe = self.probe(Some(upstream));
        let intent = SoakIntent {
            container: candidate.id.clone(),
            soak_ms: route.soak.as_millis() as u64,
            failures: route.soak_failures,
        };
        let _: Soaked = self
            .step(Step::Soak, &intent, || async {
                let until = Instant::now() + route.soak;
                let mut ticker = tokio::time::interval(SOAK_EVERY);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let (mut checks, mut failures, mut in_a_row) = (0u32, 0u32, 0u32);
                while Instant::now() < until {
                    ticker.tick().await;
                    checks += 1;
                    match self.soak_check(&probe, &candidate.id).await? {
                        None => in_a_row = 0,
                        Some(why) => {
                            failures += 1;
                            in_a_row += 1;
                            tracing::warn!(reason = %why, in_a_row, "soak check failed");
                            if in_a_row >= route.soak_failures {
                                return Err(Refusal::SoakFailed { why, in_a_row }.into());
                            }
                        }
                    }
                }
                Ok(Soaked { checks, failures })
            })
            .await?;
        Ok(())
    }

    /// One soak check: `None` when all is well, else why not.
    async fn soak_check(&self, probe: &Probe, id: &str) -> Result<Option<String>, StepError> {
        let Some(state) = self.engine().inspect_container(id).await? else {
            return Ok(Some("the container is gone".into()));
        };
        if !state.running {
            return Ok(Some(format!(
                "the container exited (exit code {})",
                state.exit_code.map_or("unknown".into(), |c| c.to_string())
            )));
        }
        if state.restarts > 0 {
            return Ok(Some(format!(
                "the container restarted {} time(s)",
                state.restarts
            )));
        }
        if let Probe::Http {
            url,
            json,
            via: Some(target),
            ..
        } = probe
        {
            // That host's proxy sends the GETs: a fresh request for every check.
            return match self
                .remote_check(target, id, url, json, Duration::from_secs(2))
                .await
            {
                Ok(_) => Ok(None),
                Err(StepError::Refused(why)) => Ok(Some(why.to_string())),
                Err(e) => Err(e),
            };
        }
        if let Probe::Http { url, .. } = probe {
            match self
                .ctx
                .http
                .get(url)
                .timeout(Duration::from_secs(2))
                .send()
                .await
            {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => return Ok(Some(format!("GET {url} answered {}", r.status().as_u16()))),
                Err(_) => return Ok(Some(format!("GET {url}: no answer"))),
            }
        }
        Ok(None)
    }
}
