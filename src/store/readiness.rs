//! Whether a delivery would be stored now: what `/readyz` means by "database: ok".
//!
//! A `SELECT 1` answers while no write can commit (a synchronous standby configured and
//! none attached: every commit waits for it; a primary turned read-only), so readiness
//! lied while every webhook stalled and got 503. The probe is a write: a transactional
//! logical-decoding message is a WAL record of its transaction, so its commit waits for
//! synchronous replication as a delivery's would, and it stores nothing in any table. (A
//! transaction that only takes an id writes no WAL and does not wait: no probe at all.) It runs at most once per
//! [`FRESH_FOR`], however often `/readyz` is asked, one probe at a time: an orchestrator
//! polling readiness costs one tiny commit a second at most, and an idle Pier none.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use super::{Store, StoreError};

/// How long one probe may take, its connection included. Shorter than a delivery's own
/// deadline, so that readiness turns before senders start getting 503s.
pub(crate) const PROBE_DEADLINE: Duration = Duration::from_secs(2);
/// How long a probe's verdict is reused.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// Why a delivery would not be stored now; words for a public page, no server details.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotWritable {
    #[error("a write did not commit within {}s (is a synchronous standby missing?)", PROBE_DEADLINE.as_secs())]
    CommitStalled,
    #[error("no database accepts writes")]
    Unreachable,
    #[error("a write failed")]
    Failed,
}

#[derive(Debug, Default)]
pub(super) struct Readiness {
    last: Mutex<Option<(Instant, Result<(), NotWritable>)>>,
}

impl Store {
    /// Whether a write commits now, from a probe at most [`FRESH_FOR`] old. Callers that
    /// arrive while a probe runs wait for it and share its verdict.
    pub(crate) async fn writable(&self) -> Result<(), NotWritable> {
        let mut last = self.readiness.last.lock().await;
        if let Some((at, verdict)) = last.as_ref()
            && at.elapsed() < FRESH_FOR
        {
            return verdict.clone();
        }
        let verdict = self.probe_write().await;
        let was = last.as_ref().map(|(_, v)| v.is_ok());
        match (&verdict, was) {
            (Err(why), Some(true) | None) => {
                tracing::warn!(reason = %why, "database: not ready for writes")
            }
            (Ok(()), Some(false)) => tracing::info!("database: ready for writes again"),
            _ => {}
        }
        *last = Some((Instant::now(), verdict.clone()));
        verdict
    }

    async fn probe_write(&self) -> Result<(), NotWritable> {
        let deadline = Instant::now() + PROBE_DEADLINE;
        let mut conn = match tokio::time::timeout_at(deadline, self.pool.acquire()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                let _ = self.noticed::<()>(Err(StoreError::from(e)));
                return Err(NotWritable::Unreachable);
            }
            Err(_) => return Err(NotWritable::Unreachable),
        };
        // One statement in its own implicit transaction, which a standby refuses as it
        // refuses a delivery. Any role may emit one; no wal_level beyond `replica` is needed.
        let probe = sqlx::query("SELECT pg_logical_emit_message(true, 'pier', 'readiness')")
            .execute(&mut *conn);
        match tokio::time::timeout_at(deadline, probe).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                let e = self.noticed::<()>(Err(StoreError::from(e))).unwrap_err();
                tracing::debug!(error = %crate::error::error_chain(&e), "write probe failed");
                Err(if e.is_unavailable() {
                    NotWritable::Unreachable
                } else {
                    NotWritable::Failed
                })
            }
            Err(_) => {
                // Its commit may still be waiting: the connection goes, not back to the pool.
                drop(conn.detach());
                Err(NotWritable::CommitStalled)
            }
        }
    }
}
