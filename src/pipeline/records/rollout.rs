//! A rollout across several engines: `reach` before any engine changes, and the `revert`
//! of an engine that had switched.

use serde::{Deserialize, Serialize};

use super::GenerationRef;

/// `reach`: the engine answered its `/_ping` before any engine of the rollout changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ReachIntent {
    pub target: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Reached {
    /// From the step's start to the engine's answer, retries within the budget included.
    pub waited_ms: u64,
}

/// `revert` of an engine that switched: the generation it served before this
/// deployment's switch, and the containers that go and come back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RevertToIntent {
    /// `None`: the engine served nothing of the app before; the revert forgets the
    /// generation after removing the candidate.
    pub to: Option<GenerationRef>,
    pub remove: Vec<String>,
    pub restart: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RevertedTo {
    pub removed: Vec<String>,
    pub restarted: Vec<String>,
}
