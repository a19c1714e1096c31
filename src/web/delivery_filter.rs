//! `?source=&verdict=&before=&limit=` of the deliveries page and of `GET /api/deliveries`,
//! read one way for both: the same words are refused with the same 400, and a page and the
//! API given the same query list the same deliveries.

use serde::Deserialize;
use uuid::Uuid;

use super::WebError;
use crate::store::{DeliveryFilter, MAX_PAGE, Store, VerdictFilter};

/// A source name longer than this is no source's.
const MAX_SOURCE: usize = 64;

#[derive(Deserialize, Default)]
pub(super) struct DeliveriesQuery {
    source: Option<String>,
    verdict: Option<String>,
    /// The id of the last delivery of the previous page.
    before: Option<String>,
    limit: Option<i64>,
}

/// The query, checked: what the store is asked, and the words it was asked in.
pub(super) struct Filtered {
    pub filter: DeliveryFilter,
    pub limit: i64,
    pub verdict_text: Option<String>,
}

impl DeliveriesQuery {
    /// Checks every field (400 with the reason), and finds the delivery `before` names
    /// (404 if there is none). An empty field is no filter.
    pub(super) async fn check(
        self,
        store: &Store,
        default_limit: i64,
    ) -> Result<Filtered, WebError> {
        let nonempty = |v: Option<String>| v.filter(|v| !v.is_empty());
        let source = nonempty(self.source);
        if source.as_ref().is_some_and(|s| s.len() > MAX_SOURCE) {
            return Err(WebError::BadRequest(format!(
                "source is at most {MAX_SOURCE} characters"
            )));
        }
        let verdict_text = nonempty(self.verdict);
        let verdict = verdict_text
            .as_deref()
            .map(str::parse::<VerdictFilter>)
            .transpose()
            .map_err(|e| WebError::BadRequest(e.to_string()))?;
        let before = match nonempty(self.before) {
            None => None,
            Some(id) => {
                let id = Uuid::parse_str(&id)
                    .map_err(|_| WebError::BadRequest("before must be a delivery id".into()))?;
                let d = store
                    .delivery(id)
                    .await?
                    .ok_or_else(|| WebError::NotFound(format!("delivery {id}")))?;
                Some((d.received_at, d.id))
            }
        };
        Ok(Filtered {
            filter: DeliveryFilter {
                source,
                verdict,
                before,
            },
            limit: self.limit.unwrap_or(default_limit).clamp(1, MAX_PAGE),
            verdict_text,
        })
    }
}
