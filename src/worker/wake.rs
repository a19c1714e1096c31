//! The process's one listening connection: it turns NOTIFYs into wake-ups for every
//! worker, and it holds the process's liveness lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sqlx::postgres::PgListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::error::error_chain;
use crate::store::{Store, StoreError, take_liveness};

/// What the listener shares with the workers.
pub struct Signals {
    /// Bumped on every NOTIFY, and after every (re)connection, since notifications sent
    /// while disconnected are lost.
    pub wake: watch::Sender<u64>,
    /// True while this connection holds the liveness lock. Workers claim only then: a
    /// deployment claimed under a key nobody holds would look abandoned to every other
    /// process at once.
    pub alive: watch::Sender<bool>,
    /// A queue change of an app this process is deploying wakes nobody (see [`Deploying`]).
    pub deploying: Deploying,
}

/// The apps this process's workers are deploying right now. A queue NOTIFY naming one of
/// them wakes no idle worker: nothing of that app can be claimed while its deployment runs
/// here, and the worker running it looks at the queue again as soon as it ends. Without
/// this, a burst of pushes for an app being deployed sent the idle workers to claim (and
/// find nothing) for every push.
#[derive(Clone, Debug, Default)]
pub struct Deploying(Arc<Mutex<HashMap<String, usize>>>);

impl Deploying {
    /// Marks `app` as deployed here until the guard is dropped.
    pub(crate) fn enter(&self, app: &str) -> DeployingGuard {
        *self.map().entry(app.to_owned()).or_default() += 1;
        DeployingGuard {
            set: self.clone(),
            app: app.to_owned(),
        }
    }

    pub(crate) fn contains(&self, app: &str) -> bool {
        self.map().contains_key(app)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) struct DeployingGuard {
    set: Deploying,
    app: String,
}

impl Drop for DeployingGuard {
    fn drop(&mut self) {
        let mut map = self.set.map();
        if let Some(n) = map.get_mut(&self.app) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.app);
            }
        }
    }
}

/// Listens for queue changes on one connection that also holds the session-level advisory
/// lock `liveness_key`. The lock lives exactly as long as the connection: if this process
/// dies, Postgres releases it at once and other processes resume its deployments without
/// waiting for their leases to expire.
///
/// After a lost connection (a restart, a failover to a standby) it connects again through
/// the store, which tries every configured host: on the new primary it re-takes its own
/// lock (a promoted standby holds none), and the wake-up after every (re)connection is the
/// one look at the queue that covers the notifications sent while it was away.
pub async fn listen(
    store: Store,
    liveness_key: i64,
    signals: Signals,
    shutdown: CancellationToken,
) {
    // Capped low: while the database is away every worker waits on this listener, so the
    // time from a standby's promotion to the first claim is at most about this cap.
    let mut backoff = Backoff::new(
        std::time::Duration::from_millis(200),
        std::time::Duration::from_secs(2),
    );
    while !shutdown.is_cancelled() {
        match connect(&store, liveness_key).await {
            Ok(mut listener) => {
                backoff.reset();
                signals.alive.send_replace(true);
                signals.wake.send_modify(|n| *n += 1);
                let lost = relay(&mut listener, &signals, &shutdown).await;
                signals.alive.send_replace(false);
                if let Some(e) = lost {
                    tracing::warn!(error = %e, "queue listener lost its connection; reconnecting");
                }
                drop(listener);
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "queue listener cannot connect; retrying");
                if !backoff.wait_or(&shutdown).await {
                    return;
                }
            }
        }
    }
}

/// Why the listener has no connection holding the liveness lock; each is retried.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListenError {
    /// No connection to the primary for the listener.
    #[error(transparent)]
    Connect(#[from] sqlx::Error),
    /// The lock could not be asked for.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Keys are random 62-bit numbers: someone else holding ours is a bug, not a race.
    #[error("liveness lock {key} is held by another session")]
    LockHeld { key: i64 },
}

/// The listener's own connection also carries the liveness lock, so both end together.
async fn connect(store: &Store, liveness_key: i64) -> Result<PgListener, ListenError> {
    let mut listener = store.own_listener(crate::store::Channel::Queue).await?;
    if !take_liveness(&mut listener, liveness_key).await? {
        return Err(ListenError::LockHeld { key: liveness_key });
    }
    Ok(listener)
}

/// Relays notifications until the connection drops (`Some(reason)`) or shutdown (`None`).
async fn relay(
    listener: &mut PgListener,
    signals: &Signals,
    shutdown: &CancellationToken,
) -> Option<String> {
    loop {
        tokio::select! {
            msg = listener.try_recv() => match msg {
                Ok(Some(n)) => {
                    if !signals.deploying.contains(n.payload()) {
                        signals.wake.send_modify(|n| *n += 1);
                    }
                }
                // The connection dropped, and the liveness lock with it.
                Ok(None) => return Some("connection closed".into()),
                Err(e) => return Some(error_chain(&e)),
            },
            _ = shutdown.cancelled() => return None,
        }
    }
}
