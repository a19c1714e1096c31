//! Commands for contained apps: `pier volumes` (owners, explicit removal) and `pier reload`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::Subcommand;

use crate::config::Config;
use crate::engine::VolumeRemoved;
use crate::store::Store;

#[derive(Subcommand, Debug)]
pub enum VolumesCommand {
    /// Delete one volume and its ownership record. Removing an app from the config never
    /// does this: data goes only when someone names it. Refused for a volume whose labels
    /// do not carry the record's provenance (one Pier did not make for that app).
    Rm {
        name: String,
        /// The engine the volume is on.
        #[arg(long, default_value = crate::config::LOCAL)]
        target: String,
    },
    /// Hand a volume of an earlier incarnation of an app (one removed from the config,
    /// then added again) to the app as configured now: its next deployment mounts the old
    /// data instead of the empty volume a new incarnation gets. The app must be in the
    /// config and mount a volume of that name.
    Adopt {
        name: String,
        /// The engine the volume is on.
        #[arg(long, default_value = crate::config::LOCAL)]
        target: String,
    },
}

/// The pid of a running `pier serve`, removed when it stops.
pub(crate) struct PidFile(PathBuf);

impl PidFile {
    pub(crate) fn write(path: &Path) -> anyhow::Result<Self> {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .with_context(|| format!("write pid file {}", path.display()))?;
        Ok(Self(path.to_owned()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The file was loaded (and so checked whole) before this runs: only a valid file is ever
/// signalled; the server checks it again, since it may change in between.
pub(crate) fn reload(pid: Option<u32>, pid_file: Option<&Path>) -> anyhow::Result<()> {
    let pid = match (pid, pid_file) {
        (Some(p), _) => p,
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("read pid file {}", f.display()))?
            .trim()
            .parse()
            .context("the pid file holds no process id")?,
        (None, None) => bail!("give --pid, or --pid-file (PIER_PID_FILE) as `pier serve` had"),
    };
    let status = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .context("run kill")?;
    if !status.success() {
        bail!("could not signal process {pid}");
    }
    println!("configuration valid; asked process {pid} to reload it");
    Ok(())
}

pub(crate) async fn volumes(config: &Config, action: Option<VolumesCommand>) -> anyhow::Result<()> {
    let store = Store::connect_lazy_many(&config.server.database_urls())?;
    let targets = crate::target::Targets::build(&config.targets, None)
        .context("make the targets' engine clients")?;
    match action {
        None => list_volumes(config, &store, &targets).await,
        Some(VolumesCommand::Rm { name, target }) => {
            remove_volume(&store, &targets, &name, &target).await
        }
        Some(VolumesCommand::Adopt { name, target }) => {
            adopt_volume(config, &store, &targets, &name, &target).await
        }
    }
}

async fn list_volumes(
    config: &Config,
    store: &Store,
    targets: &crate::target::Targets,
) -> anyhow::Result<()> {
    let owners = store.volume_owners().await.context("read volume owners")?;
    if owners.is_empty() {
        println!("no volumes");
    }
    for o in owners {
        let Some(target) = targets.get(&o.target) else {
            println!(
                "{:<40} app {}  on target {} (not in the config)",
                o.name, o.app, o.target
            );
            continue;
        };
        let on_engine = match target.engine.volume(&o.name).await {
            Ok(Some(v)) if v.carries(&o.app, o.made_in) => "exists",
            Ok(Some(_)) => "exists but NOT made by Pier for this app (labels differ)",
            Ok(None) => "not created",
            Err(_) => "unknown",
        };
        let configured = if config.app(&o.app).is_some() {
            ""
        } else {
            " (app not in config)"
        };
        let ended = if o.live {
            ""
        } else {
            " (ended: not mounted; `pier volumes adopt` hands it to the app)"
        };
        println!(
            "{:<40} app {}{configured}  service {}  incarnation {}{ended}  on {}: {on_engine}",
            o.name, o.app, o.service, o.incarnation, o.target
        );
    }
    Ok(())
}

/// The engine of `target`, and the ownership record of volume `name` on it.
async fn volume_on<'t>(
    store: &Store,
    targets: &'t crate::target::Targets,
    name: &str,
    target: &str,
) -> anyhow::Result<(&'t crate::engine::Engine, Option<crate::store::VolumeOwner>)> {
    let engine = &targets
        .get(target)
        .with_context(|| format!("no target `{target}` in the config"))?
        .engine;
    Ok((engine, store.volume_owner(target, name).await?))
}

async fn remove_volume(
    store: &Store,
    targets: &crate::target::Targets,
    name: &str,
    target: &str,
) -> anyhow::Result<()> {
    let (engine, owner) = volume_on(store, targets, name, target).await?;
    let Some(owner) = owner else {
        bail!("volume {name} is not recorded as Pier's; remove it with docker if you must");
    };
    // The record alone never deletes data: the volume must carry the record's
    // provenance (made by Pier for that app and incarnation). A hand-made volume
    // under a recorded name is someone's data that Pier never had.
    if let Some(found) = engine.volume(name).await?
        && !found.carries(&owner.app, owner.made_in)
    {
        bail!(
            "volume {name} on the engine was not made by Pier for app {} (its labels \
             do not carry the record's app and incarnation {}); nothing was removed. \
             Remove it with docker if you must",
            owner.app,
            owner.made_in
        );
    }
    match engine.remove_volume(name).await? {
        VolumeRemoved::InUse => {
            bail!("volume {name} is in use by a container; nothing was removed")
        }
        VolumeRemoved::Removed | VolumeRemoved::AlreadyGone => {}
    }
    store.forget_volume(target, name).await?;
    println!("removed volume {name} (owned by app {})", owner.app);
    Ok(())
}

/// Only a volume Pier recorded for an app that is configured again, that the app's
/// config still mounts, and whose engine labels carry the record's provenance: adoption
/// moves ownership, never data, and never across apps.
async fn adopt_volume(
    config: &Config,
    store: &Store,
    targets: &crate::target::Targets,
    name: &str,
    target: &str,
) -> anyhow::Result<()> {
    let (engine, owner) = volume_on(store, targets, name, target).await?;
    let Some(owner) = owner else {
        bail!("volume {name} on {target} is not recorded as Pier's; nothing was adopted");
    };
    let app = &owner.app;
    let Some(configured) = config.app(app) else {
        bail!("app {app} is not in the config: add it, then adopt its old volume");
    };
    let mounts: Vec<String> = std::iter::once(&configured.contained)
        .chain(configured.services.iter().map(|s| &s.contained))
        .flat_map(|c| c.volumes.iter().map(|v| v.engine_name(app)))
        .collect();
    if !mounts
        .iter()
        .any(|m| name.split('.').next() == Some(m.as_str()))
    {
        bail!(
            "app {app} mounts no volume that {name} can serve (it mounts: {}); nothing was adopted",
            if mounts.is_empty() {
                "none".to_owned()
            } else {
                mounts.join(", ")
            }
        );
    }
    if let Some(found) = engine.volume(name).await?
        && !found.carries(app, owner.made_in)
    {
        bail!(
            "volume {name} on the engine was not made by Pier for app {app}; nothing was adopted"
        );
    }
    match store.adopt_volume(target, name, app).await? {
        crate::store::Adopted::AlreadyLive => {
            println!("volume {name} already belongs to app {app} as configured now");
        }
        crate::store::Adopted::Adopted { from, to } => println!(
            "volume {name} now belongs to app {app} (incarnation {to}, was {from}); \
             the app's next deployment mounts it"
        ),
    }
    Ok(())
}

/// `pier import`: queues a deployment that loads `archive` instead of pulling. The path is
/// made absolute here, since the worker that runs it may have another working directory.
pub(crate) async fn import(
    config: &Config,
    app: &str,
    archive: &Path,
    digest: String,
    platform: Option<String>,
) -> anyhow::Result<()> {
    let Some(a) = config.app(app) else {
        bail!("no app `{app}` in the configuration");
    };
    if !crate::intake::generic::is_digest(&digest) {
        bail!("`{digest}` is not a sha256 digest");
    }
    let archive =
        std::fs::canonicalize(archive).with_context(|| format!("archive {}", archive.display()))?;
    if !std::fs::metadata(&archive).is_ok_and(|m| m.is_file()) {
        bail!("{} is not a regular file", archive.display());
    }
    let store = Store::connect_lazy_many(&config.server.database_urls())?;
    let enqueued = store
        .enqueue_import(
            crate::store::NewDeployment {
                app: a.name.to_string(),
                trigger: crate::store::Trigger::Manual,
                delivery_id: None,
                image: a.image.clone(),
                requested_tag: None,
                pinned: true,
                claimed_digest: Some(digest),
            },
            &crate::store::Import {
                archive: archive.to_string_lossy().into_owned(),
                platform,
            },
        )
        .await
        .context("queue the import")?;
    match enqueued {
        crate::store::Enqueued::Queued { id, .. } => println!("queued deployment {id}"),
        crate::store::Enqueued::AlreadyPending { id, .. } => {
            bail!("that image id is already queued or running for `{app}`: {id}")
        }
    }
    Ok(())
}
