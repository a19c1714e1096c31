//! `pier migrate`: apply the pending migrations, or (`--status`) list every migration the
//! database has or this binary carries, and where each stands. Both refuse a database
//! that a newer Pier migrated, naming its schema, and exit non-zero.

use anyhow::Context as _;

use crate::config::Config;
use crate::store::{SchemaStatus, Store};

pub(super) async fn run(config: &Config, status: bool) -> anyhow::Result<()> {
    let store = Store::connect_lazy_many(&config.server.database_urls())?;
    if status {
        return show_status(&store).await;
    }
    let before =
        crate::serve::until_reachable("read the database's schema", || store.check_schema())
            .await?;
    crate::serve::until_reachable("migrate database", || store.migrate()).await?;
    let after = store
        .schema_status()
        .await
        .context("read the database's schema")?;
    println!(
        "database schema {}: {} migration(s) applied now, none pending",
        after.database.unwrap_or(0),
        before.pending()
    );
    Ok(())
}

/// Prints the table, then fails if this binary must not work on the database.
async fn show_status(store: &Store) -> anyhow::Result<()> {
    let status =
        crate::serve::until_reachable("read the database's schema", || store.schema_status())
            .await?;
    print!("{}", render(&status));
    match status.refusal() {
        Some(refused) => Err(refused.into()),
        None => Ok(()),
    }
}

/// A header naming both ends, then one line per migration, oldest first.
fn render(status: &SchemaStatus) -> String {
    let database = match status.database {
        Some(v) => format!("database schema {v}"),
        None => "empty database".to_owned(),
    };
    let mut out = format!(
        "{database}; this Pier carries migrations up to {}; {} pending\n",
        status.known,
        status.pending()
    );
    out.push_str(&format!(
        "{:>7}  {:<8}  {:<23}  {}\n",
        "VERSION", "STATE", "INSTALLED", "DESCRIPTION"
    ));
    for r in &status.rows {
        let installed = r
            .installed_on
            .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
            .unwrap_or_else(|| "-".to_owned());
        out.push_str(&format!(
            "{:>7}  {:<8}  {:<23}  {}\n",
            r.version,
            r.state.as_str(),
            installed,
            r.description
        ));
    }
    out
}
