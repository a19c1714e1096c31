//! What one attempt came to, in the same terms for every channel: sent, or not sent with
//! a reason and maybe the receiver's own word on when to try again (`Retry-After`).
//! Reasons never carry a URL or a token: a webhook URL and a bot token are credentials.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::error_chain;

/// Longest wait a receiver's `Retry-After` can ask for; a longer one is cut to this, so a
/// receiver cannot park a notification for days.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    Sent {
        status: Option<u16>,
    },
    NotSent {
        /// The receiver's HTTP status, when it answered.
        status: Option<u16>,
        reason: String,
        /// How long the receiver asked to be left alone (429, 503), capped.
        retry_after: Option<Duration>,
    },
}

impl Attempt {
    pub(crate) fn failed(reason: impl Into<String>) -> Attempt {
        Attempt::NotSent {
            status: None,
            reason: reason.into(),
            retry_after: None,
        }
    }

    /// A request that got no answer; its URL is left out of the reason.
    pub(crate) fn transport(e: reqwest::Error) -> Attempt {
        let timed_out = e.is_timeout();
        let e = e.without_url();
        Attempt::failed(if timed_out {
            format!("no answer within the deadline: {}", error_chain(&e))
        } else {
            error_chain(&e)
        })
    }

    /// An HTTP answer: 2xx is sent; anything else is not, with its `Retry-After`.
    pub(crate) fn answered(
        status: reqwest::StatusCode,
        headers: &reqwest::header::HeaderMap,
    ) -> Attempt {
        if status.is_success() {
            return Attempt::Sent {
                status: Some(status.as_u16()),
            };
        }
        let retry_after = headers
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, Utc::now()));
        Attempt::NotSent {
            status: Some(status.as_u16()),
            reason: format!("the receiver answered {status}"),
            retry_after,
        }
    }
}

/// `Retry-After` as seconds or as an HTTP date, from `now`, capped at [`MAX_RETRY_AFTER`];
/// `None` when it is neither.
pub(crate) fn retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        let at: DateTime<Utc> = httpdate::parse_http_date(value).ok()?.into();
        (at - now).to_std().unwrap_or_default()
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// When to try again after attempt number `attempt` failed (`None`: give up): the
/// endpoint's backoff doubled per earlier attempt, at most an hour, and never sooner than
/// the receiver asked.
pub(crate) fn retry_in(
    attempt: i32,
    max_attempts: u32,
    backoff: Duration,
    asked: Option<Duration>,
) -> Option<Duration> {
    if attempt.max(0) as u32 >= max_attempts {
        return None;
    }
    let doublings = (attempt.max(1) - 1).min(20) as u32;
    let wait = backoff.saturating_mul(1 << doublings).min(MAX_RETRY_AFTER);
    Some(wait.max(asked.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_as_seconds_or_as_a_date_and_capped() {
        let now = DateTime::parse_from_rfc3339("2026-12-07T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            retry_after("Mon, 07 Dec 2026 10:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after("Mon, 07 Dec 2026 09:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("99999999", now), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after("soon", now), None);
    }

    #[test]
    fn retries_double_from_the_backoff_and_wait_at_least_what_the_receiver_asked() {
        let b = Duration::from_secs(5);
        assert_eq!(retry_in(1, 3, b, None), Some(Duration::from_secs(5)));
        assert_eq!(retry_in(2, 3, b, None), Some(Duration::from_secs(10)));
        assert_eq!(retry_in(3, 3, b, None), None);
        assert_eq!(
            retry_in(1, 3, b, Some(Duration::from_secs(30))),
            Some(Duration::from_secs(30))
        );
        assert_eq!(retry_in(30, 50, b, None), Some(MAX_RETRY_AFTER));
    }
}
