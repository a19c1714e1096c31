//! The engine rows of the pages: what each engine's row says, whatever it answered.

use std::collections::{BTreeMap, HashMap};

use chrono::Utc;
use uuid::Uuid;

use super::*;
use crate::engine::Health;
use crate::store::{DeploymentState, Step, StepState, Trigger};

fn app() -> AppConfig {
    let text = r#"
        [server]
        database_url = "postgres://localhost/pier"
        [[targets]]
        name = "edge"
        host = "unix:///run/edge/docker.sock"
        [[apps]]
        name = "web"
        image = "127.0.0.1:5000/demo/web"
        tag = "main"
        port = 8080
        targets = ["local", "edge"]
    "#;
    let config = crate::config::Config::parse(text, std::path::Path::new(".")).unwrap();
    config.apps[0].clone()
}

fn generation(target: &str, container: &str) -> Generation {
    Generation {
        app: "web".into(),
        target: target.into(),
        deployment_id: Uuid::nil(),
        digest: "sha256:aa".into(),
        container_id: container.into(),
        switched_at: Utc::now(),
    }
}

fn container(id: &str, running: bool) -> ContainerFacts {
    ContainerFacts {
        id: id.into(),
        name: format!("web-{id}"),
        image: "i".into(),
        running,
        status: if running { "Up 1 second" } else { "Exited (1)" }.into(),
        exit_code: None,
        restarts: 0,
        health: Health::None,
        labels: HashMap::from([(LABEL_DIGEST.to_owned(), "sha256:aa".to_owned())]),
    }
}

fn running(id: Uuid) -> Deployment {
    let now = Utc::now();
    Deployment {
        id,
        app: "web".into(),
        trigger: Trigger::Webhook,
        delivery_id: None,
        image: "r".into(),
        requested_tag: None,
        claimed_digest: None,
        pinned: false,
        resolved_digest: None,
        platform: None,
        state: DeploymentState::Running,
        attempt: 1,
        lease_owner: None,
        lease_key: None,
        lease_expires_at: None,
        superseded_by: None,
        outcome: None,
        error: None,
        candidate_logs: None,
        created_at: now,
        started_at: Some(now),
        finished_at: None,
        updated_at: now,
        requested_by: None,
        cancel_requested_by: None,
        cancel_requested_at: None,
        gated_at: None,
        waiting_for: None,
        waiting_until: None,
        promoted_from: None,
    }
}

fn step(id: i64, step: Step, target: &str, state: StepState) -> StepRecord {
    StepRecord {
        id,
        deployment_id: Uuid::nil(),
        step,
        service: String::new(),
        target: target.into(),
        state,
        intent: serde_json::json!({}),
        result: None,
        error: None,
        attempt: 1,
        replays: 0,
        started_at: Utc::now(),
        finished_at: None,
    }
}

#[test]
fn an_unreachable_engine_keeps_its_journal_row_and_the_others_are_whole() {
    let snapshot = Snapshot(
        BTreeMap::from([
            ("local".to_owned(), Ok(vec![container("c1", true)])),
            (
                "edge".to_owned(),
                Err(Unreachable::Engine {
                    reason: "connection refused".to_owned(),
                }),
            ),
        ]),
        BTreeMap::new(),
    );
    let generations = [generation("local", "c1"), generation("edge", "c2")];
    let rows = engine_rows(
        &TargetViews::default(),
        &app(),
        &snapshot,
        &generations,
        None,
    );
    let [local, edge] = rows.as_slice() else {
        panic!("{rows:?}")
    };
    assert_eq!(
        (local.target.as_str(), local.state.as_str()),
        ("local", "running")
    );
    assert_eq!(local.container_digest.as_deref(), Some("sha256:aa"));
    assert_eq!(local.container_name.as_deref(), Some("web-c1"));
    assert!(local.reachable && local.running && local.rollout.is_none());
    assert_eq!(
        (edge.target.as_str(), edge.state.as_str()),
        ("edge", "unreachable")
    );
    assert!(!edge.reachable && !edge.running);
    assert_eq!(edge.unreachable.as_deref(), Some("connection refused"));
    assert_eq!(
        edge.digest.as_deref(),
        Some("sha256:aa"),
        "the journal's fact stays"
    );
    assert_eq!(edge.container_name, None);
}

#[test]
fn a_rollout_in_progress_shows_each_engines_last_step_or_that_it_waits() {
    let snapshot = Snapshot(
        BTreeMap::from([
            ("local".to_owned(), Ok(vec![container("c1", false)])),
            ("edge".to_owned(), Ok(vec![])),
        ]),
        BTreeMap::new(),
    );
    let d = running(Uuid::new_v4());
    let steps = [
        step(1, Step::Resolve, "", StepState::Succeeded),
        step(2, Step::Reach, "local", StepState::Succeeded),
        step(3, Step::Reach, "edge", StepState::Succeeded),
        step(4, Step::Start, "local", StepState::Succeeded),
        step(5, Step::Health, "local", StepState::Started),
    ];
    let rows = engine_rows(
        &TargetViews::default(),
        &app(),
        &snapshot,
        &[generation("local", "c1")],
        Some((&d, &steps)),
    );
    assert_eq!(rows[0].state, "not running (Exited (1))");
    let local = rows[0].rollout.as_ref().unwrap();
    assert_eq!(
        (local.deployment_id, local.words()),
        (d.id, "health started".to_owned())
    );
    assert_eq!(rows[1].state, "nothing deployed yet");
    assert_eq!(
        rows[1].rollout.as_ref().unwrap().words(),
        "waiting for its batch"
    );
}

#[test]
fn a_reason_shown_on_a_page_names_no_file_path() {
    let shown = public_reason(
        "ssh://root@10.77.0.2:22: Warning: Identity file /home/me/.ssh/id_ed25519 not \
         accessible; known hosts '/etc/pier/known_hosts' (see /x)",
    );
    assert!(!shown.contains("/home"), "{shown}");
    assert!(!shown.contains("/etc"), "{shown}");
    assert!(shown.contains("ssh://root@10.77.0.2:22"), "{shown}");
    assert_eq!(
        public_reason("tcp://10.77.0.2:2376 (TLS): connection refused"),
        "tcp://10.77.0.2:2376 (TLS): connection refused"
    );
}
