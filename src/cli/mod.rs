//! The `pier` command line.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

use crate::actions::{Actor, Cancelled};
use crate::config::Config;
use crate::store::{DeploymentState, Enqueued, Store};

#[derive(Parser, Debug)]
#[command(
    name = "pier",
    version,
    about = "Deploys exactly the image digest a registry push names."
)]
pub struct Cli {
    /// The configuration file.
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
    pub log_format: crate::serve::LogFormat,
    /// `serve`/`worker` write their process id here; `reload` reads it.
    #[arg(long, global = true, env = "PIER_PID_FILE")]
    pub pid_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
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
    /// Apply database migrations and exit.
    Migrate,
    /// Queue a deployment of an app's tag, or of an exact digest.
    Deploy {
        app: String,
        /// Deploy exactly this digest (sha256:…) instead of resolving the tag.
        #[arg(long)]
        digest: Option<String>,
        /// Wait until the deployment has ended; exit non-zero unless it succeeded.
        #[arg(long)]
        wait: bool,
        /// With --wait: give up after this long (exit 2; the deployment goes on).
        #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Roll an app back to a digest that deployed successfully before, and pin it there:
    /// pushes are recorded but do not move it until `pier unpin`.
    Rollback {
        app: String,
        digest: String,
        /// Wait until the rollback has ended; exit non-zero unless it succeeded.
        #[arg(long)]
        wait: bool,
        #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// End an app's pin: the next push deploys again.
    Unpin { app: String },
    /// Cancel a queued deployment, or stop a running one at its next step boundary.
    Cancel { deployment: uuid::Uuid },
    /// Approve a deployment waiting for approval, as the named admin `--as` (issue 26); that
    /// admin's own token is read from PIER_ADMIN_TOKEN.
    Approve {
        deployment: uuid::Uuid,
        #[arg(long = "as")]
        admin: String,
    },
    /// Reject a deployment waiting for approval: it ends cancelled, naming who.
    Reject {
        deployment: uuid::Uuid,
        #[arg(long = "as")]
        admin: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Let a deployment that waits for its window or a freeze run now, for a reason.
    Override {
        deployment: uuid::Uuid,
        #[arg(long = "as")]
        admin: String,
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
    /// Show what runs and the latest deployments.
    Status {
        #[arg(long)]
        json: bool,
    },
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
        action: Option<crate::contain::VolumesCommand>,
    },
}

/// Worker threads for the command's runtime, when the config sets them: `pier proxy` may be
/// given fewer than one per core, to leave the others to the apps behind it.
pub fn threads(cli: &Cli) -> Option<usize> {
    match cli.command {
        Command::Proxy { .. } => Config::load(&cli.config)
            .ok()
            .map(|c| c.proxy.threads)
            .filter(|n| *n > 0),
        _ => None,
    }
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::load(&cli.config)?;
    match cli.command {
        Command::Serve | Command::Worker => {
            let _pid = cli
                .pid_file
                .as_deref()
                .map(crate::contain::PidFile::write)
                .transpose()?;
            let http = matches!(cli.command, Command::Serve);
            crate::serve::run(config, Some(cli.config.clone()), http).await
        }
        Command::Import {
            app,
            archive,
            digest,
            platform,
        } => crate::contain::import(&config, &app, &archive, digest, platform).await,
        Command::Reload { pid } => crate::contain::reload(pid, cli.pid_file.as_deref()),
        Command::Volumes { action } => crate::contain::volumes(&config, action).await,
        Command::Proxy { target } => proxy(config, target).await,
        Command::Migrate => {
            let store = store(&config)?;
            store.migrate().await.context("migrate")?;
            println!("migrations applied");
            Ok(())
        }
        Command::Status { json } => status(&config, json).await,
        command => operator_action(&config, command).await,
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

/// What an operator does to one app's deployments from the command line.
async fn operator_action(config: &Config, command: Command) -> anyhow::Result<()> {
    match command {
        Command::Deploy {
            app,
            digest,
            wait,
            timeout,
        } => {
            let store = store(config)?;
            let e = crate::actions::deploy(&store, config, &app, digest, &Actor::Cli).await?;
            queued(&store, e, wait.then_some(timeout)).await
        }
        Command::Rollback {
            app,
            digest,
            wait,
            timeout,
        } => {
            let store = store(config)?;
            let e = crate::actions::rollback(&store, config, &app, &digest, &Actor::Cli).await?;
            println!("pinned {app} to {digest}");
            queued(&store, e, wait.then_some(timeout)).await
        }
        Command::Unpin { app } => {
            let u = crate::actions::unpin(&store(config)?, &app, &Actor::Cli).await?;
            println!(
                "unpinned {} (was pinned to {} by {})",
                u.app, u.was.digest, u.was.by
            );
            Ok(())
        }
        Command::Cancel { deployment } => {
            match crate::actions::cancel(&store(config)?, deployment, &Actor::Cli).await? {
                Cancelled::Cancelled => println!("cancelled deployment {deployment}"),
                Cancelled::StopRequested => println!(
                    "stop requested: deployment {deployment} stops at its next step boundary"
                ),
            }
            Ok(())
        }
        command => gate_action(config, command).await,
    }
}

/// Approvals, overrides and freezes (issue 26), from the command line.
async fn gate_action(config: &Config, command: Command) -> anyhow::Result<()> {
    match command {
        Command::Approve { deployment, admin } => {
            let admin = named_admin(config, &admin)?;
            let d = crate::gates::approve(&store(config)?, config, deployment, &admin).await?;
            println!("{}", serde_json::to_string(&d)?);
            Ok(())
        }
        Command::Reject {
            deployment,
            admin,
            reason,
        } => {
            let admin = named_admin(config, &admin)?;
            let s = store(config)?;
            crate::gates::reject(&s, config, deployment, &admin, reason.as_deref()).await?;
            println!("rejected deployment {deployment}");
            Ok(())
        }
        Command::Override {
            deployment,
            admin,
            reason,
        } => {
            let admin = named_admin(config, &admin)?;
            crate::gates::override_wait(&store(config)?, deployment, &admin, Some(&reason)).await?;
            println!("overridden: deployment {deployment} runs now");
            Ok(())
        }
        Command::Freeze { app, until, reason } => {
            let until = crate::gates::parse_until(&until)?;
            let s = store(config)?;
            let f =
                crate::gates::freeze(&s, config, &app, until, Some(&reason), &Actor::Cli).await?;
            println!(
                "froze {} until {}: {}",
                f.app,
                f.until.to_rfc3339(),
                f.reason
            );
            Ok(())
        }
        Command::Unfreeze { app } => {
            match crate::gates::unfreeze(&store(config)?, config, &app, &Actor::Cli).await? {
                Some(f) => println!(
                    "unfroze {} (frozen by {}: {})",
                    f.app, f.frozen_by, f.reason
                ),
                None => println!("{app} was not frozen"),
            }
            Ok(())
        }
        // `run` and `operator_action` take every other command before this.
        other => unreachable!("not a gate command: {other:?}"),
    }
}

/// The named admin `--as NAME`, proven by their own token in PIER_ADMIN_TOKEN: what an
/// approval from the command line records is a person, as on the pages.
fn named_admin(config: &Config, name: &str) -> anyhow::Result<String> {
    let token = std::env::var("PIER_ADMIN_TOKEN")
        .context("set PIER_ADMIN_TOKEN to your own [[admins]] token")?;
    match crate::gates::admin_by_token(config, Some(&token)) {
        Some(a) if a.name == name => Ok(a.name.clone()),
        _ => bail!("PIER_ADMIN_TOKEN is not the token of admin `{name}`"),
    }
}

fn store(config: &Config) -> anyhow::Result<Store> {
    Ok(Store::connect_lazy_many(&config.server.database_urls())?)
}

/// Says what was queued; with `wait`, follows the deployment to its end (woken by the
/// queue's NOTIFY, as the API's long-poll is) and fails unless it succeeded.
async fn queued(
    store: &Store,
    enqueued: Enqueued,
    wait: Option<std::time::Duration>,
) -> anyhow::Result<()> {
    let id = match enqueued {
        Enqueued::Queued { id, superseded, .. } => {
            println!("queued deployment {id}");
            for s in superseded {
                println!("superseded queued deployment {s}");
            }
            id
        }
        Enqueued::AlreadyPending { id, .. } => {
            println!("already queued or running: {id}");
            id
        }
    };
    let Some(within) = wait else { return Ok(()) };
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let d = crate::actions::wait_final(store, id, left).await?;
        if d.state.is_final() {
            println!(
                "{} {}: {}",
                d.id,
                d.state,
                d.outcome.as_deref().unwrap_or("")
            );
            if let Some(e) = &d.error {
                println!("error: {e}");
            }
            return match d.state {
                DeploymentState::Succeeded => Ok(()),
                other => bail!("deployment {id} ended {other}"),
            };
        }
        if left.is_zero() {
            eprintln!(
                "pier: deployment {id} is still {} after {}",
                d.state,
                humantime::format_duration(within)
            );
            std::process::exit(2);
        }
    }
}

async fn status(config: &Config, json: bool) -> anyhow::Result<()> {
    let store = store(config)?;
    let views = status_engines(config);
    let targets = config
        .apps
        .iter()
        .flat_map(|a| a.targets.iter().map(String::as_str));
    let mut snapshot = views.snapshot(targets, None).await;
    snapshot.add_services(&views, &config.apps).await;
    let mut apps = Vec::new();
    let mut rows = Vec::new();
    for a in &config.apps {
        let generations = store.generations_of(&a.name).await?;
        let generation = generations.iter().find(|g| g.target == a.targets[0]);
        let latest = store.app_deployments(&a.name, 1).await?.into_iter().next();
        let running = latest
            .as_ref()
            .filter(|d| d.state == DeploymentState::Running);
        let steps = match running {
            Some(d) => store.steps(d.id).await?,
            None => Vec::new(),
        };
        let engines = crate::web::engines::engine_rows(
            &views,
            a,
            &snapshot,
            &generations,
            running.map(|d| (d, steps.as_slice())),
        );
        apps.push(serde_json::json!({
            "name": a.name,
            "image": a.image,
            "tag": a.tag,
            "generation": generation,
            "latest_deployment": latest,
            "engines": engines,
        }));
        rows.push(engines);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&apps)?);
        return Ok(());
    }
    for (a, engines) in apps.iter().zip(&rows) {
        let serving = a["generation"]["digest"]
            .as_str()
            .unwrap_or("nothing deployed");
        let latest = &a["latest_deployment"];
        println!(
            "{:<20} {}:{}\n  serving: {serving}\n  latest:  {} {} {}",
            a["name"].as_str().unwrap_or(""),
            a["image"].as_str().unwrap_or(""),
            a["tag"].as_str().unwrap_or(""),
            latest["id"].as_str().unwrap_or("-"),
            latest["state"].as_str().unwrap_or(""),
            latest["error"].as_str().unwrap_or(""),
        );
        let swarm = engines.iter().any(|e| e.service.is_some());
        if engines.len() > 1 || swarm {
            for e in engines {
                println!("{}", engine_line(e));
                for n in e.service.iter().flat_map(|s| &s.nodes) {
                    println!(
                        "    node {:<24} {:?} {:?}: {} running, {} on the serving digest",
                        n.node, n.role, n.status, n.running, n.on_digest
                    );
                }
                for err in e.service.iter().flat_map(|s| &s.task_errors) {
                    println!("    task error: {err}");
                }
            }
        }
    }
    Ok(())
}

/// The engines `pier status` asks: every target's, read-only. A target whose client
/// cannot be built here (its key file is not readable by this user) is shown as
/// unreachable with the reason, and the journal's rows are shown all the same.
fn status_engines(config: &Config) -> crate::web::engines::TargetViews {
    match crate::target::Targets::build(&config.targets, None) {
        Ok(t) => crate::web::engines::TargetViews::of(&t),
        Err(e) => {
            eprintln!(
                "pier: {}: engines not asked",
                crate::web::engines::public_reason(&e.to_string())
            );
            crate::web::engines::TargetViews::default()
        }
    }
}

/// `  engine tls1  sha256:…  pier-web-…  running  (rollout: health started)`.
fn engine_line(e: &crate::web::engines::EngineRow) -> String {
    let digest = e
        .digest
        .as_deref()
        .map(crate::web::engines::short_digest)
        .unwrap_or_else(|| "-".to_owned());
    let container = e
        .container_name
        .as_deref()
        .or(e.container_id.as_deref())
        .unwrap_or("-");
    let mut line = format!(
        "  engine {:<12} {digest:<20} {container:<32} {}",
        e.target, e.state
    );
    if let Some(why) = &e.unreachable {
        line.push_str(&format!(": {why}"));
    }
    if let Some(r) = &e.rollout {
        line.push_str(&format!("  (rollout: {})", r.words()));
    }
    line
}
