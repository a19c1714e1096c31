//! What each step writes to its journal row, as types: the step serializes them as its
//! intent and result, and the status page deserializes the same types to say what the
//! step did. A field renamed on one side is renamed on both, so the page cannot read a key
//! the step never writes (it once said "none runs" of every recreate's stop, reading
//! `containers` where the step wrote `running`).
//!
//! The JSON of each record is part of the journal protocol: a replay compares a strict
//! intent with the recorded one by value, so a shape change here makes deployments that
//! were in flight across an upgrade fail as conflicts rather than swap parameters.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use super::blue_green::{Previous, Switched};
pub use super::container::{Candidate, OldGeneration, Retired};
pub use super::health::{Healthy, Probe};
pub use super::image::VerifiedImage;
pub use super::rollback::RollbackIntent;
pub use super::signature::{SignatureIntent, Signed};
pub use crate::registry::Resolved;

/// `resolve` of the app's own image: a tag to look up, or a pinned digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ResolveIntent {
    pub image: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
    pub platform: String,
}

/// `resolve` of a further service; `from_deployment` names the deployment whose journal
/// gave a pinned digest. Also reads a primary's [`ResolveIntent`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ServiceResolveIntent {
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_deployment: Option<Uuid>,
    pub platform: String,
}

/// `resolve` of a `pier import`: the archive to load and the image id it must hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ImportIntent {
    pub archive: String,
    pub image_id: String,
    pub platform: String,
}

/// `pull` and `verify`: `repo@sha256:…`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ImageIntent {
    pub reference: String,
}

/// What `create` asks for. Env values are journaled only as a keyed hash (HMAC-SHA256 with
/// the installation's key): a changed value shows as a change, but a plain hash would let
/// anyone who reads the page confirm a guessed secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CreateIntent {
    pub name: String,
    pub image: String,
    pub env_names: Vec<String>,
    pub env_hmac: String,
    pub port: u16,
    pub publish: Option<SocketAddr>,
    pub memory_bytes: Option<i64>,
    pub nano_cpus: Option<i64>,
    pub no_new_privileges: bool,
    pub pids_limit: Option<i64>,
    pub restart: String,
    /// Issue 10: secret keys (values only inside `env_hmac`), network, mounts, hardening.
    pub secret_names: Vec<String>,
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

/// `start`; a blue-green candidate is published on an ephemeral loopback port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StartIntent {
    pub container: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<String>,
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

/// `switch`: the candidate becomes the serving generation (blue-green: at `upstream`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SwitchIntent {
    pub container: String,
    pub digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
}

/// A recreate's `switch` result: the container that serves now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SwitchedTo {
    pub container: String,
    pub name: String,
    /// What served on this engine before, read inside the step (before its transaction
    /// changes it), in a rollout across engines: what a `revert` puts back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<GenerationRef>,
}

/// A serving generation as the journal names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GenerationRef {
    pub deployment: uuid::Uuid,
    pub digest: String,
    pub container: String,
}

/// `applied`: the route version the proxy must serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AppliedIntent {
    pub version: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Applied {
    pub version: i64,
    pub waited_ms: u64,
}

/// `drain`: the old generation's upstream, whose requests in flight are waited for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DrainIntent {
    pub upstream: String,
}

/// `soak`: how long the new generation is watched, and how many failed checks in a row
/// fail it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SoakIntent {
    pub container: String,
    pub soak_ms: u64,
    pub failures: u32,
}

/// `network`: the app's private network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct NetworkIntent {
    pub network: String,
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

/// `revert`: the generation traffic goes back to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RevertIntent {
    pub to: Previous,
}

/// `retire`: the old generation's containers, removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RetireIntent {
    pub containers: Vec<String>,
}
