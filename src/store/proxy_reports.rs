//! What each `pier proxy` reports it serves (migration 0023): per app the route version it
//! applied, per upstream the requests in flight. The blue-green steps of a remote target
//! wait on these rows (with LISTEN) instead of on a loopback admin endpoint they cannot
//! reach.

use std::collections::BTreeMap;

use sqlx::PgConnection;
use sqlx::types::Json;

use super::text::pg_text;
use super::{Result, Store};

/// One proxy's report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProxyReport {
    /// Who reports: `pier proxy` with its pid and host.
    pub proxy: String,
    pub routes: BTreeMap<String, i64>,
    pub in_flight: BTreeMap<String, u64>,
}

#[derive(sqlx::FromRow)]
struct Row {
    proxy: String,
    routes: Json<BTreeMap<String, i64>>,
    in_flight: Json<BTreeMap<String, u64>>,
}

/// The connection a proxy reports on, holding its liveness lock: while it is open the
/// proxy's rows count; when the proxy dies it closes and Postgres releases the lock, so a
/// dead proxy is never waited for.
pub struct ReportConnection {
    conn: PgConnection,
    holder: i64,
}

impl Store {
    /// A connection of its own (not the pool's: a lock on a pooled connection would outlive
    /// the proxy) with the advisory lock `holder` taken; `Ok(None)` when another session
    /// holds it. Rows of the target's proxies that are gone are pruned.
    pub(crate) async fn report_connection(
        &self,
        holder: i64,
        target: &str,
    ) -> Result<Option<ReportConnection>> {
        let mut conn = self.cluster.connect().await?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(holder)
            .fetch_one(&mut conn)
            .await?;
        if !locked {
            return Ok(None);
        }
        sqlx::query(
            "DELETE FROM proxy_reports WHERE target = $1 AND NOT pier_holder_alive(holder)",
        )
        .bind(target)
        .execute(&mut conn)
        .await?;
        Ok(Some(ReportConnection { conn, holder }))
    }

    /// The reports of the target's proxies that are alive now.
    pub(crate) async fn live_proxy_reports(&self, target: &str) -> Result<Vec<ProxyReport>> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT proxy, routes, in_flight FROM proxy_reports
             WHERE target = $1 AND pier_holder_alive(holder) ORDER BY proxy",
        )
        .bind(target)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| ProxyReport {
                proxy: r.proxy,
                routes: r.routes.0,
                in_flight: r.in_flight.0,
            })
            .collect())
    }
}

impl ReportConnection {
    /// Writes the proxy's report (its trigger NOTIFYs the pipeline).
    pub(crate) async fn write(&mut self, target: &str, report: &ProxyReport) -> Result<()> {
        sqlx::query(
            "INSERT INTO proxy_reports (holder, target, proxy, routes, in_flight)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (holder) DO UPDATE
             SET target = $2, proxy = $3, routes = $4, in_flight = $5, updated_at = now()",
        )
        .bind(self.holder)
        .bind(target)
        .bind(pg_text(&report.proxy))
        .bind(Json(&report.routes))
        .bind(Json(&report.in_flight))
        .execute(&mut self.conn)
        .await?;
        Ok(())
    }

    /// A proxy stopping on purpose takes its row with it.
    pub(crate) async fn remove(mut self) -> Result<()> {
        sqlx::query("DELETE FROM proxy_reports WHERE holder = $1")
            .bind(self.holder)
            .execute(&mut self.conn)
            .await?;
        let _ = sqlx::Connection::close(self.conn).await;
        Ok(())
    }
}
