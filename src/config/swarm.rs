//! `[apps.swarm]`: how an app on a `kind = "swarm"` target runs as a Docker Swarm service.
//! Pier writes the service's spec and watches Swarm roll it out; it never
//! places a task itself, so everything here is a value Swarm's own spec has, checked so
//! that Swarm cannot refuse it half-way through a deployment.

use std::time::Duration;

use serde::Deserialize;

use super::{AppConfig, ConfigError, Strategy, TargetConfig, TargetKind};

/// Swarm has no deadline of its own: an update whose tasks cannot be placed waits forever.
const DEFAULT_ROLLOUT_TIMEOUT: Duration = Duration::from_secs(300);
const MAX_ROLLOUT_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
const MAX_REPLICAS: u64 = 1000;
const MAX_PLACEMENT_RULES: usize = 32;

/// Replicated (a number of tasks) or global (one task on every eligible node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwarmMode {
    Replicated(u64),
    Global,
}

#[derive(
    serde::Serialize, schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum UpdateOrder {
    /// The new task starts and passes its health check before the old one stops: the
    /// default, since the old generation must serve until the new one is healthy.
    #[default]
    StartFirst,
    /// The old task stops before the new one starts: for a service that cannot run twice.
    StopFirst,
}

#[derive(
    serde::Serialize, schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum FailureAction {
    /// Swarm rolls the service back itself when tasks fail: the default.
    #[default]
    Rollback,
    /// Swarm pauses the update; Pier then asks it to roll back.
    Pause,
    /// Swarm goes on; Pier's `rollout_timeout` is then what ends a failing update.
    Continue,
}

/// The service's `UpdateConfig`, also used as its `RollbackConfig` (a rollback moves as
/// carefully as the update did).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdatePolicy {
    /// Tasks replaced at once; 0 is all at once.
    pub parallelism: u64,
    pub delay: Duration,
    pub order: UpdateOrder,
    pub failure_action: FailureAction,
    /// How long a new task must run (and stay healthy) to count as updated.
    pub monitor: Duration,
    pub max_failure_ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    /// `node.role == worker`, `node.labels.zone != b`: Swarm's own constraint syntax.
    pub constraints: Vec<String>,
    /// Spread descriptors (`node.labels.zone`): tasks spread evenly over their values.
    pub spread: Vec<String>,
    pub max_replicas_per_node: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SwarmApp {
    pub mode: SwarmMode,
    pub update: UpdatePolicy,
    pub placement: Placement,
    /// Pier's own deadline for a rollout (and for the rollback after one that failed).
    pub rollout_timeout: Duration,
    /// Published in host mode on each node that runs a task (the routing mesh is not
    /// used): a node then runs at most one task of the service.
    pub publish_port: Option<u16>,
    /// The tasks' health check, run inside each task (`["CMD", …]` semantics); without
    /// it, the image's own HEALTHCHECK applies.
    pub health_cmd: Option<Vec<String>>,
    /// How long a new task may take to become healthy before failed checks count.
    pub health_start: Duration,
}

/// How many tasks the service runs.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum RawMode {
    Replicated,
    Global,
}

/// The service of an app on a `kind = "swarm"` target: Pier writes its spec, naming
/// `repo:tag@sha256:…`, and watches Swarm's rollout to a verdict. A swarm app cannot name
/// other targets, a `strategy`, a `route`, `publish`, volumes, host paths, devices, `tmpfs`
/// or further services.
#[derive(schemars::JsonSchema, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSwarm {
    /// Tasks of a replicated service, 0 to 1000.
    ///
    /// Default: `1`.
    replicas: Option<u64>,
    /// `global`: one task on every eligible node (no `replicas`).
    ///
    /// Default: `"replicated"`.
    mode: Option<RawMode>,
    /// The service's update config, see `[apps.swarm.update]`.
    #[serde(default)]
    update: RawUpdate,
    /// Where Swarm may put tasks, see `[apps.swarm.placement]`.
    #[serde(default)]
    placement: RawPlacement,
    /// Pier's deadline for the rollout (Swarm has none), and again for a rollback; longer
    /// than `update.monitor`, at most `24h`. It starts again when a restarted Pier resumes
    /// watching.
    ///
    /// Default: `"5m"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    rollout_timeout: Option<Duration>,
    /// `port` published in host mode on each node that runs a task (at most one task per
    /// node then). The routing mesh is not used.
    publish_port: Option<u16>,
    /// The check each task runs inside its container (`CMD` form, every 2 s, 3 failures
    /// make it unhealthy). A swarm app has no `health.path`: Pier's HTTP probe cannot reach
    /// tasks on other nodes.
    ///
    /// Default: the image's `HEALTHCHECK`.
    health_cmd: Option<Vec<String>>,
    /// How long a new task may take before failed checks count.
    ///
    /// Default: `"30s"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    health_start: Option<Duration>,
}

/// The service's update config, also its rollback config (a rollback pauses rather than
/// goes on if the previous spec fails too).
#[derive(schemars::JsonSchema, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawUpdate {
    /// Tasks replaced at once.
    ///
    /// Default: `1`.
    parallelism: Option<u64>,
    /// Pause between batches of tasks.
    ///
    /// Default: `"0s"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    delay: Option<Duration>,
    /// Whether a new task starts before its old one stops.
    #[serde(default)]
    order: UpdateOrder,
    /// What Swarm does when tasks fail during the update.
    #[serde(default)]
    failure_action: FailureAction,
    /// How long each new task is watched after it starts; a new service must hold its
    /// replicas for this long.
    ///
    /// Default: `"5s"`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    monitor: Option<Duration>,
    /// The share of tasks that may fail during the update before `failure_action` applies.
    ///
    /// Default: `0`.
    max_failure_ratio: Option<f64>,
}

/// Where Swarm may put the service's tasks. Pier adds the platforms of the image, so that
/// each node pulls the manifest of its own platform.
#[derive(schemars::JsonSchema, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPlacement {
    /// Swarm's constraints (`"node.role == worker"`).
    #[serde(default)]
    constraints: Vec<String>,
    /// Spread preferences (`"node.labels.zone"`).
    #[serde(default)]
    preferences: Vec<String>,
    /// At most this many tasks on one node.
    max_replicas_per_node: Option<u64>,
}

fn invalid(app: &str, what: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("app `{app}`: swarm.{what}"))
}

impl RawUpdate {
    fn resolve(self, app: &str) -> Result<UpdatePolicy, ConfigError> {
        let parallelism = self.parallelism.unwrap_or(1);
        if parallelism > MAX_REPLICAS {
            return Err(invalid(app, "update.parallelism is at most 1000"));
        }
        let ratio = self.max_failure_ratio.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&ratio) {
            return Err(invalid(app, "update.max_failure_ratio is from 0 to 1"));
        }
        let (delay, monitor) = (
            self.delay.unwrap_or(Duration::ZERO),
            self.monitor.unwrap_or(Duration::from_secs(5)),
        );
        if delay > Duration::from_secs(3600) || monitor > Duration::from_secs(3600) {
            return Err(invalid(
                app,
                "update.delay and update.monitor are at most 1h",
            ));
        }
        Ok(UpdatePolicy {
            parallelism,
            delay,
            order: self.order,
            failure_action: self.failure_action,
            monitor,
            max_failure_ratio: ratio,
        })
    }
}

impl RawPlacement {
    fn resolve(self, app: &str) -> Result<Placement, ConfigError> {
        if self.constraints.len() + self.preferences.len() > MAX_PLACEMENT_RULES {
            return Err(invalid(app, "placement has at most 32 rules"));
        }
        for c in &self.constraints {
            // Swarm's grammar: `key == value` or `key != value`; anything else it refuses
            // at update time, after Pier has begun.
            let ok = (c.contains("==") || c.contains("!=")) && c.len() <= 256;
            if !ok || c.trim_start().starts_with(['=', '!']) {
                return Err(invalid(
                    app,
                    format!("placement.constraints: `{c}` is not `key == value` or `key != value`"),
                ));
            }
        }
        if let Some(p) = self
            .preferences
            .iter()
            .find(|p| p.trim().is_empty() || p.len() > 256 || p.contains(char::is_whitespace))
        {
            return Err(invalid(
                app,
                format!(
                    "placement.preferences: `{p}` is not a spread descriptor such as node.labels.zone"
                ),
            ));
        }
        if self.max_replicas_per_node == Some(0) {
            return Err(invalid(
                app,
                "placement.max_replicas_per_node is at least 1",
            ));
        }
        Ok(Placement {
            constraints: self.constraints,
            spread: self.preferences,
            max_replicas_per_node: self.max_replicas_per_node,
        })
    }
}

impl RawSwarm {
    fn resolve(self, app: &str) -> Result<SwarmApp, ConfigError> {
        let mode = match (self.mode, self.replicas) {
            (Some(RawMode::Global), Some(_)) => {
                return Err(invalid(
                    app,
                    "replicas is for mode = \"replicated\", not global",
                ));
            }
            (Some(RawMode::Global), None) => SwarmMode::Global,
            (_, Some(n)) if n > MAX_REPLICAS => {
                return Err(invalid(app, "replicas is at most 1000"));
            }
            (_, n) => SwarmMode::Replicated(n.unwrap_or(1)),
        };
        let update = self.update.resolve(app)?;
        let rollout_timeout = self.rollout_timeout.unwrap_or(DEFAULT_ROLLOUT_TIMEOUT);
        if rollout_timeout > MAX_ROLLOUT_TIMEOUT || rollout_timeout <= update.monitor {
            return Err(invalid(
                app,
                "rollout_timeout must be longer than update.monitor and at most 24h",
            ));
        }
        if self.publish_port == Some(0) {
            return Err(invalid(app, "publish_port 0 is no port"));
        }
        if let Some(cmd) = &self.health_cmd
            && (cmd.is_empty() || cmd.len() > 64 || cmd.iter().any(|a| a.len() > 4096))
        {
            return Err(invalid(
                app,
                "health_cmd is the program, then its arguments (at most 64)",
            ));
        }
        let health_start = self.health_start.unwrap_or(Duration::from_secs(30));
        if health_start > Duration::from_secs(3600) {
            return Err(invalid(app, "health_start is at most 1h"));
        }
        Ok(SwarmApp {
            health_start,
            mode,
            update,
            placement: self.placement.resolve(app)?,
            rollout_timeout,
            publish_port: self.publish_port,
            health_cmd: self.health_cmd,
        })
    }
}

/// Whether the app's `targets` (as written) name a swarm target.
pub(super) fn names_swarm(names: Option<&[String]>, targets: &[TargetConfig]) -> bool {
    let local = [super::LOCAL.to_owned()];
    names.unwrap_or(&local).iter().any(|n| {
        targets
            .iter()
            .any(|t| &t.name == n && t.kind == TargetKind::Swarm)
    })
}

/// The app's `[apps.swarm]`, checked against where it runs: an app on a swarm target runs
/// there alone and as a service (`None` for an app on engines, which must not set one).
/// What a service cannot be given the way a container is (a route, a fixed `publish`,
/// volumes, host files) is refused here rather than silently left out.
pub(super) fn resolve(
    app: &AppConfig,
    raw: Option<RawSwarm>,
    targets: &[TargetConfig],
) -> Result<Option<SwarmApp>, ConfigError> {
    if !names_swarm(Some(&app.targets), targets) {
        return match raw {
            Some(_) => Err(invalid(
                &app.name,
                "is for an app on a kind = \"swarm\" target",
            )),
            None => Ok(None),
        };
    }
    let refuse = |what: &str| -> Result<Option<SwarmApp>, ConfigError> {
        Err(ConfigError::Invalid(format!(
            "app `{}`: on a swarm target {what}",
            app.name
        )))
    };
    let c = &app.contained;
    if app.targets.len() != 1 {
        return refuse("the app runs on that target alone: Swarm places its tasks on its nodes");
    }
    if app.strategy != Strategy::Recreate || app.route.is_some() {
        return refuse(
            "Swarm replaces tasks itself: set swarm.update.order, not a strategy or route",
        );
    }
    if app.ports.published().next().is_some() {
        return refuse("ports are published on each node: set swarm.publish_port, not publish");
    }
    if app.ports.others().next().is_some() {
        return refuse("one `port` only: Swarm publishes the app's HTTP port, not several ports");
    }
    if !app.services.is_empty() {
        return refuse("further services are separate apps");
    }
    if !c.volumes.is_empty() || c.has_host_paths() || !c.tmpfs.is_empty() {
        return refuse("volumes, files, binds, devices and tmpfs are not supported yet");
    }
    let swarm = raw.unwrap_or_default().resolve(&app.name)?;
    if app.health.is_some() && swarm.health_cmd.is_none() {
        return refuse(
            "health runs inside each task: give swarm.health_cmd (or use the image's HEALTHCHECK) instead of health.path",
        );
    }
    Ok(Some(swarm))
}

#[cfg(test)]
mod tests;
