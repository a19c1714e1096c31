//! A further service with its own repository (`[apps.services.worker] image = ...`): its
//! image is resolved, pulled and verified on its own, journaled under its name
//! (`resolve@worker`, `pull@worker`, `verify@worker`, each with its crash points), before
//! any container of the generation is created. A service without its own repository runs
//! the primary's resolved and verified image: it has no image steps of its own.
//!
//! Which digest a service's repository gives:
//! - a push (or the poller): the tag the push named for the app (the deployment's
//!   requested tag, else the app's `tag`), resolved once and journaled;
//! - a digest-pinned deploy (`pier deploy --digest`, rollback, reconciliation, import):
//!   the digest journaled for that service by the latest succeeded deployment whose primary
//!   service ran the pinned digest, so that a rollback brings back exactly the generation
//!   that ran; only when no such deployment is in the journal (a digest never deployed, or
//!   its journal pruned), the tag, and the intent says so (`from_deployment` is absent).
//!
//! Invariants:
//! - every image of the generation is pulled and verified before any container exists: a
//!   missing tag or a failed check fails the deployment with nothing created, and the old
//!   generation keeps serving;
//! - a service's resolve is journaled before its pull; a replay uses the recorded digest.

use super::records::{ServiceResolveIntent, VerifiedImage};
use super::{EngineRun, PipelineError, Step, StepError};
use crate::registry::{Resolved, Wanted};

/// The image a further service runs: its resolved digest and what verify found.
#[derive(Clone)]
pub(super) struct ServiceImage {
    pub resolved: Resolved,
    pub image: VerifiedImage,
}

impl EngineRun<'_> {
    /// Each further service's resolved image reference, in config order: its own
    /// repository's (journaled as `resolve@<service>`), or the primary's.
    pub(super) async fn resolve_services(
        &self,
        primary: &Resolved,
    ) -> Result<Vec<Resolved>, PipelineError> {
        let mut out = Vec::new();
        for svc in &self.app.services {
            if !self.app.own_image(svc) {
                out.push(primary.clone());
                continue;
            }
            let plan = self.service_resolve_plan(svc, primary).await?;
            let run = self.for_service(svc);
            let resolved = run
                .observed_step(Step::Resolve, plan, |plan| {
                    let run = &run;
                    async move {
                        let wanted = match (&plan.digest, &plan.tag) {
                            (Some(d), _) => Wanted::Digest(d),
                            (None, Some(t)) => Wanted::Tag(t),
                            (None, None) => Wanted::Tag(&run.app.tag),
                        };
                        let r = run
                            .ctx
                            .registry
                            .resolve(run.app, wanted.clone(), &run.ctx.platform)
                            .await
                            .map_err(StepError::from)?;
                        Ok(r)
                    }
                })
                .await
                .map_err(|e| name_service(e, &svc.contained.service))?;
            out.push(resolved);
        }
        Ok(out)
    }

    /// What a further service's resolve asks for (see the module's comment).
    async fn service_resolve_plan(
        &self,
        svc: &crate::config::AppConfig,
        primary: &Resolved,
    ) -> Result<ServiceResolveIntent, PipelineError> {
        let mut plan = ServiceResolveIntent {
            image: svc.image.clone(),
            tag: Some(
                self.dep
                    .requested_tag
                    .clone()
                    .unwrap_or_else(|| self.app.tag.clone()),
            ),
            digest: None,
            from_deployment: None,
            platform: self.ctx.platform.to_string(),
        };
        if self.dep.pinned || self.import.is_some() {
            let earlier = self
                .store_retry(|| {
                    self.ctx.store.service_resolved_with(
                        &self.app.name,
                        &primary.digest,
                        &svc.contained.service,
                        &svc.image,
                    )
                })
                .await?;
            if let Some((dep, result)) = earlier
                && let Ok(r) = serde_json::from_value::<Resolved>(result)
            {
                plan.tag = None;
                plan.digest = Some(r.digest.into());
                plan.from_deployment = Some(dep);
            }
        }
        Ok(plan)
    }

    /// Pulls and verifies each further service's own image (`pull@<service>`,
    /// `verify@<service>`), after the primary's and before any container is created; a
    /// service without its own repository gets the primary's verified image.
    pub(super) async fn pull_services(
        &self,
        resolved: &[Resolved],
        primary: &VerifiedImage,
    ) -> Result<Vec<ServiceImage>, PipelineError> {
        let mut out = Vec::new();
        for (svc, r) in self.app.services.iter().zip(resolved) {
            if !self.app.own_image(svc) {
                out.push(ServiceImage {
                    resolved: r.clone(),
                    image: primary.clone(),
                });
                continue;
            }
            let run = self.for_service(svc);
            let name = &svc.contained.service;
            run.pull(r).await.map_err(|e| name_service(e, name))?;
            let image = run.verify(r).await.map_err(|e| name_service(e, name))?;
            out.push(ServiceImage {
                resolved: r.clone(),
                image,
            });
        }
        Ok(out)
    }
}

/// A generation has several images: the failure says whose.
fn name_service(e: PipelineError, service: &str) -> PipelineError {
    match e {
        PipelineError::Failed { step, source } => PipelineError::Failed {
            step,
            source: StepError::InService {
                service: service.to_owned(),
                source: Box::new(source),
            },
        },
        other => other,
    }
}
