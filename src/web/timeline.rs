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
                intent_words: intent_words(s.step, &s.intent),
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
        Step::Health => format!("Wait until container {container} answers its health check"),
        Step::Switch => "Make the new container the app's serving generation".into(),
        Step::Applied => format!(
            "Wait until pier proxy serves route version {}",
            i.get("version").map(Value::to_string).unwrap_or_default()
        ),
        Step::Drain => "Let requests in flight on the old generation finish".into(),
        Step::Soak => "Watch the new generation before retiring the old one".into(),
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
