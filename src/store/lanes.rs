//! Connections the group commit keeps for itself, outside sqlx's pool.
//!
//! sqlx's pool pings a connection when it lends it and again when it takes it back (in a
//! task it spawns for that), so one statement through the pool costs three round trips to
//! Postgres and three wake-ups of its backend. A batch of deliveries is one statement
//! (migration 0015), so through the pool two thirds of a delivery's database work were
//! pings. A lane is lent with no ping unless it sat idle long enough to have
//! been cut off unseen (Postgres restarted, a network drop), and a lane whose statement
//! failed in any way is closed, never lent again: a broken connection costs at most the
//! one statement that found it broken, answered 503 so that its senders retry. A lane is
//! opened through the cluster, on the host that accepts writes, and one opened
//! before the cluster last moved hosts is closed instead of lent.

use std::sync::Mutex;
use std::time::Instant;

use sqlx::{Connection, PgConnection};

use super::cluster::{CONNECT_DEADLINE, Cluster};
use super::{PING_IF_IDLE_FOR, Result, StoreError};

/// A lane's connection, and when it was opened.
#[derive(Debug)]
pub(super) struct Lane {
    pub conn: PgConnection,
    born: Instant,
}

#[derive(Debug)]
pub(super) struct Lanes {
    /// Idle lanes, each with the moment it went idle.
    idle: Mutex<Vec<(Lane, Instant)>>,
    /// Idle lanes kept at most: as many as batches run at once.
    keep: usize,
}

impl Lanes {
    pub(crate) fn new(keep: usize) -> Self {
        Self {
            idle: Mutex::new(Vec::with_capacity(keep)),
            keep,
        }
    }

    /// A connection for one statement: an idle lane (pinged first if it sat idle), or a
    /// new one. Every failure to get one means the database cannot be reached.
    pub(crate) async fn take(&self, cluster: &Cluster) -> Result<Lane> {
        // Bounded: each turn removes one of at most `keep` idle lanes.
        while let Some((mut lane, since)) = self.pop() {
            if cluster.predates_move(lane.born.elapsed()) {
                continue;
            }
            if since.elapsed() < PING_IF_IDLE_FOR {
                return Ok(lane);
            }
            if let Ok(Ok(())) = tokio::time::timeout(CONNECT_DEADLINE, lane.conn.ping()).await {
                return Ok(lane);
            }
        }
        // Every host is tried, each within its own deadline.
        match cluster.connect().await {
            Ok(conn) => Ok(Lane {
                conn,
                born: Instant::now(),
            }),
            Err(e) => Err(StoreError::Unavailable(e)),
        }
    }

    /// Gives back a lane whose statement succeeded. Beyond `keep` idle lanes it is closed.
    pub(crate) fn give_back(&self, lane: Lane) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.keep {
            idle.push((lane, Instant::now()));
        }
    }

    fn pop(&self) -> Option<(Lane, Instant)> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }
}
