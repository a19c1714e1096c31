//! The blue-green steps that write the proxy's route together with the app's generation,
//! in the step's own transaction: `start` (the candidate on an ephemeral loopback port,
//! journaled as the upstream the route will name), `switch` (route and generation to the
//! candidate) and `retire` (the previous generation removed, the standby cleared).

use std::net::SocketAddr;

use crate::config::Ports;
use crate::engine::{Binding, Removed};
use crate::pipeline::plan::Placed;
use crate::pipeline::records::{
    Bound, Candidate, Previous, RetireIntent, Retired, StartIntent, Started, SwitchIntent, Switched,
};
use crate::pipeline::refusal::Refusal;
use crate::pipeline::{EngineRun, PipelineError, Step, error_chain};
use crate::registry::Resolved;
use crate::store::{GenerationSwitch, RouteWrite};

impl EngineRun<'_> {
    /// Starts the candidate and journals every loopback address the engine bound for its
    /// ports; the HTTP port's is the upstream the route will name. A replay starts it again
    /// (a no-op for a running container) and reads the same bindings back.
    pub(super) async fn start_published(
        &self,
        candidate: &Candidate,
    ) -> Result<SocketAddr, PipelineError> {
        let intent = StartIntent {
            container: candidate.id.clone(),
            publish: Some("127.0.0.1:0".into()),
            more_ports: self.app.ports.others().map(|p| p.key()).collect(),
        };
        let started: Started = self
            .step(Step::Start, &intent, || async {
                self.engine()
                    .start_container(&candidate.id)
                    .await
                    .map_err(|e| self.hide_paths(e))?;
                let all = self.engine().bindings(&candidate.id).await?;
                let bindings = on_loopback(&self.app.ports, &all.unwrap_or_default())?;
                let http = self.app.ports.http();
                let upstream = bindings
                    .iter()
                    .find(|b| b.container == http.container && b.protocol == http.protocol)
                    .map(|b| b.host.to_string())
                    .ok_or(Refusal::NoHostPort { port: http.key() })?;
                Ok(Started { upstream, bindings })
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
    pub(super) async fn switch_route(
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

    pub(super) async fn retire_previous(
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
}

/// Every port of the app bound on loopback, as the engine answered, in config order: a
/// port is ready to receive (TCP and UDP alike) once the engine holds its loopback socket,
/// which is known without dialing the container. A port the engine bound nowhere, or not
/// on loopback, is a failed start.
fn on_loopback(ports: &Ports, bound: &[Binding]) -> Result<Vec<Bound>, Refusal> {
    ports
        .iter()
        .map(|p| {
            bound
                .iter()
                .find(|b| {
                    b.container == p.container
                        && b.protocol == p.protocol
                        && b.host.ip().is_loopback()
                })
                .map(|b| Bound {
                    name: p.name.clone(),
                    container: p.container,
                    protocol: p.protocol,
                    host: b.host,
                })
                .ok_or_else(|| Refusal::NoHostPort { port: p.key() })
        })
        .collect()
}
