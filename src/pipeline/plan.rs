//! Which plan a deployment follows, picked once per deployment from the two axes that
//! decide it: the app's strategy (how a generation is replaced) and its targets (where it
//! runs). Each plan owns its forward steps and its undo (`alone.rs`, `rollout/`,
//! `swarm/`); nothing else in the pipeline matches on the strategy or the kind of target.
//!
//! A target reaches the steps only as the type of its kind, made here and nowhere else: an
//! [`EngineTarget`] is an engine Pier makes containers on, a [`SwarmTarget`] a Swarm
//! manager Pier writes a service's spec to. A container step takes the first only, so it
//! cannot be handed a Swarm target.

use crate::config::{AppConfig, Strategy, TargetKind};
use crate::engine::Engine;
use crate::target::{Target, Targets};

/// The steps of one deployment, with the targets they run on.
#[derive(Debug)]
pub(super) enum Plan<'t> {
    /// One engine; the old generation stops right before the new one starts.
    Recreate(EngineTarget<'t>),
    /// One engine behind its `pier proxy`; the old generation serves until the new one is
    /// healthy and the route switched.
    BlueGreen(EngineTarget<'t>),
    /// Several engines, batch by batch, each replacing its generation as `recreate` does;
    /// the shared steps (resolve, quarantine, signature) run once for all.
    RolloutRecreate(Vec<EngineTarget<'t>>),
    /// Several engines, batch by batch, each behind its own `pier proxy --target`.
    RolloutBlueGreen(Vec<EngineTarget<'t>>),
    /// A Swarm manager: Pier writes the service's spec and watches Swarm roll it out;
    /// none of the container steps run.
    Swarm(SwarmTarget<'t>),
}

/// An engine Pier makes, starts and removes containers on.
#[derive(Debug, Clone, Copy)]
pub(super) struct EngineTarget<'t>(&'t Target);

/// A Swarm manager: Pier writes a service's spec there and never places a container.
#[derive(Debug, Clone, Copy)]
pub(super) struct SwarmTarget<'t>(&'t Target);

/// What the journal needs of any target: the name its steps are keyed by.
pub(super) trait Placed: Copy {
    fn name(&self) -> &str;
}

impl<'t> EngineTarget<'t> {
    pub(super) fn engine(self) -> &'t Engine {
        &self.0.engine
    }

    /// Whether what its containers publish on 127.0.0.1 is this process's loopback (see
    /// [`Target::is_local`]).
    pub(super) fn is_local(self) -> bool {
        self.0.is_local()
    }
}

impl<'t> SwarmTarget<'t> {
    /// The manager's engine client: services, tasks and secrets, never containers.
    pub(super) fn manager(self) -> &'t Engine {
        &self.0.engine
    }
}

impl Placed for EngineTarget<'_> {
    fn name(&self) -> &str {
        &self.0.name
    }
}

impl Placed for SwarmTarget<'_> {
    fn name(&self) -> &str {
        &self.0.name
    }
}

/// How many engines a deployment's container steps run on. On several, each engine's
/// steps are journaled under its name and its crash points carry it (`health#edge-1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TargetSet {
    One,
    Several,
}

/// Why no plan fits: the deployment cannot run in this process as configured.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum NoPlan {
    /// A target added by a reload: engines are connected at start.
    #[error(
        "app `{app}` runs on target `{target}`, which this process has no engine for; restart Pier after adding targets"
    )]
    UnknownTarget { app: String, target: String },
    #[error("app `{0}` names no target")]
    NoTarget(String),
    /// The config refuses this too: a swarm places its own tasks, beside nothing else.
    #[error("app `{0}` runs on a swarm target and others; a swarm app runs on that target alone")]
    SwarmNotAlone(String),
}

impl<'t> Plan<'t> {
    pub(super) fn pick(app: &AppConfig, targets: &'t Targets) -> Result<Self, NoPlan> {
        let mut engines = Vec::with_capacity(app.targets.len());
        let mut swarms = Vec::new();
        for name in &app.targets {
            let target = targets.get(name).ok_or_else(|| NoPlan::UnknownTarget {
                app: app.name.to_string(),
                target: name.clone(),
            })?;
            match target.kind {
                TargetKind::Engine => engines.push(EngineTarget(target)),
                TargetKind::Swarm => swarms.push(SwarmTarget(target)),
            }
        }
        match (swarms.as_slice(), engines.is_empty()) {
            ([], _) => {}
            ([one], true) => return Ok(Plan::Swarm(*one)),
            _ => return Err(NoPlan::SwarmNotAlone(app.name.to_string())),
        }
        match (engines.as_slice(), app.strategy) {
            ([], _) => Err(NoPlan::NoTarget(app.name.to_string())),
            ([one], Strategy::Recreate) => Ok(Plan::Recreate(*one)),
            ([one], Strategy::BlueGreen) => Ok(Plan::BlueGreen(*one)),
            (_, Strategy::Recreate) => Ok(Plan::RolloutRecreate(engines)),
            (_, Strategy::BlueGreen) => Ok(Plan::RolloutBlueGreen(engines)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn app_and_targets(app_lines: &str) -> (AppConfig, Targets) {
        let toml = format!(
            "[server]\ndatabase_url = \"postgres://x@localhost/x\"\n\
             [[targets]]\nname = \"b\"\nkind = \"engine\"\nhost = \"unix:///var/run/docker.sock\"\n\
             [[apps]]\nname = \"web\"\nimage = \"registry.example/web\"\nport = 8080\n{app_lines}"
        );
        let config = Config::parse(&toml, std::path::Path::new("/etc/pier")).expect("config");
        let targets = Targets::build(&config.targets, None).expect("targets");
        (config.apps[0].clone(), targets)
    }

    #[test]
    fn one_engine_takes_the_apps_strategy() {
        let (app, targets) = app_and_targets("");
        assert!(matches!(Plan::pick(&app, &targets), Ok(Plan::Recreate(t)) if t.name() == "local"));
        let (app, targets) = app_and_targets(
            "strategy = \"blue-green\"\n[apps.route]\nlisten = \"127.0.0.1:9000\"\n",
        );
        assert!(
            matches!(Plan::pick(&app, &targets), Ok(Plan::BlueGreen(t)) if t.name() == "local")
        );
    }

    #[test]
    fn several_engines_are_one_rollout_in_config_order() {
        let (app, targets) = app_and_targets("targets = [\"b\", \"local\"]\n");
        let plan = Plan::pick(&app, &targets).expect("a plan");
        let Plan::RolloutRecreate(engines) = &plan else {
            panic!("{plan:?}")
        };
        let names: Vec<&str> = engines.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["b", "local"]);
    }

    #[test]
    fn a_target_without_an_engine_here_is_named() {
        let (app, _) = app_and_targets("targets = [\"b\"]\n");
        let empty = Targets::default();
        assert_eq!(
            Plan::pick(&app, &empty).unwrap_err(),
            NoPlan::UnknownTarget {
                app: "web".into(),
                target: "b".into()
            }
        );
    }
}
