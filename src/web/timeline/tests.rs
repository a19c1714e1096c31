use chrono::TimeZone;

use super::*;
use crate::config::Protocol;
use crate::pipeline::records::{
    AppliedIntent, Bound, ImageIntent, NetworkIntent, OldGeneration, Probe, ResolveIntent,
    Resolved, RetireIntent, ServiceHealthIntent, ServiceProbe, SignatureIntent, Signed,
    StartIntent, Started,
};
use crate::store::{DeploymentState, Step, StepState, Trigger};

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

#[test]
fn a_blue_green_start_says_where_each_port_is_bound() {
    let bound = |name: &str, container, protocol, host: &str| Bound {
        name: name.into(),
        container,
        protocol,
        host: host.parse().unwrap(),
    };
    let started = Started {
        upstream: "127.0.0.1:40000".into(),
        bindings: vec![
            bound("http", 8080, Protocol::Tcp, "127.0.0.1:40000"),
            bound("dns", 5353, Protocol::Udp, "127.0.0.1:40001"),
        ],
    };
    let mut s = step(Step::Start, 0, Some(1));
    s.result = Some(serde_json::to_value(&started).unwrap());
    assert_eq!(
        result_words(&s).as_deref(),
        Some("Bound http 8080/tcp on 127.0.0.1:40000, dns 5353/udp on 127.0.0.1:40001")
    );
    // A result journaled before ports were read back names the upstream alone.
    s.result = Some(serde_json::json!({ "upstream": "127.0.0.1:40000" }));
    assert_eq!(
        result_words(&s).as_deref(),
        Some("Bound on 127.0.0.1:40000")
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

// Long by design: one record per step of the journal, each with what its words must say,
// so that a step added without its words fails here.
#[test]
fn every_step_says_what_its_own_record_holds() {
    let c = || "0123456789abcdef".to_owned();
    let mut cases: Vec<(Step, Value, &str)> = vec![
        (
            Step::Start,
            serde_json::to_value(StartIntent {
                container: c(),
                publish: Some("127.0.0.1:0".into()),
                more_ports: vec![],
            })
            .unwrap(),
            "Start container 0123456789ab published on 127.0.0.1:0",
        ),
        (
            Step::Start,
            serde_json::to_value(StartIntent {
                container: c(),
                publish: Some("127.0.0.1:0".into()),
                more_ports: vec!["9090/tcp".into(), "5353/udp".into()],
            })
            .unwrap(),
            "Start container 0123456789ab with its HTTP port and 9090/tcp, 5353/udp published \
             on 127.0.0.1:0",
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
