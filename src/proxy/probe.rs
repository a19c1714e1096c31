//! Health probes for the pipeline, on this proxy's host: a remote engine's candidates
//! publish on this host's loopback, which Pier cannot reach (and no app port is opened to
//! the network for it). The proxy of the target takes the requests written for it
//! (`remote_probes`), probes with the same pacing and judgement as a local probe
//! (`crate::probe`), and writes each outcome; the pipeline waits on it with LISTEN.
//!
//! Woken by NOTIFY on a new request, and on every (re)connection it looks for requests it
//! may have missed; an idle proxy sends no query.

use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::error::error_chain;
use crate::probe::{NotHealthy, until_healthy};
use crate::store::{Channel, ProbeOutcome, ProbeRequest, Store};

/// Probes one proxy runs at once; more requests wait for the next wake-up.
const MAX_PROBES: usize = 32;
/// How long an outcome is retried while the database is away: past it the pipeline has
/// given up on the request anyway.
const WRITE_PATIENCE: Duration = Duration::from_secs(10);

/// Who this proxy is in the requests it takes and the reports it writes.
pub(crate) fn identity(target: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    format!(
        "pier proxy pid {} on {} for target {target}",
        std::process::id(),
        if host.is_empty() { "?" } else { &host }
    )
}

pub(crate) async fn serve(store: Store, target: String, shutdown: CancellationToken) {
    let by = identity(&target);
    let client = crate::probe::probe_client();
    let mut probes = JoinSet::new();
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    while !shutdown.is_cancelled() {
        let mut listener = match store.own_listener(Channel::Probes).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "proxy cannot listen for health probes; retrying");
                if !backoff.wait_or(&shutdown).await {
                    break;
                }
                continue;
            }
        };
        backoff.reset();
        loop {
            while probes.try_join_next().is_some() {}
            let room = MAX_PROBES.saturating_sub(probes.len());
            if room > 0 {
                match store.take_probes(&target, &by, room as i64).await {
                    Ok(taken) => {
                        for r in taken {
                            probes.spawn(probe(store.clone(), client.clone(), by.clone(), r));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), "proxy cannot take health probes");
                        break;
                    }
                }
            }
            // Until a request for this target may be waiting (or room for one is made).
            let woken = loop {
                tokio::select! {
                    msg = listener.try_recv() => match msg {
                        Ok(Some(n)) if n.payload() == target => break true,
                        Ok(Some(_)) => {}
                        Ok(None) => break false,
                        Err(e) => {
                            tracing::warn!(error = %error_chain(&e), "proxy lost its health probe listener");
                            break false;
                        }
                    },
                    Some(_) = probes.join_next(), if probes.len() >= MAX_PROBES => break true,
                    _ = shutdown.cancelled() => break false,
                }
            };
            if !woken {
                break;
            }
        }
    }
    // Probes in flight end with the process: their requests lapse on the pipeline's side.
    probes.abort_all();
}

/// Runs one request's probes and writes the outcome.
async fn probe(store: Store, client: reqwest::Client, by: String, r: ProbeRequest) {
    let url = r.url();
    tracing::info!(request = %r.id, %url, deployment = %r.deployment_id, "health probe for the pipeline");
    let run = until_healthy::<std::convert::Infallible, _, _>(
        &client,
        &url,
        &r.json.0,
        r.timeout(),
        || async { Ok(()) },
    )
    .await;
    let (healthy, probed, detail) = match run {
        Ok(p) => (true, p.clone(), p.detail),
        Err(NotHealthy::TimedOut { probed, timeout }) => {
            let why = NotHealthy::<()>::timeout_reason(timeout, &probed.detail);
            (false, probed, why)
        }
        Err(NotHealthy::Check(never)) => match never {},
    };
    let outcome = ProbeOutcome {
        healthy,
        attempts: probed.probes,
        elapsed: Duration::from_millis(probed.elapsed_ms),
        detail: &detail,
    };
    let mut backoff =
        Backoff::new(Duration::from_millis(100), Duration::from_secs(2)).within(WRITE_PATIENCE);
    loop {
        match store.finish_probe(r.id, &by, &outcome).await {
            Ok(true) => return,
            Ok(false) => {
                tracing::warn!(request = %r.id, "the probe's outcome is no longer this proxy's to write");
                return;
            }
            Err(e) if e.is_unavailable() && backoff.wait().await => {}
            Err(e) => {
                tracing::warn!(request = %r.id, error = %error_chain(&e), "cannot write the probe's outcome");
                return;
            }
        }
    }
}
