//! `[retention]`: how long deliveries and finished deployments' journal steps are kept.
//! Pruning runs in the sweep, a bounded number of rows at a time.

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

/// How long history is kept. Pruning rides on the sweep (`server.sweep_interval`), a
/// bounded number of rows each time; with no policy it sends nothing.
#[derive(schemars::JsonSchema, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetention {
    /// Deliveries received longer ago than this are deleted (at least `1m`). The
    /// deployments they queued stay, without the link; a sender's retry older than this is
    /// no longer recognised as a duplicate.
    ///
    /// Default: kept forever.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    deliveries: Option<Duration>,
    /// Deployments finished longer ago than this lose their journal steps (at least `1m`).
    /// The deployment row stays as the summary (outcome, error, times), and so do the
    /// serving generation's whole journal and every `create` step, by which Pier recognises
    /// the containers it made.
    ///
    /// Default: kept forever.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<super::doc_types::DurationText>")]
    steps: Option<Duration>,
    /// Rows each policy deletes at most per sweep, at most 100000.
    ///
    /// Default: `1000`.
    per_sweep: Option<i64>,
}

/// Rows each policy deletes at most per sweep, unless configured.
pub(crate) const DEFAULT_PER_SWEEP: i64 = 1000;
const MAX_PER_SWEEP: i64 = 100_000;

#[derive(Debug, Clone, Default)]
pub struct RetentionConfig {
    /// Deliveries older than this are deleted; `None`: kept forever.
    pub deliveries: Option<Duration>,
    /// Finished deployments older than this lose their journal steps (the deployment row
    /// and its `create` step stay); `None`: kept forever.
    pub steps: Option<Duration>,
    /// Deliveries, and deployments' journals, deleted at most per sweep and policy.
    pub per_sweep: i64,
}

impl RawRetention {
    pub(super) fn resolve(self) -> Result<RetentionConfig, ConfigError> {
        let invalid = |m: String| ConfigError::Invalid(m);
        for (name, age) in [("deliveries", self.deliveries), ("steps", self.steps)] {
            if age.is_some_and(|a| a < Duration::from_secs(60)) {
                return Err(invalid(format!(
                    "retention.{name} must be at least 1m (e.g. \"30d\")"
                )));
            }
        }
        let per_sweep = self.per_sweep.unwrap_or(DEFAULT_PER_SWEEP);
        if !(1..=MAX_PER_SWEEP).contains(&per_sweep) {
            return Err(invalid(format!(
                "retention.per_sweep must be between 1 and {MAX_PER_SWEEP}"
            )));
        }
        Ok(RetentionConfig {
            deliveries: self.deliveries,
            steps: self.steps,
            per_sweep,
        })
    }
}
