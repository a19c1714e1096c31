//! All SQL lives here. Handlers and workers call these functions; none of them writes SQL.

mod actions;
mod batch;
mod deliveries;
mod deployments;
mod imports;
pub mod kinds;
mod lanes;
mod notify;
mod reconcile;
mod retention;
mod routes;
mod sessions;
mod steps;
mod text;
mod volumes;

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres, Transaction};

pub use actions::{CancelOutcome, Pin, SucceededDigest};
pub use deliveries::{
    Delivery, DeliveryFilter, DeliveryOutcome, DeploymentRequest, HeldBack, MAX_PAGE, NewDelivery,
    POLLER_SOURCE, VerdictFilter, highest_above, pinned_reason,
};
pub use deployments::{
    Deployment, DigestStatus, Enqueued, Generation, NewDeployment, TAKEOVER_CHECK,
};
pub use imports::Import;
pub use kinds::{DeploymentState, ReconcileKind, Step, StepState, Trigger, UnknownValue, Verdict};
pub use notify::{AttemptRow, DueNotification, Endpoint, NotificationRow, OUTBOX_CHANNEL};
pub use reconcile::ReconcileAction;
pub use retention::Pruned;
pub use routes::{Quarantined, Route};
pub use sessions::{Session, SignInMethod};
pub use steps::{GenerationSwitch, Lane, RouteWrite, StepRecord};
pub use volumes::VolumeOwner;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached: callers answer 503 or retry later.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    #[error("database error: {0}")]
    Query(#[source] sqlx::Error),
    /// This worker no longer holds the deployment's lease; another one may have taken over.
    #[error("lease on deployment lost")]
    LeaseLost,
}

impl StoreError {
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        let unavailable = match &e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed => true,
            // Class 08 is connection exceptions, 57P0x the server shutting down or starting.
            sqlx::Error::Database(db) => db
                .code()
                .is_some_and(|c| c.starts_with("08") || c.starts_with("57P")),
            _ => false,
        };
        if unavailable {
            StoreError::Unavailable(e)
        } else {
            StoreError::Query(e)
        }
    }
}

/// A pooled connection idle this long is pinged before it is lent.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
    /// The group commit deliveries share (issue 12).
    batch: std::sync::Arc<batch::Batcher>,
}

impl Store {
    /// A lazy pool: Pier starts (and answers 503) even while the database is down, and
    /// reconnects on its own once it is back.
    ///
    /// sqlx pings every connection it lends by default: a round trip before every
    /// statement, which doubled the queries' share of a worker's pickup. Here only a
    /// connection that sat idle long enough to have been cut off unseen (Postgres
    /// restarted) is pinged; one that breaks in use fails its statement, which every caller
    /// already treats as the database being unavailable.
    pub fn connect_lazy(url: &str) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(3))
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_IF_IDLE_FOR {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .connect_lazy(url)?;
        Ok(Self::from_pool(pool))
    }

    pub fn from_pool(pool: PgPool) -> Self {
        Self {
            pool,
            batch: batch::Batcher::new(),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub async fn migrate(&self) -> Result<()> {
        sqlx::migrate!("./migrations")
            .run(&self.pool)
            .await
            .map_err(|e| match e {
                sqlx::migrate::MigrateError::Execute(e) => StoreError::from(e),
                other => StoreError::Query(sqlx::Error::Migrate(Box::new(other))),
            })
    }

    /// Starts a transaction that a cancelled caller cannot leave half-open. sqlx 0.9's
    /// `Pool::begin` is not cancel-safe on Postgres (launchbadge/sqlx#4385): a future
    /// dropped while `BEGIN` is in flight returns its connection to the pool inside an open
    /// transaction, and the next borrower (a worker's claim, say) runs in it. Run in a task
    /// of its own, `BEGIN` always completes; if nobody awaits the transaction any more it
    /// is dropped there, which rolls it back.
    pub(crate) async fn begin(&self) -> Result<Transaction<'static, Postgres>> {
        let pool = self.pool.clone();
        match tokio::spawn(async move { pool.begin().await }).await {
            Ok(tx) => Ok(tx?),
            Err(join) => Err(StoreError::Query(sqlx::Error::Protocol(format!(
                "BEGIN task failed: {join}"
            )))),
        }
    }

    /// This installation's secret key for the journaled env hash, made on first use. Two
    /// processes starting at once agree on one: the first insert wins.
    pub async fn installation_key(&self) -> Result<Vec<u8>> {
        let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let fresh: Vec<u8> = a.as_bytes().iter().chain(b.as_bytes()).copied().collect();
        sqlx::query("INSERT INTO installation (env_key) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(&fresh)
            .execute(&self.pool)
            .await?;
        Ok(sqlx::query_scalar("SELECT env_key FROM installation")
            .fetch_one(&self.pool)
            .await?)
    }

    /// A LISTEN on `channel` over a connection of its own, never the shared pool's: when the
    /// listener is dropped its connection closes, with every session lock taken on it (a
    /// lock left on a pooled connection would keep a dead holder looking alive).
    pub async fn own_listener(
        &self,
        channel: &str,
    ) -> std::result::Result<sqlx::postgres::PgListener, sqlx::Error> {
        let own = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy_with((*self.pool.connect_options()).clone());
        let mut listener = sqlx::postgres::PgListener::connect_with(&own).await?;
        listener.listen(channel).await?;
        Ok(listener)
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
