//! Deploy windows, `"Mon-Fri 09:00-17:00 Europe/Berlin"`, with time zones from
//! the IANA database (chrono-tz), and when the next one opens.

use chrono::{DateTime, Datelike, Days, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

/// One deploy window: on these weekdays, from `start` to `end` local time in `tz` (an end
/// at or before the start runs past midnight into the next day).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Bit 0 is Monday.
    days: u8,
    start: NaiveTime,
    end: NaiveTime,
    tz: Tz,
    pub text: String,
}

/// Why a deploy window is refused; the config error names the app and the window.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("write it as `Mon-Fri 09:00-17:00 Europe/Berlin`")]
    Shape,
    #[error("`{0}` is not a weekday (Mon … Sun)")]
    Weekday(String),
    #[error("`{0}` is not a time (HH:MM or HH:MM:SS)")]
    Time(String),
    #[error("`{0}` is not a range HH:MM-HH:MM")]
    Range(String),
    #[error("`{0}` is not an IANA time zone")]
    Zone(String),
    #[error("the window is empty: its start and end are the same")]
    Empty,
}

const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

fn day(s: &str) -> Result<usize, WindowError> {
    let l = s.to_ascii_lowercase();
    DAYS.iter()
        .position(|d| l.starts_with(d) && d.len() <= l.len() && l.len() <= 9)
        .ok_or_else(|| WindowError::Weekday(s.to_owned()))
}

fn days(spec: &str) -> Result<u8, WindowError> {
    if matches!(spec, "*" | "daily") {
        return Ok(0x7f);
    }
    let mut mask = 0u8;
    for part in spec.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (day(a)?, day(b)?);
                let mut d = a;
                loop {
                    mask |= 1 << d;
                    if d == b {
                        break;
                    }
                    d = (d + 1) % 7;
                }
            }
            None => mask |= 1 << day(part)?,
        }
    }
    Ok(mask)
}

fn time(s: &str) -> Result<NaiveTime, WindowError> {
    NaiveTime::parse_from_str(s, "%H:%M:%S")
        .or_else(|_| NaiveTime::parse_from_str(s, "%H:%M"))
        .map_err(|_| WindowError::Time(s.to_owned()))
}

impl Window {
    /// `DAYS HH:MM-HH:MM ZONE`: days as `Mon-Fri`, `Sat,Sun`, `Mon,Wed-Fri` or `daily`;
    /// seconds may be given (`09:00:30`); the zone is an IANA name (`Europe/Berlin`, `UTC`).
    pub(crate) fn parse(text: &str) -> Result<Window, WindowError> {
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [d, range, zone] = parts[..] else {
            return Err(WindowError::Shape);
        };
        let (start, end) = range
            .split_once('-')
            .ok_or_else(|| WindowError::Range(range.to_owned()))?;
        let tz: Tz = zone
            .parse()
            .map_err(|_| WindowError::Zone(zone.to_owned()))?;
        let (start, end) = (time(start)?, time(end)?);
        if start == end {
            return Err(WindowError::Empty);
        }
        Ok(Window {
            days: days(d)?,
            start,
            end,
            tz,
            text: text.to_owned(),
        })
    }

    /// This window's openings that start on `date` (local), as UTC instants; a start in a
    /// DST gap opens at the first local time after it.
    fn opening_on(&self, date: NaiveDate) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let wd = date.weekday().num_days_from_monday();
        if self.days & (1 << wd) == 0 {
            return None;
        }
        let at = |d: NaiveDate, t: NaiveTime| {
            let local = d.and_time(t);
            self.tz
                .from_local_datetime(&local)
                .earliest()
                .or_else(|| {
                    self.tz
                        .from_local_datetime(&(local + chrono::Duration::hours(1)))
                        .earliest()
                })
                .map(|x| x.with_timezone(&Utc))
        };
        let end_day = if self.end <= self.start {
            date.checked_add_days(Days::new(1))?
        } else {
            date
        };
        Some((at(date, self.start)?, at(end_day, self.end)?))
    }
}

/// When a deployment may run given `windows`: `None` when it may now (no windows, or one
/// is open), else the next opening.
pub fn next_opening(windows: &[Window], now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if windows.is_empty() {
        return None;
    }
    let mut next: Option<DateTime<Utc>> = None;
    for w in windows {
        let today = now.with_timezone(&w.tz).date_naive();
        // Yesterday's window may still be open (past midnight); a week ahead covers any.
        for offset in -1i64..=8 {
            let Some(date) = today.checked_add_signed(chrono::Duration::days(offset)) else {
                continue;
            };
            let Some((open, close)) = w.opening_on(date) else {
                continue;
            };
            if open <= now && now < close {
                return None;
            }
            if open > now && next.is_none_or(|n| open < n) {
                next = Some(open);
            }
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_weekday_office_window_in_berlin_opens_on_monday_morning_local_time() {
        let w = [Window::parse("Mon-Fri 09:00-17:00 Europe/Berlin").unwrap()];
        // Wednesday 2026-12-02, 10:00 in Berlin (CET, UTC+1): open.
        assert_eq!(next_opening(&w, utc("2026-12-02T09:00:00Z")), None);
        // 17:30 Berlin: the next opening is Thursday 09:00 Berlin = 08:00 UTC.
        assert_eq!(
            next_opening(&w, utc("2026-12-02T16:30:00Z")),
            Some(utc("2026-12-03T08:00:00Z"))
        );
        // Saturday: Monday 09:00 Berlin.
        assert_eq!(
            next_opening(&w, utc("2026-12-05T12:00:00Z")),
            Some(utc("2026-12-07T08:00:00Z"))
        );
        // In summer Berlin is UTC+2.
        assert_eq!(
            next_opening(&w, utc("2026-07-04T12:00:00Z")),
            Some(utc("2026-07-06T07:00:00Z"))
        );
    }

    #[test]
    fn an_overnight_window_and_several_windows_take_the_earliest_opening() {
        let w = [
            Window::parse("daily 22:00-02:00 UTC").unwrap(),
            Window::parse("Sat,Sun 10:00:30-12:00 UTC").unwrap(),
        ];
        assert_eq!(next_opening(&w, utc("2026-12-03T01:00:00Z")), None);
        assert_eq!(
            next_opening(&w, utc("2026-12-03T03:00:00Z")),
            Some(utc("2026-12-03T22:00:00Z"))
        );
        assert_eq!(
            next_opening(&w, utc("2026-12-05T09:00:00Z")),
            Some(utc("2026-12-05T10:00:30Z"))
        );
        assert_eq!(next_opening(&[], utc("2026-12-05T09:00:00Z")), None);
    }

    #[test]
    fn a_window_that_does_not_parse_says_why() {
        for (text, why) in [
            ("Mon-Fri 09:00-17:00", "write it as"),
            ("Mon-Fry 09:00-17:00 UTC", "not a weekday"),
            ("Mon 9-17 UTC", "not a time"),
            ("Mon 09:00-17:00 Mars/Olympus", "IANA"),
            ("Mon 09:00-09:00 UTC", "empty"),
        ] {
            let e = Window::parse(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
        assert_eq!(days("Fri-Mon").unwrap(), 0b111_0001);
    }
}
