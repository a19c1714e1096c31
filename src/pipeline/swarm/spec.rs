//! The service spec Pier writes for a swarm app: a pure function of the config, the
//! deployment and its resolved digest, so that a replay computes the same spec (its keyed
//! hash is the `update` step's intent) and a test can read it without an engine.
//!
//! Invariant: the image is always `repo:tag@sha256:…` of the digest the deployment
//! resolved (the index's when the tag named one, so that every node pulls the manifest of
//! its own platform), never a bare tag: a tag that moves during the rollout changes
//! nothing (docker CLI 29 no longer pins it, docker/cli#7302).

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{
    EndpointPortConfig, EndpointPortConfigPublishModeEnum, EndpointSpec, HealthConfig, Limit,
    NetworkAttachmentConfig, Platform, ServiceSpec, ServiceSpecMode, ServiceSpecModeReplicated,
    ServiceSpecRollbackConfig, ServiceSpecRollbackConfigFailureActionEnum,
    ServiceSpecRollbackConfigOrderEnum, ServiceSpecUpdateConfig,
    ServiceSpecUpdateConfigFailureActionEnum, ServiceSpecUpdateConfigOrderEnum, TaskSpec,
    TaskSpecContainerSpec, TaskSpecContainerSpecFile, TaskSpecContainerSpecSecrets,
    TaskSpecPlacement, TaskSpecPlacementPreferences, TaskSpecPlacementSpread, TaskSpecResources,
};

use crate::config::{AppConfig, FailureAction, SwarmApp, SwarmMode, UpdateOrder};
use crate::engine::{LABEL_APP, LABEL_DEPLOYMENT, LABEL_DIGEST, LABEL_MANAGED};

/// Everything the spec is made of besides the config.
pub(crate) struct SpecInput<'a> {
    pub app: &'a AppConfig,
    pub swarm: &'a SwarmApp,
    pub deployment: &'a str,
    /// `repo:tag@sha256:…` (or `repo@sha256:…` when no tag names it).
    pub image: &'a str,
    /// The platform manifest digest the deployment resolved: the `pier.digest` label.
    pub digest: &'a str,
    /// The index's platforms (empty for a single manifest): Swarm places tasks only on
    /// nodes of these platforms.
    pub platforms: &'a [crate::domain::Platform],
    /// `KEY=value` (secret references already resolved: the spec is sent, never logged).
    pub env: Vec<String>,
    /// Swarm secrets by the file name they are mounted as, `/run/secrets/<file>`: (file,
    /// secret name, secret id). The id is Swarm's, known once the secret exists; the
    /// spec's keyed hash is taken without it.
    pub secrets: &'a [(String, String, Option<String>)],
    /// Raised to replace every task though the spec is otherwise the same (a redeploy).
    pub force_update: u64,
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// The labels of the service and of each task's container: who made it, from which
/// deployment, running which digest.
fn labels(i: &SpecInput<'_>) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_MANAGED.to_owned(), "true".to_owned()),
        (LABEL_APP.to_owned(), i.app.name.to_string()),
        (LABEL_DEPLOYMENT.to_owned(), i.deployment.to_owned()),
        (LABEL_DIGEST.to_owned(), i.digest.to_owned()),
    ])
}

pub(crate) fn service_spec(i: &SpecInput<'_>) -> ServiceSpec {
    let s = i.swarm;
    ServiceSpec {
        name: Some(i.app.name.to_string()),
        labels: Some(labels(i)),
        task_template: Some(task(i)),
        mode: Some(match s.mode {
            SwarmMode::Replicated(n) => ServiceSpecMode {
                replicated: Some(ServiceSpecModeReplicated {
                    replicas: Some(i64::try_from(n).unwrap_or(i64::MAX)),
                }),
                ..Default::default()
            },
            SwarmMode::Global => ServiceSpecMode {
                global: Some(HashMap::new()),
                ..Default::default()
            },
        }),
        update_config: Some(update_config(s)),
        rollback_config: Some(rollback_config(s)),
        endpoint_spec: s.publish_port.map(|p| EndpointSpec {
            ports: Some(vec![EndpointPortConfig {
                target_port: Some(i64::from(i.app.port())),
                published_port: Some(i64::from(p)),
                publish_mode: Some(EndpointPortConfigPublishModeEnum::HOST),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The task template: its container, limits, placement and networks.
fn task(i: &SpecInput<'_>) -> TaskSpec {
    let app = i.app;
    TaskSpec {
        container_spec: Some(container_spec(i)),
        resources: Some(TaskSpecResources {
            limits: Some(Limit {
                nano_cpus: app.cpus.map(|c| (c * 1e9) as i64),
                memory_bytes: app.memory_bytes,
                pids: app.pids_limit,
            }),
            ..Default::default()
        }),
        placement: Some(placement(i)),
        force_update: Some(i.force_update),
        networks: (!app.contained.networks.is_empty()).then(|| {
            app.contained
                .networks
                .iter()
                .map(|n| NetworkAttachmentConfig {
                    target: Some(n.clone()),
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    }
}

fn container_spec(i: &SpecInput<'_>) -> TaskSpecContainerSpec {
    let (app, s) = (i.app, i.swarm);
    TaskSpecContainerSpec {
        image: Some(i.image.to_owned()),
        labels: Some(labels(i)),
        command: app.command.clone(),
        env: Some(i.env.clone()),
        user: app.contained.user.clone(),
        read_only: Some(app.contained.read_only_root),
        stop_grace_period: Some(nanos(app.stop_timeout)),
        health_check: s.health_cmd.as_ref().map(|cmd| HealthConfig {
            test: Some(
                std::iter::once("CMD".to_owned())
                    .chain(cmd.clone())
                    .collect(),
            ),
            interval: Some(nanos(Duration::from_secs(2))),
            timeout: Some(nanos(Duration::from_secs(5))),
            retries: Some(3),
            start_period: Some(nanos(s.health_start)),
            start_interval: Some(nanos(Duration::from_millis(500))),
        }),
        secrets: (!i.secrets.is_empty()).then(|| {
            i.secrets
                .iter()
                .map(|(file, name, id)| TaskSpecContainerSpecSecrets {
                    file: Some(TaskSpecContainerSpecFile {
                        name: Some(file.clone()),
                        uid: Some("0".into()),
                        gid: Some("0".into()),
                        mode: Some(0o444),
                    }),
                    secret_name: Some(name.clone()),
                    secret_id: id.clone(),
                })
                .collect()
        }),
        ..Default::default()
    }
}

fn placement(i: &SpecInput<'_>) -> TaskSpecPlacement {
    let placement = &i.swarm.placement;
    TaskSpecPlacement {
        constraints: Some(placement.constraints.clone()),
        preferences: Some(
            placement
                .spread
                .iter()
                .map(|d| TaskSpecPlacementPreferences {
                    spread: Some(TaskSpecPlacementSpread {
                        spread_descriptor: Some(d.clone()),
                    }),
                })
                .collect(),
        ),
        max_replicas: placement
            .max_replicas_per_node
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        platforms: (!i.platforms.is_empty()).then(|| {
            i.platforms
                .iter()
                .map(|p| Platform {
                    architecture: Some(p.architecture.clone()),
                    os: Some(p.os.clone()),
                })
                .collect()
        }),
    }
}

fn update_config(s: &SwarmApp) -> ServiceSpecUpdateConfig {
    let u = &s.update;
    ServiceSpecUpdateConfig {
        parallelism: Some(i64::try_from(u.parallelism).unwrap_or(i64::MAX)),
        delay: Some(nanos(u.delay)),
        failure_action: Some(match u.failure_action {
            FailureAction::Rollback => ServiceSpecUpdateConfigFailureActionEnum::ROLLBACK,
            FailureAction::Pause => ServiceSpecUpdateConfigFailureActionEnum::PAUSE,
            FailureAction::Continue => ServiceSpecUpdateConfigFailureActionEnum::CONTINUE,
        }),
        monitor: Some(nanos(u.monitor)),
        max_failure_ratio: Some(u.max_failure_ratio),
        order: Some(match u.order {
            UpdateOrder::StartFirst => ServiceSpecUpdateConfigOrderEnum::START_FIRST,
            UpdateOrder::StopFirst => ServiceSpecUpdateConfigOrderEnum::STOP_FIRST,
        }),
    }
}

/// A rollback moves like the update did, and pauses (for Pier to say so loudly) rather
/// than going on when the previous spec fails too.
fn rollback_config(s: &SwarmApp) -> ServiceSpecRollbackConfig {
    let u = &s.update;
    ServiceSpecRollbackConfig {
        parallelism: Some(i64::try_from(u.parallelism).unwrap_or(i64::MAX)),
        delay: Some(nanos(u.delay)),
        failure_action: Some(ServiceSpecRollbackConfigFailureActionEnum::PAUSE),
        monitor: Some(nanos(u.monitor)),
        max_failure_ratio: Some(u.max_failure_ratio),
        order: Some(match u.order {
            UpdateOrder::StartFirst => ServiceSpecRollbackConfigOrderEnum::START_FIRST,
            UpdateOrder::StopFirst => ServiceSpecRollbackConfigOrderEnum::STOP_FIRST,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn app() -> AppConfig {
        let toml = "[server]\ndatabase_url = \"postgres://x@localhost/x\"\n\
             [[targets]]\nname = \"prod\"\nkind = \"swarm\"\nhost = \"unix:///run/m.sock\"\n\
             [[apps]]\nname = \"web\"\nimage = \"registry.example/web\"\nport = 8080\n\
             targets = [\"prod\"]\nmemory = \"64m\"\n\
             swarm = { replicas = 3, publish_port = 18080, update = { parallelism = 2 } }\n";
        Config::parse(toml, std::path::Path::new("/etc/pier"))
            .expect("config")
            .apps
            .remove(0)
    }

    #[test]
    fn the_spec_pins_the_digest_and_names_the_deployment() {
        let app = app();
        let platforms = [crate::domain::Platform::from_engine("linux", "x86_64")];
        let secrets = [(
            "token".to_owned(),
            "pier-web-token-0123".to_owned(),
            Some("id1".to_owned()),
        )];
        let spec = service_spec(&SpecInput {
            app: &app,
            swarm: app.swarm.as_ref().unwrap(),
            deployment: "d-1",
            image: "registry.example/web:v2@sha256:ab",
            digest: "sha256:ab",
            platforms: &platforms,
            env: vec!["A=1".into()],
            secrets: &secrets,
            force_update: 0,
        });
        let task = spec.task_template.as_ref().unwrap();
        let c = task.container_spec.as_ref().unwrap();
        assert_eq!(
            c.image.as_deref(),
            Some("registry.example/web:v2@sha256:ab")
        );
        assert_eq!(spec.labels.as_ref().unwrap()["pier.deployment"], "d-1");
        assert_eq!(c.labels.as_ref().unwrap()["pier.digest"], "sha256:ab");
        assert_eq!(c.env.as_deref(), Some(&["A=1".to_owned()][..]));
        let mounted = &c.secrets.as_ref().unwrap()[0];
        assert_eq!(mounted.secret_name.as_deref(), Some("pier-web-token-0123"));
        let mode = spec.mode.as_ref().unwrap();
        assert_eq!(mode.replicated.as_ref().unwrap().replicas, Some(3));
        let update = spec.update_config.as_ref().unwrap();
        assert_eq!(update.parallelism, Some(2));
        assert_eq!(
            update.order,
            Some(ServiceSpecUpdateConfigOrderEnum::START_FIRST)
        );
        let port = &spec.endpoint_spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
        assert_eq!(
            port.publish_mode,
            Some(EndpointPortConfigPublishModeEnum::HOST)
        );
        assert_eq!(
            (port.target_port, port.published_port),
            (Some(8080), Some(18080))
        );
        let placed = task.placement.as_ref().unwrap();
        assert_eq!(
            placed.platforms.as_ref().unwrap()[0]
                .architecture
                .as_deref(),
            Some("amd64")
        );
        assert_eq!(
            task.resources
                .as_ref()
                .unwrap()
                .limits
                .as_ref()
                .unwrap()
                .memory_bytes,
            Some(64 * 1024 * 1024)
        );
    }

    #[test]
    fn the_same_spec_serializes_the_same_through_value() {
        let app = app();
        let build = || {
            let spec = service_spec(&SpecInput {
                app: &app,
                swarm: app.swarm.as_ref().unwrap(),
                deployment: "d-1",
                image: "registry.example/web:v2@sha256:ab",
                digest: "sha256:ab",
                platforms: &[],
                env: vec![],
                secrets: &[],
                force_update: 0,
            });
            serde_json::to_value(&spec).unwrap().to_string()
        };
        let first = build();
        assert!(
            (0..20).all(|_| build() == first),
            "a keyed hash of it is stable"
        );
    }
}
