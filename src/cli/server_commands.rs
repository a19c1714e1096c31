//! The server's own commands: they read the config file and its secrets, and talk to the
//! database and the engines directly. `pier check` is in [`super::check`].

use std::path::{Path, PathBuf};

use super::Command;
use crate::config::{Config, ConfigError};

/// The config at `path`; a missing file says how to point Pier at one.
pub(super) fn load_config(path: &Path) -> anyhow::Result<Config> {
    match Config::load(path) {
        Ok(c) => Ok(c),
        Err(e @ ConfigError::Read { .. }) if is_missing(&e) => Err(anyhow::anyhow!(
            "{e}: give Pier its config with --config FILE or the PIER_CONFIG environment variable"
        )),
        Err(e) => Err(e.into()),
    }
}

fn is_missing(e: &ConfigError) -> bool {
    matches!(e, ConfigError::Read { cause, .. } if cause.kind() == std::io::ErrorKind::NotFound)
}

pub(super) async fn run(
    config_path: &Path,
    pid_file: Option<PathBuf>,
    command: Command,
) -> anyhow::Result<()> {
    let config = load_config(config_path)?;
    match command {
        Command::Serve | Command::Worker => {
            let _pid = pid_file
                .as_deref()
                .map(crate::cli::contained::PidFile::write)
                .transpose()?;
            let http = matches!(command, Command::Serve);
            crate::serve::run(config, Some(config_path.to_owned()), http).await
        }
        Command::Import {
            app,
            archive,
            digest,
            platform,
        } => crate::cli::contained::import(&config, &app, &archive, digest, platform).await,
        Command::Reload { pid } => crate::cli::contained::reload(pid, pid_file.as_deref()),
        Command::Volumes { action } => crate::cli::contained::volumes(&config, action).await,
        Command::Proxy { target } => proxy(config, target).await,
        Command::Migrate { status } => super::migrate::run(&config, status).await,
        // `super::dispatch` sends only the commands above here.
        other => unreachable!("not a server command: {other:?}"),
    }
}

/// `pier proxy`, maybe for another target than the config's.
async fn proxy(mut config: Config, target: Option<String>) -> anyhow::Result<()> {
    if let Some(t) = target {
        anyhow::ensure!(
            config.targets.iter().any(|c| c.name == t),
            "--target {t}: no such target in the config"
        );
        config.proxy.target = t;
    }
    crate::proxy::run(config).await
}
