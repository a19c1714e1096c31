use std::path::Path;
use std::time::Duration;

use crate::config::{Config, ConfigError, FailureAction, SwarmMode, UpdateOrder};

fn parse(app_lines: &str) -> Result<Config, ConfigError> {
    let toml = format!(
        "[server]\ndatabase_url = \"postgres://x@localhost/x\"\n\
         [[targets]]\nname = \"prod\"\nkind = \"swarm\"\nhost = \"unix:///run/manager.sock\"\n\
         [[apps]]\nname = \"web\"\nimage = \"registry.example/web\"\nport = 8080\n{app_lines}"
    );
    Config::parse(&toml, Path::new("/etc/pier"))
}

fn refusal(app_lines: &str) -> String {
    match parse(app_lines) {
        Err(ConfigError::Invalid(m)) => m,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn an_app_on_a_swarm_target_gets_defaults_that_keep_the_old_tasks_serving() {
    let config = parse("targets = [\"prod\"]\n").expect("config");
    let swarm = config.apps[0].swarm.as_ref().expect("a swarm app");
    assert_eq!(swarm.mode, SwarmMode::Replicated(1));
    assert_eq!(swarm.update.order, UpdateOrder::StartFirst);
    assert_eq!(swarm.update.failure_action, FailureAction::Rollback);
    assert_eq!(swarm.rollout_timeout, Duration::from_secs(300));
}

#[test]
fn the_swarm_section_is_read_whole() {
    let config = parse(
        "targets = [\"prod\"]\n[apps.swarm]\nreplicas = 3\nrollout_timeout = \"90s\"\n\
         publish_port = 18080\nhealth_cmd = [\"/bin/busybox\", \"wget\", \"-q\", \"http://127.0.0.1:8080/health\"]\n\
         update = { parallelism = 2, delay = \"1s\", order = \"stop-first\", failure_action = \"pause\", monitor = \"3s\", max_failure_ratio = 0.5 }\n\
         placement = { constraints = [\"node.role == worker\"], preferences = [\"node.id\"], max_replicas_per_node = 2 }\n",
    )
    .expect("config");
    let s = config.apps[0].swarm.as_ref().expect("a swarm app");
    assert_eq!(s.mode, SwarmMode::Replicated(3));
    assert_eq!(s.update.parallelism, 2);
    assert_eq!(s.update.order, UpdateOrder::StopFirst);
    assert_eq!(s.update.failure_action, FailureAction::Pause);
    assert_eq!(s.update.monitor, Duration::from_secs(3));
    assert_eq!(s.placement.constraints, ["node.role == worker"]);
    assert_eq!(s.placement.spread, ["node.id"]);
    assert_eq!(s.placement.max_replicas_per_node, Some(2));
    assert_eq!(s.publish_port, Some(18080));
    assert_eq!(s.rollout_timeout, Duration::from_secs(90));
}

#[test]
fn global_mode_takes_no_replica_count() {
    let config = parse("targets = [\"prod\"]\nswarm = { mode = \"global\" }\n").expect("config");
    assert_eq!(
        config.apps[0].swarm.as_ref().unwrap().mode,
        SwarmMode::Global
    );
    let m = refusal("targets = [\"prod\"]\nswarm = { mode = \"global\", replicas = 2 }\n");
    assert!(m.contains("replicas is for mode"), "{m}");
}

#[test]
fn what_a_service_cannot_be_given_is_refused_with_the_reason() {
    let cases = [
        ("swarm = { replicas = 2 }\n", "kind = \"swarm\" target"),
        ("targets = [\"prod\", \"local\"]\n", "alone"),
        (
            "targets = [\"prod\"]\npublish = \"127.0.0.1:8080\"\n",
            "publish_port",
        ),
        (
            "targets = [\"prod\"]\nhealth = { path = \"/health\" }\n",
            "health_cmd",
        ),
        (
            "targets = [\"prod\"]\nswarm = { replicas = 5000 }\n",
            "at most 1000",
        ),
        (
            "targets = [\"prod\"]\nswarm = { placement = { constraints = [\"node.role\"] } }\n",
            "key == value",
        ),
        (
            "targets = [\"prod\"]\nswarm = { rollout_timeout = \"2s\", update = { monitor = \"5s\" } }\n",
            "longer than update.monitor",
        ),
        (
            "targets = [\"prod\"]\nswarm = { update = { max_failure_ratio = 2.0 } }\n",
            "from 0 to 1",
        ),
    ];
    for (lines, want) in cases {
        let m = refusal(lines);
        assert!(m.contains(want), "{lines:?}: {m}");
    }
}
