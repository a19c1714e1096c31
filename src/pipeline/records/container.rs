//! A container's steps on one engine: what it stands in (`network`, `volumes`, `connect`),
//! its life (`create`, `start`, `health`), the old generation's (`stop_old`, `retire`) and
//! the undo of a failed one (`rollback`).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// What `create` asks for. Env values are journaled only as a keyed hash (HMAC-SHA256 with
/// the installation's key): a changed value shows as a change, but a plain hash would let
/// anyone who reads the page confirm a guessed secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CreateIntent {
    pub name: String,
    pub image: String,
    pub env_names: Vec<String>,
    pub env_hmac: String,
    /// The HTTP port, and where it is published.
    pub port: u16,
    pub publish: Option<SocketAddr>,
    /// The app's other ports, TCP and UDP, in config order; left out when it has one port,
    /// so a one-port app's intent reads as it always has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_ports: Vec<PortIntent>,
    pub memory_bytes: Option<i64>,
    pub nano_cpus: Option<i64>,
    pub no_new_privileges: bool,
    pub pids_limit: Option<i64>,
    pub restart: String,
    /// Secret keys (their values only inside `env_hmac`), then what the container stands
    /// in and how it is hardened: networks, mounts, capabilities, user.
    pub secret_names: Vec<String>,
    /// Secrets given as files under `/run/secrets`: their keys, and one keyed hash of
    /// their values (a rotated one shows as a change). Absent when there are none, so
    /// intents journaled before files existed read the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_files: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_files_hmac: Option<String>,
    pub network: Option<String>,
    pub aliases: Vec<String>,
    pub volumes: Vec<String>,
    /// Host mounts and devices by container path, each with a keyed hash of its host path:
    /// a changed path shows as a change, and no host path is written to the journal.
    pub host_mounts: Vec<String>,
    pub cap_keep: Option<Vec<String>>,
    pub read_only_root: bool,
    /// Targets, with `:mode=…` when not the default 1777; the owner follows from `user`.
    pub tmpfs: Vec<String>,
    pub user: Option<String>,
    /// Several services: the program that replaces the image's entrypoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
}

/// A port of the container besides the HTTP one, in `create`'s intent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PortIntent {
    pub name: String,
    pub container: u16,
    pub protocol: crate::config::Protocol,
    pub publish: Option<SocketAddr>,
}

/// `create`'s result: the candidate container.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Candidate {
    pub id: String,
    pub name: String,
    /// True when a replay found the container already created and took it over.
    #[serde(default)]
    pub adopted: bool,
}

/// `network`: the app's private network (the result is its name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct NetworkIntent {
    pub network: String,
}

/// One of the app's named volumes in `volumes`' intent (a list of them).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct VolumeIntent {
    /// The engine's name (`pier-<app>-<name>`).
    pub name: String,
    pub target: String,
}

/// `volumes`' result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Volumes {
    /// Volumes this step created; the others existed already and are the app's.
    pub created: Vec<String>,
    pub reused: Vec<String>,
}

/// `connect`: the shared networks the candidate joins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ConnectIntent {
    pub container: String,
    pub networks: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Connected {
    pub joined: Vec<String>,
}

/// `start`; a blue-green candidate is published on an ephemeral loopback port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StartIntent {
    pub container: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<String>,
    /// A blue-green candidate's ports besides the HTTP one (`9090/tcp`, `5353/udp`), each
    /// also published on an ephemeral loopback port and read back; left out when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_ports: Vec<String>,
}

/// `stop_old`, intent and result alike: the old generation, observed when the step began.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct OldGeneration {
    /// Containers that were running when the step began: stopped now, and started
    /// again if the deployment fails.
    pub running: Vec<String>,
    /// Other containers of the app (stopped leftovers): removed by `retire`. Left out of
    /// the JSON when empty, so a blue-green stop (one running container) journals
    /// `{"running": [id]}` as it always has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle: Vec<String>,
    /// Containers labelled for the app that Pier's journal does not know (started by hand,
    /// say): never stopped or removed, only reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unaccounted: Vec<String>,
}

/// `health` of the app's own container: how it is judged healthy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub(crate) enum Probe {
    /// HTTP GET on the published port until a 2xx (whose JSON body has `json`'s fields,
    /// when some are required).
    Http {
        url: String,
        timeout_ms: u64,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        json: BTreeMap<String, String>,
        /// The target whose `pier proxy` sends the GETs, on its own host (a remote
        /// engine publishes on that host's loopback, not this one's); none: Pier does.
        /// Part of the journaled intent, so a replay never moves the probe elsewhere.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        via: Option<String>,
    },
    /// The image's own HEALTHCHECK, as the engine reports it.
    Healthcheck { timeout_ms: u64 },
    /// Nothing to probe: running is all that can be checked.
    Running,
}

/// `health`'s result, the app's and a further service's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Healthy {
    pub probes: u32,
    pub elapsed_ms: u64,
    /// What answered; for a remote target, also which `pier proxy` sent the probes.
    pub detail: String,
}

/// `health` of a further service: its container, and how it is judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ServiceHealthIntent {
    pub container: String,
    #[serde(flatten)]
    pub probe: ServiceProbe,
}

/// How a further service is judged healthy: it has no port to probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub(crate) enum ServiceProbe {
    /// The image's own HEALTHCHECK, as the engine reports it.
    Healthcheck { timeout_ms: u64 },
    /// Running, and still running (never restarted) after `settle_ms`.
    Settle { settle_ms: u64 },
}

/// `retire`: the old generation's containers, removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RetireIntent {
    pub containers: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Retired {
    pub removed: Vec<String>,
    pub already_gone: Vec<String>,
    pub warnings: Vec<String>,
}

/// `rollback` of a failed deployment on one engine: what it made goes, what it stopped
/// starts again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RollbackIntent {
    pub candidates: Vec<String>,
    pub restore: Vec<String>,
    /// Blue-green, after a revert: the route version the proxy must serve before the
    /// candidate is removed, so that no request is sent to a container being removed.
    #[serde(default)]
    pub after_route: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RolledBack {
    pub removed_candidates: Vec<String>,
    pub restarted: Vec<String>,
    pub warnings: Vec<String>,
    pub logs: Option<String>,
}
