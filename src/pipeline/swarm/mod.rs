//! A deployment of a swarm app (issue 24): resolve, signature, verify (the manifest and
//! its platforms, read again from the registry), update (the service's spec names the
//! digest), converge (Swarm's rollout watched to a verdict); on failure, rollback
//! (`undo.rs`). Pier never places a task: each node's engine pulls the digest itself.
//!
//! Invariant: one deployment issues at most one create or update of the service. The
//! spec carries the deployment's id as `pier.deployment`, on the service and on every
//! task's container, so a replay after a crash proves from Swarm's own records whether
//! its update landed (the spec's label, or, when Swarm has rolled it back since, tasks of
//! that spec), instead of trusting `Version.Index`, which Swarm bumps on its own.

mod spec;
mod undo;
mod watch;

pub use watch::RolloutFailure;

use super::outcome::Done;
use super::plan::Placed;
use super::records::{
    Checked, ConvergeIntent, Converged, ManifestIntent, SpecBefore, UpdatePlan, Updated,
};
use super::refusal::Refusal;
use super::{Outcome, PipelineError, Step, StepError, SwarmRun, error_chain};
use crate::config::SwarmApp;
use crate::engine::{EngineError, LABEL_DEPLOYMENT, LABEL_DIGEST, LABEL_MANAGED, ServiceFacts};
use crate::registry::Resolved;
use crate::store::GenerationSwitch;

/// At most this many reads and writes of one update when Swarm keeps moving the version
/// between them (its own task status changes do).
const UPDATE_TRIES: usize = 5;

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

    /// The Swarm secrets of the app: (file name, secret name), the name versioned by a
    /// keyed hash of the value.
    fn swarm_secrets(&self) -> Vec<(String, String)> {
        self.app
            .contained
            .secrets
            .iter()
            .map(|(k, v)| {
                let hash = self.keyed_hash(v.expose());
                let lower = k.to_ascii_lowercase();
                (
                    k.clone(),
                    format!("pier-{}-{lower}-{}", self.app.name, &hash[..16]),
                )
            })
            .collect()
    }

    /// The spec; `secrets` with their Swarm ids once they exist (see `spec.rs`).
    fn service_spec(
        &self,
        swarm: &SwarmApp,
        r: &Resolved,
        checked: &Checked,
        image: &str,
        force_update: u64,
        secrets: &[(String, String, Option<String>)],
    ) -> bollard::models::ServiceSpec {
        let mut env: Vec<String> = self
            .app
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", v.expose()))
            .collect();
        if let Some(p) = &self.app.contained.port_env {
            env.push(format!("{p}={}", self.app.port));
        }
        spec::service_spec(&spec::SpecInput {
            app: self.app,
            swarm,
            deployment: &self.dep.id.to_string(),
            image,
            digest: &r.digest,
            platforms: &checked.platforms,
            env,
            secrets,
            force_update,
        })
    }

    /// `update`: create the service, or update it from what served. Observed first (what
    /// served is the rollback's target), then journaled, then done at most once.
    async fn update(
        &self,
        swarm: &SwarmApp,
        r: &Resolved,
        checked: &Checked,
        image: &str,
    ) -> Result<UpdatePlan, PipelineError> {
        let name = self.service_name();
        let facts = match self.manager().service(name).await {
            Ok(f) => f,
            Err(e) => return Err(self.failed_before_begin(Step::Update, e.into()).await),
        };
        let previous = facts.as_ref().map(|f| SpecBefore {
            deployment: f.label(LABEL_DEPLOYMENT).map(str::to_owned),
            image: f.image.clone(),
            version: f.version,
            force_update: f.force_update,
        });
        let plan = UpdatePlan {
            service: name.to_owned(),
            image: image.to_owned(),
            spec_hmac: String::new(),
            previous,
        };
        let observed = self.with_spec_hmac(plan, swarm, r, checked);
        let recorded = observed.clone();
        self.observed_step(Step::Update, observed, |plan: UpdatePlan| async move {
            let now = self.with_spec_hmac(plan.clone(), swarm, r, checked);
            if now.spec_hmac != plan.spec_hmac {
                return Err(Refusal::ServiceSpecChanged.into());
            }
            self.apply_update(&plan, swarm, r, checked).await
        })
        .await?;
        // The plan the journal holds (a replay's is the first run's observation).
        let rec = self.update_record().await?;
        Ok(rec
            .and_then(|r| serde_json::from_value(r.intent).ok())
            .unwrap_or(recorded))
    }

    fn with_spec_hmac(
        &self,
        mut plan: UpdatePlan,
        swarm: &SwarmApp,
        r: &Resolved,
        checked: &Checked,
    ) -> UpdatePlan {
        let force = self.force_update(&plan);
        let secrets: Vec<_> = self
            .swarm_secrets()
            .into_iter()
            .map(|(file, name)| (file, name, None))
            .collect();
        let spec = self.service_spec(swarm, r, checked, &plan.image, force, &secrets);
        // Through `Value`, whose maps are sorted: the spec's labels are a `HashMap`, whose
        // order differs between two runs of the same spec.
        let json = serde_json::to_value(&spec)
            .map(|v| v.to_string())
            .expect("specs serialize");
        plan.spec_hmac = self.keyed_hash(&json);
        plan
    }

    /// An operator's redeploy of the digest that runs replaces every task: the spec's
    /// `ForceUpdate` is raised once, from what the recorded plan observed.
    fn force_update(&self, plan: &UpdatePlan) -> u64 {
        let base = plan.previous.as_ref().map_or(0, |p| p.force_update);
        match self.dep.trigger.is_operator() {
            true => base + 1,
            false => base,
        }
    }

    async fn apply_update(
        &self,
        plan: &UpdatePlan,
        swarm: &SwarmApp,
        r: &Resolved,
        checked: &Checked,
    ) -> Result<Updated, StepError> {
        let name = &plan.service;
        let mut secrets = Vec::new();
        for (file, secret) in self.swarm_secrets() {
            if let Some(v) = self.app.contained.secrets.get(&file) {
                let id = self
                    .manager()
                    .ensure_secret(&self.app.name, &secret, v.expose().as_bytes())
                    .await?;
                secrets.push((file, secret, Some(id)));
            }
        }
        let force = self.force_update(plan);
        let spec = self.service_spec(swarm, r, checked, &plan.image, force, &secrets);
        let creds = self.ctx.registry.credentials(self.app.registry_host());
        for _ in 0..UPDATE_TRIES {
            let facts = self.manager().service(name).await?;
            match facts {
                Some(f) if self.update_landed(&f).await? => {
                    return Ok(Updated {
                        created: plan.previous.is_none(),
                        warnings: vec![],
                    });
                }
                None if plan.previous.is_some() => {
                    return Err(Refusal::ServiceRemoved {
                        name: name.to_owned(),
                    }
                    .into());
                }
                None => {
                    self.manager()
                        .create_service(spec.clone(), creds.clone())
                        .await?;
                    return Ok(Updated {
                        created: true,
                        warnings: vec![],
                    });
                }
                Some(f) if f.label(LABEL_MANAGED) != Some("true") => {
                    return Err(Refusal::ServiceNotOurs {
                        name: name.to_owned(),
                    }
                    .into());
                }
                Some(f) => {
                    match self
                        .manager()
                        .update_service(name, f.version, spec.clone(), creds.clone())
                        .await
                    {
                        Ok(warnings) => {
                            return Ok(Updated {
                                created: false,
                                warnings,
                            });
                        }
                        // Swarm moved the version between the read and the write: read
                        // again (the label check above sees an update that did land).
                        Err(EngineError::OutOfSequence { .. }) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Err(Refusal::ServiceKeptChanging {
            name: name.to_owned(),
            tries: UPDATE_TRIES,
        }
        .into())
    }

    /// This deployment's spec was written to the service: the spec names it, or Swarm
    /// has rolled it back since and tasks of that spec remain in the service's history.
    async fn update_landed(&self, f: &ServiceFacts) -> Result<bool, StepError> {
        let ours = self.dep.id.to_string();
        if f.label(LABEL_DEPLOYMENT) == Some(ours.as_str()) {
            return Ok(true);
        }
        let tasks = self.manager().service_tasks(&f.name).await?;
        Ok(tasks
            .iter()
            .any(|t| t.deployment.as_deref() == Some(ours.as_str())))
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
