//! Admins' decisions about waiting deployments and apps: approve, reject, override a
//! window or freeze, freeze and unfreeze. The pages, the API and the CLI (through the API)
//! all call these; each checks who may decide before the store records it.

use chrono::{DateTime, Utc as UtcZone};
use uuid::Uuid;

use crate::actions::{ActionError, Actor, clip};
use crate::config::{Config, NamedAdmin};
use crate::store::{Decided, Deployment, Freeze, Store};

/// The named admin whose own token this is (`Bearer <token>` or bare), compared in
/// constant time against every admin's token.
pub(crate) fn admin_by_token<'c>(
    config: &'c Config,
    given: Option<&str>,
) -> Option<&'c NamedAdmin> {
    config.admins.iter().find(|a| {
        a.token
            .as_ref()
            .is_some_and(|t| crate::intake::verify::token(given, t.expose()).is_ok())
    })
}

async fn waiting(store: &Store, id: Uuid) -> Result<Deployment, ActionError> {
    store
        .deployment(id)
        .await?
        .ok_or(ActionError::UnknownDeployment(id))
}

fn not_waiting(id: Uuid, d: Decided, what: &'static str) -> Result<Decided, ActionError> {
    match d {
        Decided::NotFound => Err(ActionError::UnknownDeployment(id)),
        Decided::NotWaiting(state) => Err(ActionError::NotWaiting { id, state, what }),
        other => Ok(other),
    }
}

/// `admin` approves deployment `id`; it runs once the app's `approval.required` distinct
/// admins of `approval.from` have approved it.
pub(crate) async fn approve(
    store: &Store,
    config: &Config,
    id: Uuid,
    admin: &str,
) -> Result<Decided, ActionError> {
    let dep = waiting(store, id).await?;
    let app = crate::actions::app(config, &dep.app)?;
    let Some(a) = &app.gates.approval else {
        return Err(ActionError::NotWaiting {
            id,
            state: dep.state,
            what: "approval (its app needs none)",
        });
    };
    if !a.from.iter().any(|f| f == admin) {
        return Err(ActionError::NotAnApprover {
            admin: clip(admin, 64),
            app: app.name.to_string(),
            from: a.from.join(", "),
        });
    }
    let d = store.approve(id, admin, a.required, &a.from).await?;
    not_waiting(id, d, "approval")
}

/// `admin` rejects deployment `id`: it ends `cancelled`, naming who and why.
pub(crate) async fn reject(
    store: &Store,
    config: &Config,
    id: Uuid,
    admin: &str,
    reason: Option<&str>,
) -> Result<Decided, ActionError> {
    let dep = waiting(store, id).await?;
    let app = crate::actions::app(config, &dep.app)?;
    if let Some(a) = &app.gates.approval
        && !a.from.iter().any(|f| f == admin)
    {
        return Err(ActionError::NotAnApprover {
            admin: clip(admin, 64),
            app: app.name.to_string(),
            from: a.from.join(", "),
        });
    }
    let reason = reason
        .map(|r| clip(r.trim(), 500))
        .filter(|r| !r.is_empty());
    let d = store.reject(id, admin, reason.as_deref()).await?;
    not_waiting(id, d, "approval")
}

fn reason_of(reason: Option<&str>, what: &str) -> Result<String, ActionError> {
    reason
        .map(|r| clip(r.trim(), 500))
        .filter(|r| !r.is_empty())
        .ok_or_else(|| ActionError::Invalid(format!("{what} needs a reason")))
}

/// `admin` lets deployment `id` run now, past its window or its app's freeze; the reason
/// is recorded beside who.
pub(crate) async fn override_wait(
    store: &Store,
    id: Uuid,
    admin: &str,
    reason: Option<&str>,
) -> Result<Decided, ActionError> {
    let reason = reason_of(reason, "an override")?;
    waiting(store, id).await?;
    let d = store.override_wait(id, admin, &reason).await?;
    not_waiting(id, d, "a window or a freeze")
}

/// Freezes `app` until `until`: every new deployment waits until then (or an unfreeze).
pub(crate) async fn freeze(
    store: &Store,
    config: &Config,
    app: &str,
    until: DateTime<UtcZone>,
    reason: Option<&str>,
    actor: &Actor,
) -> Result<Freeze, ActionError> {
    let app = crate::actions::app(config, app)?;
    let reason = reason_of(reason, "a freeze")?;
    if until <= UtcZone::now() {
        return Err(ActionError::Invalid(
            "a freeze must end in the future".into(),
        ));
    }
    Ok(store
        .freeze(&app.name, until, &reason, &actor.describe())
        .await?)
}

/// Lifts `app`'s freeze; what waited for it is judged again at once.
pub(crate) async fn unfreeze(
    store: &Store,
    config: &Config,
    app: &str,
    actor: &Actor,
) -> Result<Option<Freeze>, ActionError> {
    let app = crate::actions::app(config, app)?;
    Ok(store.unfreeze(&app.name, &actor.describe()).await?)
}

/// `--until` as a user writes it: a duration from now (`2h`, `3d`) or an RFC 3339 time.
pub(crate) fn parse_until(s: &str) -> Result<DateTime<UtcZone>, ActionError> {
    let s = s.trim();
    if let Ok(d) = humantime::parse_duration(s) {
        let d = chrono::Duration::from_std(d).map_err(|_| ActionError::UntilTooLong)?;
        return UtcZone::now()
            .checked_add_signed(d)
            .ok_or(ActionError::UntilTooLong);
    }
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&UtcZone))
        .map_err(|_| ActionError::BadUntil { given: clip(s, 64) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_is_a_duration_or_a_time_and_never_past_what_a_timestamp_holds() {
        let in_two_hours = parse_until(" 2h ").unwrap() - UtcZone::now();
        assert!((7190..=7200).contains(&in_two_hours.num_seconds()));
        assert_eq!(
            parse_until("2026-12-24T18:00:00Z").unwrap().to_rfc3339(),
            "2026-12-24T18:00:00+00:00"
        );
        let e = parse_until("soon").unwrap_err();
        assert!(matches!(&e, ActionError::BadUntil { given } if given == "soon"));
        assert_eq!(
            e.to_string(),
            "`soon`: give a duration (2h) or a time (2026-12-24T18:00:00Z)"
        );
        // Past chrono's last year: refused, where adding it to now would panic.
        assert!(matches!(
            parse_until("300000years"),
            Err(ActionError::UntilTooLong)
        ));
    }
}
