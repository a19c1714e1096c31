//! The plan on a Swarm manager: resolve, signature, verify (the manifest and its
//! platforms, read again from the registry), update (the service's spec names the digest,
//! `update.rs`), converge (Swarm's rollout watched to a verdict, `watch.rs`); on failure,
//! rollback (`undo.rs`). Pier never places a task: each node's engine pulls the digest
//! itself.
//!
//! Invariant: one deployment issues at most one create or update of the service. The
//! spec carries the deployment's id as `pier.deployment`, on the service and on every
//! task's container, so a replay after a crash proves from Swarm's own records whether
//! its update landed (the spec's label, or, when Swarm has rolled it back since, tasks of
//! that spec), instead of trusting `Version.Index`, which Swarm bumps on its own.

mod spec;
mod undo;
mod update;
mod watch;

pub use watch::RolloutFailure;

use super::outcome::Done;
use super::plan::Placed;
use super::records::{Checked, ConvergeIntent, Converged, ManifestIntent};
use super::refusal::Refusal;
use super::{Outcome, PipelineError, Step, StepError, SwarmRun, error_chain};
use crate::config::SwarmApp;
use crate::engine::{LABEL_DEPLOYMENT, LABEL_DIGEST, LABEL_MANAGED};
use crate::registry::Resolved;
use crate::store::GenerationSwitch;

/// The plan on a Swarm manager: its steps, and on failure its undo (`undo.rs`). A swarm's
/// nodes pull from the registry, so an imported archive has nowhere to go.
pub(super) async fn run(run: &SwarmRun<'_>) -> Outcome {
    if let Err(e) = run.admit_without_import(Refusal::ImportOnSwarm) {
        return run.fail(&e, || run.undo_service(&e)).await;
    }
    match run.steps_swarm().await {
        Ok(done) => run.finish_done(done).await,
        Err(PipelineError::Store(e)) => Outcome::Abandoned(error_chain(&e)),
        Err(e) => run.fail(&e, || run.undo_service(&e)).await,
    }
}

impl SwarmRun<'_> {
    fn swarm(&self) -> Result<&SwarmApp, PipelineError> {
        self.app
            .swarm
            .as_ref()
            .ok_or_else(|| PipelineError::Failed {
                step: Step::Update,
                source: Refusal::NoSwarmSettings {
                    app: self.app.name.to_string(),
                    target: self.target.name().to_owned(),
                }
                .into(),
            })
    }

    /// The service's name: the app's.
    fn service_name(&self) -> &str {
        &self.app.name
    }

    /// `repo:tag@digest` (the tag only shown, the digest what runs).
    fn swarm_image(&self, digest: &str) -> String {
        let tag = self
            .dep
            .requested_tag
            .as_deref()
            .filter(|_| !self.dep.pinned)
            .or(self.app.rule.fixed());
        match tag {
            Some(t) => format!("{}:{t}@{digest}", self.app.image),
            None => format!("{}@{digest}", self.app.image),
        }
    }

    async fn steps_swarm(&self) -> Result<Done, PipelineError> {
        let swarm = self.swarm()?;
        let resolved = self.resolve().await?;
        if let Some(note) = self.skip_quarantined(&resolved.digest).await? {
            return Ok(Done::Skipped(note));
        }
        if !self.dep.trigger.is_operator()
            && let Some(note) = self.service_already_runs(&resolved).await?
        {
            return Ok(Done::Succeeded(note));
        }
        self.signature(&resolved).await?;
        let checked = self.verify_manifest(&resolved).await?;
        let image = self.swarm_image(&checked.digest);
        let plan = self.update(swarm, &resolved, &checked, &image).await?;
        let converged = self.converge(swarm, &resolved).await?;
        let nodes = converged.nodes.len();
        let mut note = format!(
            "{} runs in service {} on {} task(s) across {nodes} node(s)",
            resolved.digest,
            self.service_name(),
            converged.running
        );
        if let Some(p) = plan.previous {
            note.push_str(&format!(" (updated from {})", p.image));
        }
        note.push_str(&self.prune_secrets().await);
        Ok(Done::Succeeded(note))
    }

    /// The journal's `update` entry of this deployment, if the step began.
    async fn update_record(&self) -> Result<Option<crate::store::StepRecord>, PipelineError> {
        self.store_retry(|| {
            self.ctx
                .store
                .step(self.dep.id, Step::Update, self.lane(Step::Update))
        })
        .await
    }

    /// A push of the digest the service already runs, on every replica, sends no
    /// update. Once `update` is journaled the deployment is under way and is finished.
    async fn service_already_runs(
        &self,
        resolved: &Resolved,
    ) -> Result<Option<String>, PipelineError> {
        let updated = self.update_record().await?;
        if updated.is_some() {
            return Ok(None);
        }
        let name = self.service_name();
        let Ok(Some(facts)) = self.manager().service(name).await else {
            return Ok(None);
        };
        let managed = facts.label(LABEL_MANAGED) == Some("true");
        if !managed || facts.label(LABEL_DIGEST) != Some(resolved.digest.as_str()) {
            return Ok(None);
        }
        let Some(running) = facts.label(LABEL_DEPLOYMENT).map(str::to_owned) else {
            return Ok(None);
        };
        let Ok(tasks) = self.manager().service_tasks(name).await else {
            return Ok(None);
        };
        let goal = watch::Goal {
            service: name,
            deployment: &running,
            replicas: facts.replicas,
            settle: std::time::Duration::ZERO,
            rollback: false,
        };
        let all_up = matches!(
            watch::assess(&goal, &facts, &tasks, Some(std::time::Duration::ZERO)),
            watch::Progress::Converged(_)
        );
        Ok(all_up.then(|| {
            format!(
                "no-op: {} already runs in service {name} on every replica (deployment {running})",
                resolved.digest
            )
        }))
    }

    /// `verify`: the digest the spec will name, fetched again from the registry by that
    /// digest, and its platform list (which Swarm places by).
    async fn verify_manifest(&self, r: &Resolved) -> Result<Checked, PipelineError> {
        let digest = r
            .index_digest
            .clone()
            .unwrap_or_else(|| r.digest.to_string());
        let intent = ManifestIntent {
            digest: digest.clone(),
            member: r.digest.to_string(),
        };
        self.step(Step::Verify, &intent, || async {
            let platforms = self
                .ctx
                .registry
                .platforms(self.app, &digest, &r.digest)
                .await?;
            Ok(Checked {
                digest: digest.clone(),
                platforms,
            })
        })
        .await
    }

    /// `converge`: the rollout watched to a verdict. Its success is the app's serving
    /// generation on this target, written with the step's result.
    async fn converge(&self, swarm: &SwarmApp, r: &Resolved) -> Result<Converged, PipelineError> {
        let deployment = self.dep.id.to_string();
        let name = self.service_name();
        let intent = ConvergeIntent {
            service: name.to_owned(),
            deployment: deployment.clone(),
            timeout_secs: swarm.rollout_timeout.as_secs(),
        };
        let goal = watch::Goal {
            service: name,
            deployment: &deployment,
            replicas: match swarm.mode {
                crate::config::SwarmMode::Replicated(n) => Some(n),
                crate::config::SwarmMode::Global => None,
            },
            settle: swarm.update.monitor,
            rollback: false,
        };
        let switch = |_: &Converged| {
            Some(GenerationSwitch {
                app: self.app.name.to_string(),
                target: self.target.name().to_owned(),
                generation: Some((self.dep.id, r.digest.to_string(), name.to_owned())),
                forget: false,
                route: None,
            })
        };
        self.switching_step(Step::Converge, &intent, switch, || async {
            watch::watch(self.manager(), &goal, swarm.rollout_timeout)
                .await
                .map_err(|e| match e {
                    watch::WatchError::Failed(f) => StepError::Rollout(f),
                    watch::WatchError::Engine(e) => StepError::Engine(e),
                })
        })
        .await
    }

    /// Secrets of the app that the running spec no longer names: removed, best effort
    /// (one a task still mounts is refused by Swarm and stays for the next deployment).
    async fn prune_secrets(&self) -> String {
        let keep: Vec<String> = self.swarm_secrets().into_iter().map(|(_, n)| n).collect();
        let Ok(all) = self.manager().app_secrets(&self.app.name).await else {
            return String::new();
        };
        let mut removed = 0;
        for name in all.iter().filter(|n| !keep.contains(n)) {
            if self.manager().remove_secret(name).await.unwrap_or(false) {
                removed += 1;
            }
        }
        match removed {
            0 => String::new(),
            n => format!("; removed {n} superseded secret(s)"),
        }
    }
}
