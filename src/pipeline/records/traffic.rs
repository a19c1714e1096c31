//! The steps that move traffic from one generation to the next and back: `switch`, and
//! blue-green's `start` on an ephemeral port, `applied`, `drain`, `soak` and `revert`.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

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
    pub deployment: Uuid,
    pub digest: String,
    pub container: String,
}

/// A blue-green `switch` result: the route version written, and what it replaced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Switched {
    pub version: i64,
    pub upstream: String,
    pub previous: Option<Previous>,
}

/// What the generation being replaced was, as a blue-green `switch` found it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Previous {
    pub deployment: Uuid,
    pub digest: String,
    pub container: String,
    pub upstream: Option<String>,
}

/// A blue-green `start` result: the loopback address the engine bound for the candidate's
/// HTTP port (the route's upstream), and every port's binding as the engine reported it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Started {
    pub upstream: String,
    /// Every port of the app, in config order: container port and protocol to the host
    /// address. Empty in results journaled before an app had several ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Bound>,
}

/// One port of a started candidate and the loopback address the engine bound it to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Bound {
    pub name: String,
    pub container: u16,
    pub protocol: crate::config::Protocol,
    pub host: std::net::SocketAddr,
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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Drained {
    /// Requests that were in flight on the old generation when the drain began.
    pub in_flight_at_switch: u64,
    /// How long they took to finish (or the drain timeout, if some did not).
    pub waited_ms: u64,
    pub timed_out: bool,
}

/// `soak`: how long the new generation is watched, and how many failed checks in a row
/// fail it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SoakIntent {
    pub container: String,
    pub soak_ms: u64,
    pub failures: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Soaked {
    pub checks: u32,
    pub failures: u32,
}

/// Blue-green's `revert`: the generation traffic goes back to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RevertIntent {
    pub to: Previous,
}

/// Where the route points again, and its version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Reverted {
    pub upstream: String,
    pub version: i64,
}
