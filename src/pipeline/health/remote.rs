//! `health` on a remote engine: the candidate publishes on that host's loopback, which
//! only the `pier proxy --target` running there reaches. The step asks that proxy through
//! Postgres (`remote_probes`, migration 0023) and waits for its answer with LISTEN, within
//! deadlines; the proxy probes with the same pacing and judgement as a local probe
//! (`crate::probe`).
//!
//! Crash safety: the step's intent (the probe, naming the target) is journaled before the
//! request is written. A replay finds the newest request for (deployment, target, service,
//! container): a recorded outcome is read back (a healthy one only while the container
//! still runs), a pending one is waited on, and a lapsed one is asked again. Nothing is
//! ever taken as healthy without a proxy having seen a healthy answer.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;

use super::Healthy;
use crate::pipeline::refusal::Refusal;
use crate::pipeline::{EngineRun, StepError};
use crate::store::{Channel, NewProbe, ProbeRequest, ProbeState, StoreError};

/// How long a target's proxy has to take a request: a proxy that is up and connected takes
/// it within milliseconds of the NOTIFY; one that is reconnecting reads its requests again
/// once it is back (its backoff is at most 5 s).
const TAKE_WITHIN: Duration = Duration::from_secs(10);
/// Beyond the probe's own timeout, how long the proxy that took it may take to write its
/// outcome (it retries while the database is away).
const OUTCOME_GRACE: Duration = Duration::from_secs(10);
/// How often the engine is asked whether the candidate still runs while the proxy probes:
/// the proxy sees only its HTTP answers, and a container that exited is not waited on.
const ENGINE_CHECK_EVERY: Duration = Duration::from_secs(1);

fn store_err(e: sqlx::Error) -> StepError {
    StepError::Store(StoreError::from(e))
}

/// `http://ADDRESS/PATH` split where the pipeline built it (`EngineRun::http_probe`).
fn address_and_path(url: &str) -> Result<(&str, &str), StepError> {
    url.strip_prefix("http://")
        .and_then(|rest| rest.find('/').map(|i| rest.split_at(i)))
        .ok_or_else(|| {
            Refusal::ProbeUrl {
                url: url.to_owned(),
            }
            .into()
        })
}

impl EngineRun<'_> {
    /// Asks `target`'s proxy to probe `url` on its host and waits for its outcome; a
    /// replay reads back the outcome of the request asked before (see the module docs).
    pub(in crate::pipeline) async fn remote_healthy(
        &self,
        target: &str,
        id: &str,
        url: &str,
        json: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<Healthy, StepError> {
        self.remote_probe(target, id, url, json, timeout, true)
            .await
    }

    /// One check with a request of its own (a soak's: an earlier outcome says nothing of
    /// now).
    pub(in crate::pipeline) async fn remote_check(
        &self,
        target: &str,
        id: &str,
        url: &str,
        json: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<Healthy, StepError> {
        self.remote_probe(target, id, url, json, timeout, false)
            .await
    }

    async fn remote_probe(
        &self,
        target: &str,
        id: &str,
        url: &str,
        json: &BTreeMap<String, String>,
        timeout: Duration,
        read_back: bool,
    ) -> Result<Healthy, StepError> {
        let (address, path) = address_and_path(url)?;
        self.still_running(id).await?;
        let store = &self.ctx.store;
        // Listening before anything is read or asked: an outcome written in between
        // still wakes this wait.
        let mut listener = store
            .own_listener(Channel::ProbeResults)
            .await
            .map_err(store_err)?;
        let new = NewProbe {
            deployment: self.dep.id,
            target,
            service: self.service.key(),
            container: id,
            address,
            path,
            json,
            timeout,
            take_within: TAKE_WITHIN,
        };
        let request = self.probe_request_for(&new, read_back).await?;
        let mut engine_check = tokio::time::interval(ENGINE_CHECK_EVERY);
        engine_check.reset();
        loop {
            let r = store
                .probe_request(request.id)
                .await?
                .ok_or(Refusal::ProbeRequestGone)?;
            let wait = match self.probe_settled(target, id, &r).await? {
                Some(healthy) => return Ok(healthy),
                None => self.left_to_wait(target, &r).await?,
            };
            let Some(wait) = wait else { continue };
            // Until the request changes, its deadline passes, or the container stops.
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                tokio::select! {
                    msg = listener.try_recv() => match msg {
                        Ok(Some(n)) if n.payload() == request.id.to_string() => break,
                        Ok(Some(_)) => {}
                        // The connection went: a new listener, and the row read again
                        // for whatever was missed.
                        Ok(None) => {
                            listener = store.own_listener(Channel::ProbeResults).await.map_err(store_err)?;
                            break;
                        }
                        Err(e) => return Err(store_err(e)),
                    },
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = engine_check.tick() => { self.still_running(id).await?; }
                }
            }
        }
    }

    /// The request to wait on: with `read_back`, the one asked before (a replay), unless it
    /// lapsed or its time to be taken passed while nobody took it (it is lapsed now);
    /// otherwise a new one.
    async fn probe_request_for(
        &self,
        new: &NewProbe<'_>,
        read_back: bool,
    ) -> Result<ProbeRequest, StepError> {
        let store = &self.ctx.store;
        let found = match read_back {
            true => {
                store
                    .latest_probe(self.dep.id, new.target, self.service.key(), new.container)
                    .await?
            }
            false => None,
        };
        if let Some(r) = found {
            let untaken = r.state() == ProbeState::Requested && r.take_by <= Utc::now();
            let live = match r.state() {
                ProbeState::Lapsed => false,
                _ if untaken => !store.lapse_probe(r.id).await?,
                _ => true,
            };
            if live {
                tracing::info!(request = %r.id, state = ?r.state(), "health: the probe request asked before is read back");
                return Ok(r);
            }
        }
        let asked = store.request_probe(self.owner, new).await?;
        // A crash here leaves a request whose outcome the replay reads back.
        crate::faults::crash_point(crate::store::Step::Health.as_str(), "requested");
        Ok(asked)
    }

    /// A request's outcome, if it has one: `Ok(Some)` healthy, `Err` failed or lapsed.
    async fn probe_settled(
        &self,
        target: &str,
        id: &str,
        r: &ProbeRequest,
    ) -> Result<Option<Healthy>, StepError> {
        let by = r.taken_by.clone().unwrap_or_else(|| "a pier proxy".into());
        match r.state() {
            ProbeState::Healthy => {
                // Recorded healthy, maybe before a crash: only while it still runs.
                self.still_running(id).await?;
                Ok(Some(Healthy {
                    probes: r.attempts.unwrap_or(0).max(0) as u32,
                    elapsed_ms: r.elapsed_ms.unwrap_or(0).max(0) as u64,
                    detail: format!(
                        "{} (probed by {by})",
                        r.detail.as_deref().unwrap_or("healthy")
                    ),
                }))
            }
            ProbeState::Failed => Err(Refusal::ProbeFailed {
                detail: r.detail.as_deref().unwrap_or("the probe failed").to_owned(),
                by,
            }
            .into()),
            ProbeState::Lapsed => Err(no_proxy(target)),
            ProbeState::Requested | ProbeState::Probing => Ok(None),
        }
    }

    /// How long to wait for the request's next change; `None` to read it again at once
    /// (a proxy took it just as it lapsed). Past its deadline, the step fails.
    async fn left_to_wait(
        &self,
        target: &str,
        r: &ProbeRequest,
    ) -> Result<Option<Duration>, StepError> {
        let timeout = r.timeout();
        let (until, taken) = match (r.state(), r.taken_at) {
            (ProbeState::Probing, Some(at)) => (at + timeout + OUTCOME_GRACE, true),
            _ => (r.take_by, false),
        };
        if let Ok(left) = (until - Utc::now()).to_std()
            && !left.is_zero()
        {
            return Ok(Some(left));
        }
        if taken {
            return Err(Refusal::ProbeNoOutcome {
                by: r.taken_by.as_deref().unwrap_or("a pier proxy").to_owned(),
                secs: (timeout + OUTCOME_GRACE).as_secs(),
            }
            .into());
        }
        if self.ctx.store.lapse_probe(r.id).await? {
            return Err(no_proxy(target));
        }
        Ok(None)
    }
}

fn no_proxy(target: &str) -> StepError {
    Refusal::ProbeNotTaken {
        target: target.to_owned(),
        secs: TAKE_WITHIN.as_secs(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_url_splits_into_the_address_on_that_host_and_the_path() {
        assert_eq!(
            address_and_path("http://127.0.0.1:8080/health?x=1").unwrap(),
            ("127.0.0.1:8080", "/health?x=1")
        );
        assert!(address_and_path("http://127.0.0.1:8080").is_err());
        assert!(address_and_path("https://a/b").is_err());
    }
}
