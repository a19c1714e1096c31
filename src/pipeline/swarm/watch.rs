//! Watching a rollout to a verdict. Swarm reports progress but has no deadline: an update
//! whose tasks cannot be placed says `updating` forever. Pier reads `UpdateStatus` as
//! Swarm means it, counts the tasks that run the new spec, and gives up at its own
//! `rollout_timeout`.
//!
//! [`assess`] is pure (one reading of the service and its tasks in, a verdict out) so that
//! every rule here is checked by unit tests; [`watch`] only reads the engine with a
//! backoff that starts fast, until the verdict or the deadline.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engine::{Engine, ServiceFacts, TaskFacts, TaskState, UpdateState};
use crate::pipeline::records::Converged;

/// What a rollout is waiting for: the service's spec from one deployment, on every replica.
#[derive(Debug, Clone)]
pub(crate) struct Goal<'a> {
    pub service: &'a str,
    /// The `pier.deployment` label the spec and every task must carry.
    pub deployment: &'a str,
    /// Replicas of a replicated service; `None` for a global one (every task it keeps).
    pub replicas: Option<u64>,
    /// A freshly created service has no `UpdateStatus` to say it is done: it must stay
    /// converged this long (the update's `monitor`) before it counts.
    pub settle: Duration,
    /// Watching a rollback to this spec: Swarm's `rollback_*` states are then the
    /// progress being waited for, not a failure.
    pub rollback: bool,
}

/// Where a rollout stands after one reading.
#[derive(Debug, PartialEq)]
pub enum Progress {
    Converged(Converged),
    Waiting {
        /// Every replica runs the goal's spec; only the settle time is still to pass.
        whole: bool,
        said: String,
    },
    Failed(RolloutFailure),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FailureKind {
    /// Swarm rolled the update back itself (`failure_action = "rollback"`).
    SwarmRolledBack,
    /// Swarm paused the update (`failure_action = "pause"`), or a rollback paused.
    Paused,
    /// Pier's `rollout_timeout` passed.
    Deadline,
    /// The spec is no longer this deployment's: someone else updated the service.
    Replaced,
}

/// Why a rollout did not converge, with the tasks' own words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}", self.describe())]
pub struct RolloutFailure {
    pub kind: FailureKind,
    /// Swarm's `UpdateStatus.Message`, or what Pier was still waiting for.
    pub message: String,
    /// Distinct errors of the goal's failed tasks, and why pending ones wait.
    pub task_errors: Vec<String>,
    /// A task of the goal that failed: its logs are the deployment's.
    pub failed_task: Option<String>,
}

impl RolloutFailure {
    fn describe(&self) -> String {
        let what = match self.kind {
            FailureKind::SwarmRolledBack => "Swarm rolled the update back",
            FailureKind::Paused => "Swarm paused the update",
            FailureKind::Deadline => "the rollout did not converge within rollout_timeout",
            FailureKind::Replaced => "the service's spec was replaced by another writer",
        };
        let mut s = format!("{what}: {}", self.message);
        if !self.task_errors.is_empty() {
            s.push_str(&format!("; tasks: {}", self.task_errors.join("; ")));
        }
        s
    }

    /// The digest itself is at fault (its tasks failed), not the placement or the clock:
    /// then it is quarantined, like a container that failed its health check.
    pub(crate) fn tasks_failed(&self) -> bool {
        self.failed_task.is_some()
    }
}

/// At most this many distinct task errors are kept: a crash-looping task makes hundreds.
const MAX_ERRORS: usize = 5;

fn task_errors(tasks: &[TaskFacts], deployment: &str) -> (Vec<String>, Option<String>) {
    let mut errors: Vec<String> = Vec::new();
    let mut failed = None;
    let ours = tasks
        .iter()
        .filter(|t| t.deployment.as_deref() == Some(deployment));
    for t in ours {
        let said = match t.state {
            TaskState::Failed | TaskState::Rejected => {
                failed.get_or_insert_with(|| t.id.clone());
                t.error.clone().or_else(|| t.message.clone())
            }
            // A service's task that ends on its own is a failure too: one whose health
            // check failed is stopped by its node and exits 0 ("finished").
            TaskState::Complete | TaskState::Orphaned => {
                failed.get_or_insert_with(|| t.id.clone());
                let how = t
                    .error
                    .as_deref()
                    .or(t.message.as_deref())
                    .unwrap_or("ended");
                Some(format!(
                    "a task ended ({how}) instead of running: its health check failed, or its program exited"
                ))
            }
            s if !s.is_final() && t.desired == TaskState::Running && !t.is_up() => {
                // Pending: Swarm's `Err` says why ("no suitable node (scheduling
                // constraints not satisfied on 2 nodes)"); its message only that it waits.
                t.error.clone().or_else(|| t.message.clone())
            }
            _ => None,
        };
        if let Some(e) = said
            && errors.len() < MAX_ERRORS
            && !errors.contains(&e)
        {
            errors.push(e);
        }
    }
    (errors, failed)
}

/// One reading's verdict. `converged_since`: how long the goal has held without a break
/// (for a service Swarm reports no update of).
pub(crate) fn assess(
    goal: &Goal<'_>,
    service: &ServiceFacts,
    tasks: &[TaskFacts],
    converged_since: Option<Duration>,
) -> Progress {
    let (task_errors, failed_task) = task_errors(tasks, goal.deployment);
    let fail = |kind, message: Option<&String>| {
        Progress::Failed(RolloutFailure {
            kind,
            message: message.cloned().unwrap_or_default(),
            task_errors: task_errors.clone(),
            failed_task: failed_task.clone(),
        })
    };
    let state = service.update.state;
    match (goal.rollback, state) {
        (false, s) if s.is_rollback() => {
            return fail(
                FailureKind::SwarmRolledBack,
                service.update.message.as_ref(),
            );
        }
        (_, UpdateState::Paused | UpdateState::RollbackPaused) => {
            return fail(FailureKind::Paused, service.update.message.as_ref());
        }
        _ => {}
    }
    if service.label(crate::engine::LABEL_DEPLOYMENT) != Some(goal.deployment) {
        let now = service
            .label(crate::engine::LABEL_DEPLOYMENT)
            .unwrap_or("none");
        return fail(
            FailureKind::Replaced,
            Some(&format!("its deployment is {now}")),
        );
    }
    let meant: Vec<&TaskFacts> = tasks
        .iter()
        .filter(|t| t.desired == TaskState::Running)
        .collect();
    let new_up = meant
        .iter()
        .filter(|t| t.is_up() && t.deployment.as_deref() == Some(goal.deployment))
        .count() as u64;
    let want = goal.replicas.unwrap_or(meant.len().max(1) as u64);
    let whole = new_up == want && meant.len() as u64 == want;
    let settled = match state {
        UpdateState::Completed | UpdateState::RollbackCompleted => true,
        UpdateState::None => converged_since.is_some_and(|d| d >= goal.settle),
        _ => false,
    };
    if whole && settled {
        let mut nodes = std::collections::BTreeMap::new();
        for t in &meant {
            *nodes.entry(t.node_id.clone()).or_insert(0) += 1;
        }
        return Progress::Converged(Converged {
            running: new_up,
            nodes,
        });
    }
    let mut said = match whole {
        true => format!(
            "all {want} tasks run the spec; Swarm says {}",
            state.as_str()
        ),
        false => format!(
            "{new_up} of {want} tasks run the spec; Swarm says {}",
            state.as_str()
        ),
    };
    if let Some(e) = task_errors.first() {
        said.push_str(&format!("; {e}"));
    }
    Progress::Waiting { whole, said }
}

/// Reads the service until [`assess`] gives a verdict, or `timeout` passes. Reading
/// starts every 250 ms and backs off to every 2 s. An engine error that a retry may cure
/// is waited out until the deadline; any other is returned at once.
pub(crate) async fn watch(
    engine: &Engine,
    goal: &Goal<'_>,
    timeout: Duration,
) -> Result<Converged, WatchError> {
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(250);
    let mut holding_since: Option<Instant> = None;
    let mut last;
    let mut last_errors = (Vec::new(), None);
    loop {
        match read(engine, goal.service).await {
            Ok((service, tasks)) => {
                let since = holding_since.map(|t| t.elapsed());
                match assess(goal, &service, &tasks, since) {
                    Progress::Converged(c) => return Ok(c),
                    Progress::Failed(f) => return Err(WatchError::Failed(f)),
                    Progress::Waiting { whole, said } => {
                        holding_since = match (whole, holding_since) {
                            (true, None) => Some(Instant::now()),
                            (true, kept) => kept,
                            (false, _) => None,
                        };
                        last = said;
                        last_errors = task_errors(&tasks, goal.deployment);
                    }
                }
            }
            Err(e) if e.is_transient() => last = format!("the manager did not answer: {e}"),
            Err(e) => return Err(WatchError::Engine(e)),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WatchError::Failed(RolloutFailure {
                kind: FailureKind::Deadline,
                message: format!("after {timeout:?}, {last}"),
                task_errors: last_errors.0,
                failed_task: last_errors.1,
            }));
        }
        tokio::time::sleep(delay.min(left)).await;
        delay = (delay * 3 / 2).min(Duration::from_secs(2));
    }
}

async fn read(
    engine: &Engine,
    service: &str,
) -> Result<(ServiceFacts, Vec<TaskFacts>), crate::engine::EngineError> {
    let facts =
        engine
            .service(service)
            .await?
            .ok_or_else(|| crate::engine::EngineError::Refused {
                action: format!("inspect service {service}"),
                message: "the service is gone".into(),
            })?;
    let tasks = engine.service_tasks(service).await?;
    Ok((facts, tasks))
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum WatchError {
    #[error(transparent)]
    Failed(RolloutFailure),
    #[error(transparent)]
    Engine(crate::engine::EngineError),
}

#[cfg(test)]
mod tests;
