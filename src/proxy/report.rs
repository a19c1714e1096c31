//! What this proxy serves, written to Postgres (`proxy_reports`) for the blue-green steps
//! of a remote target, which cannot reach the loopback admin endpoint on this host: per
//! app the route version applied, per upstream the requests in flight.
//!
//! Written on change only, and at most once per [`REPORT_EVERY`]: when a new table is
//! installed, and while requests are still in flight on an upstream no route serves any
//! more (a drain the pipeline waits on), until they are done. An idle proxy, or one under
//! steady load between deployments, writes nothing. The row counts only while this
//! process holds the liveness lock of the connection it writes on (see
//! `store/proxy_reports.rs`), so a proxy that died is never waited for.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::backoff::Backoff;
use crate::error::error_chain;
use crate::store::{ProxyReport, Store};

/// The least time between two reports: a bound on the writes of a busy proxy, and the
/// most a drain's end is seen late.
const REPORT_EVERY: Duration = Duration::from_millis(50);

impl Shared {
    /// What this proxy serves now, and whether a drain is under way (requests in flight
    /// on an upstream that is no route's serving generation).
    fn report(&self, proxy: &str) -> (ProxyReport, bool) {
        let table = self.table();
        let serving: Vec<&str> = table
            .entries()
            .filter_map(|e| e.upstream.as_deref())
            .collect();
        let routes = table
            .entries()
            .filter(|e| e.version > 0)
            .map(|e| (e.app.clone(), e.version))
            .collect();
        let in_flight: BTreeMap<String, u64> = self
            .counters
            .snapshot()
            .into_iter()
            .map(|(upstream, (n, _served))| (upstream, n))
            .collect();
        let draining = in_flight
            .iter()
            .any(|(u, n)| *n > 0 && !serving.contains(&u.as_str()));
        let report = ProxyReport {
            proxy: proxy.to_owned(),
            routes,
            in_flight,
        };
        (report, draining)
    }
}

pub(crate) async fn serve(store: Store, shared: Arc<Shared>, shutdown: CancellationToken) {
    let target = shared.config.proxy.target.clone();
    let proxy = super::probe::identity(&target);
    // This process's liveness lock: random, so that proxies never share one.
    let holder = i64::from_ne_bytes(
        uuid::Uuid::new_v4().as_bytes()[..8]
            .try_into()
            .expect("8 bytes"),
    );
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    while !shutdown.is_cancelled() {
        let mut conn = match store.report_connection(holder, &target).await {
            Ok(Some(c)) => c,
            Ok(None) => {
                tracing::warn!("proxy's liveness lock is held by another session; retrying");
                if !backoff.wait_or(&shutdown).await {
                    return;
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "proxy cannot report what it serves yet; retrying");
                if !backoff.wait_or(&shutdown).await {
                    return;
                }
                continue;
            }
        };
        backoff.reset();
        // Written at once on every (re)connection: the row may be missing or stale.
        let mut last: Option<ProxyReport> = None;
        let mut written = Instant::now()
            .checked_sub(REPORT_EVERY)
            .unwrap_or_else(Instant::now);
        loop {
            tokio::time::sleep_until(written + REPORT_EVERY).await;
            let (report, draining) = shared.report(&proxy);
            if last.as_ref() != Some(&report) {
                if let Err(e) = conn.write(&target, &report).await {
                    tracing::warn!(error = %error_chain(&e), "proxy cannot write its report; reconnecting");
                    break;
                }
                written = Instant::now();
                last = Some(report);
            }
            tokio::select! {
                _ = shared.changed.notified() => {}
                _ = tokio::time::sleep(REPORT_EVERY), if draining => {}
                _ = shutdown.cancelled() => {
                    let _ = conn.remove().await;
                    return;
                }
            }
        }
    }
}
