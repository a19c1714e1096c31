//! `pier import`: a deployment that loads an archive instead of pulling. The archive is
//! written in the same transaction as the deployment, so no worker can claim it without.

use uuid::Uuid;

use super::deployments::enqueue_in;
use super::{Enqueued, NewDeployment, Result, Store};

/// The archive a deployment loads, and the platform it must hold (`None`: the engine's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub archive: String,
    pub platform: Option<String>,
}

impl Store {
    pub(crate) async fn enqueue_import(
        &self,
        d: NewDeployment,
        import: &Import,
    ) -> Result<Enqueued> {
        let mut tx = self.begin().await?;
        let out = enqueue_in(&mut tx, d).await?;
        if let Enqueued::Queued { id, .. } = &out {
            sqlx::query("UPDATE deployments SET archive = $2, archive_platform = $3 WHERE id = $1")
                .bind(id)
                .bind(&import.archive)
                .bind(&import.platform)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(out)
    }

    pub(crate) async fn import_of(&self, deployment: Uuid) -> Result<Option<Import>> {
        let row: Option<(Option<String>, Option<String>)> =
            sqlx::query_as("SELECT archive, archive_platform FROM deployments WHERE id = $1")
                .bind(deployment)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(|(a, p)| {
            a.map(|archive| Import {
                archive,
                platform: p,
            })
        }))
    }
}
