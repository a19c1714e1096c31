//! Issue 26: what may hold a deployment before it runs. `[[admins]]` (named admins with their
//! own password hash or token, so that an approval names a person), an app's `approval`
//! (how many of which admins, and for how long the request stands) and its `windows`
//! (`"Mon-Fri 09:00-17:00 Europe/Berlin"`, IANA time zones through chrono-tz).

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Datelike, Days, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::Deserialize;

use super::{ConfigError, Secret};

fn invalid(m: String) -> ConfigError {
    ConfigError::Invalid(m)
}

/// `[[admins]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    name: String,
    password_hash: Option<String>,
    token: Option<String>,
}

/// A named admin: signs in (and approves) as themself, with their own secret.
#[derive(Debug, Clone)]
pub struct NamedAdmin {
    pub name: String,
    /// An argon2 or bcrypt hash of their password.
    pub password_hash: Option<Secret>,
    /// Their own bearer token, for the API and `pier approve`.
    pub token: Option<Secret>,
}

/// Shortest named admin token accepted (as for `server.admin_token`).
const MIN_TOKEN: usize = 32;

pub(super) fn resolve_admins(
    raw: Vec<RawAdmin>,
    base: &Path,
    allow_short: bool,
) -> Result<Vec<NamedAdmin>, ConfigError> {
    let mut out: Vec<NamedAdmin> = Vec::new();
    for a in raw {
        if !super::raw::valid_name(&a.name) {
            return Err(invalid(format!(
                "admin name `{}`: use lower-case letters, digits, - and _",
                a.name
            )));
        }
        if out.iter().any(|o| o.name == a.name) {
            return Err(invalid(format!("admin `{}` is defined twice", a.name)));
        }
        let what = |f: &str| format!("admins.{}.{f}", a.name);
        let password_hash = a
            .password_hash
            .map(|h| Secret::resolve(&what("password_hash"), &h, base))
            .transpose()?
            .filter(|h| !h.expose().is_empty());
        let token = a
            .token
            .map(|t| Secret::resolve(&what("token"), &t, base))
            .transpose()?
            .filter(|t| !t.expose().is_empty());
        if password_hash.is_none() && token.is_none() {
            return Err(invalid(format!(
                "admin `{}`: give a password_hash or a token",
                a.name
            )));
        }
        if let Some(h) = &password_hash
            && !super::signin::is_password_hash(h.expose())
        {
            return Err(invalid(format!(
                "admin `{}`: password_hash must be an argon2 or bcrypt hash, not a password",
                a.name
            )));
        }
        if let Some(t) = &token
            && t.expose().len() < MIN_TOKEN
            && !allow_short
        {
            return Err(invalid(format!(
                "admin `{}`: token must be at least {MIN_TOKEN} characters",
                a.name
            )));
        }
        out.push(NamedAdmin {
            name: a.name,
            password_hash,
            token,
        });
    }
    Ok(out)
}

/// An app's `approval = { required, from, expires }` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApproval {
    #[serde(default = "one")]
    required: usize,
    /// Names of `[[admins]]`; empty: any named admin.
    #[serde(default)]
    from: Vec<String>,
    #[serde(default = "a_day", with = "humantime_serde")]
    expires: Duration,
}

fn one() -> usize {
    1
}
fn a_day() -> Duration {
    Duration::from_secs(24 * 3600)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// Distinct admins who must approve.
    pub required: usize,
    /// Whose approvals count (never empty once resolved: `from` or every named admin).
    pub from: Vec<String>,
    /// How long a request stands from when it starts waiting; then it is cancelled.
    pub expires: Duration,
}

/// What may hold an app's deployments, resolved.
#[derive(Debug, Clone, Default)]
pub struct Gates {
    pub approval: Option<Approval>,
    /// Empty: any time.
    pub windows: Vec<Window>,
    /// `promote_from` and `after`: the app deploys only what another app proved.
    pub promotion: Option<Promotion>,
}

/// Deploy exactly the digest that app `from` has served healthily for `after`; pushes and
/// the poller do not deploy this app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promotion {
    pub from: String,
    pub after: Duration,
}

/// The gate fields of `[[apps]]`, as written.
pub(super) struct RawGates {
    pub approval: Option<RawApproval>,
    pub windows: Vec<String>,
    pub promote_from: Option<String>,
    pub after: Option<String>,
}

impl RawGates {
    pub(super) fn resolve(self, app: &str, admins: &[NamedAdmin]) -> Result<Gates, ConfigError> {
        let approval = match self.approval {
            None => None,
            Some(a) => {
                for f in &a.from {
                    if !admins.iter().any(|n| &n.name == f) {
                        return Err(invalid(format!(
                            "app `{app}`: approval.from names `{f}`, which is no [[admins]] entry"
                        )));
                    }
                }
                let from = if a.from.is_empty() {
                    admins.iter().map(|n| n.name.clone()).collect()
                } else {
                    a.from
                };
                if a.required == 0 || a.required > from.len() {
                    return Err(invalid(format!(
                        "app `{app}`: approval.required must be between 1 and the {} admin(s) it may come from",
                        from.len()
                    )));
                }
                if a.expires < Duration::from_secs(1) {
                    return Err(invalid(format!(
                        "app `{app}`: approval.expires must be at least 1s"
                    )));
                }
                Some(Approval {
                    required: a.required,
                    from,
                    expires: a.expires,
                })
            }
        };
        let windows = self
            .windows
            .iter()
            .map(|w| {
                Window::parse(w).map_err(|e| invalid(format!("app `{app}`: window `{w}`: {e}")))
            })
            .collect::<Result<_, _>>()?;
        let promotion = match (self.promote_from, self.after) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(invalid(format!(
                    "app `{app}`: `after` needs `promote_from`"
                )));
            }
            (Some(from), after) => {
                if from == app {
                    return Err(invalid(format!("app `{app}`: promote_from names itself")));
                }
                let after = match after {
                    None => Duration::ZERO,
                    Some(a) => humantime::parse_duration(&a).map_err(|_| {
                        invalid(format!("app `{app}`: after `{a}` is not a duration (15m)"))
                    })?,
                };
                Some(Promotion { from, after })
            }
        };
        Ok(Gates {
            approval,
            windows,
            promotion,
        })
    }
}

/// Every `promote_from` names another app of the config, with the same image: what is
/// promoted is a digest of that repository.
pub(super) fn check_promotions(apps: &[super::AppConfig]) -> Result<(), ConfigError> {
    for a in apps {
        let Some(p) = &a.gates.promotion else {
            continue;
        };
        let Some(src) = apps.iter().find(|s| s.name == p.from) else {
            return Err(invalid(format!(
                "app `{}`: promote_from names `{}`, which is no app",
                a.name, p.from
            )));
        };
        if src.image_name != a.image_name {
            return Err(invalid(format!(
                "app `{}`: promote_from `{}` deploys another image ({}); a promotion deploys the same digest",
                a.name, p.from, src.image
            )));
        }
    }
    Ok(())
}

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

const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

fn day(s: &str) -> Result<usize, String> {
    let l = s.to_ascii_lowercase();
    DAYS.iter()
        .position(|d| l.starts_with(d) && d.len() <= l.len() && l.len() <= 9)
        .ok_or_else(|| format!("`{s}` is not a weekday (Mon … Sun)"))
}

fn days(spec: &str) -> Result<u8, String> {
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

fn time(s: &str) -> Result<NaiveTime, String> {
    NaiveTime::parse_from_str(s, "%H:%M:%S")
        .or_else(|_| NaiveTime::parse_from_str(s, "%H:%M"))
        .map_err(|_| format!("`{s}` is not a time (HH:MM or HH:MM:SS)"))
}

impl Window {
    /// `DAYS HH:MM-HH:MM ZONE`: days as `Mon-Fri`, `Sat,Sun`, `Mon,Wed-Fri` or `daily`;
    /// seconds may be given (`09:00:30`); the zone is an IANA name (`Europe/Berlin`, `UTC`).
    pub fn parse(text: &str) -> Result<Window, String> {
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [d, range, zone] = parts[..] else {
            return Err("write it as `Mon-Fri 09:00-17:00 Europe/Berlin`".into());
        };
        let (start, end) = range
            .split_once('-')
            .ok_or_else(|| format!("`{range}` is not a range HH:MM-HH:MM"))?;
        let tz: Tz = zone
            .parse()
            .map_err(|_| format!("`{zone}` is not an IANA time zone"))?;
        let (start, end) = (time(start)?, time(end)?);
        if start == end {
            return Err("the window is empty: its start and end are the same".into());
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

    fn config(admins: &str, apps: &str) -> Result<super::super::Config, ConfigError> {
        let text = format!(
            "[server]\ndatabase_url = \"postgres://localhost/pier\"\n{admins}\n\
             [[apps]]\nname = \"stg\"\nimage = \"127.0.0.1:5000/demo/web\"\nport = 8080\n\
             [[apps]]\nname = \"prod\"\nimage = \"127.0.0.1:5000/demo/web\"\nport = 8080\n{apps}"
        );
        super::super::Config::parse(&text, Path::new("."))
    }

    const ADMINS: &str = "[[admins]]\nname = \"ops\"\ntoken = \"0123456789abcdef0123456789abcdef\"\n\
                          [[admins]]\nname = \"release\"\ntoken = \"fedcba9876543210fedcba9876543210\"\n";

    #[test]
    fn approvals_promotions_and_windows_resolve_and_name_what_is_wrong() {
        let c = config(
            ADMINS,
            "approval = { required = 2, expires = \"2h\" }\n\
             windows = [\"Mon-Fri 09:00-17:00 Europe/Berlin\"]\n\
             promote_from = \"stg\"\nafter = \"15m\"\n",
        )
        .unwrap();
        let prod = &c.apps[1];
        let a = prod.gates.approval.as_ref().unwrap();
        assert_eq!(
            a.from,
            ["ops", "release"],
            "empty `from`: every named admin"
        );
        assert_eq!(a.expires, Duration::from_secs(7200));
        assert_eq!(prod.gates.windows.len(), 1);
        let p = prod.gates.promotion.as_ref().unwrap();
        assert_eq!(
            (p.from.as_str(), p.after),
            ("stg", Duration::from_secs(900))
        );
        assert_eq!(prod.poll, None, "a promoted app is not polled");
        for (admins, apps, why) in [
            (
                ADMINS,
                "approval = { required = 3 }\n",
                "between 1 and the 2",
            ),
            (
                ADMINS,
                "approval = { from = [\"bob\"] }\n",
                "no [[admins]] entry",
            ),
            (ADMINS, "promote_from = \"nope\"\n", "which is no app"),
            (ADMINS, "promote_from = \"prod\"\n", "names itself"),
            (ADMINS, "after = \"1m\"\n", "needs `promote_from`"),
            (ADMINS, "windows = [\"weekdays\"]\n", "window `weekdays`"),
            (
                "[[admins]]\nname = \"ops\"\n",
                "",
                "give a password_hash or a token",
            ),
            (
                "[[admins]]\nname = \"ops\"\ntoken = \"short\"\n",
                "",
                "at least 32",
            ),
            (
                "[[admins]]\nname = \"ops\"\npassword_hash = \"hunter2\"\n",
                "",
                "not a password",
            ),
        ] {
            let e = config(admins, apps).unwrap_err().to_string();
            assert!(e.contains(why), "{apps}: {e}");
        }
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
            let e = Window::parse(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        assert_eq!(days("Fri-Mon").unwrap(), 0b111_0001);
    }
}
