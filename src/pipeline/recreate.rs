//! Strategy `recreate` on one engine: every service of the generation is created, the old
//! generation stopped (it holds the fixed host port; stopped, not removed), the new one
//! started and healthy, then `switch`; `retire` removes the old one once it is no longer
//! needed. It moves no traffic of its own, so its undo has nothing to revert: the
//! rollback starts what `stop_old` stopped.

use super::container::Publishing;
use super::plan::{Placed, TargetSet};
use super::records::{
    Candidate, GenerationRef, Healthy, OldGeneration, Resolved, SwitchIntent, SwitchedTo,
};
use super::replace::{Made, Replace};
use super::{EngineRun, PipelineError, Step};
use crate::store::GenerationSwitch;

pub(super) struct Recreate;

/// A recreated generation that serves, its predecessor stopped but not yet removed.
pub(super) struct Replaced {
    /// Every service's container, the primary's first.
    all: Vec<Candidate>,
    old: OldGeneration,
    /// The primary's container name, and how it proved healthy.
    name: String,
    probe: Healthy,
    /// Each further service's health, in words.
    services: Vec<String>,
}

impl Replace for Recreate {
    type Serving = Replaced;

    /// The app's fixed addresses: the old generation is stopped before the new one starts.
    fn publishing(&self) -> Publishing {
        Publishing::Fixed
    }

    /// One generation: every service is created before any is started, and every one is
    /// healthy before the switch (see `services.rs`).
    async fn serve(&self, run: &EngineRun<'_>, made: Made) -> Result<Replaced, PipelineError> {
        let Made {
            resolved,
            image,
            candidate,
            services: images,
        } = made;
        let others = run.create_services(&images).await?;
        let all: Vec<Candidate> = std::iter::once(candidate.clone())
            .chain(others.iter().cloned())
            .collect();
        let refs: Vec<&Candidate> = all.iter().collect();
        let old = run.stop_old(&refs).await?;
        run.start(&candidate).await?;
        run.start_services(&others).await?;
        let probe = run.health(&candidate, &image, None).await?;
        let services = run.services_health(&others, &images).await?;
        run.switch(&resolved, &candidate).await?;
        Ok(Replaced {
            all,
            old,
            name: candidate.name,
            probe,
            services,
        })
    }

    async fn retire(
        &self,
        run: &EngineRun<'_>,
        serving: &Replaced,
    ) -> Result<Vec<String>, PipelineError> {
        let refs: Vec<&Candidate> = serving.all.iter().collect();
        Ok(run.retire(&refs, &serving.old).await?.warnings)
    }

    async fn revert(&self, _: &EngineRun<'_>) -> Result<Option<i64>, PipelineError> {
        Ok(None)
    }

    fn said_alone(&self, serving: &Replaced, resolved: &Resolved) -> String {
        let mut note = format!(
            "{} is running in {} ({})",
            resolved.digest, serving.name, serving.probe
        );
        if !serving.services.is_empty() {
            note.push_str(&format!("; {}", serving.services.join("; ")));
        }
        note
    }

    fn said_among(&self, serving: &Replaced, target: &str) -> String {
        format!("{target}: {} ({})", serving.name, serving.probe)
    }
}

impl EngineRun<'_> {
    /// The app's serving generation changes in the same transaction that journals this
    /// step: the status page and the journal can never disagree about what serves.
    pub(super) async fn switch(
        &self,
        r: &Resolved,
        candidate: &Candidate,
    ) -> Result<(), PipelineError> {
        let intent = SwitchIntent {
            container: candidate.id.clone(),
            digest: r.digest.to_string(),
            upstream: None,
        };
        let generation = GenerationSwitch {
            app: self.app.name.to_string(),
            forget: false,
            target: self.target.name().to_owned(),
            generation: Some((self.dep.id, r.digest.to_string(), candidate.id.clone())),
            route: None,
        };
        let _: SwitchedTo = self
            .switching_step(
                Step::Switch,
                &intent,
                |_| Some(generation.clone()),
                || async {
                    // Read before this step's transaction replaces it; a replay reads the
                    // same row, since the switch commits with the step's result.
                    let previous = match self.targets {
                        TargetSet::Several => self
                            .ctx
                            .store
                            .generation(&self.app.name, self.target.name())
                            .await?
                            .map(|g| GenerationRef {
                                deployment: g.deployment_id,
                                digest: g.digest,
                                container: g.container_id,
                            }),
                        TargetSet::One => None,
                    };
                    Ok(SwitchedTo {
                        container: candidate.id.clone(),
                        name: candidate.name.clone(),
                        previous,
                    })
                },
            )
            .await?;
        Ok(())
    }
}
