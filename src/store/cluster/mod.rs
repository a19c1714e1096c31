//! The one place where Pier picks its database server. `database_url` may name
//! a primary and its standbys; sqlx 0.9 connects to one host per URL and knows nothing of
//! `target_session_attrs`, so every connection Pier opens comes through here: the pool's
//! (through its hooks), the group commit's lanes and the LISTEN connections.
//!
//! The rules:
//! - A connection goes to the host that last accepted writes, then to each other host in
//!   the order given; the first one that passes [`Wants::accepts`] wins and becomes the
//!   host the pool opens its connections to ([`Cluster::moved`]).
//! - A connection the pool opened to a host that is no longer usable (a standby now) is
//!   swapped in its `after_connect` hook for one to a usable host; a pooled connection
//!   older than the last move belongs to the old host and is closed, never lent.
//! - The pool cannot move by itself when its host refuses connections (sqlx retries the
//!   same host until its deadline), so a failure anywhere starts [`Cluster::suspect`]: one
//!   task that tries every host with backoff until one is usable, then ends. With one
//!   host nothing of this runs: the pool's own reconnects are all there is.

mod targets;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

use crate::backoff::Backoff;
pub use targets::{TargetError, Targets, Wants};

/// Deadline for opening one connection to one host (and checking what it is).
pub(crate) const CONNECT_DEADLINE: Duration = Duration::from_secs(3);

pub(crate) struct Cluster {
    hosts: Vec<PgConnectOptions>,
    wants: Wants,
    /// The host that last accepted a connection Pier may use.
    current: AtomicUsize,
    /// When `current` last changed: connections opened before then are to the old host.
    moved_at: Mutex<Option<Instant>>,
    /// The store's pool, whose connect options follow `current`. The pool's hooks hold
    /// only a `Weak` to this, so the two do not keep each other alive.
    pool: OnceLock<PgPool>,
    /// A [`Cluster::suspect`] task is looking for a usable host.
    locating: AtomicBool,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field(
                "hosts",
                &self.hosts.iter().map(Targets::label).collect::<Vec<_>>(),
            )
            .field("wants", &self.wants)
            .field("current", &self.current.load(Ordering::Relaxed))
            .finish()
    }
}

impl Cluster {
    pub(crate) fn new(targets: Targets) -> Arc<Self> {
        Arc::new(Self {
            hosts: targets.hosts,
            wants: targets.wants,
            current: AtomicUsize::new(0),
            moved_at: Mutex::new(None),
            pool: OnceLock::new(),
            locating: AtomicBool::new(false),
        })
    }

    /// The options the pool connects with now.
    pub(crate) fn options(&self) -> PgConnectOptions {
        self.hosts[self.current.load(Ordering::Acquire)].clone()
    }

    /// Hands the store's pool over, so that a move of hosts moves its connections too.
    pub(crate) fn attach(&self, pool: &PgPool) {
        let _ = self.pool.set(pool.clone());
    }

    pub(crate) fn hosts(&self) -> usize {
        self.hosts.len()
    }

    /// Pool options with the hooks that keep its connections on a usable host.
    pub(crate) fn pool_options(self: &Arc<Self>) -> PgPoolOptions {
        let before = Arc::downgrade(self);
        let options = PgPoolOptions::new()
            .test_before_acquire(false)
            .before_acquire(move |conn, meta| {
                let cluster = before.upgrade();
                Box::pin(async move {
                    // Opened before the last move: to the old host, which may be gone or a
                    // standby now. Closed here; the pool opens one to the new host.
                    if cluster.is_some_and(|c| c.predates_move(meta.age)) {
                        return Ok(false);
                    }
                    // sqlx pings every connection it lends by default: a round trip before
                    // every statement. Only one idle long enough to have been cut off
                    // unseen (Postgres restarted) is pinged; one that breaks in use fails
                    // its statement, which every caller treats as the database away.
                    if meta.idle_for >= super::PING_IF_IDLE_FOR {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            });
        if self.wants == Wants::Any {
            return options;
        }
        let after = Arc::downgrade(self);
        options.after_connect(move |conn, _meta| {
            let cluster = after.upgrade();
            Box::pin(async move {
                let Some(cluster) = cluster else {
                    return Ok(());
                };
                if cluster.wants.accepts(conn).await? {
                    return Ok(());
                }
                // The pool's host is not usable (a standby, or read-only): a connection to
                // one that is takes its place, and the pool moves there.
                let usable = cluster.connect().await?;
                let unusable = std::mem::replace(conn, usable);
                let _ = unusable.close().await;
                Ok(())
            })
        })
    }

    /// A connection to a host Pier may use: the current one first, then each other one in
    /// the order given, each within [`CONNECT_DEADLINE`]. Bounded: one try per host.
    pub(crate) async fn connect(&self) -> Result<PgConnection, sqlx::Error> {
        let start = self.current.load(Ordering::Acquire);
        let n = self.hosts.len();
        let mut failures = Vec::new();
        for step in 0..n {
            let i = (start + step) % n;
            match self.try_host(i).await {
                Ok(conn) => {
                    if i != start {
                        self.moved(i);
                    }
                    return Ok(conn);
                }
                // One host: its own error, so that what it means (a wrong password is not
                // an outage) is kept.
                Err(e) if n == 1 => return Err(e),
                Err(e) => {
                    failures.push(format!("{}: {}", Targets::label(&self.hosts[i]), brief(&e)))
                }
            }
        }
        Err(sqlx::Error::Protocol(format!(
            "no database host is usable ({})",
            failures.join("; ")
        )))
    }

    async fn try_host(&self, i: usize) -> Result<PgConnection, sqlx::Error> {
        let mut conn = targets::connect_one(&self.hosts[i], CONNECT_DEADLINE).await?;
        let accepted = tokio::time::timeout(CONNECT_DEADLINE, self.wants.accepts(&mut conn)).await;
        match accepted {
            Ok(Ok(true)) => Ok(conn),
            Ok(Ok(false)) => {
                let _ = conn.close().await;
                Err(sqlx::Error::Protocol(
                    "does not accept writes (a standby, or read-only)".into(),
                ))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(sqlx::Error::PoolTimedOut),
        }
    }

    /// `i` is the host to use from now on; the pool's new connections go there.
    fn moved(&self, i: usize) {
        let from = self.current.swap(i, Ordering::AcqRel);
        if from == i {
            return;
        }
        *self.moved_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        if let Some(pool) = self.pool.get() {
            pool.set_connect_options(self.hosts[i].clone());
        }
        tracing::warn!(
            from = %Targets::label(&self.hosts[from]),
            to = %Targets::label(&self.hosts[i]),
            "database: moved to the host that is usable now"
        );
    }

    /// Whether a connection opened `age` ago predates the last move of hosts.
    pub(crate) fn predates_move(&self, age: Duration) -> bool {
        self.moved_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| age > at.elapsed())
    }

    /// Something failed to reach the database: unless a search runs already, one task
    /// tries every host with backoff until one is usable (the pool then moves there), and
    /// ends. It also ends once nothing holds the store. With one host it does nothing.
    pub(crate) fn suspect(self: &Arc<Self>) {
        if self.hosts.len() < 2 || self.locating.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.locating.store(false, Ordering::Release);
            return;
        };
        runtime.spawn(locate(Arc::downgrade(self)));
    }
}

async fn locate(cluster: Weak<Cluster>) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));
    loop {
        let Some(c) = cluster.upgrade() else { return };
        match c.connect().await {
            Ok(conn) => {
                let _ = conn.close().await;
                c.locating.store(false, Ordering::Release);
                return;
            }
            Err(e) => tracing::warn!(error = %e, "database: no usable host yet; trying again"),
        }
        drop(c);
        backoff.wait().await;
    }
}

/// An error in a few words for the list of hosts tried.
fn brief(e: &sqlx::Error) -> String {
    let s = match e {
        sqlx::Error::PoolTimedOut => "no answer in time".to_owned(),
        other => other.to_string(),
    };
    s.chars().take(160).collect()
}
