//! The schema check every server command makes: `pier migrate --status` lists applied and
//! pending migrations, and a database that a newer Pier migrated is refused by `migrate`,
//! `serve`, `worker` and `proxy` alike ("database schema N is newer than this Pier"),
//! exit non-zero, with nothing changed. Against Postgres alone: no engine, no registry.

use crate::support::*;

/// A version above any this binary carries, as a newer Pier's migration would be.
const NEWER: i64 = 99_990_101;

/// A config for the server's own commands on `db`; nothing else is reached before the
/// schema check.
fn config_file(dir: &std::path::Path, db: &TestDb) -> std::path::PathBuf {
    let path = dir.join("pier.toml");
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\ndatabase_url = {}\nadmin_token = \"{}\"\n\
         \n[proxy]\nadmin = \"127.0.0.1:{}\"\nstate_file = {}\n",
        free_port(),
        toml_str(&db.url),
        random_hex(32),
        free_port(),
        toml_str(&dir.join("routes.json").to_string_lossy()),
    );
    std::fs::write(&path, toml).expect("write pier.toml");
    path
}

/// How many migrations the repository holds.
fn carried() -> usize {
    std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .expect("migrations/")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
        })
        .count()
}

fn out(o: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The STATE column of each migration line of `--status`.
fn states(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn migrate_status_lists_every_migration_pending_then_applied() {
    let mut db = TestDb::create().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &db);

    let before = run_pier_cli(&config, &["migrate", "--status"]).await;
    let (stdout, stderr) = out(&before);
    assert!(before.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("empty database;"), "{stdout}");
    let n = carried();
    assert_eq!(states(&stdout), vec!["pending"; n], "{stdout}");
    assert!(stdout.contains(&format!("; {n} pending")), "{stdout}");

    let migrated = run_pier_cli(&config, &["migrate"]).await;
    let (stdout, stderr) = out(&migrated);
    assert!(migrated.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{n} migration(s) applied now")),
        "{stdout}"
    );

    let after = run_pier_cli(&config, &["migrate", "--status"]).await;
    let (stdout, stderr) = out(&after);
    assert!(after.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("database schema "), "{stdout}");
    assert!(stdout.contains("; 0 pending"), "{stdout}");
    assert_eq!(states(&stdout), vec!["applied"; n], "{stdout}");
    db.cleanup().await;
}

#[tokio::test]
async fn a_database_migrated_by_a_newer_pier_is_refused_by_every_server_command() {
    let mut db = TestDb::create().await;
    db.migrate().await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES ($1, 'a newer pier''s migration', true, '\\x00', 0)",
    )
    .bind(NEWER)
    .execute(&db.pool)
    .await
    .expect("record a newer migration");
    let rows = |db: &TestDb| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM _sqlx_migrations")
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let recorded = rows(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &db);
    let refusal = format!("database schema {NEWER} is newer than this Pier");

    for command in [&["migrate"][..], &["serve"], &["worker"], &["proxy"]] {
        let o = run_pier_cli(&config, command).await;
        let (stdout, stderr) = out(&o);
        assert_eq!(
            o.status.code(),
            Some(1),
            "pier {command:?}: {stdout}\n{stderr}"
        );
        assert!(stderr.contains(&refusal), "pier {command:?}: {stderr}");
    }

    let status = run_pier_cli(&config, &["migrate", "--status"]).await;
    let (stdout, stderr) = out(&status);
    assert_eq!(status.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains(&refusal), "{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.contains(&NEWER.to_string()) && last.contains("newer"),
        "{stdout}"
    );
    assert_eq!(rows(&db).await, recorded, "nothing was changed");
    db.cleanup().await;
}
