//! Where samples come from: [`Source`] is one round over every engine, and
//! [`EngineSource`] the real one. A round asks each target's engine, all engines at
//! once: one list of Pier's containers, then for each running one a one-shot stats call
//! and an inspect (at most [`PER_ENGINE`] containers at a time), and one read of the
//! engine's OOM events since that engine's last round. Every call has a probe's deadline
//! (see `engine/stats.rs`), so a round lasts a few seconds at worst, however many
//! engines hang.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;

use super::{Sample, Who};
use crate::config::{Config, LiveConfig};
use crate::engine::{
    ContainerFacts, EngineError, LABEL_APP, LABEL_DEPLOYMENT, LABEL_SERVICE, OomKill, Runs,
};
use crate::store::{NewContainerEvent, Store};
use crate::target::{Target, Targets};

/// Containers of one engine sampled at once, at most.
const PER_ENGINE: usize = 4;

/// What a round asks: the OOM events of each engine since its last round (`fallback`
/// for an engine not asked before) until `until`.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub since: HashMap<String, DateTime<Utc>>,
    pub fallback: DateTime<Utc>,
    pub until: DateTime<Utc>,
}

impl Span {
    pub(crate) fn since(&self, target: &str) -> DateTime<Utc> {
        self.since.get(target).copied().unwrap_or(self.fallback)
    }
}

/// What one engine answered in a round.
#[derive(Debug)]
pub(crate) struct TargetRound {
    pub target: String,
    /// Its containers, or why they could not be listed (then nothing else was asked).
    pub listed: Result<Listed, EngineError>,
}

#[derive(Debug, Default)]
pub(crate) struct Listed {
    /// Every container of Pier's the engine listed, sampled or not.
    pub ids: Vec<String>,
    pub seen: Vec<(Who, Sample, Runs)>,
    /// `None` when the events could not be read (they are asked again next round).
    pub ooms: Option<Vec<OomKill>>,
    /// The calls that failed, each once.
    pub errors: Vec<EngineError>,
}

/// One round over every engine, and where what it found is recorded.
pub(crate) trait Source: Send + Sync + 'static {
    fn round(&self, span: &Span) -> impl Future<Output = Vec<TargetRound>> + Send;
    /// Records `event` (and its notifications); `false` when it could not be recorded now
    /// and should be offered again next round.
    fn record(&self, event: &NewContainerEvent) -> impl Future<Output = bool> + Send;
}

/// The real engines, the store the events go to, and the config (as reloaded) that says
/// which apps are Pier's here: containers of other apps on a shared engine (another
/// installation's, or an app removed from the config) are listed but never sampled.
pub(crate) struct EngineSource {
    pub targets: Targets,
    pub store: Store,
    pub live: LiveConfig,
}

impl Source for EngineSource {
    async fn round(&self, span: &Span) -> Vec<TargetRound> {
        let config = self.live.load();
        let config = &*config;
        let rounds = self.targets.iter().map(|t| async move {
            let started = std::time::Instant::now();
            let listed = sample_target(t, span, config).await;
            metrics::histogram!("pier_stats_round_seconds", "target" => t.name.clone())
                .record(started.elapsed().as_secs_f64());
            TargetRound {
                target: t.name.clone(),
                listed,
            }
        });
        futures_util::future::join_all(rounds).await
    }

    async fn record(&self, event: &NewContainerEvent) -> bool {
        match self.store.record_container_event(event).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %crate::error::error_chain(&e), kind = %event.kind,
                    deployment = %event.deployment_id, "cannot record a container event; offered again next round");
                false
            }
        }
    }
}

/// Who a container is, from the labels Pier gave it.
pub(crate) fn who(target: &str, id: &str, name: &str, labels: &HashMap<String, String>) -> Who {
    let app = labels.get(LABEL_APP).cloned().unwrap_or_default();
    Who {
        target: target.to_owned(),
        service: labels
            .get(LABEL_SERVICE)
            .cloned()
            .unwrap_or_else(|| app.clone()),
        app,
        container_id: id.to_owned(),
        container_name: name.trim_start_matches('/').to_owned(),
        deployment: labels.get(LABEL_DEPLOYMENT).cloned(),
    }
}

/// Whether a listed container has counters worth asking for: running, or between two runs
/// of a restart loop.
fn live(c: &ContainerFacts) -> bool {
    c.running || c.status.starts_with("Restarting")
}

/// One engine's round, of the containers of `config`'s apps.
async fn sample_target(t: &Target, span: &Span, config: &Config) -> Result<Listed, EngineError> {
    let ours = |app: Option<&str>| app.is_some_and(|a| config.app(a).is_some());
    let mut listed = t.engine.managed_containers(None, None).await?;
    listed.retain(|c| ours(c.label(LABEL_APP)));
    let mut out = Listed {
        ids: listed.iter().map(|c| c.id.clone()).collect(),
        ..Listed::default()
    };
    // The calls made up front, with no closure over a borrowed container: a stream
    // adapter's closure there would make the round's future lose `Send`.
    let mut calls = Vec::new();
    for c in &listed {
        if live(c) {
            calls.push(sample_one(t, c));
        }
    }
    let sampled: Vec<_> = futures_util::stream::iter(calls)
        .buffer_unordered(PER_ENGINE)
        .collect()
        .await;
    for s in sampled {
        match s {
            Ok(Some(seen)) => out.seen.push(seen),
            // Gone between the list and the call: nothing to sample.
            Ok(None) => {}
            Err(e) => out.errors.push(e),
        }
    }
    match t.engine.oom_kills(span.since(&t.name), span.until).await {
        Ok(mut ooms) => {
            ooms.retain(|o| ours(o.labels.get(LABEL_APP).map(String::as_str)));
            out.ooms = Some(ooms);
        }
        Err(e) => out.errors.push(e),
    }
    // The list, the events, and a stats call and an inspect per container (those that
    // failed counted as one).
    let calls = 2 + 2 * out.seen.len() + out.errors.len();
    metrics::counter!("pier_stats_engine_calls_total", "target" => t.name.clone())
        .increment(calls as u64);
    metrics::counter!("pier_stats_rounds_total", "target" => t.name.clone()).increment(1);
    Ok(out)
}

async fn sample_one(
    t: &Target,
    c: &ContainerFacts,
) -> Result<Option<(Who, Sample, Runs)>, EngineError> {
    let Some(usage) = t.engine.usage(&c.id).await? else {
        return Ok(None);
    };
    let Some(runs) = t.engine.runs(&c.id).await? else {
        return Ok(None);
    };
    let sample = Sample {
        at: Utc::now(),
        usage,
        restarts: runs.restarts,
    };
    Ok(Some((
        who(&t.name, &c.id, &c.name, &c.labels),
        sample,
        runs,
    )))
}
