//! From authentic events to a stored delivery: which apps each event deploys, why the
//! rest deploy nothing, and the one transaction that stores the delivery with its
//! deployments (so a crash never keeps one without the other).

use super::matching::event_key;
use super::{
    Accepted, EventVerdict, IntakeError, IntakeSource, Parsed, PushEvent, RuleMatch, is_digest,
    match_apps,
};
use crate::config::{AppConfig, Config};
use crate::store::{
    DeliveryOutcome, DeploymentRequest, HeldBack, NewDelivery, NewDeployment, Pin, Store, Trigger,
};

/// Matches authentic (or stored) events to apps and stores the delivery with its
/// deployments. `redelivery_of` marks a redelivery, which is never deduplicated.
pub async fn run_intake(
    config: &Config,
    store: &Store,
    source: IntakeSource<'_>,
    parsed: Parsed,
    body_sha256: Option<&[u8]>,
    redelivery_of: Option<uuid::Uuid>,
) -> Result<Accepted, IntakeError> {
    let (verdicts, wanted) = judge_events(config, source, parsed.events);
    let reason = delivery_reason(parsed.reason.as_deref(), &verdicts, &wanted);
    let events: Vec<PushEvent> = verdicts.iter().map(|v| v.event.clone()).collect();
    let delivery = NewDelivery {
        source: source.name.to_owned(),
        // A redelivery keeps its events' ids for the page but has no key: keyed, it would
        // be a duplicate of its original and run nothing, which is what it exists to undo.
        event_key: redelivery_of
            .is_none()
            .then(|| event_key(parsed.delivery_id.as_deref(), &events))
            .flatten(),
        events: serde_json::to_value(&verdicts).unwrap_or_default(),
        reason: reason.clone(),
    };
    let outcome = store
        .record_delivery_with(
            delivery,
            body_sha256,
            requests(config, wanted),
            redelivery_of,
        )
        .await?;
    count(source, &outcome);
    Ok(answer(outcome, verdicts, reason))
}

/// Each event's verdict, and the deployments the delivery asks for: one per app, the
/// last event's for it unless an earlier one holds a higher version (see
/// [`supersedes_in_delivery`]).
fn judge_events(
    config: &Config,
    source: IntakeSource<'_>,
    events: Vec<PushEvent>,
) -> (Vec<EventVerdict>, Vec<NewDeployment>) {
    let mut verdicts = Vec::with_capacity(events.len());
    let mut wanted: Vec<NewDeployment> = Vec::new();
    for mut event in events {
        if let Some(host) = source.registry {
            event.registry = Some(host.to_owned());
        }
        let apps = match match_apps(&config.apps, &event, source.fold_case) {
            Ok(apps) => apps,
            Err(unmatched) => {
                verdicts.push(EventVerdict {
                    event,
                    apps: vec![],
                    rules: vec![],
                    reason: Some(unmatched.to_string()),
                });
                continue;
            }
        };
        for app in &apps {
            want(&mut wanted, source, app, &event);
        }
        verdicts.push(EventVerdict {
            apps: apps.iter().map(|a| a.name.to_string()).collect(),
            rules: apps
                .iter()
                .map(|a| RuleMatch {
                    app: a.name.to_string(),
                    rule: a.rule.to_string(),
                })
                .collect(),
            reason: None,
            event,
        });
    }
    (verdicts, wanted)
}

/// Adds `app`'s deployment for `event` to `wanted`, replacing an earlier one for the same
/// app (one delivery asking twice for an app queues once) unless that one stays.
fn want(
    wanted: &mut Vec<NewDeployment>,
    source: IntakeSource<'_>,
    app: &AppConfig,
    event: &PushEvent,
) {
    // The tag to resolve: an exact app's own spelling (a sender may have lower-cased
    // it); for a glob or range, the pushed tag that matched, never the rule, which names
    // no manifest.
    let pushed = event.tag.as_deref().unwrap_or_default();
    let tag = app.rule.fixed().unwrap_or(pushed).to_owned();
    if let Some(earlier) = wanted.iter().find(|w| w.app == app.name)
        && !supersedes_in_delivery(app, earlier.requested_tag.as_deref(), &tag)
    {
        return;
    }
    wanted.retain(|w| w.app != app.name);
    wanted.push(NewDeployment {
        app: app.name.to_string(),
        trigger: source.trigger(),
        delivery_id: None,
        image: app.image.clone(),
        requested_tag: Some(tag),
        claimed_digest: event.digest.clone().filter(|d| is_digest(d)),
        pinned: false,
    });
}

/// Within one delivery, a later event for the same app replaces an earlier one, except
/// that for a version range the higher version stays (a push of v1.3.0 and v1.2.0 together
/// deploys v1.3.0, whatever their order).
fn supersedes_in_delivery(app: &AppConfig, earlier: Option<&str>, later: &str) -> bool {
    if !app.rule.is_monotonic() {
        return true;
    }
    let v = |t: &str| crate::config::tag_version(t);
    match (earlier.and_then(v), v(later)) {
        (Some(a), Some(b)) => b >= a,
        _ => true,
    }
}

/// What the delivery does, in words: the apps it deploys, or every reason it deploys
/// nothing.
fn delivery_reason(
    parsed: Option<&str>,
    verdicts: &[EventVerdict],
    wanted: &[NewDeployment],
) -> String {
    if !wanted.is_empty() {
        let apps: Vec<&str> = wanted.iter().map(|w| w.app.as_str()).collect();
        return format!("deploys {}", apps.join(", "));
    }
    let reasons: Vec<&str> = parsed
        .into_iter()
        .chain(verdicts.iter().filter_map(|v| v.reason.as_deref()))
        .collect();
    if reasons.is_empty() {
        "no events".to_owned()
    } else {
        reasons.join("; ")
    }
}

/// The deployments to store, each with the rule that forbids going back to an older
/// version when its app follows a version range.
fn requests(config: &Config, wanted: Vec<NewDeployment>) -> Vec<DeploymentRequest> {
    wanted
        .into_iter()
        .map(|d| {
            let never_older = config
                .app(&d.app)
                .map(|a| &a.rule)
                .filter(|r| r.is_monotonic())
                .cloned();
            DeploymentRequest {
                deployment: d,
                never_older,
            }
        })
        .collect()
}

/// What became of a delivery, as the metric's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Queued,
    Pinned,
    Ignored,
    Duplicate,
    Replay,
}

impl Verdict {
    fn of(outcome: &DeliveryOutcome) -> Self {
        match outcome {
            DeliveryOutcome::Recorded { deployments, .. } if !deployments.is_empty() => {
                Verdict::Queued
            }
            DeliveryOutcome::Recorded { pinned, .. } if !pinned.is_empty() => Verdict::Pinned,
            DeliveryOutcome::Recorded { .. } => Verdict::Ignored,
            DeliveryOutcome::Duplicate { .. } => Verdict::Duplicate,
            DeliveryOutcome::Replay { .. } => Verdict::Replay,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Verdict::Queued => "queued",
            Verdict::Pinned => "pinned",
            Verdict::Ignored => "ignored",
            Verdict::Duplicate => "duplicate",
            Verdict::Replay => "replay",
        }
    }
}

fn count(source: IntakeSource<'_>, outcome: &DeliveryOutcome) {
    let verdict = Verdict::of(outcome).as_str();
    // Only configured sources (and `poller`) get here: the label set stays bounded.
    metrics::counter!("pier_deliveries_total", "source" => source.name.to_owned(), "verdict" => verdict)
        .increment(1);
}

/// The answer to the sender: what was queued, or why nothing was.
fn answer(outcome: DeliveryOutcome, verdicts: Vec<EventVerdict>, reason: String) -> Accepted {
    let not_again = |delivery_id, replay: bool| Accepted {
        delivery_id,
        duplicate: !replay,
        replay,
        deployments: vec![],
        events: verdicts.clone(),
        reason: Some(if replay {
            "replay: this body was accepted before under another delivery id".to_owned()
        } else {
            "duplicate: this delivery id was seen before".to_owned()
        }),
    };
    match outcome {
        DeliveryOutcome::Recorded {
            delivery_id,
            deployments,
            held_back,
            pinned,
        } => Accepted {
            delivery_id,
            duplicate: false,
            replay: false,
            reason: held_reason(&held_back, &pinned).or(deployments.is_empty().then_some(reason)),
            deployments,
            events: verdicts,
        },
        DeliveryOutcome::Duplicate { delivery_id } => not_again(delivery_id, false),
        DeliveryOutcome::Replay { delivery_id } => not_again(delivery_id, true),
    }
}

fn held_reason(held: &[HeldBack], pinned: &[Pin]) -> Option<String> {
    (!held.is_empty() || !pinned.is_empty()).then(|| {
        held.iter()
            .map(HeldBack::reason)
            .chain(pinned.iter().map(crate::store::pinned_reason))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

impl IntakeSource<'_> {
    /// The poller's deliveries are reconciles; every other source's are webhooks.
    fn trigger(&self) -> Trigger {
        if self.name == crate::domain::POLLER_SOURCE {
            Trigger::Reconcile
        } else {
            Trigger::Webhook
        }
    }
}
