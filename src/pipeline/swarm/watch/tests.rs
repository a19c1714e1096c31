use std::collections::HashMap;
use std::time::Duration;

use super::*;
use crate::engine::UpdateStatus;

fn service(deployment: &str, state: UpdateState) -> ServiceFacts {
    ServiceFacts {
        id: "svc".into(),
        name: "web".into(),
        image: "r/web:v2@sha256:2".into(),
        version: 10,
        labels: HashMap::from([("pier.deployment".to_owned(), deployment.to_owned())]),
        replicas: Some(2),
        update: UpdateStatus {
            state,
            message: Some("swarm's words".into()),
        },
        force_update: 0,
    }
}

fn task(id: &str, node: &str, deployment: &str, desired: TaskState, state: TaskState) -> TaskFacts {
    TaskFacts {
        id: id.into(),
        node_id: node.into(),
        slot: Some(1),
        desired,
        state,
        image: String::new(),
        error: (state == TaskState::Failed).then(|| "task: non-zero exit (1)".to_owned()),
        message: (state == TaskState::Pending).then(|| "no suitable node".to_owned()),
        container_id: String::new(),
        deployment: Some(deployment.into()),
        digest: None,
        host_ports: vec![],
    }
}

const R: TaskState = TaskState::Running;

fn goal(rollback: bool) -> Goal<'static> {
    Goal {
        service: "web",
        deployment: "d2",
        replicas: Some(2),
        settle: Duration::from_secs(5),
        rollback,
    }
}

#[test]
fn completed_with_every_replica_on_the_new_spec_converges() {
    let tasks = [
        task("a", "n1", "d2", R, R),
        task("b", "n2", "d2", R, R),
        task("old", "n1", "d1", TaskState::Shutdown, TaskState::Shutdown),
    ];
    let p = assess(
        &goal(false),
        &service("d2", UpdateState::Completed),
        &tasks,
        None,
    );
    let Progress::Converged(c) = p else {
        panic!("{p:?}")
    };
    assert_eq!(c.running, 2);
    assert_eq!(c.nodes.len(), 2);
}

#[test]
fn completed_while_an_old_task_still_runs_waits() {
    let tasks = [task("a", "n1", "d2", R, R), task("old", "n2", "d1", R, R)];
    let p = assess(
        &goal(false),
        &service("d2", UpdateState::Completed),
        &tasks,
        None,
    );
    assert!(matches!(p, Progress::Waiting { whole: false, .. }), "{p:?}");
}

#[test]
fn a_new_service_converges_only_after_holding_for_the_settle_time() {
    let tasks = [task("a", "n1", "d2", R, R), task("b", "n2", "d2", R, R)];
    let s = service("d2", UpdateState::None);
    let early = assess(&goal(false), &s, &tasks, Some(Duration::from_secs(1)));
    assert!(
        matches!(early, Progress::Waiting { whole: true, .. }),
        "{early:?}"
    );
    let later = assess(&goal(false), &s, &tasks, Some(Duration::from_secs(6)));
    assert!(matches!(later, Progress::Converged(_)), "{later:?}");
}

#[test]
fn a_swarm_rollback_fails_the_update_with_the_tasks_errors() {
    let tasks = [
        task("a", "n1", "d2", TaskState::Shutdown, TaskState::Failed),
        task("old", "n1", "d1", R, R),
    ];
    let p = assess(
        &goal(false),
        &service("d1", UpdateState::RollbackStarted),
        &tasks,
        None,
    );
    let Progress::Failed(f) = p else {
        panic!("{p:?}")
    };
    assert_eq!(f.kind, FailureKind::SwarmRolledBack);
    assert_eq!(f.task_errors, ["task: non-zero exit (1)"]);
    assert_eq!(f.failed_task.as_deref(), Some("a"));
    assert!(f.tasks_failed());
}

#[test]
fn a_paused_update_fails_and_a_pending_task_says_why() {
    let tasks = [
        task("p", "", "d2", R, TaskState::Pending),
        task("old", "n1", "d1", R, R),
    ];
    let p = assess(
        &goal(false),
        &service("d2", UpdateState::Paused),
        &tasks,
        None,
    );
    let Progress::Failed(f) = p else {
        panic!("{p:?}")
    };
    assert_eq!(f.kind, FailureKind::Paused);
    assert_eq!(f.task_errors, ["no suitable node"]);
    assert!(
        !f.tasks_failed(),
        "a task that cannot be placed is no fault of the digest"
    );
}

#[test]
fn watching_a_rollback_waits_through_swarms_rollback_states() {
    let mut g = goal(true);
    g.deployment = "d1";
    let tasks = [
        task("old", "n1", "d1", R, R),
        task("old2", "n2", "d1", R, R),
    ];
    let started = assess(
        &g,
        &service("d1", UpdateState::RollbackStarted),
        &tasks,
        None,
    );
    assert!(matches!(started, Progress::Waiting { .. }), "{started:?}");
    let done = assess(
        &g,
        &service("d1", UpdateState::RollbackCompleted),
        &tasks,
        None,
    );
    assert!(matches!(done, Progress::Converged(_)), "{done:?}");
    let paused = assess(
        &g,
        &service("d1", UpdateState::RollbackPaused),
        &tasks,
        None,
    );
    assert!(matches!(
        paused,
        Progress::Failed(RolloutFailure {
            kind: FailureKind::Paused,
            ..
        })
    ));
}

#[test]
fn a_spec_from_another_deployment_is_a_replaced_spec() {
    let p = assess(
        &goal(false),
        &service("d9", UpdateState::Updating),
        &[],
        None,
    );
    assert!(matches!(
        p,
        Progress::Failed(RolloutFailure {
            kind: FailureKind::Replaced,
            ..
        })
    ));
}
