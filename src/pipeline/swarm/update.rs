//! `update`: the service's spec written at most once per deployment. What served before is
//! observed first (the rollback's target) and journaled as the step's intent with a keyed
//! hash of the whole spec, so a replay whose config changed is a conflict; the write is
//! proved from Swarm's own records before it is tried again (see the module above).

use super::spec;
use crate::config::SwarmApp;
use crate::engine::{EngineError, LABEL_DEPLOYMENT, LABEL_MANAGED, ServiceFacts};
use crate::pipeline::records::{Checked, SpecBefore, UpdatePlan, Updated};
use crate::pipeline::refusal::Refusal;
use crate::pipeline::{PipelineError, Step, StepError, SwarmRun};
use crate::registry::Resolved;

/// At most this many reads and writes of one update when Swarm keeps moving the version
/// between them (its own task status changes do).
pub(super) const UPDATE_TRIES: usize = 5;

impl SwarmRun<'_> {
    /// The Swarm secrets of the app: (file name, secret name), the name versioned by a
    /// keyed hash of the value. Every secret is one, `as = "env"` or `"file"` alike: Swarm
    /// mounts each at `/run/secrets/KEY` (`age:` ones are refused at load for Swarm).
    pub(super) fn swarm_secrets(&self) -> Vec<(String, String)> {
        self.app
            .contained
            .secrets
            .iter()
            .filter_map(|(k, s)| Some((k, s.loaded()?)))
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
            env.push(format!("{p}={}", self.app.port()));
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
    pub(super) async fn update(
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

    /// Every Swarm secret of the app made (or found) on the manager: (file name, secret
    /// name, its Swarm id).
    async fn ensure_swarm_secrets(
        &self,
    ) -> Result<Vec<(String, String, Option<String>)>, StepError> {
        let mut secrets = Vec::new();
        for (file, secret) in self.swarm_secrets() {
            let value = self.app.contained.secrets.get(&file);
            if let Some(v) = value.and_then(|s| s.loaded()) {
                let id = self
                    .manager()
                    .ensure_secret(&self.app.name, &secret, v.expose().as_bytes())
                    .await?;
                secrets.push((file, secret, Some(id)));
            }
        }
        Ok(secrets)
    }

    async fn apply_update(
        &self,
        plan: &UpdatePlan,
        swarm: &SwarmApp,
        r: &Resolved,
        checked: &Checked,
    ) -> Result<Updated, StepError> {
        let name = &plan.service;
        let secrets = self.ensure_swarm_secrets().await?;
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
    pub(super) async fn update_landed(&self, f: &ServiceFacts) -> Result<bool, StepError> {
        let ours = self.dep.id.to_string();
        if f.label(LABEL_DEPLOYMENT) == Some(ours.as_str()) {
            return Ok(true);
        }
        let tasks = self.manager().service_tasks(&f.name).await?;
        Ok(tasks
            .iter()
            .any(|t| t.deployment.as_deref() == Some(ours.as_str())))
    }
}
