//! `health`: the candidate proves itself before any strategy switches to it, over HTTP on
//! its published port (on a remote engine, by that host's `pier proxy`: `remote.rs`), by
//! its image's HEALTHCHECK, or by running at all.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::plan::Placed;
use super::records::{Candidate, Healthy, Probe, VerifiedImage};
use super::refusal::Refusal;
use super::{EngineRun, PipelineError, Step, StepError};

mod remote;
use crate::engine::Health;
use crate::probe::{NotHealthy, next_probe_delay};

impl std::fmt::Display for Healthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} after {} probe(s), {} ms",
            self.detail, self.probes, self.elapsed_ms
        )
    }
}

/// An image HEALTHCHECK changes state only at its own interval: no point asking the engine
/// every few milliseconds.
const MIN_HEALTHCHECK_DELAY: Duration = Duration::from_millis(50);

pub use crate::probe::probe_client;

impl EngineRun<'_> {
    /// Whether this run's containers publish where Pier cannot reach them: on another
    /// host's loopback, which only that host's `pier proxy --target` probes. `local` is
    /// where Pier always probed, whatever `server.docker_host` says (as config checks).
    pub(super) fn probes_elsewhere(&self) -> bool {
        self.target.name() != crate::config::LOCAL && !self.target.is_local()
    }

    /// How to judge the candidate: over HTTP on `at` (a blue-green candidate's ephemeral
    /// port) or the app's fixed `publish` address.
    pub(super) fn probe(&self, at: Option<SocketAddr>) -> Probe {
        match (&self.app.health, at.or(self.app.publish())) {
            (Some(h), Some(addr)) => self.http_probe(addr, &h.path, h.timeout, h.json.clone()),
            _ => Probe::Running,
        }
    }

    /// An HTTP probe of `addr` on the host of this run's engine.
    pub(super) fn http_probe(
        &self,
        addr: SocketAddr,
        path: &str,
        timeout: Duration,
        json: BTreeMap<String, String>,
    ) -> Probe {
        Probe::Http {
            url: format!("http://{addr}{path}"),
            timeout_ms: timeout.as_millis() as u64,
            json,
            via: self
                .probes_elsewhere()
                .then(|| self.target.name().to_owned()),
        }
    }

    pub(super) async fn health(
        &self,
        candidate: &Candidate,
        image: &VerifiedImage,
        at: Option<SocketAddr>,
    ) -> Result<Healthy, PipelineError> {
        let mut probe = self.probe(at);
        if probe == Probe::Running && image.has_healthcheck {
            probe = Probe::Healthcheck {
                timeout_ms: 120_000,
            };
        }
        self.step(Step::Health, &probe, || {
            self.wait_healthy(&probe, &candidate.id)
        })
        .await
    }

    pub(super) async fn wait_healthy(&self, probe: &Probe, id: &str) -> Result<Healthy, StepError> {
        match probe {
            Probe::Http {
                url,
                timeout_ms,
                json,
                via: Some(target),
            } => {
                let timeout = Duration::from_millis(*timeout_ms);
                self.remote_healthy(target, id, url, json, timeout).await
            }
            Probe::Http {
                url,
                timeout_ms,
                json,
                via: None,
            } => {
                let timeout = Duration::from_millis(*timeout_ms);
                let beside = || async { self.still_running(id).await.map(drop) };
                match crate::probe::until_healthy(&self.ctx.http, url, json, timeout, beside).await
                {
                    Ok(p) => Ok(Healthy {
                        probes: p.probes,
                        elapsed_ms: p.elapsed_ms,
                        detail: p.detail,
                    }),
                    Err(NotHealthy::Check(e)) => Err(e),
                    Err(NotHealthy::TimedOut { probed, timeout }) => {
                        Err(Refusal::NotHealthyWithin {
                            timeout,
                            last: probed.detail,
                        }
                        .into())
                    }
                }
            }
            Probe::Healthcheck { timeout_ms } => {
                self.engine_healthy(Some(Duration::from_millis(*timeout_ms)), id)
                    .await
            }
            Probe::Running => self.engine_healthy(None, id).await,
        }
    }

    /// The candidate as the engine sees it, while it runs and has not restarted: a
    /// container that exited is not waited on for the rest of the timeout.
    pub(super) async fn still_running(
        &self,
        id: &str,
    ) -> Result<crate::engine::ContainerFacts, StepError> {
        let Some(state) = self.engine().inspect_container(id).await? else {
            return Err(Refusal::CandidateGone.into());
        };
        if !state.running || state.restarts > 0 {
            return Err(Refusal::ExitedBeforeHealthy {
                status: state.status,
                exit_code: state.exit_code,
            }
            .into());
        }
        Ok(state)
    }

    /// The image's HEALTHCHECK (`Some(timeout)`) or, without one, that it keeps running.
    async fn engine_healthy(
        &self,
        healthcheck: Option<Duration>,
        id: &str,
    ) -> Result<Healthy, StepError> {
        let started = Instant::now();
        let timeout = healthcheck.unwrap_or(Duration::from_secs(10));
        let mut probes = 0u32;
        loop {
            probes += 1;
            let state = self.still_running(id).await?;
            let done = match healthcheck {
                None => Some("running (no health check configured)".to_owned()),
                Some(_) => match state.health {
                    Health::Healthy => Some("image HEALTHCHECK reports healthy".to_owned()),
                    Health::Unhealthy => {
                        return Err(Refusal::HealthcheckUnhealthy.into());
                    }
                    _ => None,
                },
            };
            if let Some(detail) = done {
                return Ok(Healthy {
                    probes,
                    elapsed_ms: started.elapsed().as_millis() as u64,
                    detail,
                });
            }
            let delay = next_probe_delay(started.elapsed(), MIN_HEALTHCHECK_DELAY);
            if started.elapsed() + delay > timeout {
                return Err(Refusal::NotHealthyWithin {
                    timeout,
                    last: "image HEALTHCHECK still starting".into(),
                }
                .into());
            }
            tokio::time::sleep(delay).await;
        }
    }
}
