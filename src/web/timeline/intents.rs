//! What each step set out to do, in a sentence, from its journaled intent.

use serde_json::Value;

use super::{read, short_id, short_ids, swarm};
use crate::pipeline::records::{
    AppliedIntent, ConnectIntent, CreateIntent, DrainIntent, ImageIntent, ImportIntent,
    NetworkIntent, OldGeneration, Probe, RetireIntent, RevertIntent, RollbackIntent,
    ServiceHealthIntent, ServiceProbe, ServiceResolveIntent, SignatureIntent, SoakIntent,
    StartIntent, SwitchIntent,
};
use crate::store::Step;
use crate::web::format::short_digest;

/// What the step set out to do, in a sentence.
pub(crate) fn intent_words(step: Step, i: &Value) -> String {
    intent_sentence(step, i).unwrap_or_else(|| generic_intent(step).to_owned())
}

fn generic_intent(step: Step) -> &'static str {
    match step {
        Step::Resolve => "Ask the registry which image the tag is",
        Step::Signature => "Check that a trusted key signed exactly this digest",
        Step::Pull => "Pull the image by digest",
        Step::Verify => "Check that the engine's image carries exactly that digest",
        Step::Create => "Create the new container",
        Step::Reach => "Check that the engine answers",
        Step::StopOld => "Stop the previous generation",
        Step::Start => "Start the new container",
        Step::Health => "Wait until the new container is healthy",
        Step::Switch => "Make the new container the app's serving generation",
        Step::Applied => "Wait until pier proxy serves the new route",
        Step::Drain => "Let requests in flight on the old generation finish",
        Step::Soak => "Watch the new generation before retiring the old one",
        Step::Network => "Make sure the app's private network exists",
        Step::Volumes => "Record the app's volumes as its own, then create them",
        Step::Connect => "Join the shared networks",
        Step::Revert => "Switch traffic back to the previous generation",
        Step::Retire => "Remove the previous generation",
        Step::Rollback => "Roll back: remove the candidate and keep the previous generation",
        Step::Update => "Write the service's spec: the digest on every task",
        Step::Converge => "Watch Swarm roll the service out, to a verdict",
    }
}

// One sentence per step kind, from its journaled intent; `None` where the intent does not
// read as the step's kind (the generic title is shown instead).
fn intent_sentence(step: Step, i: &Value) -> Option<String> {
    if let Some(words) = swarm::sentence(step, i) {
        return Some(words);
    }
    match step {
        Step::Resolve => resolve_sentence(i),
        Step::Signature | Step::Pull | Step::Verify => image_sentence(step, i),
        Step::Create | Step::StopOld | Step::Start | Step::Network | Step::Connect => {
            container_sentence(step, i)
        }
        Step::Health => health_sentence(i),
        Step::Switch
        | Step::Applied
        | Step::Drain
        | Step::Soak
        | Step::Revert
        | Step::Retire
        | Step::Rollback => traffic_sentence(step, i),
        Step::Volumes | Step::Reach | Step::Update | Step::Converge => None,
    }
}

/// A resolve: the archive an import loads, or what the registry is asked.
fn resolve_sentence(i: &Value) -> Option<String> {
    Some(match read::<ImportIntent>(i) {
        Some(imp) => format!(
            "Load the archive {} and check that it holds image {} for {}",
            imp.archive,
            short_id(&imp.image_id),
            imp.platform
        ),
        None => {
            let r: ServiceResolveIntent = read(i)?;
            let what = match (&r.digest, &r.tag, r.from_deployment) {
                // A further service's digest, taken from an earlier deployment's journal.
                (Some(d), _, Some(from)) => {
                    format!("digest {} (as deployment {from} ran it)", short_digest(d))
                }
                (Some(d), _, None) => format!("digest {}", short_digest(d)),
                (None, Some(t), _) => format!("tag {t}"),
                _ => "the app's tag".into(),
            };
            format!(
                "Ask the registry which image {what} of {} is, for {}",
                r.image, r.platform
            )
        }
    })
}

/// Signature, pull and verify: what is checked of the image, and how it is fetched.
fn image_sentence(step: Step, i: &Value) -> Option<String> {
    Some(match step {
        Step::Signature => {
            let s: SignatureIntent = read(i)?;
            let of = match &s.manifest {
                Some(m) => format!(" (the index of {})", short_digest(m)),
                None => String::new(),
            };
            format!(
                "Check that {}{of} is signed by a trusted key: {}",
                s.subject,
                s.keys.join(", ")
            )
        }
        Step::Pull => format!("Pull {} by digest", read::<ImageIntent>(i)?.reference),
        Step::Verify => format!(
            "Check that the engine's image {} carries exactly that digest",
            read::<ImageIntent>(i)?.reference
        ),
        _ => return None,
    })
}

/// The steps that make, start or wire a container.
fn container_sentence(step: Step, i: &Value) -> Option<String> {
    Some(match step {
        Step::Create => {
            let c: CreateIntent = read(i)?;
            let more: String = c
                .more_ports
                .iter()
                .map(|p| {
                    let on = p.publish.map(|a| format!(" on {a}")).unwrap_or_default();
                    format!("; {} {}/{}{on}", p.name, p.container, p.protocol)
                })
                .collect();
            format!(
                "Create container {} from {} (port {}{}{more})",
                c.name,
                c.image,
                c.port,
                c.publish
                    .map(|p| format!(", published on {p}"))
                    .unwrap_or_default()
            )
        }
        Step::StopOld => match read::<OldGeneration>(i)?.running {
            c if c.is_empty() => "Stop the previous generation (none runs)".into(),
            c => format!("Stop the previous generation ({})", short_ids(&c)),
        },
        Step::Start => {
            let s: StartIntent = read(i)?;
            match s.publish {
                Some(p) if s.more_ports.is_empty() => format!(
                    "Start container {} published on {p}",
                    short_id(&s.container)
                ),
                Some(p) => format!(
                    "Start container {} with its HTTP port and {} published on {p}",
                    short_id(&s.container),
                    s.more_ports.join(", ")
                ),
                None => format!("Start container {}", short_id(&s.container)),
            }
        }
        Step::Network => format!(
            "Make sure the app's private network {} exists",
            read::<NetworkIntent>(i)?.network
        ),
        Step::Connect => {
            let c: ConnectIntent = read(i)?;
            format!(
                "Join container {} to the shared networks {}",
                short_id(&c.container),
                c.networks.join(", ")
            )
        }
        _ => return None,
    })
}

/// The steps that move traffic between generations and retire one.
fn traffic_sentence(step: Step, i: &Value) -> Option<String> {
    Some(match step {
        Step::Switch => format!(
            "Make container {} the app's serving generation",
            short_id(&read::<SwitchIntent>(i)?.container)
        ),
        Step::Applied => format!(
            "Wait until pier proxy serves route version {}",
            read::<AppliedIntent>(i)?.version
        ),
        Step::Drain => format!(
            "Let requests in flight on the old generation ({}) finish",
            read::<DrainIntent>(i)?.upstream
        ),
        Step::Soak => {
            let s: SoakIntent = read(i)?;
            format!(
                "Watch container {} for {} ms before retiring the old one ({} failed checks in \
                 a row fail it)",
                short_id(&s.container),
                s.soak_ms,
                s.failures
            )
        }
        Step::Revert => format!(
            "Switch traffic back to the previous generation ({})",
            short_id(&read::<RevertIntent>(i)?.to.container)
        ),
        Step::Retire => match read::<RetireIntent>(i)?.containers {
            c if c.is_empty() => "Remove the previous generation (none is left)".into(),
            c => format!("Remove the previous generation ({})", short_ids(&c)),
        },
        Step::Rollback => {
            let r: RollbackIntent = read(i)?;
            format!(
                "Roll back: remove {} and keep {} serving",
                if r.candidates.is_empty() {
                    "the candidate".into()
                } else {
                    short_ids(&r.candidates)
                },
                if r.restore.is_empty() {
                    "the previous generation".into()
                } else {
                    short_ids(&r.restore)
                }
            )
        }
        _ => return None,
    })
}

/// The app's own probe ([`Probe`]) or a further service's ([`ServiceHealthIntent`]).
fn health_sentence(i: &Value) -> Option<String> {
    if let Some(s) = read::<ServiceHealthIntent>(i) {
        let c = short_id(&s.container);
        return Some(match s.probe {
            ServiceProbe::Settle { settle_ms } => {
                format!("Check that container {c} keeps running for {settle_ms} ms")
            }
            ServiceProbe::Healthcheck { .. } => {
                format!("Wait until container {c} reports its image's HEALTHCHECK healthy")
            }
        });
    }
    Some(match read::<Probe>(i)? {
        Probe::Http { url, .. } => format!("Wait until {url} answers 2xx"),
        Probe::Healthcheck { .. } => {
            "Wait until the container reports its image's HEALTHCHECK healthy".into()
        }
        Probe::Running => "Check that the container keeps running".into(),
    })
}
