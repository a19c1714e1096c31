//! health and switch: the candidate proves itself, then becomes the serving generation.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::container::Candidate;
use super::image::VerifiedImage;
use super::records::{SwitchIntent, SwitchedTo};
use super::{PipelineError, Run, Step, StepError};
use crate::engine::Health;
use crate::registry::Resolved;
use crate::store::GenerationSwitch;

/// How the candidate is judged healthy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Probe {
    /// HTTP GET on the published port until a 2xx (whose JSON body has `json`'s fields,
    /// when some are required).
    Http {
        url: String,
        timeout_ms: u64,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        json: BTreeMap<String, String>,
    },
    /// The image's own HEALTHCHECK, as the engine reports it.
    Healthcheck { timeout_ms: u64 },
    /// Nothing to probe: running is all that can be checked.
    Running,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Healthy {
    pub probes: u32,
    pub elapsed_ms: u64,
    pub detail: String,
}

impl std::fmt::Display for Healthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} after {} probe(s), {} ms",
            self.detail, self.probes, self.elapsed_ms
        )
    }
}

/// Probe pacing: the first probe at once, then one every eighth of the time waited so far,
/// at least [`MIN_PROBE_DELAY`] and at most [`MAX_PROBE_DELAY`]. A quick app is seen within
/// a few milliseconds of answering (a doubling backoff from 25 ms could miss it by half the
/// time it took), and a slow one gets about eight probes per doubling of its start time.
pub const MIN_PROBE_DELAY: Duration = Duration::from_millis(5);
pub const MAX_PROBE_DELAY: Duration = Duration::from_secs(1);
/// An image HEALTHCHECK changes state only at its own interval: no point asking the engine
/// every few milliseconds.
const MIN_HEALTHCHECK_DELAY: Duration = Duration::from_millis(50);
/// A probe's deadline grows with the time waited, from [`FIRST_PROBE_TIMEOUT`] up to
/// [`PROBE_TIMEOUT`]: a SYN sent while the engine is still wiring the container's network
/// is dropped and retransmitted by the kernel only after 1 s, so early probes give up fast
/// and try again; a slow health endpoint is still answered once the deadline outgrows it.
const FIRST_PROBE_TIMEOUT: Duration = Duration::from_millis(100);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long to wait before the next probe, `elapsed` after the first one.
fn next_probe_delay(elapsed: Duration, floor: Duration) -> Duration {
    (elapsed / 8).clamp(floor, MAX_PROBE_DELAY)
}

/// The deadline of a probe sent `elapsed` after the first one.
fn probe_timeout(elapsed: Duration) -> Duration {
    elapsed.clamp(FIRST_PROBE_TIMEOUT, PROBE_TIMEOUT)
}

/// The client health probes use: no redirects followed (a 3xx is not healthy).
pub fn probe_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        // A SYN sent while the engine is still wiring the container's network is dropped
        // and retried by the kernel only after 1 s; a short connect timeout retries sooner.
        .connect_timeout(Duration::from_millis(250))
        .build()
        .expect("an HTTP client without TLS settings always builds")
}

impl Run<'_> {
    /// How to judge the candidate: over HTTP on `at` (a blue-green candidate's ephemeral
    /// port) or the app's fixed `publish` address.
    pub(super) fn probe(&self, at: Option<SocketAddr>) -> Probe {
        match (&self.app.health, at.or(self.app.publish)) {
            (Some(h), Some(addr)) => Probe::Http {
                url: format!("http://{addr}{}", h.path),
                timeout_ms: h.timeout.as_millis() as u64,
                json: h.json.clone(),
            },
            _ => Probe::Running,
        }
    }

    pub(super) async fn health(
        &self,
        candidate: &Candidate,
        image: &VerifiedImage,
        at: Option<SocketAddr>,
    ) -> Result<Healthy, PipelineError> {
        let mut probe = self.probe(at);
        if probe == Probe::Running && image.has_healthcheck {
            probe = Probe::Healthcheck {
                timeout_ms: 120_000,
            };
        }
        self.step(Step::Health, &probe, || {
            self.wait_healthy(&probe, &candidate.id)
        })
        .await
    }

    pub(super) async fn wait_healthy(&self, probe: &Probe, id: &str) -> Result<Healthy, StepError> {
        let started = Instant::now();
        let timeout = match probe {
            Probe::Http { timeout_ms, .. } | Probe::Healthcheck { timeout_ms } => {
                Duration::from_millis(*timeout_ms)
            }
            Probe::Running => Duration::from_secs(10),
        };
        let client = &self.ctx.http;
        let floor = match probe {
            Probe::Healthcheck { .. } => MIN_HEALTHCHECK_DELAY,
            _ => MIN_PROBE_DELAY,
        };
        let mut probes = 0u32;
        let mut last = String::from("no answer yet");
        loop {
            probes += 1;
            // The engine's view and the HTTP probe at the same time: one round trip, not two,
            // between the app answering and the step seeing it.
            let get = async {
                match probe {
                    Probe::Http { url, .. } => Some(
                        client
                            .get(url)
                            .timeout(probe_timeout(started.elapsed()))
                            .send()
                            .await,
                    ),
                    _ => None,
                }
            };
            let (state, answer) = tokio::join!(self.engine().inspect_container(id), get);
            let Some(state) = state? else {
                return Err(StepError::Check("candidate container disappeared".into()));
            };
            if !state.running || state.restarts > 0 {
                return Err(StepError::Check(format!(
                    "container exited (status {}, exit code {}) before becoming healthy",
                    state.status,
                    state.exit_code.map_or("unknown".into(), |c| c.to_string())
                )));
            }
            let done = match (probe, answer) {
                (Probe::Http { url, json, .. }, Some(answer)) => match answer {
                    Ok(r) if r.status().is_success() && !json.is_empty() => {
                        let status = r.status().as_u16();
                        match json_fields_match(r, json).await {
                            Ok(()) => Some(format!(
                                "GET {url} answered {status} with the required JSON fields"
                            )),
                            Err(why) => {
                                last = format!("GET {url} answered {status} but {why}");
                                None
                            }
                        }
                    }
                    Ok(r) if r.status().is_success() => {
                        Some(format!("GET {url} answered {}", r.status().as_u16()))
                    }
                    Ok(r) => {
                        last = format!("GET {url} answered {}", r.status().as_u16());
                        None
                    }
                    Err(e) => {
                        last = format!(
                            "GET {url}: {}",
                            if e.is_timeout() {
                                "timed out"
                            } else {
                                "no connection"
                            }
                        );
                        None
                    }
                },
                (Probe::Healthcheck { .. }, _) => match state.health {
                    Health::Healthy => Some("image HEALTHCHECK reports healthy".to_owned()),
                    Health::Unhealthy => {
                        return Err(StepError::Check(
                            "image HEALTHCHECK reports unhealthy".into(),
                        ));
                    }
                    _ => {
                        last = "image HEALTHCHECK still starting".into();
                        None
                    }
                },
                (Probe::Running, _) => Some("running (no health check configured)".to_owned()),
                (Probe::Http { .. }, None) => unreachable!("an HTTP probe always sends its GET"),
            };
            if let Some(detail) = done {
                return Ok(Healthy {
                    probes,
                    elapsed_ms: started.elapsed().as_millis() as u64,
                    detail,
                });
            }
            let delay = next_probe_delay(started.elapsed(), floor);
            if started.elapsed() + delay > timeout {
                return Err(StepError::Check(format!(
                    "not healthy within {}s: {last}",
                    timeout.as_secs_f32()
                )));
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// The app's serving generation changes in the same transaction that journals this
    /// step: the status page and the journal can never disagree about what serves.
    pub(super) async fn switch(
        &self,
        r: &Resolved,
        candidate: &Candidate,
    ) -> Result<(), PipelineError> {
        let intent = SwitchIntent {
            container: candidate.id.clone(),
            digest: r.digest.clone(),
            upstream: None,
        };
        let generation = GenerationSwitch {
            app: self.app.name.clone(),
            forget: false,
            target: self.target.name.clone(),
            generation: Some((self.dep.id, r.digest.clone(), candidate.id.clone())),
            route: None,
        };
        let _: SwitchedTo = self
            .switching_step(
                Step::Switch,
                &intent,
                |_| Some(generation.clone()),
                || async {
                    // Read before this step's transaction replaces it; a replay reads the
                    // same row, since the switch commits with the step's result.
                    let previous = match self.multi_target {
                        true => self
                            .ctx
                            .store
                            .generation(&self.app.name, &self.target.name)
                            .await?
                            .map(|g| super::records::GenerationRef {
                                deployment: g.deployment_id,
                                digest: g.digest,
                                container: g.container_id,
                            }),
                        false => None,
                    };
                    Ok(SwitchedTo {
                        container: candidate.id.clone(),
                        name: candidate.name.clone(),
                        previous,
                    })
                },
            )
            .await?;
        Ok(())
    }
}

/// The largest health body read for its JSON fields.
const MAX_HEALTH_BODY: usize = 64 << 10;

/// Every `path = value` of `want` holds in the body: `path` is dotted (`status`,
/// `components.db.status`); a string compares as is, any other JSON value by its text.
async fn json_fields_match(
    mut r: reqwest::Response,
    want: &BTreeMap<String, String>,
) -> Result<(), String> {
    let mut body = Vec::new();
    while let Some(chunk) = r
        .chunk()
        .await
        .map_err(|_| "the body broke off".to_owned())?
    {
        if body.len() + chunk.len() > MAX_HEALTH_BODY {
            return Err(format!("the body is over {MAX_HEALTH_BODY} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&body).map_err(|_| "the body is not JSON".to_owned())?;
    for (path, value) in want {
        let found = path.split('.').try_fold(&doc, |v, key| v.get(key));
        let text = match found {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => return Err(format!("the JSON has no `{path}`")),
        };
        if &text != value {
            // The app's own words are not echoed: only which field disagreed.
            return Err(format!("`{path}` is not \"{value}\""));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ready_app_is_seen_within_an_eighth_of_its_start_time() {
        // Wherever in the first ten seconds the app starts answering, the next probe comes
        // within max(5 ms, an eighth of the time waited): never half of it, as a doubling
        // backoff would allow.
        for ready_ms in [0u64, 3, 12, 40, 130, 700, 2_500, 9_000] {
            let ready = Duration::from_millis(ready_ms);
            let mut at = Duration::ZERO;
            let mut probes = 1;
            while at < ready {
                at += next_probe_delay(at, MIN_PROBE_DELAY);
                probes += 1;
            }
            let lag = at - ready;
            assert!(
                lag <= (ready / 8).max(MIN_PROBE_DELAY) + Duration::from_millis(1),
                "ready at {ready_ms} ms, seen at {at:?}"
            );
            assert!(probes < 80, "ready at {ready_ms} ms took {probes} probes");
        }
        assert_eq!(probe_timeout(Duration::ZERO), FIRST_PROBE_TIMEOUT);
        assert_eq!(probe_timeout(Duration::from_secs(60)), PROBE_TIMEOUT);
    }

    #[tokio::test]
    async fn a_json_health_body_must_have_every_required_field() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for body in [
                r#"{"status":"UP","db":{"ok":true}}"#,
                r#"{"status":"DOWN"}"#,
                "oops",
            ] {
                let (mut s, _) = listener.accept().await.unwrap();
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                s.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        let want = BTreeMap::from([
            ("status".to_owned(), "UP".to_owned()),
            ("db.ok".to_owned(), "true".to_owned()),
        ]);
        let client = probe_client();
        let get = || client.get(format!("http://{addr}/health")).send();
        assert_eq!(json_fields_match(get().await.unwrap(), &want).await, Ok(()));
        let e = json_fields_match(get().await.unwrap(), &want)
            .await
            .unwrap_err();
        assert!(e.contains("db.ok") || e.contains("status"), "{e}");
        let e = json_fields_match(get().await.unwrap(), &want)
            .await
            .unwrap_err();
        assert_eq!(e, "the body is not JSON");
    }
}
