//! `[retention]`: how long deliveries and finished deployments' journal steps are kept.
//! Pruning runs in the sweep, a bounded number of rows at a time.

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetention {
    #[serde(default, with = "humantime_serde")]
    deliveries: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    steps: Option<Duration>,
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
