//! Blue-green on a remote engine: that host's `pier proxy --target NAME` serves the app,
//! and its loopback admin endpoint is out of Pier's reach. `applied` and `drain` read what
//! that proxy reports to Postgres instead (`proxy_reports`, written on change, with
//! NOTIFY), and wait on LISTEN within their deadlines: no polling.
//!
//! Every proxy of the target that is alive (holds its liveness lock) must have applied the
//! version, and the in-flight count of the old upstream is their sum: a second proxy
//! started beside the first (an upgrade) is waited for too, a dead one is not.

use std::time::Duration;

use tokio::time::Instant;

use super::proxy::APPLY_DEADLINE;
use crate::pipeline::plan::Placed;
use crate::pipeline::records::Drained;
use crate::pipeline::refusal::Refusal;
use crate::pipeline::{EngineRun, StepError};
use crate::store::{Channel, ProxyReport, StoreError};

fn store_err(e: sqlx::Error) -> StepError {
    StepError::Store(StoreError::from(e))
}

impl EngineRun<'_> {
    /// Waits until every live proxy of this run's target reports route `version` (or a
    /// later one) applied for the app; the time waited, in ms.
    pub(super) async fn remote_applied(&self, version: i64) -> Result<u64, StepError> {
        let started = Instant::now();
        let app = self.app.name.clone();
        let seen = self
            .wait_reports(APPLY_DEADLINE, |reports| {
                let lagging: Vec<String> = reports
                    .iter()
                    .filter_map(|r| {
                        let v = r.routes.get(app.as_str()).copied().unwrap_or(0);
                        (v < version).then(|| format!("{} serves route version {v}", r.proxy))
                    })
                    .collect();
                match (reports.is_empty(), lagging.is_empty()) {
                    (true, _) => Err(format!(
                        "no pier proxy for target {} reports what it serves",
                        self.target.name()
                    )),
                    (false, true) => Ok(()),
                    (false, false) => Err(lagging.join("; ")),
                }
            })
            .await;
        match seen {
            Ok(()) => Ok(started.elapsed().as_millis() as u64),
            Err(WaitError::Store(e)) => Err(e),
            Err(WaitError::Timeout(last)) => Err(Refusal::RemoteRouteNotApplied {
                target: self.target.name().to_owned(),
                version,
                secs: APPLY_DEADLINE.as_secs(),
                last,
            }
            .into()),
        }
    }

    /// Waits until no live proxy of the target has requests in flight on `old`, up to
    /// `timeout` (then the drain is recorded as timed out, as a local one is).
    pub(super) async fn remote_drained(
        &self,
        old: &str,
        timeout: Duration,
    ) -> Result<Drained, StepError> {
        let started = Instant::now();
        let mut first: Option<u64> = None;
        let res = self
            .wait_reports(timeout, |reports| {
                let n: u64 = reports.iter().filter_map(|r| r.in_flight.get(old)).sum();
                first.get_or_insert(n);
                if n == 0 { Ok(()) } else { Err(n) }
            })
            .await;
        let timed_out = match res {
            Ok(()) => false,
            Err(WaitError::Timeout(_)) => true,
            Err(WaitError::Store(e)) => return Err(e),
        };
        Ok(Drained {
            in_flight_at_switch: first.unwrap_or(0),
            waited_ms: started.elapsed().as_millis() as u64,
            timed_out,
        })
    }

    /// Reads the target's live reports now and after every NOTIFY about the target until
    /// `done` says so (`Ok`), or `within` has passed: then `done`'s last `Err`. A database
    /// that is away ends the wait as its last word too; the step's own retry takes over.
    async fn wait_reports<E>(
        &self,
        within: Duration,
        mut done: impl FnMut(&[ProxyReport]) -> Result<(), E>,
    ) -> Result<(), WaitError<E>> {
        let deadline = Instant::now() + within;
        let store = &self.ctx.store;
        let target = self.target.name();
        // Listening before the first read: a report written in between still wakes us.
        let mut listener = store
            .own_listener(Channel::ProxyReports)
            .await
            .map_err(|e| WaitError::Store(store_err(e)))?;
        loop {
            let reports = store
                .live_proxy_reports(target)
                .await
                .map_err(|e| WaitError::Store(StepError::Store(e)))?;
            let why = match done(&reports) {
                Ok(()) => return Ok(()),
                Err(why) => why,
            };
            loop {
                tokio::select! {
                    msg = listener.try_recv() => match msg {
                        Ok(Some(n)) if n.payload() == target => break,
                        Ok(Some(_)) => {}
                        Ok(None) => {
                            listener = store
                                .own_listener(Channel::ProxyReports)
                                .await
                                .map_err(|e| WaitError::Store(store_err(e)))?;
                            break;
                        }
                        Err(e) => return Err(WaitError::Store(store_err(e))),
                    },
                    _ = tokio::time::sleep_until(deadline) => return Err(WaitError::Timeout(why)),
                }
            }
        }
    }
}

/// Why [`EngineRun::wait_reports`] ended without its condition.
pub(super) enum WaitError<E> {
    Timeout(E),
    Store(StepError),
}
