use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::actions::Pin;
use super::deployments::{Enqueued, NewDeployment};
use super::kinds::Verdict;
use super::text::{pg_json, pg_opt, pg_text};
use super::{Result, Store};
use crate::domain::tags::{TagRule, tag_version};

#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub source: String,
    /// The sender's event id(s); `None` when the sender gives none (then no dedupe).
    pub event_key: Option<String>,
    pub events: serde_json::Value,
    /// Why nothing deploys, when nothing does.
    pub reason: String,
}

/// A deployment a delivery asks for. With `never_older`, the requested tag is a version
/// and it is queued only if no version of the same rule already running or queued for the
/// app is higher: checked under the app's enqueue lock, so two pushes racing (v1.4 and
/// v1.3) can never end with v1.3 superseding v1.4.
#[derive(Debug, Clone)]
pub struct DeploymentRequest {
    pub deployment: NewDeployment,
    pub never_older: Option<TagRule>,
}

impl From<NewDeployment> for DeploymentRequest {
    fn from(deployment: NewDeployment) -> Self {
        Self {
            deployment,
            never_older: None,
        }
    }
}

/// A requested version that was not queued because a higher one runs or waits.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct HeldBack {
    pub app: String,
    pub tag: String,
    pub newer: String,
}

impl HeldBack {
    pub(crate) fn reason(&self) -> String {
        format!(
            "{}: {} not deployed, {} is newer (running or queued); a version range never rolls back",
            self.app, self.tag, self.newer
        )
    }
}

#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct Delivery {
    pub id: Uuid,
    pub source: String,
    pub event_key: Option<String>,
    pub received_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    pub seen_count: i32,
    /// How many of the repeats were the same delivery id again (a sender's retry).
    pub duplicates: i32,
    /// How many were the same authentic body under another delivery id.
    pub replays: i32,
    pub redelivery_of: Option<Uuid>,
    pub verdict: Verdict,
    pub reason: String,
    pub events: serde_json::Value,
}

/// Which deliveries `GET /deliveries` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerdictFilter {
    Is(Verdict),
    /// Repeated under the same delivery id at least once.
    Duplicate,
    /// Repeated under another delivery id at least once.
    Replay,
    Redelivery,
}

/// A `verdict` filter that names no verdict: a 400 that quotes at most 32 characters of it.
/// `pub` as `VerdictFilter` is: the `Err` of a public `FromStr` cannot be less visible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown verdict `{given}`")]
pub struct UnknownVerdict {
    pub given: String,
}

impl std::str::FromStr for VerdictFilter {
    type Err = UnknownVerdict;
    fn from_str(s: &str) -> std::result::Result<Self, UnknownVerdict> {
        match s {
            "duplicate" => Ok(Self::Duplicate),
            "replay" => Ok(Self::Replay),
            "redelivery" => Ok(Self::Redelivery),
            other => other
                .parse::<Verdict>()
                .map(Self::Is)
                .map_err(|_| UnknownVerdict {
                    given: other.chars().take(32).collect(),
                }),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub source: Option<String>,
    pub verdict: Option<VerdictFilter>,
    /// Keyset: only deliveries strictly older than this one (the last of the previous page).
    pub before: Option<(DateTime<Utc>, Uuid)>,
}

/// Most deliveries one page lists.
pub const MAX_PAGE: i64 = 200;

#[derive(Debug)]
pub enum DeliveryOutcome {
    /// Stored for the first time, with what each requested deployment became.
    Recorded {
        delivery_id: Uuid,
        deployments: Vec<Enqueued>,
        /// Versions not queued because a higher one runs or waits; when nothing was
        /// queued because of them, the stored verdict is `ignored` with their reason.
        held_back: Vec<HeldBack>,
        /// Apps not deployed because an operator pinned them; when nothing was queued
        /// because of them, the stored verdict is `pinned`.
        pinned: Vec<Pin>,
    },
    /// The same event was delivered before; nothing new is stored.
    Duplicate { delivery_id: Uuid },
    /// The same authentic body was accepted before under another delivery id; nothing new
    /// is stored.
    Replay { delivery_id: Uuid },
}

impl Store {
    /// Stores a delivery and the deployments it asks for in ONE transaction: the sender is
    /// answered 2xx only after this commits, so a crash or outage never loses an accepted
    /// push, and a retry of the same event finds its first delivery.
    ///
    /// With `body_sha256`, a body (by its hash) that this source already delivered is
    /// refused too: senders that sign only the body cannot tell a replay from a retry, so
    /// the body itself is the event's identity. A retry of the same event id is a
    /// `Duplicate`, the same body under another id a `Replay`; the unique indexes decide
    /// races between processes.
    pub async fn record_delivery(
        &self,
        delivery: NewDelivery,
        body_sha256: Option<&[u8]>,
        wanted: Vec<NewDeployment>,
    ) -> Result<DeliveryOutcome> {
        let wanted = wanted.into_iter().map(DeploymentRequest::from).collect();
        self.record_delivery_with(delivery, body_sha256, wanted, None)
            .await
    }

    /// [`Store::record_delivery`] with version guards, and for a redelivery the delivery
    /// it repeats (a redelivery has no event key and no body hash: it is never deduplicated
    /// against its original, which is the point of asking for it).
    pub async fn record_delivery_with(
        &self,
        delivery: NewDelivery,
        body_sha256: Option<&[u8]>,
        wanted: Vec<DeploymentRequest>,
        redelivery_of: Option<Uuid>,
    ) -> Result<DeliveryOutcome> {
        self.record_batched(DeliveryRequest {
            delivery,
            body_sha256: body_sha256.map(<[u8]>::to_vec),
            wanted,
            redelivery_of,
        })
        .await
    }
}

/// One delivery to record, as the group commit ([`super::batch`]) carries it.
#[derive(Debug, Clone)]
pub(super) struct DeliveryRequest {
    pub delivery: NewDelivery,
    pub body_sha256: Option<Vec<u8>>,
    pub wanted: Vec<DeploymentRequest>,
    pub redelivery_of: Option<Uuid>,
}

impl DeliveryRequest {
    /// The apps whose enqueue locks recording this delivery needs.
    pub(crate) fn apps(&self) -> impl Iterator<Item = &str> {
        self.wanted.iter().map(|w| w.deployment.app.as_str())
    }
}

/// Whether this delivery carries a version guard: then the versions in play decide
/// ([`newer_per_wanted`]), read under its apps' locks in the batch's transaction.
pub(super) fn has_guard(req: &DeliveryRequest) -> bool {
    req.wanted.iter().any(|w| w.never_older.is_some())
}

/// Per requested deployment of `req`, in order, the higher version in play that holds it
/// back (`None`: none, or no guard). `tx` must hold the enqueue lock of every app of `req`.
/// Exact because intake folds a delivery to one request per app (`intake::record`): no
/// request of `req` can change what another of it finds in play.
pub(super) async fn newer_per_wanted(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    req: &DeliveryRequest,
) -> Result<Vec<Option<String>>> {
    let mut newer = Vec::with_capacity(req.wanted.len());
    for w in &req.wanted {
        let d = &w.deployment;
        newer.push(match (&w.never_older, &d.requested_tag) {
            (Some(rule), Some(tag)) => newer_in_play(tx, &d.app, rule, tag).await?,
            _ => None,
        });
    }
    Ok(newer)
}

/// One delivery's outcome as `pier_record_deliveries` (migration 0028) returns it.
#[derive(serde::Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Answer {
    Recorded {
        delivery_id: Uuid,
        deployments: Vec<Enqueued>,
        pinned: Vec<Pin>,
        held_back: Vec<HeldBack>,
    },
    Duplicate {
        delivery_id: Uuid,
    },
    Replay {
        delivery_id: Uuid,
    },
}

/// A batch's deliveries as the column arrays that both batch statements bind (the
/// function's and the plain `INSERT`'s), in arrival order.
pub(super) struct DeliveryColumns<'a> {
    pub(super) sources: Vec<Cow<'a, str>>,
    pub(super) keys: Vec<Option<Cow<'a, str>>>,
    pub(super) reasons: Vec<Cow<'a, str>>,
    pub(super) events: Vec<String>,
    pub(super) bodies: Vec<Option<&'a [u8]>>,
    pub(super) redeliveries: Vec<Option<Uuid>>,
}

impl<'a> DeliveryColumns<'a> {
    pub(super) fn of(reqs: &[&'a DeliveryRequest]) -> Self {
        Self {
            sources: reqs.iter().map(|r| pg_text(&r.delivery.source)).collect(),
            keys: reqs
                .iter()
                .map(|r| pg_opt(r.delivery.event_key.as_deref()))
                .collect(),
            reasons: reqs.iter().map(|r| pg_text(&r.delivery.reason)).collect(),
            events: reqs
                .iter()
                .map(|r| pg_json(&r.delivery.events).to_string())
                .collect(),
            bodies: reqs.iter().map(|r| r.body_sha256.as_deref()).collect(),
            redeliveries: reqs.iter().map(|r| r.redelivery_of).collect(),
        }
    }
}

/// Records deliveries in arrival order with ONE statement, `pier_record_deliveries`
/// (migration 0028), the one writer of a delivery's rules: one round trip for the whole
/// batch. Outside a transaction it commits on its own and the sender is still answered only
/// after that commit. `newer` is [`newer_per_wanted`] of each of `reqs`, or empty when none
/// of them carries a version guard (then `conn` needs no transaction or lock of its own).
pub(super) async fn record_all(
    conn: &mut sqlx::PgConnection,
    reqs: &[&DeliveryRequest],
    newer: &[Vec<Option<String>>],
) -> Result<Vec<DeliveryOutcome>> {
    debug_assert!(newer.is_empty() || newer.len() == reqs.len());
    let n = reqs.len();
    let c = DeliveryColumns::of(reqs);
    let wanted = || {
        reqs.iter().enumerate().flat_map(|(i, r)| {
            r.wanted
                .iter()
                .enumerate()
                .map(move |(k, w)| (i, k, &w.deployment))
        })
    };
    // 1-based, ascending: the function walks deliveries and their deployments together.
    let w_delivery: Vec<i32> = wanted().map(|(i, _, _)| i as i32 + 1).collect();
    let w_app: Vec<&str> = wanted().map(|(_, _, d)| d.app.as_str()).collect();
    let w_trigger: Vec<&str> = wanted().map(|(_, _, d)| d.trigger.as_str()).collect();
    let w_image: Vec<&str> = wanted().map(|(_, _, d)| d.image.as_str()).collect();
    let w_tag: Vec<Option<&str>> = wanted()
        .map(|(_, _, d)| d.requested_tag.as_deref())
        .collect();
    let w_digest: Vec<Option<&str>> = wanted()
        .map(|(_, _, d)| d.claimed_digest.as_deref())
        .collect();
    let w_pinned: Vec<bool> = wanted().map(|(_, _, d)| d.pinned).collect();
    let w_newer: Vec<Option<&str>> = wanted()
        .map(|(i, k, _)| newer.get(i).and_then(|n| n[k].as_deref()))
        .collect();
    let sqlx::types::Json(answers): sqlx::types::Json<Vec<Answer>> = sqlx::query_scalar(
        "SELECT pier_record_deliveries($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                                       $14)",
    )
    .bind(&c.sources)
    .bind(&c.keys)
    .bind(&c.reasons)
    .bind(&c.events)
    .bind(&c.bodies)
    .bind(&c.redeliveries)
    .bind(&w_delivery)
    .bind(&w_app)
    .bind(&w_trigger)
    .bind(&w_image)
    .bind(&w_tag)
    .bind(&w_digest)
    .bind(&w_pinned)
    .bind(&w_newer)
    .fetch_one(conn)
    .await?;
    if answers.len() != n {
        return Err(super::StoreError::Query(sqlx::Error::Protocol(format!(
            "pier_record_deliveries answered {} outcomes for {n} deliveries",
            answers.len()
        ))));
    }
    Ok(answers.into_iter().map(DeliveryOutcome::from).collect())
}

impl From<Answer> for DeliveryOutcome {
    fn from(answer: Answer) -> Self {
        match answer {
            Answer::Recorded {
                delivery_id,
                deployments,
                pinned,
                held_back,
            } => DeliveryOutcome::Recorded {
                delivery_id,
                deployments,
                held_back,
                pinned,
            },
            Answer::Duplicate { delivery_id } => DeliveryOutcome::Duplicate { delivery_id },
            Answer::Replay { delivery_id } => DeliveryOutcome::Replay { delivery_id },
        }
    }
}

impl Store {
    pub async fn delivery(&self, id: Uuid) -> Result<Option<Delivery>> {
        Ok(sqlx::query_as("SELECT * FROM deliveries WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// One page of deliveries, newest first. Each filter shape is its own statement
    /// (built, never concatenated from input: every value is bound) so that each is planned
    /// against its own index; `limit` is capped at [`MAX_PAGE`].
    pub(crate) async fn deliveries_page(
        &self,
        filter: &DeliveryFilter,
        limit: i64,
    ) -> Result<Vec<Delivery>> {
        let mut q =
            sqlx::QueryBuilder::<sqlx::Postgres>::new("SELECT * FROM deliveries WHERE true");
        if let Some(source) = &filter.source {
            q.push(" AND source = ").push_bind(source.clone());
        }
        match filter.verdict {
            Some(VerdictFilter::Is(v)) => {
                q.push(" AND verdict = ").push_bind(v);
            }
            Some(VerdictFilter::Duplicate) => {
                q.push(" AND duplicates > 0");
            }
            Some(VerdictFilter::Replay) => {
                q.push(" AND replays > 0");
            }
            Some(VerdictFilter::Redelivery) => {
                q.push(" AND redelivery_of IS NOT NULL");
            }
            None => {}
        }
        if let Some((at, id)) = filter.before {
            q.push(" AND (received_at, id) < (")
                .push_bind(at)
                .push(", ")
                .push_bind(id)
                .push(")");
        }
        q.push(" ORDER BY received_at DESC, id DESC LIMIT ")
            .push_bind(limit.clamp(1, MAX_PAGE));
        Ok(q.build_query_as().fetch_all(&self.pool).await?)
    }

    pub async fn recent_deliveries(&self, limit: i64) -> Result<Vec<Delivery>> {
        Ok(
            sqlx::query_as("SELECT * FROM deliveries ORDER BY received_at DESC LIMIT $1")
                .bind(limit)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// The deployments the given deliveries created: `(delivery, deployment, app)`.
    pub(crate) async fn deployments_of_deliveries(
        &self,
        ids: &[Uuid],
    ) -> Result<Vec<(Uuid, Uuid, String)>> {
        Ok(sqlx::query_as(
            "SELECT delivery_id, id, app FROM deployments WHERE delivery_id = ANY($1)
             ORDER BY created_at",
        )
        .bind(ids)
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn count_deliveries(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM deliveries")
            .fetch_one(&self.pool)
            .await?)
    }
}

/// Why a pinned app was not deployed, for the delivery's reason and the hook's answer.
pub fn pinned_reason(pin: &Pin) -> String {
    format!(
        "{}: pinned to {} by {} at {}; not deployed until unpinned",
        pin.app,
        pin.digest,
        pin.by,
        pin.at.format("%Y-%m-%d %H:%M:%S UTC")
    )
}

/// The highest version of `rule` running or queued for `app`, when it is higher than
/// `tag`'s: what runs is the tag of the newest succeeded deployment that named one; what is
/// queued or running, the tags those deployments resolve. Versions the rule no longer
/// matches do not count, so narrowing a range (`<1.5` after running 1.9) can go down.
async fn newer_in_play(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    app: &str,
    rule: &TagRule,
    tag: &str,
) -> Result<Option<String>> {
    let Some(wanted) = tag_version(tag) else {
        return Ok(None);
    };
    let tags: Vec<String> = sqlx::query_scalar(
        "SELECT requested_tag FROM deployments
         WHERE app = $1 AND requested_tag IS NOT NULL AND state IN ('queued', 'running')
         UNION ALL
         (SELECT requested_tag FROM deployments
          WHERE app = $1 AND requested_tag IS NOT NULL AND state = 'succeeded'
          ORDER BY finished_at DESC LIMIT 1)",
    )
    .bind(app)
    .fetch_all(&mut **tx)
    .await?;
    Ok(highest_above(rule, &wanted, tags.iter().map(String::as_str)).map(str::to_owned))
}

/// The no-rollback rule, pure: of the tags in play that the rule matches, the highest
/// version if it is strictly higher than `wanted` (the same version again, re-pushed with
/// another digest, still deploys).
pub fn highest_above<'a>(
    rule: &TagRule,
    wanted: &semver::Version,
    in_play: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    in_play
        .into_iter()
        .filter(|t| rule.matches(t, false))
        .filter_map(|t| tag_version(t).map(|v| (v, t)))
        .filter(|(v, _)| v > wanted)
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_version_is_held_back_and_the_same_or_a_higher_one_is_not() {
        let rule = TagRule::from_versions(">=1.0.0, <2").unwrap();
        let v = |s: &str| tag_version(s).unwrap();
        assert_eq!(
            highest_above(&rule, &v("1.2.0"), ["v1.3.0", "1.1.0"]),
            Some("v1.3.0")
        );
        assert_eq!(
            highest_above(&rule, &v("1.3.0"), ["v1.3.0"]),
            None,
            "a re-push"
        );
        assert_eq!(highest_above(&rule, &v("1.4.0"), ["1.3.0", "1.2.0"]), None);
        assert_eq!(
            highest_above(&rule, &v("1.4.0"), []),
            None,
            "nothing runs yet"
        );
        // A version the rule no longer matches does not hold anything back.
        assert_eq!(highest_above(&rule, &v("1.4.0"), ["2.5.0"]), None);
        assert_eq!(highest_above(&rule, &v("1.4.0"), ["main"]), None);
    }
}
