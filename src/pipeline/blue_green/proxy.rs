//! The waits on `pier proxy`: `applied` (it serves the route version the switch wrote) and
//! `drain` (requests in flight on the old generation finish), asked of its admin endpoint
//! on this host, or of what another host's proxy reports to Postgres (`remote.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::pipeline::records::{Applied, AppliedIntent, DrainIntent, Drained};
use crate::pipeline::refusal::Refusal;
use crate::pipeline::{EngineRun, PipelineError, Step, StepError, error_chain};

/// How long the proxy gets to apply a route the pipeline wrote.
pub(super) const APPLY_DEADLINE: Duration = Duration::from_secs(15);

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
    /// Waits until the proxy reports route `version` (or a later one) applied for the app.
    pub(super) async fn wait_applied(&self, step: Step, version: i64) -> Result<(), PipelineError> {
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
    pub(super) async fn drain(&self, old: &str) -> Result<Drained, PipelineError> {
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

    /// Waits (within [`APPLY_DEADLINE`]) until the proxy serves route `version` or later.
    pub(in crate::pipeline) async fn proxy_applied(&self, version: i64) -> Result<u64, StepError> {
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
