//! Where the proxy's routes come from: Postgres, followed with LISTEN/NOTIFY and a full
//! re-read every `proxy.refresh`; and the state file, the last routes known, so that a
//! restart while the database is away still serves them. While the database is away the
//! proxy keeps serving what it has.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::backoff::Backoff;
use crate::config::Config;
use crate::error::error_chain;
use crate::store::{Route, Store, StoreError};

/// Why the proxy has no routes from where they come: each is logged, and the proxy serves
/// what it has meanwhile.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FeedError {
    #[error("{}: {source}", path.display())]
    StateUnreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A state file some other program wrote, or a Pier of another version.
    #[error("{}: {source}", path.display())]
    StateMalformed {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Listen(#[from] sqlx::Error),
    #[error("connection closed")]
    Closed,
}

/// The last routes known; `None` before the first were ever saved.
pub(crate) fn load_state(path: &Path) -> Result<Option<Vec<Route>>, FeedError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| FeedError::StateMalformed {
                    path: path.to_owned(),
                    source,
                })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FeedError::StateUnreadable {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Written to a temporary file and renamed over the old one: a crash mid-write never
/// leaves a half file for the next start to trip on.
fn save_state(path: &Path, routes: &[Route]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(routes).expect("routes serialize"),
    )?;
    std::fs::rename(&tmp, path)
}

/// How long a starting proxy waits for the database to say which schema it has.
const SCHEMA_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// Refuses to start on a database that a newer Pier migrated, as `serve` does. A proxy
/// also starts while the database is away (it serves its last known routes), so a
/// database that does not answer within [`SCHEMA_PATIENCE`] is not waited for.
pub(crate) async fn check_schema(config: &Config) -> Result<(), StoreError> {
    let Ok(store) = Store::connect_lazy_many(&config.server.database_urls()) else {
        return Ok(()); // `follow` says what is wrong with the URL.
    };
    match tokio::time::timeout(SCHEMA_PATIENCE, store.check_schema()).await {
        Ok(Ok(status)) if status.pending() > 0 => {
            tracing::warn!(
                pending = status.pending(),
                "the database's schema is older than this Pier's: run `pier migrate` (or start `pier serve`, which migrates)"
            );
            Ok(())
        }
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e @ StoreError::Schema(_))) => Err(e),
        Ok(Err(e)) => {
            tracing::warn!(error = %error_chain(&e), "proxy cannot read the database's schema; starting with the last known routes");
            Ok(())
        }
        Err(_) => {
            tracing::warn!(
                ?SCHEMA_PATIENCE,
                "the database did not say its schema in time; starting with the last known routes"
            );
            Ok(())
        }
    }
}

pub(crate) async fn follow(config: Arc<Config>, shared: Arc<Shared>, shutdown: CancellationToken) {
    let store = match Store::connect_lazy_many(&config.server.database_urls()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %error_chain(&e), "proxy: bad database url; serving the last known routes only");
            return;
        }
    };
    let mut backoff = Backoff::new(
        std::time::Duration::from_millis(200),
        std::time::Duration::from_secs(5),
    );
    while !shutdown.is_cancelled() {
        match store.own_listener(crate::store::Channel::Routes).await {
            Ok(mut listener) => {
                backoff.reset();
                if let Err(e) = relay(&store, &mut listener, &config, &shared, &shutdown).await {
                    tracing::warn!(error = %error_chain(&e), "proxy lost the database; serving the last known routes");
                }
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "proxy cannot reach the database; serving the last known routes");
                if !backoff.wait_or(&shutdown).await {
                    return;
                }
            }
        }
    }
}

/// Reads all routes now, then again on every NOTIFY and every refresh, until the
/// connection fails (an error) or shutdown (`Ok`).
async fn relay(
    store: &Store,
    listener: &mut PgListener,
    config: &Config,
    shared: &Shared,
    shutdown: &CancellationToken,
) -> Result<(), FeedError> {
    loop {
        let routes = store.routes_of_target(&config.proxy.target).await?;
        shared.install(&routes);
        if let Err(e) = save_state(&config.proxy.state_file, &routes) {
            tracing::warn!(error = %e, "cannot save the proxy's routes; a restart without the database would serve older ones");
        }
        tokio::select! {
            msg = listener.try_recv() => match msg {
                Ok(Some(_)) => {}
                Ok(None) => return Err(FeedError::Closed),
                Err(e) => return Err(e.into()),
            },
            _ = tokio::time::sleep(config.proxy.refresh) => {}
            _ = shutdown.cancelled() => return Ok(()),
        }
    }
}
