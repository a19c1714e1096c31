//! Connections the group commit keeps for itself, outside sqlx's pool.
//!
//! sqlx's pool pings a connection when it lends it and again when it takes it back (in a
//! task it spawns for that), so one statement through the pool costs three round trips to
//! Postgres and three wake-ups of its backend. A batch of deliveries is one statement
//! (migration 0015), so through the pool two thirds of a delivery's database work were
//! pings (issue 12). A lane is lent with no ping unless it sat idle long enough to have
//! been cut off unseen (Postgres restarted, a network drop), and a lane whose statement
//! failed in any way is closed, never lent again: a broken connection costs at most the
//! one statement that found it broken, answered 503 so that its senders retry.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

use super::{PING_IF_IDLE_FOR, Result, StoreError};
/// Deadline for opening a lane, and for the ping of one that sat idle.
const CONNECT_DEADLINE: Duration = Duration::from_secs(3);

#[derive(Debug)]
pub(super) struct Lanes {
    idle: Mutex<Vec<(PgConnection, Instant)>>,
    /// Idle lanes kept at most: as many as batches run at once.
    keep: usize,
}

impl Lanes {
    pub fn new(keep: usize) -> Self {
        Self {
            idle: Mutex::new(Vec::with_capacity(keep)),
            keep,
        }
    }

    /// A connection for one statement: an idle lane (pinged first if it sat idle), or a
    /// new one. Every failure to get one means the database cannot be reached.
    pub async fn take(&self, options: &PgConnectOptions) -> Result<PgConnection> {
        // Bounded: each turn removes one of at most `keep` idle lanes.
        while let Some((mut conn, since)) = self.pop() {
            if since.elapsed() < PING_IF_IDLE_FOR {
                return Ok(conn);
            }
            if let Ok(Ok(())) = tokio::time::timeout(CONNECT_DEADLINE, conn.ping()).await {
                return Ok(conn);
            }
        }
        match tokio::time::timeout(CONNECT_DEADLINE, PgConnection::connect_with(options)).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(StoreError::Unavailable(e)),
            Err(_) => Err(StoreError::Unavailable(sqlx::Error::PoolTimedOut)),
        }
    }

    /// Gives back a lane whose statement succeeded. Beyond `keep` idle lanes it is closed.
    pub fn give_back(&self, conn: PgConnection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.keep {
            idle.push((conn, Instant::now()));
        }
    }

    fn pop(&self) -> Option<(PgConnection, Instant)> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }
}
