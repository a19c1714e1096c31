//! Which steps a deployment takes, picked once per deployment from the two axes that
//! decide it: the app's strategy (how a generation is replaced) and its targets (where it
//! runs). Nothing else in the pipeline matches on the strategy or counts engines, so a new
//! kind of target (a Swarm manager: the same resolve and checks, none of the container
//! steps) is one more arm here, not a flag threaded through the steps.

use std::sync::Arc;

use crate::config::{AppConfig, Strategy, TargetKind};
use crate::target::{Target, Targets};

/// The steps of one deployment, with the engines they run on.
#[derive(Debug)]
pub(super) enum Plan<'t> {
    /// One engine; the old generation stops right before the new one starts.
    Recreate(&'t Arc<Target>),
    /// One engine behind its `pier proxy`; the old generation serves until the new one is
    /// healthy and the route switched.
    BlueGreen(&'t Arc<Target>),
    /// Several engines, batch by batch, each running its strategy's steps (`rollout/`);
    /// the shared steps (resolve, quarantine, signature) run once for all.
    Rollout(Vec<&'t Arc<Target>>),
    /// A Swarm manager: Pier writes the service's spec and watches Swarm roll it out
    /// (`swarm/`); none of the container steps run.
    Swarm(&'t Arc<Target>),
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
                TargetKind::Engine => engines.push(target),
                TargetKind::Swarm => swarms.push(target),
            }
        }
        match (swarms.as_slice(), engines.is_empty()) {
            ([], _) => {}
            ([one], true) => return Ok(Plan::Swarm(one)),
            _ => return Err(NoPlan::SwarmNotAlone(app.name.to_string())),
        }
        match (engines.as_slice(), app.strategy) {
            ([], _) => Err(NoPlan::NoTarget(app.name.to_string())),
            ([one], Strategy::Recreate) => Ok(Plan::Recreate(one)),
            ([one], Strategy::BlueGreen) => Ok(Plan::BlueGreen(one)),
            (_, _) => Ok(Plan::Rollout(engines)),
        }
    }

    /// The engine the deployment's own (not per-engine) rows are written beside: the first.
    pub(super) fn first(&self) -> &'t Arc<Target> {
        match self {
            Plan::Recreate(t) | Plan::BlueGreen(t) | Plan::Swarm(t) => t,
            Plan::Rollout(all) => all[0],
        }
    }

    pub(super) fn crosses_engines(&self) -> bool {
        matches!(self, Plan::Rollout(_))
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
        assert!(matches!(Plan::pick(&app, &targets), Ok(Plan::Recreate(t)) if t.name == "local"));
        let (app, targets) = app_and_targets(
            "strategy = \"blue-green\"\n[apps.route]\nlisten = \"127.0.0.1:9000\"\n",
        );
        assert!(matches!(Plan::pick(&app, &targets), Ok(Plan::BlueGreen(t)) if t.name == "local"));
    }

    #[test]
    fn several_engines_are_one_rollout_in_config_order() {
        let (app, targets) = app_and_targets("targets = [\"b\", \"local\"]\n");
        let plan = Plan::pick(&app, &targets).expect("a plan");
        assert!(plan.crosses_engines());
        let Plan::Rollout(engines) = &plan else {
            panic!("{plan:?}")
        };
        let names: Vec<&str> = engines.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["b", "local"]);
        assert_eq!(plan.first().name, "b");
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
