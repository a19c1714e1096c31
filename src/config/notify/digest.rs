//! `digest = "daily" | "weekly"` and `digest_at`: when an endpoint's summary goes out, as
//! moments in an IANA time zone (daylight saving included). A period is named by the
//! moment that ends it, so every Pier process that computes it names it alike.

use chrono::{DateTime, Datelike, NaiveTime, TimeZone, Utc, Weekday};
use chrono_tz::Tz;
use serde::Deserialize;

#[derive(schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DigestEvery {
    Daily,
    Weekly,
}

/// When the digest is sent: every day at `at`, or every week on `day` at `at`, in `tz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestSchedule {
    pub every: DigestEvery,
    day: Weekday,
    at: NaiveTime,
    tz: Tz,
}

/// Why `digest_at` is refused; the config error names the endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    #[error(
        "digest_at `{0}`: write it as `09:00 UTC` (daily) or `Mon 09:00 Europe/Berlin` (weekly)"
    )]
    Shape(String),
    #[error("digest_at needs `digest = \"daily\"` or `\"weekly\"`")]
    WithoutDigest,
}

pub(super) fn resolve(
    every: Option<DigestEvery>,
    at: Option<&str>,
) -> Result<Option<DigestSchedule>, DigestError> {
    let every = match (every, at) {
        (None, None) => return Ok(None),
        (None, Some(_)) => return Err(DigestError::WithoutDigest),
        (Some(e), _) => e,
    };
    let text = at.unwrap_or(match every {
        DigestEvery::Daily => "09:00 UTC",
        DigestEvery::Weekly => "Mon 09:00 UTC",
    });
    let shape = || DigestError::Shape(text.to_owned());
    let parts: Vec<&str> = text.split_whitespace().collect();
    let (day, time, zone) = match (every, parts.as_slice()) {
        (DigestEvery::Daily, [t, z]) => (Weekday::Mon, t, z),
        (DigestEvery::Weekly, [d, t, z]) => (d.parse::<Weekday>().map_err(|_| shape())?, t, z),
        _ => return Err(shape()),
    };
    let at = NaiveTime::parse_from_str(time, "%H:%M:%S")
        .or_else(|_| NaiveTime::parse_from_str(time, "%H:%M"))
        .map_err(|_| shape())?;
    let tz: Tz = zone.parse().map_err(|_| shape())?;
    Ok(Some(DigestSchedule { every, day, at, tz }))
}

impl DigestSchedule {
    /// `daily` or `weekly`, as a period's name starts.
    pub fn name(&self) -> &'static str {
        match self.every {
            DigestEvery::Daily => "daily",
            DigestEvery::Weekly => "weekly",
        }
    }

    /// How long one period is.
    pub fn length(&self) -> chrono::Duration {
        match self.every {
            DigestEvery::Daily => chrono::Duration::days(1),
            DigestEvery::Weekly => chrono::Duration::weeks(1),
        }
    }

    /// The moments of this schedule around `now` (eight days each side), ascending. A time
    /// in a daylight-saving gap moves to the first local time after it.
    fn moments_around(&self, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let today = now.with_timezone(&self.tz).date_naive();
        (-8i64..=8)
            .filter_map(|o| today.checked_add_signed(chrono::Duration::days(o)))
            .filter(|d| self.every == DigestEvery::Daily || d.weekday() == self.day)
            .filter_map(|d| {
                let local = d.and_time(self.at);
                self.tz
                    .from_local_datetime(&local)
                    .earliest()
                    .or_else(|| {
                        self.tz
                            .from_local_datetime(&(local + chrono::Duration::hours(1)))
                            .earliest()
                    })
                    .map(|t| t.with_timezone(&Utc))
            })
            .collect()
    }

    /// The first moment after `now`.
    pub fn next_after(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.moments_around(now).into_iter().find(|m| *m > now)
    }

    /// The last moment at or before `now`.
    pub fn last_at_or_before(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.moments_around(now)
            .into_iter()
            .rev()
            .find(|m| *m <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_daily_digest_falls_at_its_local_time_and_a_weekly_one_on_its_day() {
        let d = resolve(Some(DigestEvery::Daily), Some("09:00 Europe/Berlin"))
            .unwrap()
            .unwrap();
        // Berlin is UTC+1 in December.
        assert_eq!(
            d.next_after(utc("2026-12-07T08:00:00Z")),
            Some(utc("2026-12-08T08:00:00Z"))
        );
        assert_eq!(
            d.last_at_or_before(utc("2026-12-07T08:00:00Z")),
            Some(utc("2026-12-07T08:00:00Z"))
        );
        let w = resolve(Some(DigestEvery::Weekly), None).unwrap().unwrap();
        // 2026-12-07 is a Monday.
        assert_eq!(
            w.next_after(utc("2026-12-07T09:00:00Z")),
            Some(utc("2026-12-14T09:00:00Z"))
        );
        assert_eq!(
            w.last_at_or_before(utc("2026-12-10T00:00:00Z")),
            Some(utc("2026-12-07T09:00:00Z"))
        );
    }

    #[test]
    fn a_digest_time_that_is_not_one_is_refused_naming_the_shape() {
        for (every, at) in [
            (DigestEvery::Daily, "9am"),
            (DigestEvery::Daily, "Mon 09:00 UTC"),
            (DigestEvery::Weekly, "09:00 UTC"),
            (DigestEvery::Daily, "09:00 Mars/Olympus"),
        ] {
            let e = resolve(Some(every), Some(at)).unwrap_err();
            assert!(e.to_string().contains("digest_at"), "{e}");
        }
        assert_eq!(
            resolve(None, Some("09:00 UTC")),
            Err(DigestError::WithoutDigest)
        );
    }
}
