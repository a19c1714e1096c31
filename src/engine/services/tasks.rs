//! A service's tasks and the swarm's nodes, in Pier's own types: the pages and the journal
//! name Pier's states, and a state a newer engine adds is one match arm here.

use bollard::models::{Node, NodeSpecRoleEnum, NodeState, Task, TaskState as EngineTaskState};
use serde::Serialize;

/// A task's state (`Status.State`) or desired state, as Swarm names them. The order is
/// Swarm's lifecycle: a task only moves forward, `Running` and then one of the ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    New,
    Allocated,
    Pending,
    Assigned,
    Accepted,
    Preparing,
    Ready,
    Starting,
    Running,
    Complete,
    Shutdown,
    Failed,
    Rejected,
    Remove,
    Orphaned,
    /// The engine said nothing.
    Unknown,
}

impl TaskState {
    pub(crate) fn from_engine(state: Option<EngineTaskState>) -> Self {
        use EngineTaskState as S;
        match state {
            None => TaskState::Unknown,
            Some(S::NEW) => TaskState::New,
            Some(S::ALLOCATED) => TaskState::Allocated,
            Some(S::PENDING) => TaskState::Pending,
            Some(S::ASSIGNED) => TaskState::Assigned,
            Some(S::ACCEPTED) => TaskState::Accepted,
            Some(S::PREPARING) => TaskState::Preparing,
            Some(S::READY) => TaskState::Ready,
            Some(S::STARTING) => TaskState::Starting,
            Some(S::RUNNING) => TaskState::Running,
            Some(S::COMPLETE) => TaskState::Complete,
            Some(S::SHUTDOWN) => TaskState::Shutdown,
            Some(S::FAILED) => TaskState::Failed,
            Some(S::REJECTED) => TaskState::Rejected,
            Some(S::REMOVE) => TaskState::Remove,
            Some(S::ORPHANED) => TaskState::Orphaned,
        }
    }

    /// The task ended and will not run again (Swarm starts a new task instead).
    pub(crate) fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Complete
                | TaskState::Shutdown
                | TaskState::Failed
                | TaskState::Rejected
                | TaskState::Remove
                | TaskState::Orphaned
        )
    }
}

/// One task of a service.
#[derive(Debug, Clone, Serialize)]
pub struct TaskFacts {
    pub id: String,
    /// Empty until the scheduler assigns it (a task that cannot be placed stays so).
    pub node_id: String,
    /// The replica slot (`None` for a global service's tasks).
    pub slot: Option<i64>,
    pub desired: TaskState,
    pub state: TaskState,
    /// The task's own spec's image: what this task runs, whatever the service says now.
    pub image: String,
    /// `Status.Err`: why it failed or was rejected ("No such image: …",
    /// "task: non-zero exit (1)").
    pub error: Option<String>,
    /// `Status.Message`: Swarm's last word on it ("started", "no suitable node …").
    pub message: Option<String>,
    /// Empty until a node created its container.
    pub container_id: String,
    /// The `pier.deployment` label of the task's own container spec: which deployment's
    /// spec made this task, whatever the service's spec says now. What proves, after a
    /// crash, that an update Swarm has since rolled back did happen.
    pub deployment: Option<String>,
    /// The `pier.digest` label of the task's container spec: the platform manifest digest
    /// the deployment resolved.
    pub digest: Option<String>,
    /// Ports the task publishes in host mode, on its node.
    pub host_ports: Vec<u16>,
}

impl TaskFacts {
    pub(crate) fn from_engine(t: Task) -> Self {
        let status = t.status.unwrap_or_default();
        let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
        let container = t.spec.and_then(|s| s.container_spec);
        let label = |key: &str| {
            container
                .as_ref()
                .and_then(|c| c.labels.as_ref())
                .and_then(|l| l.get(key).cloned())
        };
        let (deployment, digest) = (
            label(crate::engine::LABEL_DEPLOYMENT),
            label(crate::engine::LABEL_DIGEST),
        );
        let host_ports = status
            .port_status
            .as_ref()
            .and_then(|p| p.ports.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|p| p.published_port)
            .filter_map(|p| u16::try_from(p).ok())
            .collect();
        TaskFacts {
            id: t.id.unwrap_or_default(),
            node_id: t.node_id.unwrap_or_default(),
            slot: t.slot,
            desired: TaskState::from_engine(t.desired_state),
            state: TaskState::from_engine(status.state),
            image: container.and_then(|c| c.image).unwrap_or_default(),
            error: nonempty(status.err),
            message: nonempty(status.message),
            container_id: status
                .container_status
                .and_then(|c| c.container_id)
                .unwrap_or_default(),
            deployment,
            digest,
            host_ports,
        }
    }

    /// Running, and meant to: a replica that serves.
    pub fn is_up(&self) -> bool {
        self.desired == TaskState::Running && self.state == TaskState::Running
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    Ready,
    Down,
    Disconnected,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeRole {
    Manager,
    Worker,
}

/// A node of the swarm.
#[derive(Debug, Clone, Serialize)]
pub struct NodeFacts {
    pub id: String,
    pub hostname: String,
    pub role: NodeRole,
    pub status: NodeStatus,
    /// The address the manager sees it at.
    pub addr: String,
}

impl NodeFacts {
    pub(crate) fn from_engine(n: Node) -> Self {
        let spec = n.spec.unwrap_or_default();
        let status = n.status.unwrap_or_default();
        NodeFacts {
            id: n.id.unwrap_or_default(),
            hostname: n.description.and_then(|d| d.hostname).unwrap_or_default(),
            role: match spec.role {
                Some(NodeSpecRoleEnum::MANAGER) => NodeRole::Manager,
                _ => NodeRole::Worker,
            },
            status: match status.state {
                Some(NodeState::READY) => NodeStatus::Ready,
                Some(NodeState::DOWN) => NodeStatus::Down,
                Some(NodeState::DISCONNECTED) => NodeStatus::Disconnected,
                _ => NodeStatus::Unknown,
            },
            addr: status.addr.unwrap_or_default(),
        }
    }
}
