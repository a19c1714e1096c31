use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::store::Store;

/// The channel the `deployments` trigger notifies on every queue change.
pub const CHANNEL: &str = "pier_queue";

/// Turns NOTIFYs into wake-ups for every worker (a counter they watch). After any
/// (re)connection it wakes them too, since notifications sent meanwhile are lost.
pub async fn listen(store: Store, wake: watch::Sender<u64>, shutdown: CancellationToken) {
    let mut backoff = Duration::from_millis(200);
    while !shutdown.is_cancelled() {
        let mut listener = match PgListener::connect_with(store.pool()).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "queue listener cannot connect; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if let Err(e) = listener.listen(CHANNEL).await {
            tracing::warn!(error = %e, "LISTEN failed; retrying");
            continue;
        }
        backoff = Duration::from_millis(200);
        wake.send_modify(|n| *n += 1);
        loop {
            tokio::select! {
                msg = listener.try_recv() => match msg {
                    Ok(Some(_)) => wake.send_modify(|n| *n += 1),
                    // The connection dropped; notifications may have been missed.
                    Ok(None) => {
                        tracing::warn!("queue listener lost its connection; reconnecting");
                        wake.send_modify(|n| *n += 1);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "queue listener failed; reconnecting");
                        break;
                    }
                },
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
