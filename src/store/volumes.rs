//! Volume ownership: which app (and which incarnation of it) owns each engine volume Pier
//! made. Ownership is this record, never a name or a label; and a record alone proves
//! nothing about the volume on the engine: only one whose labels carry the record's
//! provenance (app, `made_in`) is the record's ([`crate::engine::Labelled::carries`]).
//!
//! An incarnation is one life of an app name: it begins when the app first owns something
//! and ends when the app has left the config and none of its containers is left
//! ([`Store::end_incarnations`]). A volume is owned by the incarnation that made it until
//! an operator adopts it for the live one ([`Store::adopt_volume`]): a different app added
//! later under the same name never inherits data by name.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{Result, Store};

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, Serialize)]
pub struct VolumeOwner {
    /// The engine the volume is on: the same name on two engines is two volumes.
    pub target: String,
    pub name: String,
    pub app: String,
    /// The incarnation that owns the volume now.
    pub incarnation: Uuid,
    /// The incarnation that made it: what the volume's labels say, for ever.
    pub made_in: Uuid,
    /// Whether the owning incarnation is the app's live one (false once it ended).
    pub live: bool,
    pub service: String,
    pub deployment_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub adopted_at: Option<DateTime<Utc>>,
}

/// What `pier volumes adopt` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adopted {
    /// The volume now belongs to the app's live incarnation, taken from `from`.
    Adopted { from: Uuid, to: Uuid },
    /// The live incarnation owned it already.
    AlreadyLive,
}

/// A query of [`VolumeOwner`] rows: its columns, then `$rest` (a literal, so the SQL
/// stays a static string).
macro_rules! owners_where {
    ($rest:literal) => {
        concat!(
            "SELECT v.target, v.name, v.app, v.incarnation,
                    COALESCE(v.made_in, v.incarnation) AS made_in,
                    EXISTS (SELECT 1 FROM app_incarnations i
                            WHERE i.incarnation = v.incarnation) AS live,
                    v.service, v.deployment_id, v.created_at, v.adopted_at
             FROM volumes v ",
            $rest
        )
    };
}

impl Store {
    /// The app's live incarnation, begun on first use; two callers at once agree on one.
    pub(crate) async fn incarnation(&self, app: &str) -> Result<Uuid> {
        sqlx::query(
            "INSERT INTO app_incarnations (app, incarnation) VALUES ($1, $2)
             ON CONFLICT (app) DO NOTHING",
        )
        .bind(app)
        .bind(Uuid::new_v4())
        .execute(&self.pool)
        .await?;
        Ok(
            sqlx::query_scalar("SELECT incarnation FROM app_incarnations WHERE app = $1")
                .bind(app)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Ends the live incarnation of every app not in `keep` (the configured apps and
    /// those with a container on some engine), unless a deployment of it is queued or
    /// running, or was queued after `seen_at` (when the containers were listed: a reload
    /// that added the app back may have deployed it since). Returns what ended.
    pub(crate) async fn end_incarnations(
        &self,
        keep: &[String],
        seen_at: DateTime<Utc>,
    ) -> Result<Vec<(String, Uuid)>> {
        Ok(sqlx::query_as(
            "WITH ended AS (
                 DELETE FROM app_incarnations i
                 WHERE NOT (i.app = ANY($1))
                   AND NOT EXISTS (SELECT 1 FROM deployments d WHERE d.app = i.app
                                   AND (d.state IN ('queued', 'running') OR d.created_at >= $2))
                 RETURNING i.app, i.incarnation, i.created_at)
             INSERT INTO ended_incarnations (incarnation, app, created_at)
             SELECT incarnation, app, created_at FROM ended
             RETURNING app, incarnation",
        )
        .bind(keep)
        .bind(seen_at)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The database's clock: what `end_incarnations` compares deployments with.
    pub(crate) async fn clock(&self) -> Result<DateTime<Utc>> {
        Ok(sqlx::query_scalar("SELECT clock_timestamp()")
            .fetch_one(&self.pool)
            .await?)
    }

    /// Records `app`'s live incarnation as the owner (and maker) of volume `name` unless
    /// someone already is, and returns the owner on record: the caller compares it with
    /// itself and refuses another's.
    pub(crate) async fn claim_volume(
        &self,
        target: &str,
        name: &str,
        app: &str,
        service: &str,
        deployment: Uuid,
    ) -> Result<VolumeOwner> {
        let incarnation = self.incarnation(app).await?;
        sqlx::query(
            "INSERT INTO volumes (name, app, incarnation, made_in, service, deployment_id, target)
             VALUES ($1, $2, $3, $3, $4, $5, $6) ON CONFLICT (target, name) DO NOTHING",
        )
        .bind(name)
        .bind(app)
        .bind(incarnation)
        .bind(service)
        .bind(deployment)
        .bind(target)
        .execute(&self.pool)
        .await?;
        Ok(self
            .volume_owner(target, name)
            .await?
            .expect("a volume row just inserted or already present"))
    }

    pub(crate) async fn volume_owner(
        &self,
        target: &str,
        name: &str,
    ) -> Result<Option<VolumeOwner>> {
        Ok(
            sqlx::query_as(owners_where!("WHERE v.target = $1 AND v.name = $2"))
                .bind(target)
                .bind(name)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// The volumes `incarnation` owns on `target`: adopted ones first (the latest
    /// adoption first), then in the order they were made.
    pub(crate) async fn volumes_owned(
        &self,
        target: &str,
        incarnation: Uuid,
    ) -> Result<Vec<VolumeOwner>> {
        Ok(sqlx::query_as(owners_where!(
            "WHERE v.target = $1 AND v.incarnation = $2
             ORDER BY v.adopted_at DESC NULLS LAST, v.created_at, v.name LIMIT 1000"
        ))
        .bind(target)
        .bind(incarnation)
        .fetch_all(&self.pool)
        .await?)
    }

    pub(crate) async fn volume_owners(&self) -> Result<Vec<VolumeOwner>> {
        Ok(sqlx::query_as(owners_where!(
            "ORDER BY v.app, v.name, v.target LIMIT 10000"
        ))
        .fetch_all(&self.pool)
        .await?)
    }

    /// `pier volumes adopt`: hands volume `name`, recorded for `app` in an earlier
    /// incarnation, to `app`'s live one. Only the owner changes; `made_in` (what the
    /// engine's labels say) stays, so the provenance check still holds.
    pub(crate) async fn adopt_volume(
        &self,
        target: &str,
        name: &str,
        app: &str,
    ) -> Result<Adopted> {
        let live = self.incarnation(app).await?;
        let from: Option<Uuid> = sqlx::query_scalar(
            "UPDATE volumes v
             SET made_in = COALESCE(v.made_in, v.incarnation), incarnation = $4,
                 adopted_at = now()
             FROM (SELECT incarnation FROM volumes
                   WHERE target = $1 AND name = $2 AND app = $3 FOR UPDATE) old
             WHERE v.target = $1 AND v.name = $2 AND v.app = $3 AND v.incarnation <> $4
             RETURNING old.incarnation",
        )
        .bind(target)
        .bind(name)
        .bind(app)
        .bind(live)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match from {
            Some(from) => Adopted::Adopted { from, to: live },
            None => Adopted::AlreadyLive,
        })
    }

    /// Undoes the record `deployment` wrote for `name`, and no other: the step that wrote
    /// it found a volume of that name that Pier did not make, and a record left behind
    /// would give that volume (and its data) to the app.
    pub(crate) async fn unclaim_volume(
        &self,
        target: &str,
        name: &str,
        app: &str,
        deployment: Uuid,
    ) -> Result<bool> {
        Ok(sqlx::query(
            "DELETE FROM volumes
             WHERE target = $1 AND name = $2 AND app = $3 AND deployment_id = $4",
        )
        .bind(target)
        .bind(name)
        .bind(app)
        .bind(deployment)
        .execute(&self.pool)
        .await?
        .rows_affected()
            > 0)
    }

    /// `pier volumes rm`: the record goes only after the volume itself is gone.
    pub(crate) async fn forget_volume(&self, target: &str, name: &str) -> Result<bool> {
        Ok(
            sqlx::query("DELETE FROM volumes WHERE target = $1 AND name = $2")
                .bind(target)
                .bind(name)
                .execute(&self.pool)
                .await?
                .rows_affected()
                > 0,
        )
    }
}
