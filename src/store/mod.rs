//! All SQL lives here. Handlers and workers call these functions; none of them writes SQL.

mod actions;
mod batch;
mod channels;
pub(crate) mod cluster;
mod container_events;
mod deliveries;
mod deployments;
mod digests;
mod freezes;
mod gates;
mod holders;
mod imports;
pub(crate) mod kinds;
mod lanes;
mod notify;
mod probes;
mod promotions;
mod proxy_reports;
mod readiness;
mod reconcile;
mod retention;
mod routes;
mod schema;
mod sessions;
mod snapshot;
mod steps;
mod text;
mod volumes;

use std::time::Duration;

use std::sync::Arc;

use sqlx::{PgPool, Postgres, Transaction};

use cluster::{Cluster, TargetError, Targets};

pub use actions::{CancelOutcome, Pin, SucceededDigest};
pub use channels::Channel;
pub use container_events::{ContainerEvent, NewContainerEvent};
pub use deliveries::{
    Delivery, DeliveryFilter, DeliveryOutcome, DeploymentRequest, HeldBack, MAX_PAGE, NewDelivery,
    VerdictFilter, highest_above, pinned_reason,
};
pub use deployments::{
    Deployment, DigestStatus, Enqueued, Generation, NewDeployment, TAKEOVER_CHECK,
};
pub use digests::DigestApp;
pub use freezes::Freeze;
pub use gates::{ApprovalGate, Decided, Decision};
pub use holders::take_liveness;
pub use imports::Import;
pub use kinds::{
    ContainerEventKind, DeploymentState, ReconcileKind, Step, StepState, Trigger, UnknownValue,
    Verdict,
};
pub use notify::{AttemptRow, DueNotification, Endpoint, NotificationRow};
pub use probes::{NewProbe, ProbeOutcome, ProbeRequest, ProbeState};
pub use promotions::Proven;
pub use proxy_reports::{ProxyReport, ReportConnection};
pub use reconcile::ReconcileAction;
pub use retention::Pruned;
pub use routes::{Quarantined, Route};
pub use schema::{MigrationRow, MigrationState, SchemaError, SchemaStatus};
pub use sessions::{Session, SignInMethod};
pub use steps::{GenerationSwitch, Lane, RouteWrite, StepRecord};
pub use volumes::{Adopted, VolumeOwner};

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
    /// `server.database_url(s)` cannot be used as given.
    #[error("database url: {0}")]
    Targets(#[from] TargetError),
    /// The database's schema is one this binary must not work on (a newer Pier's).
    #[error(transparent)]
    Schema(#[from] SchemaError),
}

impl StoreError {
    pub(crate) fn is_unavailable(&self) -> bool {
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
            // Class 08 is connection exceptions, 57P0x the server shutting down or starting,
            // 25006 a write on a server that became a standby (a failover under way): each
            // is answered 503 or retried, never taken as the request's own fault.
            sqlx::Error::Database(db) => db
                .code()
                .is_some_and(|c| c.starts_with("08") || c.starts_with("57P") || c == "25006"),
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

pub(crate) type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
    /// The group commit deliveries share.
    batch: Arc<batch::Batcher>,
    /// Which of the configured hosts Pier uses; every connection comes from it.
    cluster: Arc<Cluster>,
    /// The last write probe's verdict, for `/readyz`.
    readiness: Arc<readiness::Readiness>,
}

/// Connections the shared pool holds at most.
const POOL_CONNECTIONS: u32 = 16;
/// How long a statement waits for a pooled connection before the database counts as away.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

impl Store {
    /// A lazy pool: Pier starts (and answers 503) even while the database is down, and
    /// reconnects on its own once it is back. `url` may name several hosts (libpq style).
    pub fn connect_lazy(url: &str) -> Result<Self> {
        Self::connect_lazy_many(&[url])
    }

    /// The same for `server.database_urls`: several URLs, each maybe with several hosts;
    /// Pier uses the one that accepts writes and moves when it stops doing so.
    pub fn connect_lazy_many(urls: &[&str]) -> Result<Self> {
        let cluster = Cluster::new(Targets::parse(urls.iter().copied())?);
        let pool = cluster
            .pool_options()
            .max_connections(POOL_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(cluster.options());
        cluster.attach(&pool);
        // Which host is the primary is not known yet: look now rather than at the first
        // statement that finds the first host dead.
        cluster.suspect();
        Ok(Self {
            pool,
            batch: batch::Batcher::new(),
            cluster,
            readiness: Default::default(),
        })
    }

    /// A store on a pool made elsewhere (tests): one host, the pool's.
    pub fn from_pool(pool: PgPool) -> Self {
        let options = (*pool.connect_options()).clone();
        let cluster = Cluster::new(Targets {
            hosts: vec![options],
            wants: cluster::Wants::Any,
        });
        cluster.attach(&pool);
        Self {
            pool,
            batch: batch::Batcher::new(),
            cluster,
            readiness: Default::default(),
        }
    }

    /// A failure reached the caller: if it was the database being away, the cluster looks
    /// for a usable host (the pool cannot move by itself while its host refuses).
    fn noticed<T>(&self, res: Result<T>) -> Result<T> {
        if let Err(e) = &res
            && e.is_unavailable()
        {
            self.cluster.suspect();
        }
        res
    }

    /// Starts a transaction that a cancelled caller cannot leave half-open. sqlx 0.9's
    /// `Pool::begin` is not cancel-safe on Postgres (launchbadge/sqlx#4385): a future
    /// dropped while `BEGIN` is in flight returns its connection to the pool inside an open
    /// transaction, and the next borrower (a worker's claim, say) runs in it. Run in a task
    /// of its own, `BEGIN` always completes; if nobody awaits the transaction any more it
    /// is dropped there, which rolls it back.
    pub(crate) async fn begin(&self) -> Result<Transaction<'static, Postgres>> {
        let pool = self.pool.clone();
        let res = match tokio::spawn(async move { pool.begin().await }).await {
            Ok(tx) => tx.map_err(StoreError::from),
            Err(join) => Err(StoreError::Query(sqlx::Error::Protocol(format!(
                "BEGIN task failed: {join}"
            )))),
        };
        self.noticed(res)
    }

    /// This installation's secret key for the journaled env hash, made on first use. Two
    /// processes starting at once agree on one: the first insert wins.
    pub(crate) async fn installation_key(&self) -> Result<Vec<u8>> {
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
    ///
    /// It never reconnects by itself (`eager_reconnect` off): a lost connection is
    /// `Ok(None)` from `try_recv` at once, and its owner opens a new listener here, on the
    /// host that is usable then, and reads again what it may have missed.
    pub(crate) async fn own_listener(
        &self,
        channel: Channel,
    ) -> std::result::Result<sqlx::postgres::PgListener, sqlx::Error> {
        if self.cluster.hosts() > 1 {
            // Find the usable host first: the listener's own pool can only retry its host.
            let found = self.cluster.connect().await?;
            let _ = sqlx::Connection::close(found).await;
        }
        let own = self
            .cluster
            .pool_options()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy_with(self.cluster.options());
        let mut listener = sqlx::postgres::PgListener::connect_with(&own).await?;
        listener.eager_reconnect(false);
        listener.listen(channel.as_str()).await?;
        Ok(listener)
    }

    pub(crate) async fn ping(&self) -> Result<()> {
        let res = sqlx::query("SELECT 1").execute(&self.pool).await;
        self.noticed(res.map(drop).map_err(StoreError::from))
    }
}
