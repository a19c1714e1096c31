//! Where a generation runs: the targets of `[[targets]]`, each with its engine client.
//! Built once at start from the config; a target's engine is asked nothing until it is
//! used (see `engine/connect.rs`), so an engine that is down delays only what needs it.
//!
//! Target and strategy are separate axes: the pipeline picks its plan from both
//! (`pipeline/plan.rs`); nothing here knows how a version is replaced.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{LOCAL, SubnetPool, TargetConfig, TargetKind};
use crate::domain::Endpoint;
use crate::engine::{Engine, EngineError};

/// One place apps run.
#[derive(Debug)]
pub(crate) struct Target {
    pub name: String,
    pub kind: TargetKind,
    pub endpoint: Endpoint,
    pub engine: Engine,
}

impl Target {
    /// Whether what its containers publish on 127.0.0.1 is this process's loopback, where
    /// Pier probes health and its local `pier proxy` routes. A remote engine's are that
    /// host's, reached only by the `pier proxy --target` running there.
    pub(crate) fn is_local(&self) -> bool {
        self.endpoint.is_local()
    }
}

/// Every target by name. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Targets(Arc<BTreeMap<String, Arc<Target>>>);

impl Targets {
    /// A client per target; nothing is sent yet. `app_subnets` applies on every engine:
    /// each has its own networks, so the same `/27`s may be used on each.
    pub fn build(
        configs: &[TargetConfig],
        app_subnets: Option<SubnetPool>,
    ) -> Result<Self, TargetError> {
        let mut all = BTreeMap::new();
        for c in configs {
            let engine = Engine::for_endpoint(&c.endpoint)
                .map_err(|source| TargetError {
                    target: c.name.clone(),
                    source,
                })?
                .named(&c.name)
                .with_app_subnets(app_subnets);
            all.insert(
                c.name.clone(),
                Arc::new(Target {
                    name: c.name.clone(),
                    kind: c.kind,
                    endpoint: c.endpoint.clone(),
                    engine,
                }),
            );
        }
        Ok(Self(Arc::new(all)))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Target>> {
        self.0.get(name)
    }

    /// The `local` target, where a config without `[[targets]]` runs everything.
    pub(crate) fn local(&self) -> Option<&Arc<Target>> {
        self.get(LOCAL)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Target>> {
        self.0.values()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("target `{target}`: {source}")]
pub struct TargetError {
    pub target: String,
    #[source]
    pub source: EngineError,
}
