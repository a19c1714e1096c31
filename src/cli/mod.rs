//! The `pier` command line. Two kinds of command:
//!
//! - the server's own (`serve`, `worker`, `proxy`, `migrate`, `reload`, `import`,
//!   `volumes`, `check`) read the config file and its secrets: [`server_commands`], [`check`];
//! - what an operator does (`deploy`, `rollback`, `unpin`, `cancel`, `approve`, `reject`,
//!   `override`, `freeze`, `unfreeze`, `status`, `logs`) is a client of a running Pier's HTTP API
//!   with the caller's own token, like `docker` or `kubectl`: it needs neither the config,
//!   nor anyone else's secret, nor the database: [`operator`], [`status`], [`client`],
//!   [`credentials`], [`logs`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

mod check;
mod client;
pub(crate) mod contained;
mod credentials;
mod logs;
mod migrate;
mod operator;
mod server_commands;
mod status;

pub use client::ClientError;

#[derive(Parser, Debug)]
#[command(
    name = "pier",
    version,
    about = "Deploys exactly the image digest a registry push names."
)]
pub struct Cli {
    /// The configuration file of the server's own commands (serve, worker, proxy, migrate,
    /// reload, import, volumes, check); the operator's commands do not read it.
    #[arg(
        long,
        short,
        global = true,
        env = "PIER_CONFIG",
        default_value = "pier.toml"
    )]
    pub config: PathBuf,
    /// Log lines as text, or one JSON object per line (with the request, deployment and
    /// step they belong to).
    #[arg(
        long,
        global = true,
        env = "PIER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: crate::runtime::LogFormat,
    /// `serve`/`worker` write their process id here; `reload` reads it.
    #[arg(long, global = true, env = "PIER_PID_FILE")]
    pub pid_file: Option<PathBuf>,
    #[command(flatten)]
    pub remote: Remote,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the operator's commands find Pier, and the caller's own token. The token itself
/// is read from the environment (`PIER_TOKEN`), a file, or `pier login`'s credentials;
/// never from an argument, which other users of the machine can see.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Talking to a Pier server (operator commands)")]
pub struct Remote {
    /// Pier's URL (http:// or https://), as browsers reach it; default: the one
    /// `pier login` stored. The token comes from PIER_TOKEN, --token-file or `pier login`.
    #[arg(long, global = true, env = "PIER_URL")]
    pub url: Option<String>,
    /// A file holding your own token (a named admin's `[[admins]]` token, or the shared
    /// `server.admin_token`), instead of PIER_TOKEN.
    #[arg(long, global = true, env = "PIER_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// The CA certificate(s) (PEM) that sign the https server's certificate: only these
    /// are trusted then, not the system's roots.
    #[arg(long, global = true, env = "PIER_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the HTTP server (webhooks, status page, API) and the workers.
    Serve,
    /// Run workers only (more processes may share one database).
    Worker,
    /// Run Pier's reverse proxy for blue-green apps (its own process).
    Proxy {
        /// The target whose apps this proxy serves (default: `[proxy] target`, else
        /// `local`): on each host of a rollout across engines, the one beside its engine.
        #[arg(long)]
        target: Option<String>,
    },
    /// Apply database migrations and exit. Refuses (exit 1) a database that a newer
    /// Pier migrated: "database schema N is newer than this Pier".
    Migrate {
        /// List every migration, applied or pending (or newer than this Pier), and change
        /// nothing.
        #[arg(long)]
        status: bool,
    },
    /// Check the config as `serve` would load it, and that every secret it refers to
    /// (env:NAME, file:PATH) can be read, without printing any; exits non-zero naming
    /// every field at fault. Needs no database and no engine.
    Check,
    /// Queue a deployment of an app's tag, or of an exact digest.
    Deploy {
        app: String,
        /// Deploy exactly this digest (sha256:…) instead of resolving the tag.
        #[arg(long)]
        digest: Option<String>,
        #[command(flatten)]
        wait: Wait,
    },
    /// Roll an app back to a digest that deployed successfully before, and pin it there:
    /// pushes are recorded but do not move it until `pier unpin`.
    Rollback {
        app: String,
        digest: String,
        #[command(flatten)]
        wait: Wait,
    },
    /// End an app's pin: the next push deploys again.
    Unpin { app: String },
    /// Cancel a queued deployment, or stop a running one at its next step boundary.
    Cancel { deployment: uuid::Uuid },
    /// Approve a deployment waiting for approval, as the named admin whose own token you
    /// give; an approval records a person, so the shared server.admin_token cannot.
    Approve {
        deployment: uuid::Uuid,
        /// Refuse to act unless the token is this admin's (Pier is asked whose it is).
        #[arg(long = "as")]
        admin: Option<String>,
    },
    /// Reject a deployment waiting for approval: it ends cancelled, naming who.
    Reject {
        deployment: uuid::Uuid,
        /// Refuse to act unless the token is this admin's.
        #[arg(long = "as")]
        admin: Option<String>,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Let a deployment that waits for its window or a freeze run now, for a reason.
    Override {
        deployment: uuid::Uuid,
        /// Refuse to act unless the token is this admin's.
        #[arg(long = "as")]
        admin: Option<String>,
        #[arg(long)]
        reason: String,
    },
    /// Hold every new deployment of an app until `--until` (2h, or 2026-12-24T18:00:00Z).
    Freeze {
        app: String,
        #[arg(long)]
        until: String,
        #[arg(long)]
        reason: String,
    },
    /// Lift an app's freeze: what waited for it is judged again at once.
    Unfreeze { app: String },
    /// Show what runs and the latest deployments, as the server sees them.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Print an app's log as its engine keeps it (the serving container's, a deployment's,
    /// or a Swarm service's), with the app's secrets masked; `-f` follows it.
    Logs(logs::LogsArgs),
    /// Check a Pier URL and your token, and keep both for the operator's commands in a
    /// file only you can read ($XDG_CONFIG_HOME/pier/credentials, mode 0600). The token
    /// is read from PIER_TOKEN, --token-file, or standard input.
    Login {
        /// Pier's URL; default: --url / PIER_URL.
        #[arg(value_name = "URL")]
        server: Option<String>,
    },
    /// Delete the credentials `pier login` kept.
    Logout,
    /// Make a running `pier serve` read its configuration again (SIGHUP): checked here
    /// first, and again there; an invalid file changes nothing.
    Reload {
        /// The process to signal; default: the one in --pid-file.
        #[arg(long)]
        pid: Option<u32>,
    },
    /// Deploy an app from an OCI or docker-save archive (air-gapped hosts), through the
    /// same journaled pipeline: loaded, checked against the image id and platform, then
    /// created like any deployment.
    Import {
        app: String,
        archive: PathBuf,
        /// The image id (`sha256:…`, the config digest) the archive must hold.
        #[arg(long)]
        digest: String,
        /// The platform it must be for (`linux/amd64`); default: the engine's.
        #[arg(long)]
        platform: Option<String>,
    },
    /// List named volumes and the app that owns each; `rm NAME` deletes one.
    Volumes {
        #[command(subcommand)]
        action: Option<crate::cli::contained::VolumesCommand>,
    },
}

/// `--wait` and its `--timeout`, for the commands that queue a deployment.
#[derive(Args, Debug, Clone, Copy)]
pub struct Wait {
    /// Wait until the deployment has ended; exit non-zero unless it succeeded.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this long (exit 2; the deployment goes on).
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

impl Wait {
    fn within(self) -> Option<Duration> {
        self.wait.then_some(self.timeout)
    }
}

/// With `--wait`, the deployment had not ended when the timeout passed: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("deployment {id} is still {state} after {after}")]
pub struct StillRunning {
    pub id: uuid::Uuid,
    pub state: String,
    pub after: String,
}

/// Worker threads for the command's runtime, when the config sets them: `pier proxy` may be
/// given fewer than one per core, to leave the others to the apps behind it.
pub fn threads(cli: &Cli) -> Option<usize> {
    match cli.command {
        Command::Proxy { .. } => crate::config::Config::load(&cli.config)
            .ok()
            .map(|c| c.proxy.threads)
            .filter(|n| *n > 0),
        _ => None,
    }
}

/// Runs the command; prints its error, each cause once, and says how it ended: 0, 1, or 2
/// when `--wait` gave up before the deployment ended.
pub async fn run(cli: Cli) -> ExitCode {
    match dispatch(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pier: {}", report(&e));
            if e.is::<StillRunning>() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// An error and every cause under it, each once: a cause that an outer message already
/// quotes (`read pier.toml: No such file…` over the io error itself) is not repeated.
pub fn report(e: &anyhow::Error) -> String {
    crate::error::error_chain(e.as_ref())
}

async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let Cli {
        config,
        pid_file,
        remote,
        command,
        ..
    } = cli;
    match command {
        Command::Check => check::run(&config),
        Command::Login { server } => credentials::login(remote, server).await,
        Command::Logout => credentials::logout(),
        Command::Status { json } => status::run(remote, json).await,
        Command::Logs(args) => logs::run(remote, args).await,
        c @ (Command::Serve
        | Command::Worker
        | Command::Proxy { .. }
        | Command::Migrate { .. }
        | Command::Reload { .. }
        | Command::Import { .. }
        | Command::Volumes { .. }) => server_commands::run(&config, pid_file, c).await,
        operator_command => operator::run(remote, operator_command).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_chain_prints_each_cause_once() {
        let missing = std::path::Path::new("/nonexistent/pier-test/pier.toml");
        let e = server_commands::load_config(missing).unwrap_err();
        let text = report(&e);
        assert_eq!(
            text.matches("No such file or directory").count(),
            1,
            "{text}"
        );
        assert!(text.contains("--config FILE"), "{text}");
        assert!(text.contains("PIER_CONFIG"), "{text}");
        // The config error itself quotes its cause and does not chain it again, so that
        // anyhow's own `{:#}` prints it once too.
        let e = anyhow::Error::new(crate::config::Config::load(missing).unwrap_err());
        let alt = format!("{e:#}");
        assert_eq!(alt.matches("No such file or directory").count(), 1, "{alt}");

        // A cause quoted by its wrapper and also given as its source is printed once; a
        // context over it adds only its own words.
        #[derive(Debug, thiserror::Error)]
        #[error("target `t`: {source}")]
        struct Wrapper {
            #[source]
            source: std::io::Error,
        }
        let inner = std::io::Error::other("engine gone");
        let e = anyhow::Error::new(Wrapper { source: inner }).context("ask the engines");
        assert_eq!(report(&e), "ask the engines: target `t`: engine gone");
    }

    #[test]
    fn no_help_text_names_a_token_value_or_an_issue_number() {
        use clap::CommandFactory;
        let mut cmd = Cli::command();
        let mut texts = vec![cmd.render_long_help().to_string()];
        for sub in cmd.get_subcommands_mut() {
            texts.push(sub.render_long_help().to_string());
        }
        for t in texts {
            assert!(!t.to_lowercase().contains("issue "), "{t}");
            assert!(!t.contains("PIER_TOKEN="), "{t}");
        }
    }
}
