//! Several services per app (`[apps.services.<name>]`): one generation is every service's
//! container, at the one digest the push named. The primary service runs the steps it
//! always ran; each further service runs its own `volumes`, `create`, `connect`, `start`
//! and `health` through the same journal runner, keyed by its name (`create@worker` is its
//! crash point), right after the primary's. `stop_old`, `switch`, `retire` and `rollback`
//! are the generation's: they stop, retire or remove every service's containers, so the
//! services switch together or not at all.
//!
//! Invariants:
//! - every service's container is journaled before it exists and labelled with its
//!   service; a replay adopts the container of its own service only, never a sibling's;
//! - nothing is started before every service's container is created, and nothing is
//!   switched before every service is healthy;
//! - a failure anywhere removes every candidate and restarts the whole old generation.

use std::time::Duration;

use tokio::time::Instant;

use super::container::Publishing;
use super::records::{Candidate, Healthy, Probe, ServiceHealthIntent, ServiceProbe, VerifiedImage};
use super::refusal::Refusal;
use super::service_images::ServiceImage;
use super::{EngineRun, PipelineError, Run, ServiceName, Step, StepError};
use crate::config::AppConfig;

/// How often a settling service is looked at.
const SETTLE_POLL: Duration = Duration::from_millis(100);
/// A service whose image has a HEALTHCHECK gets this long to report healthy.
const HEALTHCHECK_TIMEOUT_MS: u64 = 120_000;

impl<'a> EngineRun<'a> {
    /// The run as the further service `svc` sees it: the same deployment, lease and
    /// journal; its own settings, container and journal key.
    pub(super) fn for_service(&self, svc: &'a AppConfig) -> EngineRun<'a> {
        Run {
            ctx: self.ctx,
            owner: self.owner,
            dep: self.dep,
            app: svc,
            // A loaded archive is the primary's image only: a service with its own
            // repository pulls it (see `service_images.rs`).
            import: if self.app.own_image(svc) {
                None
            } else {
                self.import.clone()
            },
            service: ServiceName::Named(&svc.contained.service),
            target: self.target,
            targets: self.targets,
        }
    }

    fn service_runs(&self) -> impl Iterator<Item = EngineRun<'a>> + '_ {
        self.app.services.iter().map(|s| self.for_service(s))
    }

    /// Every further service's volumes, container and shared networks, in config order,
    /// after the primary's: the candidates, in that order.
    pub(super) async fn create_services(
        &self,
        images: &[ServiceImage],
    ) -> Result<Vec<Candidate>, PipelineError> {
        let mut out = Vec::new();
        for (run, image) in self.service_runs().zip(images) {
            let volumes = run.volumes().await?;
            // Only the primary's ports are the strategy's to publish; a further service
            // publishes what its own config says (nothing: its ports have no address).
            let candidate = run
                .create(&image.resolved, Publishing::Fixed, &volumes)
                .await?;
            run.connect(&candidate).await?;
            out.push(candidate);
        }
        Ok(out)
    }

    pub(super) async fn start_services(&self, others: &[Candidate]) -> Result<(), PipelineError> {
        for (run, candidate) in self.service_runs().zip(others) {
            run.start(candidate).await?;
        }
        Ok(())
    }

    /// Each further service's health, journaled under its name; the first that fails
    /// fails the generation.
    pub(super) async fn services_health(
        &self,
        others: &[Candidate],
        images: &[ServiceImage],
    ) -> Result<Vec<String>, PipelineError> {
        let mut out = Vec::new();
        for ((run, candidate), image) in self.service_runs().zip(others).zip(images) {
            let healthy = run.service_health(candidate, &image.image).await?;
            let own = if self.app.own_image(run.app) {
                format!(" {}@{}", run.app.image, image.resolved.digest)
            } else {
                String::new()
            };
            out.push(format!(
                "{}{own} in {} ({healthy})",
                run.service.key(),
                candidate.name
            ));
        }
        Ok(out)
    }

    async fn service_health(
        &self,
        candidate: &Candidate,
        image: &VerifiedImage,
    ) -> Result<Healthy, PipelineError> {
        let probe = if image.has_healthcheck {
            ServiceProbe::Healthcheck {
                timeout_ms: HEALTHCHECK_TIMEOUT_MS,
            }
        } else {
            ServiceProbe::Settle {
                settle_ms: self.app.settle.as_millis() as u64,
            }
        };
        let name = self.service.key();
        let intent = ServiceHealthIntent {
            container: candidate.id.clone(),
            probe,
        };
        self.step(Step::Health, &intent, || async {
            let res = match intent.probe {
                ServiceProbe::Healthcheck { timeout_ms } => {
                    self.wait_healthy(&Probe::Healthcheck { timeout_ms }, &candidate.id)
                        .await
                }
                ServiceProbe::Settle { settle_ms } => {
                    self.settled(&candidate.id, Duration::from_millis(settle_ms))
                        .await
                }
            };
            // The failure names the service: a generation has several.
            res.map_err(|e| match e {
                StepError::Refused(r) => StepError::InService {
                    service: name.to_string(),
                    source: Box::new(r.into()),
                },
                other => other,
            })
        })
        .await
    }

    /// Running for the whole settle window, never restarted: a process that dies at
    /// start-up (a bad command, a missing setting) has died by then.
    async fn settled(&self, id: &str, settle: Duration) -> Result<Healthy, StepError> {
        let started = Instant::now();
        let deadline = started + settle;
        let mut probes = 0u32;
        loop {
            probes += 1;
            let Some(state) = self.engine().inspect_container(id).await? else {
                return Err(Refusal::ContainerGone.into());
            };
            if !state.running || state.restarts > 0 {
                return Err(Refusal::ExitedWhileSettling {
                    status: state.status,
                    exit_code: state.exit_code,
                    settle_ms: settle.as_millis(),
                }
                .into());
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Healthy {
                    probes,
                    elapsed_ms: started.elapsed().as_millis() as u64,
                    detail: format!(
                        "still running after its {} ms settle window",
                        settle.as_millis()
                    ),
                });
            }
            tokio::time::sleep_until(deadline.min(now + SETTLE_POLL)).await;
        }
    }
}

impl EngineRun<'_> {
    /// Whether every further service has a running container of deployment `serving` (the
    /// serving generation), at the digest `others` resolved for it. Not knowing counts as
    /// "no".
    pub(super) async fn services_running(
        &self,
        serving: uuid::Uuid,
        others: &[crate::registry::Resolved],
    ) -> bool {
        if self.app.services.is_empty() {
            return true;
        }
        let dep = serving.to_string();
        let all = match self
            .engine()
            .managed_containers(Some(&self.app.name), Some(&dep))
            .await
        {
            Ok(all) => all,
            Err(e) => {
                tracing::warn!(error = %super::error_chain(&e), "cannot list the serving containers; deploying anyway");
                return false;
            }
        };
        self.app.services.iter().zip(others).all(|(s, r)| {
            all.iter().any(|c| {
                c.running
                    && c.label(crate::engine::LABEL_SERVICE) == Some(&s.contained.service)
                    && c.label(crate::engine::LABEL_DIGEST) == Some(&r.digest)
            })
        })
    }
}
