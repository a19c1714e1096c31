//! What came of each step, in a sentence, from its journaled result.

use serde_json::Value;

use super::{read, short_id, short_ids};
use crate::pipeline::records::{
    Applied, Candidate, Healthy, OldGeneration, Resolved, Retired, Signed, Started, Switched,
    SwitchedTo, VerifiedImage,
};
use crate::store::{Step, StepRecord, StepState};
use crate::web::format::short_digest;

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
        Step::Start => {
            let s: Started = read(r)?;
            let bound: Vec<String> = s
                .bindings
                .iter()
                .map(|b| format!("{} {}/{} on {}", b.name, b.container, b.protocol, b.host))
                .collect();
            match bound.len() {
                0 => format!("Bound on {}", s.upstream),
                _ => format!("Bound {}", bound.join(", ")),
            }
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
