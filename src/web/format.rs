//! How the pages write what the rows hold: digests, times, durations, triggers. Plain
//! functions of their inputs, shared by every page, the timeline and the engine rows, so
//! each value is written one way everywhere. What they return as HTML is escaped here.

use chrono::{DateTime, Utc};

use crate::store::Deployment;

/// `sha256:` and the first 12 hex digits.
pub fn short_digest(d: &str) -> String {
    let hex = d.strip_prefix("sha256:").unwrap_or(d);
    format!("sha256:{}", hex.chars().take(12).collect::<String>())
}

pub(crate) fn when(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

pub(crate) fn took(from: Option<&DateTime<Utc>>, to: Option<&DateTime<Utc>>) -> String {
    match (from, to) {
        (Some(a), Some(b)) => {
            let ms = (*b - *a).num_milliseconds().max(0);
            if ms < 10_000 {
                format!("{ms} ms")
            } else {
                format!("{:.1} s", ms as f64 / 1000.0)
            }
        }
        (Some(_), None) => "…".into(),
        _ => String::new(),
    }
}

/// `<time>` with the relative age (the page's script keeps it current) and the absolute
/// time. Only digits and fixed words: safe to insert unescaped.
pub(crate) fn time_html(t: &DateTime<Utc>) -> String {
    format!(
        "<time datetime=\"{iso}\" title=\"{abs}\"><span class=\"rel\">{rel}</span> <span class=\"abs\">{abs}</span></time>",
        iso = t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        abs = when(t),
        rel = relative(*t, Utc::now()),
    )
}

/// `3 min ago`, `in 5 s`, `2 days ago`.
pub(crate) fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - t).num_seconds();
    let (n, unit) = match secs.unsigned_abs() {
        s if s < 60 => (s, "s"),
        s if s < 3600 => (s / 60, "min"),
        s if s < 86_400 => (s / 3600, "h"),
        s => (s / 86_400, if s < 2 * 86_400 { "day" } else { "days" }),
    };
    if secs >= 0 {
        format!("{n} {unit} ago")
    } else {
        format!("in {n} {unit}")
    }
}

/// A digest, shortened, with the full value on hover and a copy button. The digest is
/// escaped: a sender may name any text as its digest.
pub(crate) fn digest_html(d: &str) -> String {
    let full = super::error::html_escape(d);
    let short = super::error::html_escape(&short_digest(d));
    format!(
        "<span class=\"digest\"><code title=\"{full}\">{short}</code><button type=\"button\" class=\"copy\" data-copy=\"{full}\" title=\"copy {full}\">copy</button></span>"
    )
}

/// What started a deployment, in words, linking the delivery it came from, naming who
/// asked for it by hand (escaped: a user names themselves at sign-in).
pub(crate) fn trigger_html(d: &Deployment) -> String {
    use crate::store::Trigger;
    let delivery = d
        .delivery_id
        .map(|id| {
            format!(
                " <a href=\"/deliveries#{id}\">delivery {}</a>",
                &id.simple().to_string()[..8]
            )
        })
        .unwrap_or_default();
    match d.trigger {
        Trigger::Webhook => format!("push{delivery}"),
        Trigger::Reconcile if d.delivery_id.is_some() => format!("registry poll{delivery}"),
        Trigger::Reconcile => "reconcile".into(),
        Trigger::Promotion => match d.promoted_from {
            Some(id) => format!(
                "promotion of <a href=\"/deployments/{id}\">{}</a>",
                &id.simple().to_string()[..8]
            ),
            None => "promotion".into(),
        },
        Trigger::Manual | Trigger::Rollback => {
            let by = d
                .requested_by
                .as_deref()
                .map(|b| format!(" by {}", super::error::html_escape(b)))
                .unwrap_or_default();
            format!("{}{by}", d.trigger)
        }
    }
}
