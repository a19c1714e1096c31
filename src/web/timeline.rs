//! A deployment's steps as the page draws them: each step's bar placed to scale on the
//! deployment's own time line, and its intent and result said in words. The raw JSON
//! stays beside it (the page shows it behind a disclosure), so nothing is hidden by the
//! wording.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::views::{short_digest, took};
use crate::store::{Deployment, Step, StepRecord, StepState};

pub struct TimelineRow {
    pub step: StepRecord,
    /// Where the bar starts and how wide it is, in percent of the whole deployment.
    pub left: f64,
    pub width: f64,
    pub took: String,
    pub intent_words: String,
    pub result_words: Option<String>,
}

/// Rows for the steps, to the scale of the deployment: from its first step's start to its
/// end (or now, while it runs).
pub fn rows(d: &Deployment, steps: &[StepRecord], now: DateTime<Utc>) -> Vec<TimelineRow> {
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
                step: s.clone(),
            }
        })
        .collect()
}

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn short_id(id: &str) -> String {
    if id.starts_with("sha256:") {
        return short_digest(id);
    }
    id.chars().take(12).collect()
}

fn list(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), short_id))
                .collect()
        })
        .unwrap_or_default()
}

/// What the step set out to do, in a sentence.
pub fn intent_words(step: Step, i: &Value) -> String {
    let container = text(i, "container").map(short_id).unwrap_or_default();
    match step {
        Step::Resolve => {
            let what = match (text(i, "digest"), text(i, "tag")) {
                // A further service's digest, taken from an earlier deployment's journal.
                (Some(d), _) if text(i, "from_deployment").is_some() => format!(
                    "digest {} (as deployment {} ran it)",
                    short_digest(d),
                    text(i, "from_deployment").unwrap_or("?")
                ),
                (Some(d), _) => format!("digest {}", short_digest(d)),
                (None, Some(t)) => format!("tag {t}"),
                _ => "the app's tag".into(),
            };
            format!(
                "Ask the registry which image {what} of {} is, for {}",
                text(i, "image").unwrap_or("the image"),
                text(i, "platform").unwrap_or("this engine's platform")
            )
        }
        Step::Pull => format!(
            "Pull {} by digest",
            text(i, "reference").unwrap_or("the image")
        ),
        Step::Verify => "Check that the engine's image carries exactly that digest".into(),
        Step::Create => format!(
            "Create container {} from {} (port {}{})",
            text(i, "name").unwrap_or("?"),
            text(i, "image").map(|r| r.to_string()).unwrap_or_default(),
            i.get("port").map(Value::to_string).unwrap_or_default(),
            text(i, "publish")
                .map(|p| format!(", published on {p}"))
                .unwrap_or_default()
        ),
        Step::StopOld => match list(i, "containers") {
            c if c.is_empty() => "Stop the previous generation (none runs)".into(),
            c => format!("Stop the previous generation ({})", c.join(", ")),
        },
        Step::Start => format!("Start container {container}"),
        Step::Health => match (text(i, "mode"), i.get("settle_ms")) {
            (Some("settle"), Some(ms)) => {
                format!("Check that container {container} keeps running for {ms} ms")
            }
            _ => format!("Wait until container {container} answers its health check"),
        },
        Step::Switch => "Make the new container the app's serving generation".into(),
        Step::Applied => format!(
            "Wait until pier proxy serves route version {}",
            i.get("version").map(Value::to_string).unwrap_or_default()
        ),
        Step::Drain => "Let requests in flight on the old generation finish".into(),
        Step::Soak => "Watch the new generation before retiring the old one".into(),
        Step::Network => format!(
            "Make sure the app's private network {} exists",
            text(i, "network").unwrap_or("?")
        ),
        Step::Volumes => "Record the app's volumes as its own, then create them".into(),
        Step::Connect => format!(
            "Join container {container} to the shared networks {}",
            list(i, "networks").join(", ")
        ),
        Step::Revert => "Switch traffic back to the previous generation".into(),
        Step::Retire => match list(i, "containers") {
            c if c.is_empty() => "Remove the previous generation".into(),
            c => format!("Remove the previous generation ({})", c.join(", ")),
        },
        Step::Rollback => {
            let c = list(i, "candidates");
            let r = list(i, "restore");
            format!(
                "Roll back: remove {} and keep {} serving",
                if c.is_empty() {
                    "the candidate".into()
                } else {
                    c.join(", ")
                },
                if r.is_empty() {
                    "the previous generation".into()
                } else {
                    r.join(", ")
                }
            )
        }
    }
}

/// What came of it, in a sentence; `None` while it runs.
pub fn result_words(s: &StepRecord) -> Option<String> {
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
    let words = match s.step {
        Step::Resolve => text(r, "digest").map(|d| {
            format!(
                "Resolved to {}{}",
                short_digest(d),
                text(r, "platform")
                    .map(|p| format!(" ({p})"))
                    .unwrap_or_default()
            )
        }),
        Step::Verify => text(r, "image_id").map(|id| format!("Image {} verified", short_id(id))),
        Step::Create => text(r, "id")
            .or_else(|| text(r, "container"))
            .map(|id| format!("Created {}", short_id(id))),
        Step::Applied => r
            .get("waited_ms")
            .map(|ms| format!("The proxy serves it (waited {ms} ms)")),
        Step::Switch => text(r, "name").map(|n| format!("{n} serves now")),
        _ => None,
    };
    Some(words.unwrap_or_else(|| {
        let scalars = scalars(r);
        if scalars.is_empty() {
            "Done".into()
        } else {
            format!("Done: {scalars}")
        }
    }))
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
    use crate::store::{DeploymentState, Trigger};

    fn at(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(1_700_000_000_000 + ms).unwrap()
    }

    fn step(step: Step, from: i64, to: Option<i64>) -> StepRecord {
        StepRecord {
            id: from,
            deployment_id: uuid::Uuid::nil(),
            step,
            service: String::new(),
            state: if to.is_some() {
                StepState::Succeeded
            } else {
                StepState::Started
            },
            intent: serde_json::json!({ "reference": "r@sha256:abc", "container": "0123456789abcdef" }),
            result: to.map(|_| {
                serde_json::json!({ "digest": "sha256:0123456789abcdef0123", "platform": "linux/amd64" })
            }),
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
            "Wait until container 0123456789ab answers its health check"
        );
        // A step at the very end keeps a visible bar inside the track.
        let steps = [
            step(Step::Resolve, 0, Some(1000)),
            step(Step::Retire, 1000, Some(1000)),
        ];
        let end = super::rows(&deployment(Some(1000)), &steps, at(1000));
        assert!(end[1].width >= 0.4 && end[1].left + end[1].width <= 100.0);
    }
}
