//! Volume ownership: which app (and which incarnation of it) owns each engine volume Pier
//! made. Ownership is this record, never a name or a label; and a record alone proves
//! nothing about the volume on the engine: only one whose labels carry the record's
//! provenance (app, incarnation) is the record's ([`crate::engine::Labelled::carries`]).

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
    pub incarnation: Uuid,
    pub service: String,
    pub deployment_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl Store {
    /// The app's incarnation, made on first use; two callers at once agree on one.
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

    /// Records `app` as the owner of volume `name` unless someone already is, and returns
    /// the owner on record: the caller compares it with itself and refuses another's.
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
            "INSERT INTO volumes (name, app, incarnation, service, deployment_id, target)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (target, name) DO NOTHING",
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
        Ok(sqlx::query_as(
            "SELECT target, name, app, incarnation, service, deployment_id, created_at
             FROM volumes WHERE target = $1 AND name = $2",
        )
        .bind(target)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(crate) async fn volume_owners(&self) -> Result<Vec<VolumeOwner>> {
        Ok(sqlx::query_as(
            "SELECT target, name, app, incarnation, service, deployment_id, created_at
             FROM volumes ORDER BY app, name, target LIMIT 10000",
        )
        .fetch_all(&self.pool)
        .await?)
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
