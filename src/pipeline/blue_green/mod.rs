//! Strategy `blue-green`: the new generation starts beside the old one on an ephemeral
//! loopback port, proves itself, and only then does Pier's proxy switch to it.
//!
//! resolve, pull, verify, create, start (journals the port the engine bound), health,
//! switch (route and generation in one transaction), applied (the proxy serves the new
//! route), drain (requests in flight on the old generation finish), stop_old (unless the
//! old one stays running as the proxy's standby), soak (the new generation is watched),
//! retire. A soak that fails switches traffic back (`revert.rs`), removes the candidate and
//! quarantines its digest. Every step goes through the journal's one runner, with its
//! crash points; every wait has a deadline.
//!
//! Here the strategy and its order of steps; `switch.rs` the steps that write the proxy's
//! route with the generation (start on an ephemeral port, switch, retire), `proxy.rs` the
//! waits on the proxy (applied, drain; `remote.rs` for another host's proxy), `soak.rs`
//! the soak.

use std::net::SocketAddr;

use super::container::Publishing;
use super::records::{Candidate, OldGeneration, Previous, Switched, VerifiedImage};
use super::replace::{Made, Replace};
use super::{EngineRun, PipelineError, Step};
use crate::config::RouteConfig;
use crate::engine::Stopped;
use crate::registry::Resolved;

mod proxy;
mod remote;
mod revert;
mod soak;
mod switch;

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

    /// Ephemeral loopback ports beside the old generation; clients reach the HTTP one
    /// through the proxy only.
    fn publishing(&self) -> Publishing {
        Publishing::EphemeralLoopback
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
        image: &VerifiedImage,
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
}
