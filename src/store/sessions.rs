//! Status-page sessions. The cookie's value never reaches the database: rows are keyed by
//! its SHA-256, and a row past its expiry signs nobody in, whatever the cookie says.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::text::pg_text;
use super::{Result, Store};

/// How the session's holder proved they are an admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignInMethod {
    Token,
    Password,
    /// A named admin (`[[admins]]`) with their own secret: the user name is proven.
    Admin,
}

impl SignInMethod {
    fn as_str(self) -> &'static str {
        match self {
            Self::Token => "token",
            Self::Password => "password",
            Self::Admin => "admin",
        }
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Session {
    pub user_name: String,
    pub method: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

fn id_hash(id: &str) -> Vec<u8> {
    Sha256::digest(id.as_bytes()).to_vec()
}

impl Store {
    /// Stores a new session for the cookie value `id` (random, made by the caller), and
    /// deletes expired ones: the table holds live sessions only, without a timer.
    pub(crate) async fn create_session(
        &self,
        id: &str,
        user: &str,
        method: SignInMethod,
        ttl: Duration,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM sessions WHERE expires_at < now()")
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO sessions (id_hash, user_name, method, expires_at)
             VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')",
        )
        .bind(id_hash(id))
        .bind(pg_text(user).as_ref())
        .bind(method.as_str())
        .bind(ttl.as_millis().min(i64::MAX as u128) as i64)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The live session the cookie value `id` names; `None` when unknown or expired.
    pub(crate) async fn session(&self, id: &str) -> Result<Option<Session>> {
        Ok(sqlx::query_as(
            "SELECT user_name, method, created_at, expires_at FROM sessions
             WHERE id_hash = $1 AND expires_at > now()",
        )
        .bind(id_hash(id))
        .fetch_optional(&self.pool)
        .await?)
    }

    pub(crate) async fn end_session(&self, id: &str) -> Result<()> {
        sqlx::query("DELETE FROM sessions WHERE id_hash = $1")
            .bind(id_hash(id))
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
