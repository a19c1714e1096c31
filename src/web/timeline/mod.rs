//! A deployment's steps as the page draws them: each step's bar placed to scale on the
//! deployment's own time line, and its intent and result said in words (`intents.rs`,
//! `results.rs`, and `swarm.rs` for a Swarm service's steps), read from the pipeline's own
//! record types. The raw JSON stays beside it (the page shows it behind a disclosure), so
//! nothing is hidden by the wording.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::format::{short_digest, took};
use crate::store::{Deployment, StepRecord};

mod intents;
mod results;
mod swarm;
#[cfg(test)]
mod tests;

use intents::intent_words;
use results::result_words;
pub(crate) use results::signed_by;

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
fn read<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
    serde_json::from_value(v.clone()).ok()
}
