//! What each step writes to its journal row, as types: the step serializes them as its
//! intent and result, and the status page deserializes the same types to say what the
//! step did. A field renamed on one side is renamed on both, so the page cannot read a key
//! the step never writes (it once said "none runs" of every recreate's stop, reading
//! `containers` where the step wrote `running`).
//!
//! The JSON of each record is part of the journal protocol: a replay compares a strict
//! intent with the recorded one by value, so a shape change here makes deployments that
//! were in flight across an upgrade fail as conflicts rather than swap parameters.
//!
//! One file per family of steps: the image's (`image.rs`), a container's (`container.rs`),
//! the ones that move traffic between generations (`traffic.rs`), a rollout's across
//! engines (`rollout.rs`), a Swarm service's (`swarm.rs`). The types hold data only; what
//! a step does with them is beside the step.

mod container;
mod image;
mod rollout;
mod swarm;
mod traffic;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use crate::registry::Resolved;
pub(crate) use container::{
    Candidate, ConnectIntent, Connected, CreateIntent, Healthy, NetworkIntent, OldGeneration,
    PortIntent, Probe, RetireIntent, Retired, RollbackIntent, RolledBack, ServiceHealthIntent,
    ServiceProbe, StartIntent, VolumeIntent, Volumes,
};
pub(crate) use image::{
    ImageIntent, ImportIntent, Loaded, ResolveIntent, ServiceResolveIntent, SignatureIntent,
    Signed, VerifiedImage,
};
pub(crate) use rollout::{ReachIntent, Reached, RevertToIntent, RevertedTo};
pub(crate) use swarm::{
    Checked, ConvergeIntent, Converged, ManifestIntent, ServiceRemoved, ServiceRollbackIntent,
    SpecBefore, UpdatePlan, Updated,
};
pub(crate) use traffic::{
    Applied, AppliedIntent, Bound, DrainIntent, Drained, GenerationRef, Previous, RevertIntent,
    Reverted, SoakIntent, Soaked, Started, SwitchIntent, Switched, SwitchedTo,
};

/// The intent of a step an operator stopped the deployment before: who asked. Written in
/// place of the step's own intent, so a replay knows the stop was no conflict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StopRequest {
    pub stop_requested_by: String,
}

/// The intent of a step that failed while observing what it would do (the engine did not
/// answer), before it had an intent: `{}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Unobserved {}

impl Unobserved {
    /// Whether `intent` is this marker rather than a step's own intent.
    pub(crate) fn is(intent: &Value) -> bool {
        intent.as_object().is_some_and(|o| o.is_empty())
    }
}

/// A journaled step's own intent, as `T`; `None` when the row holds one of the markers
/// written in its place (the step never observed anything, or an operator stopped the
/// deployment before it). An undo reads what a step did through this: read as `T`, a
/// stop's marker failed the rollback of every deployment stopped at `stop_old`.
pub(crate) fn own_intent<T: serde::de::DeserializeOwned>(
    intent: &Value,
) -> Result<Option<T>, serde_json::Error> {
    if Unobserved::is(intent) || serde_json::from_value::<StopRequest>(intent.clone()).is_ok() {
        return Ok(None);
    }
    serde_json::from_value(intent.clone()).map(Some)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_journals_markers_write_the_json_they_always_wrote() {
        let stop = StopRequest {
            stop_requested_by: "admin".into(),
        };
        assert_eq!(
            serde_json::to_value(&stop).unwrap(),
            json!({ "stop_requested_by": "admin" })
        );
        let none = serde_json::to_value(Unobserved {}).unwrap();
        assert_eq!(none, json!({}));
        assert!(Unobserved::is(&none));
        assert!(!Unobserved::is(&json!({ "running": [] })));
    }

    #[test]
    fn an_undo_reads_no_intent_from_a_stop_or_an_unobserved_marker() {
        let read = |v: Value| own_intent::<OldGeneration>(&v).unwrap();
        assert!(read(json!({})).is_none());
        assert!(read(json!({ "stop_requested_by": "admin" })).is_none());
        let old = read(json!({ "running": ["c1"] })).expect("a recorded intent");
        assert_eq!(old.running, ["c1"]);
        assert!(own_intent::<OldGeneration>(&json!({ "other": 1 })).is_err());
    }
}
