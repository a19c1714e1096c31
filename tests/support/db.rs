//! Fresh Postgres databases, one per test.

use super::*;

// ---------------------------------------------------------------------------------------------
// Postgres
// ---------------------------------------------------------------------------------------------

/// The server the tests create their databases on.
pub fn base_database_url() -> String {
    std::env::var("PIER_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://pier:pier@127.0.0.1:5432/postgres".to_owned())
}

/// A fresh, empty database `pier_test_<uuid>`, dropped `WITH (FORCE)` by [`TestDb::cleanup`]
/// or, failing that, on `Drop`.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
    /// A server of the test's own (a [`PgPair`]): it goes with its directory, so the
    /// database is not dropped.
    own_server: bool,
    dropped: bool,
}

impl TestDb {
    pub async fn create() -> TestDb {
        Self::create_at(&base_database_url(), false).await
    }

    /// A fresh database on a server the test runs itself (`base`: a superuser's URL).
    pub async fn create_on(base: &str) -> TestDb {
        Self::create_at(base, true).await
    }

    /// Points `url` and `pool` at another server holding the same database (the promoted
    /// standby after a failover).
    pub async fn repoint(&mut self, server: &str) {
        let mut url = reqwest::Url::parse(server).expect("a database URL");
        url.set_path(&format!("/{}", self.name));
        self.url = url.to_string();
        self.pool.close().await;
        self.pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.url));
    }

    async fn create_at(base: &str, own_server: bool) -> TestDb {
        let base = base.to_owned();
        let name = format!("pier_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&base)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "connect to {base}: {e} (is Postgres running? `pg_ctlcluster 15 main start`)"
                )
            });
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        let _ = conn.close().await;

        let mut url = reqwest::Url::parse(&base).expect("PIER_TEST_DATABASE_URL is a URL");
        url.set_path(&format!("/{name}"));
        let url = url.to_string();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        TestDb {
            name,
            url,
            pool,
            own_server,
            dropped: false,
        }
    }

    /// Applies the crate's `migrations/` (Pier normally does this itself at start-up).
    pub async fn migrate(&self) {
        sqlx::migrate!("./migrations")
            .run(&self.pool)
            .await
            .expect("run migrations");
    }

    /// Closes the pool and drops the database.
    pub async fn cleanup(&mut self) {
        if self.dropped {
            return;
        }
        self.pool.close().await;
        if !self.own_server {
            drop_database(&self.name).await;
        }
        self.dropped = true;
    }
}

async fn drop_database(name: &str) {
    let base = base_database_url();
    match sqlx::PgConnection::connect(&base).await {
        Ok(mut conn) => {
            let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
            if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await
            {
                eprintln!("test harness: DROP DATABASE {name}: {e}");
            }
            let _ = conn.close().await;
        }
        Err(e) => eprintln!("test harness: cannot drop {name}: connect {base}: {e}"),
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if !self.dropped && !self.own_server {
            self.dropped = true;
            let name = self.name.clone();
            block_on_side_thread(async move { drop_database(&name).await });
        }
    }
}
