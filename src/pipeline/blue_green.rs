//! Strategy `blue-green`: the new generation starts beside the old one on an ephemeral
//! loopback port, proves itself, and only then does Pier's proxy switch to it.
//!
//! resolve, pull, verify, create, start (journals the port the engine bound), health,
//! switch (route and generation in one transaction), applied (the proxy serves the new
//! route), drain (requests in flight on the old generation finish), stop_old (unless the
//! old one stays running as the proxy's standby), soak (the new generation is watched),
//! retire. A soak that fails switches traffic back (`revert`), removes the candidate and
//! quarantines its digest. Every step goes through the journal's one runner, with its
//! crash points; every wait has a deadline.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use super::plan::Placed;
use super::records::{
    Applied, AppliedIntent, Candidate, DrainIntent, Drained, OldGeneration, Previous, Probe,
    RetireIntent, Retired, RevertIntent, Reverted, SoakIntent, Soaked, StartIntent, Started,
    SwitchIntent, Switched,
};
use super::refusal::Refusal;
use super::replace::{Made, Replace};
use super::{EngineRun, PipelineError, Step, StepError, error_chain};
use crate::backoff::Backoff;
use crate::config::{AppConfig, RouteConfig};
use crate::engine::{Removed, Stopped};
use crate::registry::Resolved;
use crate::store::{GenerationSwitch, RouteWrite, StepState};

mod remote;

/// How long the proxy gets to apply a route the pipeline wrote.
const APPLY_DEADLINE: Duration = Duration::from_secs(15);
/// How often the soak looks at the new generation.
const SOAK_EVERY: Duration = Duration::from_secs(1);

/// Strategy `blue-green` on one engine behind its `pier proxy`.
pub(super) struct BlueGreen;

/// A blue-green generation that serves and passed its soak, its predecessor not yet retired.
pub(super) struct Served {
    candidate: Candidate,
    switched: Switched,
    upstream: SocketAddr,
    note: String,
}

impl Replace for BlueGreen {
    type Serving = Served;

    /// An ephemeral loopback port beside the old generation; clients reach it through the
    /// proxy only.
    fn publish(&self, _: &AppConfig) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// The config gives a blue-green app no further services: the candidate is the
    /// generation.
    async fn serve(&self, run: &EngineRun<'_>, made: Made) -> Result<Served, PipelineError> {
        run.serve_blue_green(&made.resolved, &made.image, made.candidate)
            .await
    }

    /// The soak passed: the previous generation is removed, and the proxy's standby is
    /// cleared in the same transaction as the step's result.
    async fn retire(
        &self,
        run: &EngineRun<'_>,
        served: &Served,
    ) -> Result<Vec<String>, PipelineError> {
        run.retire_previous(&served.candidate, &served.switched, served.upstream)
            .await
    }

    async fn revert(&self, run: &EngineRun<'_>) -> Result<Option<i64>, PipelineError> {
        run.revert().await
    }

    fn said_alone(&self, served: &Served, _: &Resolved) -> String {
        served.note.clone()
    }

    fn said_among(&self, served: &Served, target: &str) -> String {
        format!("{target}: {}", served.note)
    }
}

/// What the proxy's admin endpoint says.
#[derive(Debug, Deserialize)]
struct ProxyView {
    routes: Vec<ProxyRoute>,
    upstreams: BTreeMap<String, ProxyUpstream>,
}

#[derive(Debug, Deserialize)]
struct ProxyRoute {
    app: String,
    version: i64,
}

#[derive(Debug, Deserialize)]
struct ProxyUpstream {
    in_flight: u64,
}

impl EngineRun<'_> {
    fn route(&self) -> &RouteConfig {
        self.app
            .route
            .as_ref()
            .expect("config checks that a blue-green app has a route")
    }

    /// Everything from the candidate's start to the end of its soak: afterwards the new
    /// generation serves through this engine's proxy and has proven itself, and the old
    /// one is stopped (or kept as the standby) but not yet removed, so a revert still has
    /// it. A rollout across engines retires only once every engine got here.
    async fn serve_blue_green(
        &self,
        resolved: &Resolved,
        image: &super::records::VerifiedImage,
        candidate: Candidate,
    ) -> Result<Served, PipelineError> {
        let upstream = self.start_published(&candidate).await?;
        let probe = self.health(&candidate, image, Some(upstream)).await?;
        let switched = self.switch_route(resolved, &candidate, upstream).await?;
        self.wait_applied(Step::Applied, switched.version).await?;
        let drained = match switched.previous.as_ref().and_then(|p| p.upstream.clone()) {
            Some(old) => Some(self.drain(&old).await?),
            None => None,
        };
        if let Some(prev) = &switched.previous
            && !self.route().keep_previous_running
        {
            self.stop_previous(prev).await?;
        }
        if !self.route().soak.is_zero() {
            self.soak(&candidate, upstream).await?;
        }
        let mut note = format!(
            "{} serves through the proxy from {} ({probe})",
            resolved.digest, candidate.name
        );
        if let Some(d) = drained {
            note.push_str(&format!(
                "; drained {} request(s) in {} ms",
                d.in_flight_at_switch, d.waited_ms
            ));
        }
        Ok(Served {
            candidate,
            switched,
            upstream,
            note,
        })
    }

    /// Starts the candidate and journals the loopback address the engine bound for it.
    async fn start_published(&self, candidate: &Candidate) -> Result<SocketAddr, PipelineError> {
        let intent = StartIntent {
            container: candidate.id.clone(),
            publish: Some("127.0.0.1:0".into()),
        };
        let started: Started = self
            .step(Step::Start, &intent, || async {
                self.engine()
                    .start_container(&candidate.id)
                    .await
                    .map_err(|e| self.hide_paths(e))?;
                let bound = self
                    .engine()
                    .published(&candidate.id, self.app.port)
                    .await?
                    .ok_or(Refusal::NoHostPort {
                        port: self.app.port,
                    })?;
                Ok(Started {
                    upstream: bound.to_string(),
                })
            })
            .await?;
        started.upstream.parse().map_err(|_| PipelineError::Failed {
            step: Step::Start,
            source: Refusal::BadUpstream {
                upstream: started.upstream.clone(),
            }
            .into(),
        })
    }

    /// The proxy's route and the app's generation change together, in the step's own
    /// transaction. The route version is drawn first and journaled, so `applied` waits for
    /// exactly this write.
    async fn switch_route(
        &self,
        r: &Resolved,
        candidate: &Candidate,
        upstream: SocketAddr,
    ) -> Result<Switched, PipelineError> {
        // What serves now is observed, not derived from config: it is recorded in the
        // result, never in the intent, so a replay after the commit (when the candidate
        // itself serves) finds the intent unchanged.
        let previous = self.previous_generation(&candidate.id).await?;
        let intent = SwitchIntent {
            container: candidate.id.clone(),
            digest: r.digest.to_string(),
            upstream: Some(upstream.to_string()),
        };
        let version = self
            .store_retry(|| self.ctx.store.next_route_version())
            .await?;
        let standby = previous
            .as_ref()
            .filter(|_| self.route().keep_previous_running)
            .and_then(|p| p.upstream.clone());
        let change = GenerationSwitch {
            app: self.app.name.to_string(),
            forget: false,
            target: self.target.name().to_owned(),
            generation: Some((self.dep.id, r.digest.to_string(), candidate.id.clone())),
            route: Some(RouteWrite {
                version,
                upstream: upstream.to_string(),
                container_id: candidate.id.clone(),
                deployment_id: self.dep.id,
                standby,
            }),
        };
        self.switching_step(
            Step::Switch,
            &intent,
            |_| Some(change.clone()),
            || async {
                Ok(Switched {
                    version,
                    upstream: upstream.to_string(),
                    previous: previous.clone(),
                })
            },
        )
        .await
    }

    /// The generation that serves now (not this deployment's candidate), with its route.
    async fn previous_generation(
        &self,
        candidate: &str,
    ) -> Result<Option<Previous>, PipelineError> {
        let generation = self
            .store_retry(|| {
                self.ctx
                    .store
                    .generation(&self.app.name, self.target.name())
            })
            .await?;
        let route = self
            .store_retry(|| self.ctx.store.route(&self.app.name, self.target.name()))
            .await?;
        Ok(generation
            .filter(|g| g.container_id != candidate)
            .map(|g| Previous {
                upstream: route
                    .filter(|r| r.container_id == g.container_id)
                    .map(|r| r.upstream),
                deployment: g.deployment_id,
                digest: g.digest,
                container: g.container_id,
            }))
    }

    /// Waits until the proxy reports route `version` (or a later one) applied for the app.
    async fn wait_applied(&self, step: Step, version: i64) -> Result<(), PipelineError> {
        let intent = AppliedIntent { version };
        let _: Applied = self
            .step(step, &intent, || async {
                let waited_ms = self.proxy_applied(version).await?;
                Ok(Applied { version, waited_ms })
            })
            .await?;
        Ok(())
    }

    async fn proxy_view(&self) -> Result<ProxyView, Refusal> {
        let url = format!("http://{}/routes", self.ctx.proxy_admin);
        let unreachable = |e: reqwest::Error| Refusal::ProxyAdmin {
            url: url.clone(),
            cause: error_chain(&e),
        };
        let resp = self
            .ctx
            .http
            .get(&url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .map_err(unreachable)?;
        resp.json::<ProxyView>().await.map_err(unreachable)
    }

    /// New requests already go to the new generation; this waits until the ones in flight
    /// on the old one are done, up to the route's `drain_timeout`.
    async fn drain(&self, old: &str) -> Result<Drained, PipelineError> {
        let intent = DrainIntent {
            upstream: old.to_owned(),
        };
        let timeout = self.route().drain_timeout;
        self.step(Step::Drain, &intent, || async {
            if self.probes_elsewhere() {
                return self.remote_drained(old, timeout).await;
            }
            let started = Instant::now();
            let mut backoff = Backoff::local_probe().within(timeout);
            let mut first: Option<u64> = None;
            loop {
                let in_flight = self
                    .proxy_view()
                    .await?
                    .upstreams
                    .get(old)
                    .map_or(0, |u| u.in_flight);
                let at_switch = *first.get_or_insert(in_flight);
                if in_flight == 0 || !backoff.wait().await {
                    return Ok(Drained {
                        in_flight_at_switch: at_switch,
                        waited_ms: started.elapsed().as_millis() as u64,
                        timed_out: in_flight > 0,
                    });
                }
            }
        })
        .await
    }

    /// The old generation, drained, is stopped but kept: a failed soak starts it again.
    async fn stop_previous(&self, prev: &Previous) -> Result<(), PipelineError> {
        let intent = OldGeneration {
            running: vec![prev.container.clone()],
            ..OldGeneration::default()
        };
        let _: OldGeneration = self
            .step(Step::StopOld, &intent, || async {
                match self
                    .engine()
                    .stop_container(&prev.container, self.app.stop_timeout)
                    .await?
                {
                    Stopped::Stopped | Stopped::WasNotRunning | Stopped::Gone => {}
                }
                Ok(intent.clone())
            })
            .await?;
        Ok(())
    }

    /// Watches the new generation for the route's `soak`: it must keep running, without
    /// restarts, and (with a health path) keep answering. `soak_failures` failed checks in
    /// a row fail the step, which switches traffic back.
    async fn soak(&self, candidate: &Candidate, upstream: SocketAddr) -> Result<(), PipelineError> {
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

    async fn retire_previous(
        &self,
        candidate: &Candidate,
        switched: &Switched,
        upstream: SocketAddr,
    ) -> Result<Vec<String>, PipelineError> {
        let containers: Vec<String> = switched
            .previous
            .iter()
            .map(|p| p.container.clone())
            .collect();
        let intent = RetireIntent { containers };
        let version = self
            .store_retry(|| self.ctx.store.next_route_version())
            .await?;
        let change = GenerationSwitch {
            app: self.app.name.to_string(),
            forget: false,
            target: self.target.name().to_owned(),
            generation: None,
            route: Some(RouteWrite {
                version,
                upstream: upstream.to_string(),
                container_id: candidate.id.clone(),
                deployment_id: self.dep.id,
                standby: None,
            }),
        };
        let retired: Retired = self
            .switching_step(
                Step::Retire,
                &intent,
                |_| Some(change.clone()),
                || async {
                    let mut r = Retired::default();
                    for id in &intent.containers {
                        match self.engine().remove_container(id).await {
                            Ok(Removed::Removed) => r.removed.push(id.clone()),
                            Ok(Removed::AlreadyGone) => r.already_gone.push(id.clone()),
                            Err(e) => r.warnings.push(format!("remove {id}: {}", error_chain(&e))),
                        }
                    }
                    Ok(r)
                },
            )
            .await?;
        Ok(retired.warnings)
    }

    /// After a failed soak (or a failure between the switch and the end): the previous
    /// generation is started again if needed, proven healthy, and made to serve, route and
    /// generation in one transaction. `None` when there is nothing to switch back to.
    async fn revert(&self) -> Result<Option<i64>, PipelineError> {
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
                    .published(&prev.container, self.app.port)
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

    /// Waits (within [`APPLY_DEADLINE`]) until the proxy serves route `version` or later.
    pub(super) async fn proxy_applied(&self, version: i64) -> Result<u64, StepError> {
        if self.probes_elsewhere() {
            // That host's proxy, through what it reports to Postgres (`remote.rs`).
            return self.remote_applied(version).await;
        }
        let started = Instant::now();
        let mut backoff = Backoff::local_probe().within(APPLY_DEADLINE);
        loop {
            let last = match self.proxy_view().await {
                Ok(v) => {
                    let applied = v
                        .routes
                        .iter()
                        .find(|r| r.app == self.app.name)
                        .map_or(0, |r| r.version);
                    if applied >= version {
                        return Ok(started.elapsed().as_millis() as u64);
                    }
                    format!("the proxy serves route version {applied}")
                }
                Err(e) => e.to_string(),
            };
            if !backoff.wait().await {
                return Err(Refusal::RouteNotApplied {
                    version,
                    secs: APPLY_DEADLINE.as_secs(),
                    last,
                }
                .into());
            }
        }
    }
}
