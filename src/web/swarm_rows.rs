//! A swarm app's service as the app page, `GET /api/apps/{app}` and `pier status` show it:
//! replicas desired, running, and running the serving digest, per node, and
//! the errors of tasks that failed lately. Read from the manager, within the same
//! deadline as any engine's listing, beside the journal's serving generation.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::engine::{NodeFacts, ServiceFacts, TaskFacts, TaskState, UpdateState};

/// What the manager said of one service: the facts the row is made from.
pub(crate) type ServiceSeen = (ServiceFacts, Vec<TaskFacts>, Vec<NodeFacts>);

#[derive(Serialize, Debug, Clone, PartialEq)]
pub(crate) struct ServiceRow {
    pub name: String,
    /// The spec's image: `repo:tag@sha256:…`.
    pub image: String,
    /// Replicas the spec asks for; `None` for a global service.
    pub desired: Option<u64>,
    pub running: u64,
    /// Running tasks whose container runs the serving digest.
    pub on_digest: u64,
    pub update_state: UpdateState,
    pub update_message: Option<String>,
    pub nodes: Vec<NodeRow>,
    /// Distinct errors of the tasks Swarm still keeps that failed (at most five).
    pub task_errors: Vec<String>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
pub(crate) struct NodeRow {
    /// The node's hostname (its id when it has none).
    pub node: String,
    pub role: crate::engine::NodeRole,
    pub status: crate::engine::NodeStatus,
    pub running: u64,
    pub on_digest: u64,
}

impl ServiceRow {
    /// `3/3 running, 3 on the serving digest`.
    pub(crate) fn words(&self) -> String {
        let desired = self
            .desired
            .map_or_else(|| "global".to_owned(), |n| n.to_string());
        format!(
            "{}/{desired} running, {} on the serving digest",
            self.running, self.on_digest
        )
    }

    /// Every replica runs, and runs the serving digest.
    pub(crate) fn whole(&self) -> bool {
        let want = self.desired.unwrap_or(self.running.max(1));
        self.running == want && self.on_digest == want
    }
}

pub(crate) fn service_row(seen: &ServiceSeen, serving: Option<&str>) -> ServiceRow {
    let (facts, tasks, nodes) = seen;
    let up: Vec<&TaskFacts> = tasks.iter().filter(|t| t.is_up()).collect();
    let on = |t: &TaskFacts| serving.is_some() && t.digest.as_deref() == serving;
    let mut per_node: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for t in &up {
        let e = per_node.entry(t.node_id.as_str()).or_default();
        e.0 += 1;
        e.1 += u64::from(on(t));
    }
    let nodes = nodes
        .iter()
        .map(|n| {
            let (running, on_digest) = per_node.get(n.id.as_str()).copied().unwrap_or_default();
            NodeRow {
                node: if n.hostname.is_empty() {
                    n.id.clone()
                } else {
                    n.hostname.clone()
                },
                role: n.role,
                status: n.status,
                running,
                on_digest,
            }
        })
        .collect();
    let mut task_errors: Vec<String> = Vec::new();
    let failed = tasks
        .iter()
        .filter(|t| matches!(t.state, TaskState::Failed | TaskState::Rejected));
    for e in failed.filter_map(|t| t.error.clone()) {
        if task_errors.len() < 5 && !task_errors.contains(&e) {
            task_errors.push(e);
        }
    }
    ServiceRow {
        name: facts.name.clone(),
        image: facts.image.clone(),
        desired: facts.replicas,
        running: up.len() as u64,
        on_digest: up.iter().filter(|t| on(t)).count() as u64,
        update_state: facts.update.state,
        update_message: facts.update.message.clone(),
        nodes,
        task_errors,
    }
}
