//! The configuration a running Pier follows now: replaced whole by a reload (`SIGHUP`,
//! `pier reload`) only when the new file loads and checks whole; an invalid file changes
//! nothing and its error is kept for the status page.

use std::sync::{Arc, RwLock};

use super::{Config, ConfigError};

#[derive(Clone)]
pub struct LiveConfig {
    inner: Arc<RwLock<State>>,
    /// The number of successful reloads, announced to whoever follows them (the poller
    /// starts and stops its per-app timers there).
    reloaded: Arc<tokio::sync::watch::Sender<u64>>,
}

struct State {
    config: Arc<Config>,
    /// Where a reload reads from; `None` for a config built in memory.
    path: Option<PathBuf>,
    /// The last reload's error, until a reload succeeds.
    error: Option<String>,
    reloads: u64,
}

use std::path::PathBuf;

impl LiveConfig {
    pub fn new(config: Arc<Config>, path: Option<PathBuf>) -> Self {
        Self {
            inner: Arc::new(RwLock::new(State {
                config,
                path,
                error: None,
                reloads: 0,
            })),
            reloaded: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    /// The config as it is now. Callers take a snapshot per decision, never hold the lock.
    pub(crate) fn load(&self) -> Arc<Config> {
        self.read().config.clone()
    }

    /// The last failed reload's error (no secret values: config errors name variables and
    /// fields, never values).
    pub(crate) fn reload_error(&self) -> Option<String> {
        self.read().error.clone()
    }

    /// Successful reloads since start.
    pub(crate) fn reloads(&self) -> u64 {
        self.read().reloads
    }

    /// Changes after each successful reload.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloaded.subscribe()
    }

    /// Reads and checks the file again; the new config replaces the old only if it is
    /// valid whole. Server settings that need a restart (listen address, database,
    /// workers) keep their start-up values until then.
    pub(crate) fn reload(&self) -> Result<(), ConfigError> {
        let Some(path) = self.read().path.clone() else {
            return Ok(());
        };
        let res = Config::load(&path);
        let mut s = self.inner.write().unwrap_or_else(|p| p.into_inner());
        match res {
            Ok(c) => {
                s.config = Arc::new(c);
                s.error = None;
                s.reloads += 1;
                self.reloaded.send_replace(s.reloads);
                Ok(())
            }
            Err(e) => {
                s.error = Some(without_source_lines(&e.to_string()));
                Err(e)
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-written config: writes are
        // one assignment of a whole `Arc`.
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for LiveConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveConfig")
    }
}

/// A TOML parse error quotes the offending line of the file, which may hold an inline
/// secret: the page and the log get the position and the reason only.
fn without_source_lines(text: &str) -> String {
    text.lines()
        .filter(|l| {
            !l.trim_start().starts_with('|')
                && !l
                    .trim_start()
                    .split_once(" |")
                    .is_some_and(|(n, _)| n.trim().chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_reload_keeps_the_old_config_and_its_error_quotes_no_line() {
        let dir = std::env::temp_dir().join(format!("pier-live-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pier.toml");
        let good = "[server]\ndatabase_url = \"postgres://localhost/a\"\n";
        std::fs::write(&path, good).unwrap();
        let live = LiveConfig::new(Arc::new(Config::load(&path).unwrap()), Some(path.clone()));
        std::fs::write(
            &path,
            "[server]\ndatabase_url = \"postgres://u:hunter2@x/a\" oops\n",
        )
        .unwrap();
        assert!(live.reload().is_err());
        let e = live.reload_error().unwrap();
        assert!(!e.contains("hunter2"), "{e}");
        assert_eq!(
            live.load().server.database_urls(),
            ["postgres://localhost/a"]
        );
        std::fs::write(&path, good.replace("/a", "/b")).unwrap();
        live.reload().unwrap();
        assert_eq!(live.reload_error(), None);
        assert_eq!(
            live.load().server.database_urls(),
            ["postgres://localhost/b"]
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
