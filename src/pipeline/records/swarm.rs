//! A Swarm service's steps: `verify` (the manifest read again from the registry),
//! `update` (the service's spec written once), `converge` (Swarm's rollout watched to a
//! verdict) and the `rollback` of a failed one. Each writes the same JSON it always has,
//! so journals written before these types read the same.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::Platform;

/// A swarm's `verify`: the digest the spec will name (the index's, when the tag named
/// one) and the platform manifest resolved, which it must be or list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ManifestIntent {
    pub digest: String,
    pub member: String,
}

/// A swarm's `verify` result: what the spec will name, as the registry serves it now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Checked {
    /// The digest in the spec: the index's, when the tag named one.
    pub digest: String,
    pub platforms: Vec<Platform>,
}

/// `update`'s intent: what served before the update, observed when the step first began.
/// The recorded plan of every replay, and what a rollback returns to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct UpdatePlan {
    pub service: String,
    pub image: String,
    /// Keyed hash of the whole spec: a replay whose config changed is a conflict.
    pub spec_hmac: String,
    /// `None`: there was no service; this deployment creates it.
    pub previous: Option<SpecBefore>,
}

/// The service's spec before the update.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct SpecBefore {
    pub deployment: Option<String>,
    pub image: String,
    /// The service's `Version.Index` when the update was planned (shown; the update
    /// itself names the version it reads then, since Swarm moves it on its own).
    pub version: u64,
    pub force_update: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Updated {
    pub created: bool,
    /// Swarm's warnings (an image it could not inspect on the manager, say).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// `converge`: the service whose tasks must all run this deployment's spec, and for how
/// long Pier watches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ConvergeIntent {
    pub service: String,
    pub deployment: String,
    pub timeout_secs: u64,
}

/// `converge`'s result, and a rollback's: the tasks that run the goal's spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Converged {
    /// Tasks running the goal's spec.
    pub running: u64,
    /// Running tasks per node id.
    pub nodes: BTreeMap<String, u64>,
}

/// A swarm's `rollback`: the service back on the spec of the deployment that served
/// before (result: [`Converged`]), or removed when this deployment created it (result:
/// [`ServiceRemoved`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum ServiceRollbackIntent {
    To {
        service: String,
        to_deployment: String,
    },
    Remove {
        remove: String,
    },
}

/// The result of removing a service this deployment had created: whether it was there.
pub(crate) type ServiceRemoved = bool;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// These intents were written as `json!` literals before they had types: the types
    /// must write exactly those objects, or a replay across the upgrade is a conflict.
    #[test]
    fn the_typed_intents_write_the_json_the_journal_already_holds() {
        let verify = ManifestIntent {
            digest: "sha256:aa".into(),
            member: "sha256:bb".into(),
        };
        assert_eq!(
            serde_json::to_value(&verify).unwrap(),
            json!({ "digest": "sha256:aa", "member": "sha256:bb" })
        );
        let converge = ConvergeIntent {
            service: "web".into(),
            deployment: "d-1".into(),
            timeout_secs: 90,
        };
        assert_eq!(
            serde_json::to_value(&converge).unwrap(),
            json!({ "service": "web", "deployment": "d-1", "timeout_secs": 90 })
        );
        let to = ServiceRollbackIntent::To {
            service: "web".into(),
            to_deployment: "d-0".into(),
        };
        assert_eq!(
            serde_json::to_value(&to).unwrap(),
            json!({ "service": "web", "to_deployment": "d-0" })
        );
        let remove = ServiceRollbackIntent::Remove {
            remove: "web".into(),
        };
        assert_eq!(
            serde_json::to_value(&remove).unwrap(),
            json!({ "remove": "web" })
        );
        for v in [
            json!({ "service": "web", "to_deployment": "" }),
            json!({ "remove": "web" }),
        ] {
            let back: ServiceRollbackIntent = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(serde_json::to_value(back).unwrap(), v);
        }
    }

    #[test]
    fn a_containers_rollback_does_not_read_as_a_services() {
        let container = json!({ "candidates": ["c1"], "restore": [], "after_route": null });
        assert!(serde_json::from_value::<ServiceRollbackIntent>(container).is_err());
    }
}
