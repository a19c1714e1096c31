use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, DeviceMapping, EndpointSettings, HostConfig,
    Mount, MountType, NetworkingConfig, RestartPolicy as EngineRestartPolicy,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use futures_util::StreamExt;
use serde::Serialize;

use super::deadline::Call;
use super::ports::PortSpec;
use super::{Engine, Result, label_filters, not_found_is_none, status_of};
use crate::config::{RestartPolicy, TmpfsMount, TmpfsOwner};

/// Everything the `create` step asks of the engine.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub name: String,
    /// `repository@sha256:…`
    pub image: String,
    pub env: Vec<String>,
    pub labels: HashMap<String, String>,
    /// Every port the container exposes, each published where it says.
    pub ports: Vec<PortSpec>,
    pub memory_bytes: Option<i64>,
    pub nano_cpus: Option<i64>,
    pub no_new_privileges: bool,
    pub pids_limit: Option<i64>,
    pub restart: RestartPolicy,
    /// Network, mounts and hardening.
    pub contained: ContainedSpec,
    /// Replaces the image's entrypoint (and so its command): program, then arguments.
    pub command: Option<Vec<String>>,
}

/// What a container is attached to, mounts, and may do.
#[derive(Debug, Clone, Default)]
pub struct ContainedSpec {
    /// The app's private network and the container's aliases on it.
    pub network: Option<(String, Vec<String>)>,
    /// Engine volume name, container path, read-only.
    pub volumes: Vec<(String, String, bool)>,
    /// Host path, container path, read-only. Host paths never reach an error message.
    pub host_mounts: Vec<(std::path::PathBuf, String, bool)>,
    pub devices: Vec<std::path::PathBuf>,
    /// `None`: the engine's default capabilities; `Some(keep)`: all dropped but these.
    pub cap_keep: Option<Vec<String>>,
    pub read_only_root: bool,
    pub tmpfs: Vec<TmpfsMount>,
    /// Owner of every tmpfs mount (the numeric `user`); `None`: root.
    pub tmpfs_owner: Option<TmpfsOwner>,
    pub user: Option<String>,
    /// The host directory (under `[server] secrets_dir`) bound at `/run/secrets`, where
    /// the engine writes the container's secret files before it starts.
    pub secrets_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// The image has no HEALTHCHECK.
    None,
    Starting,
    Healthy,
    Unhealthy,
}

/// A container as the pipeline and the status page see it.
#[derive(Debug, Clone, Serialize)]
pub struct ContainerFacts {
    pub id: String,
    pub name: String,
    pub image: String,
    pub running: bool,
    pub status: String,
    pub exit_code: Option<i64>,
    /// Times the engine restarted it after it exited (restart policy): a crash loop.
    pub restarts: i64,
    pub health: Health,
    pub labels: HashMap<String, String>,
}

impl ContainerFacts {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stopped {
    Stopped,
    WasNotRunning,
    Gone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Removed {
    Removed,
    AlreadyGone,
}

/// The mount options of one tmpfs: its mode always (the engine's default would be the
/// image directory's), and the owner when the app runs as a numeric uid, since runc 1.1
/// resets the mode of a tmpfs over an image directory to that directory's own.
fn tmpfs_options(t: &TmpfsMount, owner: Option<TmpfsOwner>) -> String {
    let mut o = format!("rw,nosuid,nodev,size=64m,mode={}", t.mode);
    if let Some(owner) = owner {
        o.push_str(&format!(",uid={}", owner.uid));
        if let Some(gid) = owner.gid {
            o.push_str(&format!(",gid={gid}"));
        }
    }
    o
}

/// The engine's request for `spec`: ports, restart policy, limits, hardening, mounts.
fn create_body(spec: &ContainerSpec) -> ContainerCreateBody {
    let c = &spec.contained;
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        entrypoint: spec.command.clone(),
        user: c.user.clone(),
        networking_config: networking(c),
        env: Some(spec.env.clone()),
        labels: Some(spec.labels.clone()),
        exposed_ports: Some(spec.ports.iter().map(PortSpec::key).collect()),
        host_config: Some(host_config(spec)),
        ..Default::default()
    }
}

fn host_config(spec: &ContainerSpec) -> HostConfig {
    let port_bindings = super::ports::port_bindings(&spec.ports);
    let c = &spec.contained;
    let mounts = mounts(c);
    let devices = devices(c);
    HostConfig {
        port_bindings,
        restart_policy: Some(EngineRestartPolicy {
            name: Some(restart_policy(spec.restart)),
            maximum_retry_count: None,
        }),
        memory: spec.memory_bytes,
        nano_cpus: spec.nano_cpus,
        pids_limit: spec.pids_limit,
        security_opt: spec
            .no_new_privileges
            .then(|| vec!["no-new-privileges:true".to_owned()]),
        network_mode: c.network.as_ref().map(|(n, _)| n.clone()),
        mounts: (!mounts.is_empty()).then_some(mounts),
        // The legacy form, since the engine then makes the directory itself (a `Mount`
        // needs it to exist, and Pier may not share the engine's filesystem).
        binds: c.secrets_dir.as_ref().map(|d| {
            vec![format!(
                "{}:{}",
                d.to_string_lossy(),
                super::secret_files::SECRETS_TARGET
            )]
        }),
        devices: (!devices.is_empty()).then_some(devices),
        cap_drop: c.cap_keep.as_ref().map(|_| vec!["ALL".to_owned()]),
        cap_add: c.cap_keep.clone().filter(|k| !k.is_empty()),
        readonly_rootfs: c.read_only_root.then_some(true),
        tmpfs: (!c.tmpfs.is_empty()).then(|| {
            c.tmpfs
                .iter()
                .map(|t| (t.target.clone(), tmpfs_options(t, c.tmpfs_owner)))
                .collect()
        }),
        ..Default::default()
    }
}

fn restart_policy(r: RestartPolicy) -> RestartPolicyNameEnum {
    match r {
        RestartPolicy::No => RestartPolicyNameEnum::NO,
        RestartPolicy::Always => RestartPolicyNameEnum::ALWAYS,
        RestartPolicy::OnFailure => RestartPolicyNameEnum::ON_FAILURE,
        RestartPolicy::UnlessStopped => RestartPolicyNameEnum::UNLESS_STOPPED,
    }
}

/// Named volumes first, then host files and binds.
fn mounts(c: &ContainedSpec) -> Vec<Mount> {
    let mut mounts: Vec<Mount> = c
        .volumes
        .iter()
        .map(|(name, target, ro)| Mount {
            target: Some(target.clone()),
            source: Some(name.clone()),
            typ: Some(MountType::VOLUME),
            read_only: Some(*ro),
            ..Default::default()
        })
        .collect();
    mounts.extend(c.host_mounts.iter().map(|(source, target, ro)| Mount {
        target: Some(target.clone()),
        source: Some(source.to_string_lossy().into_owned()),
        typ: Some(MountType::BIND),
        read_only: Some(*ro),
        ..Default::default()
    }));
    mounts
}

fn devices(c: &ContainedSpec) -> Vec<DeviceMapping> {
    c.devices
        .iter()
        .map(|d| DeviceMapping {
            path_on_host: Some(d.to_string_lossy().into_owned()),
            path_in_container: Some(d.to_string_lossy().into_owned()),
            cgroup_permissions: Some("rwm".into()),
        })
        .collect()
}

/// The app's private network, with the service's aliases on it.
fn networking(c: &ContainedSpec) -> Option<NetworkingConfig> {
    c.network.as_ref().map(|(name, aliases)| NetworkingConfig {
        endpoints_config: Some(HashMap::from([(
            name.clone(),
            EndpointSettings {
                aliases: Some(aliases.clone()),
                ..Default::default()
            },
        )])),
    })
}

impl Engine {
    pub async fn create_container(&self, spec: &ContainerSpec) -> Result<String> {
        let body = create_body(spec);
        let options = CreateContainerOptionsBuilder::default()
            .name(&spec.name)
            .build();
        let c = &spec.contained;
        let redact = !(c.host_mounts.is_empty() && c.devices.is_empty());
        let action = format!("create container {}", spec.name);
        let created = self
            .call(Call::Change, &action, async |d| {
                d.create_container(Some(options), body).await
            })
            .await
            // The engine's words may quote a host path; with host mounts or devices in
            // the request only the kind of failure leaves this function.
            .map_err(|e| if redact { e.redacted() } else { e })?;
        Ok(created.id)
    }

    pub async fn inspect_container(&self, id: &str) -> Result<Option<ContainerFacts>> {
        let Some(c) = self.inspect_raw(id).await? else {
            return Ok(None);
        };
        let state = c.state.unwrap_or_default();
        let health = match state.health.and_then(|h| h.status).map(|s| s.to_string()) {
            Some(s) if s == "healthy" => Health::Healthy,
            Some(s) if s == "unhealthy" => Health::Unhealthy,
            Some(s) if s == "starting" => Health::Starting,
            _ => Health::None,
        };
        let config = c.config.unwrap_or_default();
        let restarts = c.restart_count.unwrap_or(0) + i64::from(state.restarting.unwrap_or(false));
        Ok(Some(ContainerFacts {
            id: c.id.unwrap_or_default(),
            name: c
                .name
                .unwrap_or_default()
                .trim_start_matches('/')
                .to_owned(),
            image: config.image.unwrap_or_default(),
            running: state.running.unwrap_or(false),
            status: state.status.map(|s| s.to_string()).unwrap_or_default(),
            exit_code: state.exit_code,
            restarts,
            health,
            labels: config.labels.unwrap_or_default(),
        }))
    }

    /// Containers Pier manages, found by label, never by name.
    pub async fn managed_containers(
        &self,
        app: Option<&str>,
        deployment: Option<&str>,
    ) -> Result<Vec<ContainerFacts>> {
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&label_filters(app, deployment))
            .build();
        let list = self
            .call(Call::Read, "list containers", async |d| {
                d.list_containers(Some(options)).await
            })
            .await?;
        Ok(list
            .into_iter()
            .map(|c| ContainerFacts {
                id: c.id.unwrap_or_default(),
                name: c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .unwrap_or_default()
                    .trim_start_matches('/')
                    .to_owned(),
                image: c.image.unwrap_or_default(),
                running: c.state.as_ref().is_some_and(|s| s.to_string() == "running"),
                status: c.status.unwrap_or_default(),
                exit_code: None,
                restarts: 0,
                health: Health::None,
                labels: c.labels.unwrap_or_default(),
            })
            .collect())
    }

    /// Starting a running container is not an error: replays reach the same state.
    pub async fn start_container(&self, id: &str) -> Result<()> {
        let action = format!("start container {id}");
        self.call(Call::Change, &action, async |d| {
            match d.start_container(id, None).await {
                Err(e) if status_of(&e) == Some(304) => Ok(()),
                other => other,
            }
        })
        .await
    }

    pub(crate) async fn stop_container(&self, id: &str, grace: Duration) -> Result<Stopped> {
        let options = StopContainerOptionsBuilder::default()
            .t(grace.as_secs().min(i32::MAX as u64) as i32)
            .build();
        let action = format!("stop container {id}");
        self.call(Call::Stop(grace), &action, async |d| {
            match d.stop_container(id, Some(options)).await {
                Ok(()) => Ok(Stopped::Stopped),
                Err(e) if status_of(&e) == Some(304) => Ok(Stopped::WasNotRunning),
                Err(e) if status_of(&e) == Some(404) => Ok(Stopped::Gone),
                Err(e) => Err(e),
            }
        })
        .await
    }

    pub async fn remove_container(&self, id: &str) -> Result<Removed> {
        // Its secret files outlive it on the host's tmpfs: emptied first, while the engine
        // can still write them. Trouble there never keeps a container from going.
        if let Err(e) = self.empty_secret_files(id).await {
            tracing::warn!(container = %id, error = %e, "secret files not emptied");
        }
        // Never the container's volumes: they may hold an app's data, and outlive it.
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(false)
            .build();
        let action = format!("remove container {id}");
        self.call(Call::Change, &action, async |d| {
            match d.remove_container(id, Some(options)).await {
                Ok(()) => Ok(Removed::Removed),
                Err(e) if status_of(&e) == Some(404) => Ok(Removed::AlreadyGone),
                // 409: removal already in progress; it will be gone.
                Err(e) if status_of(&e) == Some(409) => Ok(Removed::Removed),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// The last `lines` lines of a container's output, for a failed deployment's record.
    pub(crate) async fn logs_tail(&self, id: &str, lines: usize) -> Result<String> {
        let options = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .tail(&lines.to_string())
            .build();
        let action = format!("logs of {id}");
        self.call(Call::Read, &action, async |d| {
            let mut stream = d.logs(id, Some(options));
            let mut out = String::new();
            while let Some(item) = stream.next().await {
                match item {
                    Ok(chunk) => out.push_str(&String::from_utf8_lossy(&chunk.into_bytes())),
                    Err(e) if status_of(&e) == Some(404) => break,
                    Err(e) => return Err(e),
                }
            }
            Ok(out)
        })
        .await
    }

    /// The engine's whole record of container `id`; `None` when there is none.
    pub(super) async fn inspect_raw(&self, id: &str) -> Result<Option<ContainerInspectResponse>> {
        let action = format!("inspect container {id}");
        self.call(Call::Read, &action, async |d| {
            not_found_is_none(d.inspect_container(id, None).await)
        })
        .await
    }
}
