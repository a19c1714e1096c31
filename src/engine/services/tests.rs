//! The pure parts of the services adapter: what Swarm's answers (as the engine sends them,
//! JSON) become.

use bollard::errors::Error as DockerError;
use bollard::models::{Service, Task};
use serde_json::json;

use super::*;

fn service(update_status: serde_json::Value) -> ServiceFacts {
    let mut v = json!({
        "ID": "svc1",
        "Version": { "Index": 42 },
        "Spec": {
            "Name": "web",
            "Labels": { "pier.deployment": "d-1" },
            "TaskTemplate": { "ContainerSpec": { "Image": "r/web:v1@sha256:aa" } },
            "Mode": { "Replicated": { "Replicas": 3 } }
        }
    });
    if !update_status.is_null() {
        v["UpdateStatus"] = update_status;
    }
    let s: Service = serde_json::from_value(v).expect("a service as the engine sends it");
    ServiceFacts::from_engine(s)
}

#[test]
fn a_service_is_reduced_to_its_image_version_labels_and_replicas() {
    let s = service(serde_json::Value::Null);
    assert_eq!(s.id, "svc1");
    assert_eq!(s.name, "web");
    assert_eq!(s.image, "r/web:v1@sha256:aa");
    assert_eq!(s.version, 42);
    assert_eq!(s.label("pier.deployment"), Some("d-1"));
    assert_eq!(s.replicas, Some(3));
}

#[test]
fn no_update_status_is_none_not_completed() {
    let s = service(serde_json::Value::Null);
    assert_eq!(s.update.state, UpdateState::None);
    assert_eq!(s.update.message, None);
    let empty = service(json!({ "State": "", "Message": "" }));
    assert_eq!(empty.update.state, UpdateState::None);
    assert_eq!(empty.update.message, None, "an empty message is no message");
}

#[test]
fn every_update_state_swarm_sends_is_read_as_swarm_means_it() {
    let cases = [
        ("updating", UpdateState::Updating, false, false),
        ("paused", UpdateState::Paused, true, false),
        ("completed", UpdateState::Completed, true, false),
        (
            "rollback_started",
            UpdateState::RollbackStarted,
            false,
            true,
        ),
        ("rollback_paused", UpdateState::RollbackPaused, true, true),
        (
            "rollback_completed",
            UpdateState::RollbackCompleted,
            true,
            true,
        ),
    ];
    for (wire, state, settled, rollback) in cases {
        let s = service(json!({ "State": wire, "Message": "update paused due to failure" }));
        assert_eq!(s.update.state, state, "{wire}");
        assert_eq!(state.is_settled(), settled, "{wire} settled");
        assert_eq!(state.is_rollback(), rollback, "{wire} rollback");
        assert_eq!(
            s.update.message.as_deref(),
            Some("update paused due to failure")
        );
    }
    assert!(UpdateState::None.is_settled());
}

#[test]
fn a_global_service_has_no_replica_count() {
    let s: Service = serde_json::from_value(json!({
        "ID": "g", "Version": { "Index": 1 },
        "Spec": { "Name": "agent", "Mode": { "Global": {} } }
    }))
    .expect("a global service");
    assert_eq!(ServiceFacts::from_engine(s).replicas, None);
}

#[test]
fn a_task_is_reduced_to_its_node_states_image_error_and_container() {
    let t: Task = serde_json::from_value(json!({
        "ID": "t1", "NodeID": "n1", "Slot": 2, "DesiredState": "shutdown",
        "Spec": { "ContainerSpec": { "Image": "r/web:v2@sha256:bb" } },
        "Status": {
            "State": "failed", "Message": "started", "Err": "task: non-zero exit (1)",
            "ContainerStatus": { "ContainerID": "c1", "ExitCode": 1 }
        }
    }))
    .expect("a task as the engine sends it");
    let t = TaskFacts::from_engine(t);
    assert_eq!((t.id.as_str(), t.node_id.as_str()), ("t1", "n1"));
    assert_eq!(t.slot, Some(2));
    assert_eq!(
        (t.desired, t.state),
        (TaskState::Shutdown, TaskState::Failed)
    );
    assert_eq!(t.image, "r/web:v2@sha256:bb");
    assert_eq!(t.error.as_deref(), Some("task: non-zero exit (1)"));
    assert_eq!(t.container_id, "c1");
    assert!(!t.is_up());
    assert!(t.state.is_final());
}

#[test]
fn an_unplaced_task_has_no_node_and_no_container() {
    let t: Task = serde_json::from_value(json!({
        "ID": "t2", "DesiredState": "running",
        "Status": { "State": "pending", "Message": "pending task scheduling", "Err": "" }
    }))
    .expect("a pending task");
    let t = TaskFacts::from_engine(t);
    assert_eq!(t.node_id, "");
    assert_eq!(t.container_id, "");
    assert_eq!(t.error, None);
    assert_eq!(t.state, TaskState::Pending);
    assert!(!t.state.is_final());
}

#[test]
fn a_version_the_client_cannot_send_is_refused_not_truncated() {
    assert_eq!(update_version(7).expect("fits"), 7);
    let e = update_version(u64::from(u32::MAX)).expect_err("does not fit in an i32");
    assert!(!e.is_transient());
}

#[test]
fn an_update_out_of_sequence_is_a_conflict_not_an_outage() {
    let stale = DockerError::DockerResponseServerError {
        status_code: 500,
        message: "rpc error: code = Unknown desc = update out of sequence".into(),
    };
    assert!(!classify_update("update service web".into(), stale).is_transient());
    let down = DockerError::DockerResponseServerError {
        status_code: 503,
        message: "manager unavailable".into(),
    };
    assert!(classify_update("update service web".into(), down).is_transient());
}
