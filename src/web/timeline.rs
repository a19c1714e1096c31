//! A deployment's steps as the page draws them: each step's bar placed to scale on the
//! deployment's own time line, and its intent and result said in words. The raw JSON
//! stays beside it (the page shows it behind a disclosure), so nothing is hidden by the
//! wording.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::format::{short_digest, took};
use crate::pipeline::records::{
    Applied, AppliedIntent, Candidate, ConnectIntent, CreateIntent, DrainIntent, Healthy,
    ImageIntent, ImportIntent, NetworkIntent, OldGeneration, Probe, Resolved, RetireIntent,
    Retired, RevertIntent, RollbackIntent, ServiceHealthIntent, ServiceProbe, ServiceResolveIntent,
    SignatureIntent, Signed, SoakIntent, StartIntent, SwitchIntent, Switched, SwitchedTo,
    VerifiedImage,
};
use crate::store::{Deployment, Step, StepRecord, StepState};

pub(crate) struct TimelineRow {
    pub step: StepRecord,
    /// Where the bar starts and how wide it is, in percent of the whole deployment.
    pub left: f64,
    pub width: f64,
    pub took: String,
    pub intent_words: String,
    pub result_words: Option<String>,
    /// The engine the step ran on, when the deployment crossed several (a rollout).
    pub engine: Option<String>,
}

/// Rows for the steps, to the scale of the deployment: from its first step's start to its
/// end (or now, while it runs).
pub(crate) fn rows(d: &Deployment, steps: &[StepRecord], now: DateTime<Utc>) -> Vec<TimelineRow> {
    let Some(start) = steps.iter().map(|s| s.started_at).min() else {
        return vec![];
    };
    let end = steps
        .iter()
        .map(|s| s.finished_at.unwrap_or(now))
        .chain(d.finished_at)
        .max()
        .unwrap_or(now)
        .max(start);
    let total = ((end - start).num_milliseconds() as f64).max(1.0);
    let several = engines_of(steps) > 1;
    steps
        .iter()
        .map(|s| {
            let from = (s.started_at - start).num_milliseconds() as f64;
            let to = (s.finished_at.unwrap_or(now) - start).num_milliseconds() as f64;
            // A bar is never thinner than a hair, so a 0 ms step still shows.
            let left = (from / total * 100.0).clamp(0.0, 99.6);
            let width = ((to - from) / total * 100.0).max(0.4).min(100.0 - left);
            TimelineRow {
                left: (left * 10.0).round() / 10.0,
                width: (width * 10.0).round() / 10.0,
                took: took(Some(&s.started_at), s.finished_at.as_ref()),
                // A further service's own steps say whose they are.
                intent_words: match s.service.as_str() {
                    "" => intent_words(s.step, &s.intent),
                    svc => format!("Service {svc}: {}", intent_words(s.step, &s.intent)),
                },
                result_words: result_words(s),
                engine: (several && !s.target.is_empty()).then(|| s.target.clone()),
                step: s.clone(),
            }
        })
        .collect()
}

/// How many engines the steps ran on (the deployment's own steps, like `resolve`, on none).
fn engines_of(steps: &[StepRecord]) -> usize {
    let mut seen: Vec<&str> = steps
        .iter()
        .map(|s| s.target.as_str())
        .filter(|t| !t.is_empty())
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

fn short_id(id: &str) -> String {
    if id.starts_with("sha256:") {
        return short_digest(id);
    }
    id.chars().take(12).collect()
}

fn short_ids(ids: &[String]) -> String {
    ids.iter()
        .map(|i| short_id(i))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A record as the step that wrote it typed it; `None` if it is not that shape (a journal
/// from before the type, or a record that step kinds share): the page then says what the
/// step is for in general, and the raw JSON beside it says the rest.
mod swarm;

fn read<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
    serde_json::from_value(v.clone()).ok()
}

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
            format!(
                "Create container {} from {} (port {}{})",
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
                Some(p) => format!(
                    "Start container {} published on {p}",
                    short_id(&s.container)
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

/// What came of it, in a sentence; `None` while it runs.
pub(crate) fn result_words(s: &StepRecord) -> Option<String> {
    match s.state {
        StepState::Started => return Some("running…".into()),
        StepState::Failed => {
            return Some(format!(
                "Failed: {}",
                s.error.as_deref().unwrap_or("no reason recorded")
            ));
        }
        StepState::Succeeded => {}
    }
    let r = s.result.as_ref()?;
    Some(result_sentence(s.step, r).unwrap_or_else(|| {
        let scalars = scalars(r);
        if scalars.is_empty() {
            "Done".into()
        } else {
            format!("Done: {scalars}")
        }
    }))
}

fn result_sentence(step: Step, r: &Value) -> Option<String> {
    Some(match step {
        Step::Resolve => {
            let r: Resolved = read(r)?;
            format!("Resolved to {} ({})", short_digest(&r.digest), r.platform)
        }
        Step::Signature => signed_by(&read::<Signed>(r)?),
        Step::Verify => format!(
            "Image {} verified",
            short_id(&read::<VerifiedImage>(r)?.image_id)
        ),
        Step::Create => {
            let c: Candidate = read(r)?;
            let how = if c.adopted { "Took over" } else { "Created" };
            format!("{how} {}", short_id(&c.id))
        }
        Step::StopOld => match read::<OldGeneration>(r)?.running {
            c if c.is_empty() => "Nothing was running".into(),
            c => format!("Stopped {}", short_ids(&c)),
        },
        Step::Health => {
            let h: Healthy = read(r)?;
            format!("Healthy after {} probes, {} ms", h.probes, h.elapsed_ms)
        }
        Step::Applied => format!(
            "The proxy serves it (waited {} ms)",
            read::<Applied>(r)?.waited_ms
        ),
        Step::Switch => match read::<SwitchedTo>(r) {
            Some(to) => format!("{} serves now", to.name),
            None => format!("{} serves now", read::<Switched>(r)?.upstream),
        },
        Step::Retire => {
            let r: Retired = read(r)?;
            match (r.removed.len() + r.already_gone.len(), r.warnings.len()) {
                (0, 0) => "Nothing to remove".into(),
                (n, 0) => format!("Removed {n}"),
                (n, w) => format!("Removed {n}; {w} could not be removed (see the record)"),
            }
        }
        _ => return None,
    })
}

/// Who signed what runs, in words: the page's "Signed by" and the step's result.
pub(crate) fn signed_by(s: &Signed) -> String {
    format!(
        "Signed by {} ({}, trust {}), {} over {}",
        s.key,
        s.algorithm,
        s.trust,
        s.format.describe(),
        short_digest(&s.signed)
    )
}

/// The top-level scalar fields of a JSON object, as `key value, …`.
fn scalars(v: &Value) -> String {
    let Some(o) = v.as_object() else {
        return String::new();
    };
    o.iter()
        .filter_map(|(k, v)| match v {
            Value::String(s) => Some(format!(
                "{} {}",
                k.replace('_', " "),
                s.chars().take(48).collect::<String>()
            )),
            Value::Number(n) => Some(format!("{} {n}", k.replace('_', " "))),
            Value::Bool(b) => Some(format!(
                "{} {}",
                k.replace('_', " "),
                if *b { "yes" } else { "no" }
            )),
            _ => None,
        })
        .take(6)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::pipeline::records::ResolveIntent;
    use crate::store::{DeploymentState, Trigger};

    fn at(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(1_700_000_000_000 + ms).unwrap()
    }

    /// A step row as the pipeline writes it: its intent and result are the records'
    /// own types, serialized, so these tests fail if the page reads a field they lack.
    fn step(step: Step, from: i64, to: Option<i64>) -> StepRecord {
        let intent = match step {
            Step::Pull => serde_json::to_value(ImageIntent {
                reference: "r@sha256:abc".into(),
            }),
            Step::Health => serde_json::to_value(ServiceHealthIntent {
                container: "0123456789abcdef".into(),
                probe: ServiceProbe::Healthcheck { timeout_ms: 1 },
            }),
            _ => Ok(serde_json::json!({})),
        }
        .unwrap();
        let result = to.map(|_| {
            serde_json::to_value(Resolved {
                digest: crate::domain::Digest::parse(&format!(
                    "sha256:0123456789abcdef0123{}",
                    "0".repeat(44)
                ))
                .unwrap(),
                index_digest: None,
                media_type: "m".into(),
                platform: "linux/amd64".into(),
            })
            .unwrap()
        });
        StepRecord {
            id: from,
            deployment_id: uuid::Uuid::nil(),
            step,
            service: String::new(),
            target: if step.is_shared() {
                String::new()
            } else {
                "local".into()
            },
            state: if to.is_some() {
                StepState::Succeeded
            } else {
                StepState::Started
            },
            intent,
            result,
            error: None,
            attempt: 1,
            replays: 0,
            started_at: at(from),
            finished_at: to.map(at),
        }
    }

    fn deployment(finished: Option<i64>) -> Deployment {
        Deployment {
            id: uuid::Uuid::nil(),
            app: "web".into(),
            trigger: Trigger::Webhook,
            delivery_id: None,
            image: "r".into(),
            requested_tag: None,
            claimed_digest: None,
            pinned: false,
            resolved_digest: None,
            platform: None,
            state: DeploymentState::Running,
            attempt: 1,
            lease_owner: None,
            lease_key: None,
            lease_expires_at: None,
            superseded_by: None,
            outcome: None,
            error: None,
            candidate_logs: None,
            created_at: at(0),
            started_at: Some(at(0)),
            finished_at: finished.map(at),
            updated_at: at(0),
            requested_by: None,
            cancel_requested_by: None,
            cancel_requested_at: None,
            gated_at: None,
            waiting_for: None,
            waiting_until: None,
            promoted_from: None,
        }
    }

    #[test]
    fn bars_are_drawn_to_the_scale_of_the_whole_deployment() {
        let steps = [
            step(Step::Resolve, 0, Some(100)),
            step(Step::Pull, 100, Some(900)),
            step(Step::Health, 900, Some(1000)),
        ];
        let rows = rows(&deployment(Some(1000)), &steps, at(5000));
        let bars: Vec<(f64, f64)> = rows.iter().map(|r| (r.left, r.width)).collect();
        assert_eq!(bars, vec![(0.0, 10.0), (10.0, 80.0), (90.0, 10.0)]);
        assert_eq!(
            rows[0].result_words.as_deref(),
            Some("Resolved to sha256:0123456789ab (linux/amd64)")
        );
        assert_eq!(rows[1].intent_words, "Pull r@sha256:abc by digest");
    }

    #[test]
    fn each_step_names_its_engine_only_when_the_deployment_crossed_several() {
        let mut steps = vec![
            step(Step::Resolve, 0, Some(100)),
            step(Step::Pull, 100, Some(200)),
        ];
        let one = rows(&deployment(Some(300)), &steps, at(300));
        assert!(
            one.iter().all(|r| r.engine.is_none()),
            "one engine: no label"
        );
        let mut remote = step(Step::Pull, 200, Some(300));
        remote.target = "edge".into();
        steps.push(remote);
        let engines: Vec<Option<String>> = rows(&deployment(Some(300)), &steps, at(300))
            .into_iter()
            .map(|r| r.engine)
            .collect();
        assert_eq!(engines, [None, Some("local".into()), Some("edge".into())]);
    }

    #[test]
    fn a_running_step_reaches_now_and_an_instant_step_still_shows() {
        let steps = [step(Step::Resolve, 0, Some(0)), step(Step::Health, 0, None)];
        let rows = rows(&deployment(None), &steps, at(2000));
        assert_eq!(
            (rows[0].left, rows[0].width),
            (0.0, 0.4),
            "a hair, not nothing"
        );
        assert_eq!((rows[1].left, rows[1].width), (0.0, 100.0));
        assert_eq!(rows[1].result_words.as_deref(), Some("running…"));
        assert_eq!(
            rows[1].intent_words,
            "Wait until container 0123456789ab reports its image's HEALTHCHECK healthy"
        );
        // A step at the very end keeps a visible bar inside the track.
        let steps = [
            step(Step::Resolve, 0, Some(1000)),
            step(Step::Retire, 1000, Some(1000)),
        ];
        let end = super::rows(&deployment(Some(1000)), &steps, at(1000));
        assert!(end[1].width >= 0.4 && end[1].left + end[1].width <= 100.0);
    }

    #[test]
    fn a_signature_step_says_which_key_signed_what() {
        let signed = Signed {
            key: "SHA256:abc=".into(),
            algorithm: "ECDSA P-256".into(),
            trust: "ci".into(),
            format: crate::signature::Format::Bundle,
            signed: "sha256:0123456789abcdef0123".into(),
        };
        let mut s = step(Step::Signature, 0, Some(1));
        s.result = Some(serde_json::to_value(&signed).unwrap());
        assert_eq!(
            result_words(&s).as_deref(),
            Some(
                "Signed by SHA256:abc= (ECDSA P-256, trust ci), sigstore bundle (OCI referrer) \
                 over sha256:0123456789ab"
            )
        );
    }

    fn words(step: Step, intent: impl serde::Serialize) -> String {
        intent_words(step, &serde_json::to_value(intent).unwrap())
    }

    #[test]
    fn a_recreate_stop_names_the_generation_it_stopped() {
        let stopped = OldGeneration {
            running: vec!["aaaaaaaaaaaaaaaa".into()],
            idle: vec!["bbbbbbbbbbbbbbbb".into()],
            unaccounted: vec![],
        };
        assert_eq!(
            words(Step::StopOld, &stopped),
            "Stop the previous generation (aaaaaaaaaaaa)"
        );
        assert_eq!(
            words(Step::StopOld, OldGeneration::default()),
            "Stop the previous generation (none runs)"
        );
    }

    #[test]
    fn every_step_says_what_its_own_record_holds() {
        let c = || "0123456789abcdef".to_owned();
        let mut cases: Vec<(Step, Value, &str)> = vec![
            (
                Step::Start,
                serde_json::to_value(StartIntent {
                    container: c(),
                    publish: Some("127.0.0.1:0".into()),
                })
                .unwrap(),
                "Start container 0123456789ab published on 127.0.0.1:0",
            ),
            (
                Step::Retire,
                serde_json::to_value(RetireIntent {
                    containers: vec![c()],
                })
                .unwrap(),
                "Remove the previous generation (0123456789ab)",
            ),
            (
                Step::Applied,
                serde_json::to_value(AppliedIntent { version: 7 }).unwrap(),
                "Wait until pier proxy serves route version 7",
            ),
            (
                Step::Network,
                serde_json::to_value(NetworkIntent {
                    network: "pier-web".into(),
                })
                .unwrap(),
                "Make sure the app's private network pier-web exists",
            ),
            (
                Step::Health,
                serde_json::to_value(Probe::Http {
                    url: "http://127.0.0.1:1/health".into(),
                    timeout_ms: 1,
                    json: Default::default(),
                    via: None,
                })
                .unwrap(),
                "Wait until http://127.0.0.1:1/health answers 2xx",
            ),
            (
                Step::Resolve,
                serde_json::to_value(ResolveIntent {
                    image: "127.0.0.1:5000/demo/web".into(),
                    tag: Some("main".into()),
                    digest: None,
                    platform: "linux/amd64".into(),
                })
                .unwrap(),
                "Ask the registry which image tag main of 127.0.0.1:5000/demo/web is, for \
                 linux/amd64",
            ),
        ];
        cases.push((
            Step::Signature,
            serde_json::to_value(SignatureIntent {
                subject: "127.0.0.1:5000/demo/web@sha256:1111".into(),
                manifest: Some("sha256:0123456789abcdef0123".into()),
                keys: vec!["SHA256:abc= (trust ci)".into()],
                annotations: vec![],
            })
            .unwrap(),
            "Check that 127.0.0.1:5000/demo/web@sha256:1111 (the index of sha256:0123456789ab) \
             is signed by a trusted key: SHA256:abc= (trust ci)",
        ));
        for (step, intent, want) in cases {
            assert_eq!(intent_words(step, &intent), want, "{step:?}");
        }
        // A record of another shape is not misread: the step's general sentence.
        assert_eq!(
            intent_words(Step::Retire, &serde_json::json!({ "running": ["x"] })),
            "Remove the previous generation"
        );
    }
}
