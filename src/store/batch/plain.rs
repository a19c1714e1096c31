//! A batch in which no delivery asks for a deployment (pushes to repositories no app
//! follows, which is most of what a busy registry sends): one plain multi-row `INSERT`.
//! Kept beside `pier_record_deliveries` (migration 0028) for speed alone: it stores a new
//! delivery as `ignored` and nothing else, and every rule beyond that (a repeat counted on
//! its first row) is the function's. Through the function such a batch cost a quarter of
//! the ingest bench's `no app` rate at concurrency 16 (`bench/RESULTS.md`).

use uuid::Uuid;

use super::super::Result;
use super::super::deliveries::{DeliveryColumns, DeliveryOutcome, DeliveryRequest, record_all};

/// Whether [`record_plain`] can take this batch: nothing in it asks for a deployment.
pub(super) fn queues_nothing(reqs: &[&DeliveryRequest]) -> bool {
    reqs.iter().all(|r| r.wanted.is_empty())
}

/// Records a batch that [`queues_nothing`]: its new deliveries with one `INSERT`, in
/// arrival order (so of two with one key in the batch the first is stored), then its
/// repeats, if any, with the function. Outcomes in the order of `reqs`.
pub(super) async fn record_plain(
    conn: &mut sqlx::PgConnection,
    reqs: &[&DeliveryRequest],
) -> Result<Vec<DeliveryOutcome>> {
    debug_assert!(queues_nothing(reqs));
    let ids: Vec<Uuid> = reqs.iter().map(|_| Uuid::new_v4()).collect();
    let c = DeliveryColumns::of(reqs);
    let inserted: Vec<Uuid> = sqlx::query_scalar(
        "INSERT INTO deliveries
           (id, source, event_key, verdict, reason, events, body_sha256, redelivery_of)
         SELECT i, s, k, 'ignored', r, e::jsonb, b, d
         FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[],
                     $7::uuid[]) WITH ORDINALITY AS t(i, s, k, r, e, b, d, n)
         ORDER BY n
         ON CONFLICT DO NOTHING
         RETURNING id",
    )
    .bind(&ids)
    .bind(&c.sources)
    .bind(&c.keys)
    .bind(&c.reasons)
    .bind(&c.events)
    .bind(&c.bodies)
    .bind(&c.redeliveries)
    .fetch_all(&mut *conn)
    .await?;
    let repeats: Vec<&DeliveryRequest> = reqs
        .iter()
        .zip(&ids)
        .filter(|(_, id)| !inserted.contains(id))
        .map(|(r, _)| *r)
        .collect();
    let mut counted = if repeats.is_empty() {
        Vec::new()
    } else {
        record_all(conn, &repeats, &[]).await?
    }
    .into_iter();
    ids.iter()
        .map(|id| match inserted.contains(id) {
            true => Ok(DeliveryOutcome::Recorded {
                delivery_id: *id,
                deployments: Vec::new(),
                held_back: Vec::new(),
                pinned: Vec::new(),
            }),
            false => counted.next().ok_or_else(|| {
                super::super::StoreError::Query(sqlx::Error::Protocol(
                    "pier_record_deliveries answered fewer outcomes than repeats".into(),
                ))
            }),
        })
        .collect()
}
