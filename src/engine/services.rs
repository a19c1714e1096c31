//! Swarm services, tasks and nodes, through bollard's services API, reduced to
//! the facts a rollout needs. As for containers: "not found" is a value, every call has a
//! deadline, every failure is an [`EngineError`] that says whether a retry may help.
//!
//! Pier never schedules anything itself: it writes a service's spec and reads back what
//! Swarm did with it (the spec's version and `UpdateStatus`, the tasks on each node).

use std::collections::HashMap;

use bollard::models::{
    Node, Service, ServiceSpec, ServiceUpdateStatus, ServiceUpdateStatusStateEnum, Task,
};
use bollard::query_parameters::{ListTasksOptionsBuilder, UpdateServiceOptionsBuilder};
use serde::Serialize;

use super::deadline::Call;
use super::{Engine, EngineError, Result, docker_credentials, err, status_of};

/// `UpdateStatus.State` as Swarm means it. `None`: the service was never updated, or its
/// last update changed nothing (a no-op update leaves `UpdateStatus` absent), so `None`
/// alone says nothing about which spec runs: compare the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateState {
    None,
    Updating,
    Paused,
    Completed,
    RollbackStarted,
    RollbackPaused,
    RollbackCompleted,
}

impl UpdateState {
    /// Swarm's own word for it (`rollback_completed`), `none` when it said nothing.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            UpdateState::None => "none",
            UpdateState::Updating => "updating",
            UpdateState::Paused => "paused",
            UpdateState::Completed => "completed",
            UpdateState::RollbackStarted => "rollback_started",
            UpdateState::RollbackPaused => "rollback_paused",
            UpdateState::RollbackCompleted => "rollback_completed",
        }
    }

    /// Swarm has stopped acting on its own: a rollout watcher decides from here. `Paused`
    /// and `RollbackPaused` wait for an operator forever, so they count as settled.
    #[cfg(test)]
    pub(crate) fn is_settled(self) -> bool {
        !matches!(self, UpdateState::Updating | UpdateState::RollbackStarted)
    }

    /// Swarm is rolling back, or has: the update did not take.
    pub(crate) fn is_rollback(self) -> bool {
        matches!(
            self,
            UpdateState::RollbackStarted
                | UpdateState::RollbackPaused
                | UpdateState::RollbackCompleted
        )
    }

    fn from_engine(state: Option<ServiceUpdateStatusStateEnum>) -> Self {
        use ServiceUpdateStatusStateEnum as S;
        match state {
            None | Some(S::EMPTY) => UpdateState::None,
            Some(S::UPDATING) => UpdateState::Updating,
            Some(S::PAUSED) => UpdateState::Paused,
            Some(S::COMPLETED) => UpdateState::Completed,
            Some(S::ROLLBACK_STARTED) => UpdateState::RollbackStarted,
            Some(S::ROLLBACK_PAUSED) => UpdateState::RollbackPaused,
            Some(S::ROLLBACK_COMPLETED) => UpdateState::RollbackCompleted,
        }
    }
}

/// `UpdateStatus`: its state and Swarm's message (e.g. "update completed", or why it
/// paused: "update paused due to failure or early termination of task …").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpdateStatus {
    pub state: UpdateState,
    pub message: Option<String>,
}

impl UpdateStatus {
    pub(crate) fn from_engine(status: Option<&ServiceUpdateStatus>) -> Self {
        UpdateStatus {
            state: UpdateState::from_engine(status.and_then(|s| s.state)),
            message: status
                .and_then(|s| s.message.clone())
                .filter(|m| !m.is_empty()),
        }
    }
}

/// A service as a rollout sees it.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceFacts {
    pub id: String,
    pub name: String,
    /// The spec's image: `repo:tag@sha256:…` when Pier wrote it.
    pub image: String,
    /// `Version.Index`, what an update must name. Swarm bumps it on its own status
    /// changes too, so it proves nothing about whether an update happened; the spec's
    /// labels do.
    pub version: u64,
    /// The spec's labels (the service's, not its containers').
    pub labels: HashMap<String, String>,
    /// `None` for a global service.
    pub replicas: Option<u64>,
    pub update: UpdateStatus,
    /// `TaskTemplate.ForceUpdate`: raised to replace every task of an unchanged spec.
    pub force_update: u64,
}

impl ServiceFacts {
    pub(crate) fn from_engine(s: Service) -> Self {
        let spec = s.spec.unwrap_or_default();
        let image = spec
            .task_template
            .as_ref()
            .and_then(|t| t.container_spec.as_ref())
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        let force_update = spec
            .task_template
            .as_ref()
            .and_then(|t| t.force_update)
            .unwrap_or(0);
        let replicas = spec
            .mode
            .as_ref()
            .and_then(|m| m.replicated.as_ref())
            .and_then(|r| r.replicas)
            .map(|n| n.max(0) as u64);
        ServiceFacts {
            id: s.id.unwrap_or_default(),
            name: spec.name.unwrap_or_default(),
            image,
            version: s.version.and_then(|v| v.index).unwrap_or(0),
            labels: spec.labels.unwrap_or_default(),
            replicas,
            update: UpdateStatus::from_engine(s.update_status.as_ref()),
            force_update,
        }
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

mod secrets;
mod tasks;
#[cfg(test)]
mod tests;

pub use tasks::{NodeFacts, NodeRole, NodeStatus, TaskFacts, TaskState};

/// A version Pier read back from the engine, as bollard's update call takes it (an
/// `i32`, though Swarm's index is a `u64`): one that does not fit is refused, never
/// truncated into another service version.
fn update_version(version: u64) -> Result<i32> {
    i32::try_from(version).map_err(|_| EngineError::Refused {
        action: "update service".into(),
        message: format!("service version {version} exceeds what the API client can send"),
    })
}

/// Swarm answers an update that names a stale version with "update out of sequence" (a
/// 500 on Docker 20.10): it is a conflict, not an engine that is down, so it must not be
/// retried as if transient.
fn classify_update(action: String, e: bollard::errors::Error) -> EngineError {
    match err(action, e) {
        EngineError::Unavailable { action, message } | EngineError::Refused { action, message }
            if message.contains("out of sequence") =>
        {
            EngineError::OutOfSequence { action }
        }
        other => other,
    }
}

impl Engine {
    /// The service named (or with the id) `name`, or `None` if there is none.
    pub async fn service(&self, name: &str) -> Result<Option<ServiceFacts>> {
        let action = format!("inspect service {name}");
        match self
            .attempt(Call::Read, &action, async |docker| {
                docker.inspect_service(name, None).await
            })
            .await?
        {
            Ok(s) => Ok(Some(ServiceFacts::from_engine(s))),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(err(action, e)),
        }
    }

    /// Creates a service from `spec`; its id. `credentials` go to the manager as
    /// `X-Registry-Auth`, for every node's pull.
    pub async fn create_service(
        &self,
        spec: ServiceSpec,
        credentials: Option<(String, String)>,
    ) -> Result<String> {
        let action = format!("create service {}", spec.name.as_deref().unwrap_or(""));
        let creds = docker_credentials(&service_image(&spec), credentials);
        let created = self
            .attempt(Call::Change, &action, async |docker| {
                docker.create_service(spec, creds).await
            })
            .await?
            .map_err(|e| err(action, e))?;
        Ok(created.id.unwrap_or_default())
    }

    /// Replaces the spec of the service `name`, which must still be at `version` (the
    /// one read with [`Engine::service`]): Swarm refuses a stale one, so two writers never
    /// both update from the same spec. Swarm's warnings, if any.
    pub async fn update_service(
        &self,
        name: &str,
        version: u64,
        spec: ServiceSpec,
        credentials: Option<(String, String)>,
    ) -> Result<Vec<String>> {
        let action = format!("update service {name}");
        let options = UpdateServiceOptionsBuilder::new()
            .version(update_version(version)?)
            .build();
        let creds = docker_credentials(&service_image(&spec), credentials);
        let answer = self
            .attempt(Call::Change, &action, async |docker| {
                docker.update_service(name, spec, options, creds).await
            })
            .await?
            .map_err(|e| classify_update(action, e))?;
        Ok(answer.warnings.unwrap_or_default())
    }

    /// Asks Swarm to put the service `name` back on its previous spec (what `docker service
    /// rollback` does): Swarm swaps the two specs, so the version must be the current one.
    /// The spec sent is the current one, which Swarm ignores for a rollback.
    pub(crate) async fn rollback_service(&self, name: &str) -> Result<()> {
        let action = format!("roll back service {name}");
        let current = match self
            .attempt(Call::Read, &action, async |docker| {
                docker.inspect_service(name, None).await
            })
            .await?
        {
            Ok(s) => s,
            Err(e) => return Err(err(action, e)),
        };
        let version = current.version.and_then(|v| v.index).unwrap_or(0);
        let options = UpdateServiceOptionsBuilder::new()
            .version(update_version(version)?)
            .rollback("previous")
            .build();
        let spec = current.spec.unwrap_or_default();
        self.attempt(Call::Change, &action, async |docker| {
            docker.update_service(name, spec, options, None).await
        })
        .await?
        .map_err(|e| classify_update(action, e))?;
        Ok(())
    }

    /// The last `lines` lines a task wrote (from whichever node ran it, through the
    /// manager), within a read's deadline; empty if the task or its logs are gone.
    pub(crate) async fn task_logs(&self, task: &str, lines: usize) -> Result<String> {
        use futures_util::StreamExt;
        let action = format!("logs of task {task}");
        let options = bollard::query_parameters::LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .tail(&lines.to_string())
            .build();
        let read = async |docker: &bollard::Docker| {
            let mut stream = docker.task_logs(task, Some(options));
            let mut out = String::new();
            while let Some(item) = stream.next().await {
                match item {
                    Ok(chunk) => out.push_str(&String::from_utf8_lossy(&chunk.into_bytes())),
                    Err(e) if status_of(&e) == Some(404) => break,
                    Err(e) => return Err(e),
                }
                if out.len() > 64 * 1024 {
                    break;
                }
            }
            Ok(out)
        };
        self.call(Call::Read, &action, read).await
    }

    /// Removes the service `name`; `false` if there was none.
    pub async fn remove_service(&self, name: &str) -> Result<bool> {
        let action = format!("remove service {name}");
        match self
            .attempt(Call::Change, &action, async |docker| {
                docker.delete_service(name).await
            })
            .await?
        {
            Ok(()) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(err(action, e)),
        }
    }

    /// Every task Swarm keeps for the service `name` (its history too: shut down and
    /// failed tasks stay until the task history limit drops them).
    pub async fn service_tasks(&self, name: &str) -> Result<Vec<TaskFacts>> {
        let action = format!("list tasks of service {name}");
        let filters = HashMap::from([("service", vec![name])]);
        let options = ListTasksOptionsBuilder::new().filters(&filters).build();
        let tasks: Vec<Task> = self
            .attempt(Call::Read, &action, async |docker| {
                docker.list_tasks(Some(options)).await
            })
            .await?
            .map_err(|e| err(action, e))?;
        Ok(tasks.into_iter().map(TaskFacts::from_engine).collect())
    }

    /// The swarm's nodes, as the manager sees them.
    pub async fn nodes(&self) -> Result<Vec<NodeFacts>> {
        let action = "list nodes";
        let nodes: Vec<Node> = self
            .attempt(Call::Read, action, async |docker| {
                docker.list_nodes(None).await
            })
            .await?
            .map_err(|e| err(action, e))?;
        Ok(nodes.into_iter().map(NodeFacts::from_engine).collect())
    }
}

/// The spec's image, for the registry its credentials are for.
fn service_image(spec: &ServiceSpec) -> String {
    spec.task_template
        .as_ref()
        .and_then(|t| t.container_spec.as_ref())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}
