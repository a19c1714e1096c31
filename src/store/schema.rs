//! The database's schema against the migrations this binary carries: what `pier migrate
//! --status` lists, and what every server command checks before it touches a table.
//!
//! The invariant: a Pier never works on a schema it does not know. A database migrated by
//! a newer Pier holds a migration whose version is above this binary's newest; such a
//! database is refused with "database schema N is newer than this Pier", never read
//! with queries written for an older schema. sqlx's own check would refuse it too, but
//! as "previously applied but is missing", which reads like damage rather than an
//! upgrade in progress.

use sqlx::migrate::Migrator;

use super::{Result, Store, StoreError};

/// The migrations this binary carries (`migrations/`, embedded at compile time).
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Why a database's schema cannot be used by this binary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// A newer Pier migrated the database: run that release (or a later one) instead.
    #[error(
        "database schema {database} is newer than this Pier (it knows schema {known}): \
         run the Pier release that migrated it, or a newer one"
    )]
    Newer { database: i64, known: i64 },
    /// A migration this binary does not carry, below its newest: another build's.
    #[error(
        "database has migration {version}, which this Pier does not carry although it knows \
         later ones: it was migrated by a different build of Pier"
    )]
    Foreign { version: i64 },
    /// An applied migration whose text differs from this binary's copy of it.
    #[error("migration {version} in the database differs from this Pier's copy of it")]
    Changed { version: i64 },
    /// A migration that started and did not finish.
    #[error("migration {version} did not finish; the database needs an operator's repair")]
    Failed { version: i64 },
}

/// One migration as the database recorded it (`_sqlx_migrations`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AppliedMigration {
    pub version: i64,
    pub description: String,
    pub installed_on: chrono::DateTime<chrono::Utc>,
    pub success: bool,
    pub checksum: Vec<u8>,
}

/// One migration this binary carries.
#[derive(Debug, Clone, Copy)]
pub struct KnownMigration<'a> {
    pub version: i64,
    pub description: &'a str,
    pub checksum: &'a [u8],
}

/// Where one migration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationState {
    Applied,
    /// Carried by this binary, not in the database yet: `pier migrate` applies it.
    Pending,
    /// In the database, above everything this binary carries.
    Newer,
    /// In the database, unknown to this binary, below its newest.
    Foreign,
    Changed,
    Failed,
}

impl MigrationState {
    pub fn as_str(self) -> &'static str {
        match self {
            MigrationState::Applied => "applied",
            MigrationState::Pending => "pending",
            MigrationState::Newer => "newer",
            MigrationState::Foreign => "foreign",
            MigrationState::Changed => "changed",
            MigrationState::Failed => "failed",
        }
    }
}

/// One line of `pier migrate --status`.
#[derive(Debug, Clone)]
pub struct MigrationRow {
    pub version: i64,
    pub description: String,
    pub state: MigrationState,
    pub installed_on: Option<chrono::DateTime<chrono::Utc>>,
}

/// Every migration the database has or this binary carries, by version.
#[derive(Debug, Clone)]
pub struct SchemaStatus {
    pub rows: Vec<MigrationRow>,
    /// The newest version this binary carries.
    pub known: i64,
    /// The newest version the database has applied (none on an empty database).
    pub database: Option<i64>,
}

impl SchemaStatus {
    /// Compares what the database applied with what this binary carries.
    pub fn compare(applied: &[AppliedMigration], known: &[KnownMigration<'_>]) -> SchemaStatus {
        let newest_known = known.iter().map(|k| k.version).max().unwrap_or(0);
        let mut rows: Vec<MigrationRow> = applied
            .iter()
            .map(|a| {
                let ours = known.iter().find(|k| k.version == a.version);
                let state = match ours {
                    _ if !a.success => MigrationState::Failed,
                    None if a.version > newest_known => MigrationState::Newer,
                    None => MigrationState::Foreign,
                    Some(k) if k.checksum != a.checksum.as_slice() => MigrationState::Changed,
                    Some(_) => MigrationState::Applied,
                };
                MigrationRow {
                    version: a.version,
                    description: a.description.clone(),
                    state,
                    installed_on: Some(a.installed_on),
                }
            })
            .collect();
        rows.extend(
            known
                .iter()
                .filter(|k| !applied.iter().any(|a| a.version == k.version))
                .map(|k| MigrationRow {
                    version: k.version,
                    description: k.description.to_owned(),
                    state: MigrationState::Pending,
                    installed_on: None,
                }),
        );
        rows.sort_by_key(|r| r.version);
        SchemaStatus {
            rows,
            known: newest_known,
            database: applied.iter().map(|a| a.version).max(),
        }
    }

    pub fn pending(&self) -> usize {
        self.count(MigrationState::Pending)
    }

    fn count(&self, state: MigrationState) -> usize {
        self.rows.iter().filter(|r| r.state == state).count()
    }

    /// Why this binary must not work on the database, if it must not: a newer schema
    /// first, since that is the one an operator meets in an upgrade.
    pub fn refusal(&self) -> Option<SchemaError> {
        let first = |state| self.rows.iter().find(|r| r.state == state);
        if let (Some(_), Some(database)) = (first(MigrationState::Newer), self.database) {
            return Some(SchemaError::Newer {
                database,
                known: self.known,
            });
        }
        if let Some(r) = first(MigrationState::Foreign) {
            return Some(SchemaError::Foreign { version: r.version });
        }
        if let Some(r) = first(MigrationState::Changed) {
            return Some(SchemaError::Changed { version: r.version });
        }
        first(MigrationState::Failed).map(|r| SchemaError::Failed { version: r.version })
    }
}

/// The migrations this binary carries (up-migrations only; Pier has no down ones).
fn known() -> Vec<KnownMigration<'static>> {
    MIGRATOR
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .map(|m| KnownMigration {
            version: m.version,
            description: &m.description,
            checksum: &m.checksum,
        })
        .collect()
}

impl Store {
    /// The database's migrations against this binary's, read without a lock and without
    /// creating anything: an empty database has every migration pending.
    pub async fn schema_status(&self) -> Result<SchemaStatus> {
        let res = self.applied_migrations().await;
        let applied = self.noticed(res)?;
        Ok(SchemaStatus::compare(&applied, &known()))
    }

    async fn applied_migrations(&self) -> Result<Vec<AppliedMigration>> {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(&self.pool)
            .await?;
        if !exists {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_as(
            "SELECT version, description, installed_on, success, checksum
             FROM _sqlx_migrations ORDER BY version",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Refuses a schema this binary cannot work with (see [`SchemaStatus::refusal`]).
    pub async fn check_schema(&self) -> Result<SchemaStatus> {
        let status = self.schema_status().await?;
        match status.refusal() {
            Some(refused) => Err(StoreError::Schema(refused)),
            None => Ok(status),
        }
    }

    /// Applies the pending migrations, under sqlx's advisory lock (several Piers starting
    /// at once migrate once), after refusing a schema this binary cannot work with.
    pub(crate) async fn migrate(&self) -> Result<()> {
        self.check_schema().await?;
        let res = MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|e| from_migrate_error(e, newest_known()));
        self.noticed(res)
    }
}

fn newest_known() -> i64 {
    known().iter().map(|k| k.version).max().unwrap_or(0)
}

/// sqlx's error as the store's. A newer Pier that migrated between the check and the
/// lock shows as a "missing" migration above this binary's newest: the same refusal.
fn from_migrate_error(e: sqlx::migrate::MigrateError, known: i64) -> StoreError {
    use sqlx::migrate::MigrateError as M;
    match e {
        M::Execute(e) => StoreError::from(e),
        M::VersionMissing(v) if v > known => {
            StoreError::Schema(SchemaError::Newer { database: v, known })
        }
        M::VersionMissing(v) => StoreError::Schema(SchemaError::Foreign { version: v }),
        M::VersionMismatch(v) => StoreError::Schema(SchemaError::Changed { version: v }),
        M::Dirty(v) => StoreError::Schema(SchemaError::Failed { version: v }),
        other => StoreError::Query(sqlx::Error::Migrate(Box::new(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(version: i64, checksum: &[u8]) -> AppliedMigration {
        AppliedMigration {
            version,
            description: format!("m{version}"),
            installed_on: chrono::Utc::now(),
            success: true,
            checksum: checksum.to_vec(),
        }
    }

    fn ours() -> Vec<KnownMigration<'static>> {
        [1, 2, 4]
            .into_iter()
            .map(|version| KnownMigration {
                version,
                description: "ours",
                checksum: b"same",
            })
            .collect()
    }

    fn states(s: &SchemaStatus) -> Vec<(i64, &'static str)> {
        s.rows
            .iter()
            .map(|r| (r.version, r.state.as_str()))
            .collect()
    }

    #[test]
    fn an_empty_database_has_every_migration_pending_and_is_not_refused() {
        let s = SchemaStatus::compare(&[], &ours());
        assert_eq!(states(&s), [(1, "pending"), (2, "pending"), (4, "pending")]);
        assert_eq!((s.database, s.known, s.pending()), (None, 4, 3));
        assert_eq!(s.refusal(), None);
    }

    #[test]
    fn an_older_schema_lists_what_migrate_will_apply() {
        let s = SchemaStatus::compare(&[applied(1, b"same"), applied(2, b"same")], &ours());
        assert_eq!(states(&s), [(1, "applied"), (2, "applied"), (4, "pending")]);
        assert_eq!(s.refusal(), None);
    }

    #[test]
    fn a_migration_above_the_newest_known_is_a_newer_schema_and_refused() {
        let db = [1, 2, 4, 5, 7].map(|v| applied(v, b"same"));
        let s = SchemaStatus::compare(&db, &ours());
        assert_eq!(states(&s)[3..], [(5, "newer"), (7, "newer")]);
        let refused = s.refusal().expect("refused");
        assert_eq!(
            refused,
            SchemaError::Newer {
                database: 7,
                known: 4
            }
        );
        assert!(
            refused
                .to_string()
                .starts_with("database schema 7 is newer than this Pier"),
            "{refused}"
        );
    }

    #[test]
    fn an_unknown_migration_below_the_newest_or_a_changed_one_is_refused_as_such() {
        let db = [applied(1, b"same"), applied(3, b"x"), applied(4, b"same")];
        let s = SchemaStatus::compare(&db, &ours());
        assert_eq!(s.refusal(), Some(SchemaError::Foreign { version: 3 }));
        let db = [applied(1, b"same"), applied(2, b"edited")];
        let s = SchemaStatus::compare(&db, &ours());
        assert_eq!(s.refusal(), Some(SchemaError::Changed { version: 2 }));
    }

    #[test]
    fn the_binary_carries_its_migrations_in_order_with_the_newest_last() {
        let known = known();
        assert!(known.len() > 20, "{}", known.len());
        assert!(known.windows(2).all(|w| w[0].version < w[1].version));
        assert_eq!(newest_known(), known.last().unwrap().version);
    }
}
