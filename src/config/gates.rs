//! What may hold a deployment before it runs. `[[admins]]` (named admins with their
//! own password hash or token, so that an approval names a person), an app's `approval`
//! (how many of which admins, and for how long the request stands) and its `windows`
//! (`"Mon-Fri 09:00-17:00 Europe/Berlin"`, IANA time zones through chrono-tz).

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Secret, invalid};

/// A named admin: signs in and acts as themselves, recorded as `user NAME`; only named
/// admins approve, reject and override.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    /// The name they sign in with and that approvals record: lower-case letters, digits,
    /// `-`, `_`; unique.
    name: String,
    /// Their password for the sign-in form: an argon2 or bcrypt hash. One of `token` and
    /// `password_hash` is required.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
    password_hash: Option<String>,
    /// Their own bearer token, 32 characters or more: the JSON API and the CLI's
    /// `PIER_TOKEN` (every action, approvals included) and the sign-in form.
    #[schemars(with = "Option<super::doc_types::SecretText>")]
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
        if !crate::domain::is_name(&a.name) {
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

/// Deployments of the app wait in `awaiting_approval` until enough named admins approve
/// them (the page's Approve button, the API, or `pier approve`); Reject ends one
/// `cancelled`.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApproval {
    /// Distinct admins of `from` whose approval a deployment needs.
    #[serde(default = "one")]
    required: usize,
    /// Names of `[[admins]]` whose approvals count.
    ///
    /// Default: every named admin.
    #[serde(default)]
    from: Vec<String>,
    /// How long a deployment waits for its approvals; then it ends `cancelled`, saying the
    /// request expired.
    #[serde(default = "a_day", with = "humantime_serde")]
    #[schemars(with = "super::doc_types::DurationText")]
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
    pub windows: Vec<super::windows::Window>,
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
                super::windows::Window::parse(w)
                    .map_err(|e| invalid(format!("app `{app}`: window `{w}`: {e}")))
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
