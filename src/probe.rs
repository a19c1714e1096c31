//! The HTTP health probe, in one place for both places that run it: the pipeline, on this
//! machine's loopback (a local engine's containers), and `pier proxy --target NAME`, on its
//! own host's loopback (a remote engine's containers, which Pier cannot reach and must not
//! open to the network). One pacing and one judgement of an answer, so that "healthy"
//! means the same on every engine.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// Probe pacing: the first probe at once, then one every eighth of the time waited so far,
/// at least [`MIN_PROBE_DELAY`] and at most [`MAX_PROBE_DELAY`]. A quick app is seen within
/// a few milliseconds of answering (a doubling backoff from 25 ms could miss it by half the
/// time it took), and a slow one gets about eight probes per doubling of its start time.
pub(crate) const MIN_PROBE_DELAY: Duration = Duration::from_millis(5);
pub(crate) const MAX_PROBE_DELAY: Duration = Duration::from_secs(1);
/// A probe's deadline grows with the time waited, from [`FIRST_PROBE_TIMEOUT`] up to
/// [`PROBE_TIMEOUT`]: a SYN sent while the engine is still wiring the container's network
/// is dropped and retransmitted by the kernel only after 1 s, so early probes give up fast
/// and try again; a slow health endpoint is still answered once the deadline outgrows it.
const FIRST_PROBE_TIMEOUT: Duration = Duration::from_millis(100);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long to wait before the next probe, `elapsed` after the first one.
pub(crate) fn next_probe_delay(elapsed: Duration, floor: Duration) -> Duration {
    (elapsed / 8).clamp(floor, MAX_PROBE_DELAY)
}

/// The deadline of a probe sent `elapsed` after the first one.
pub(crate) fn probe_timeout(elapsed: Duration) -> Duration {
    elapsed.clamp(FIRST_PROBE_TIMEOUT, PROBE_TIMEOUT)
}

/// The client health probes use: no redirects followed (a 3xx is not healthy).
pub fn probe_client() -> reqwest::Client {
    crate::runtime::with_shared_tls(reqwest::Client::builder())
        .redirect(reqwest::redirect::Policy::none())
        // A SYN sent while the engine is still wiring the container's network is dropped
        // and retried by the kernel only after 1 s; a short connect timeout retries sooner.
        .connect_timeout(Duration::from_millis(250))
        .build()
        .expect("an HTTP client without TLS settings always builds")
}

/// What a run of probes saw: the number of probes, the time from the first, and the last
/// answer (why it is healthy, or why not yet).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Probed {
    pub probes: u32,
    pub elapsed_ms: u64,
    pub detail: String,
}

/// Why a run of probes ended without a healthy answer.
#[derive(Debug)]
pub(crate) enum NotHealthy<E> {
    /// No healthy answer within the timeout: `last` says what the last probe saw.
    TimedOut { probed: Probed, timeout: Duration },
    /// The check run beside every probe (the engine's view of the container) failed.
    Check(E),
}

impl<E> NotHealthy<E> {
    /// The words the journal and the page show for a timeout.
    pub(crate) fn timeout_reason(timeout: Duration, last: &str) -> String {
        format!("not healthy within {}s: {last}", timeout.as_secs_f32())
    }
}

/// GETs `url` until it answers healthy (a 2xx whose JSON has every field of `json`), at the
/// pacing above, within `timeout`. `beside` runs at the same time as every probe (one round
/// trip, not two, between the app answering and the caller seeing it); its error ends the
/// run at once.
pub(crate) async fn until_healthy<E, F, Fut>(
    client: &reqwest::Client,
    url: &str,
    json: &BTreeMap<String, String>,
    timeout: Duration,
    mut beside: F,
) -> Result<Probed, NotHealthy<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let started = Instant::now();
    let mut probes = 0u32;
    loop {
        probes += 1;
        let get = get_once(client, url, json, probe_timeout(started.elapsed()));
        let (check, answer) = tokio::join!(beside(), get);
        check.map_err(NotHealthy::Check)?;
        let probed = |detail| Probed {
            probes,
            elapsed_ms: started.elapsed().as_millis() as u64,
            detail,
        };
        let last = match answer {
            Ok(detail) => return Ok(probed(detail)),
            Err(seen) => seen.to_string(),
        };
        let delay = next_probe_delay(started.elapsed(), MIN_PROBE_DELAY);
        if started.elapsed() + delay > timeout {
            return Err(NotHealthy::TimedOut {
                probed: probed(last),
                timeout,
            });
        }
        tokio::time::sleep(delay).await;
    }
}

/// What a probe saw instead of a healthy answer. The app's own words are never echoed,
/// only its status and which required field disagreed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unhealthy {
    #[error("GET {url} answered {status}")]
    Status { url: String, status: u16 },
    /// A 2xx whose body lacks a required JSON field.
    #[error("GET {url} answered {status} but {why}")]
    Body {
        url: String,
        status: u16,
        #[source]
        why: BodyMismatch,
    },
    #[error("GET {url}: timed out")]
    TimedOut { url: String },
    #[error("GET {url}: no connection")]
    NoConnection { url: String },
}

/// How a 2xx health body fails the app's required JSON fields.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BodyMismatch {
    #[error("the body broke off")]
    BrokeOff,
    #[error("the body is over {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the body is not JSON")]
    NotJson,
    #[error("the JSON has no `{path}`")]
    Missing { path: String },
    /// Only the field and the value wanted: the app's own value is not echoed.
    #[error("`{path}` is not \"{want}\"")]
    Differs { path: String, want: String },
}

/// One probe: `Ok(why healthy)` or `Err(what it saw instead)`.
pub(crate) async fn get_once(
    client: &reqwest::Client,
    url: &str,
    json: &BTreeMap<String, String>,
    deadline: Duration,
) -> Result<String, Unhealthy> {
    let url = url.to_owned();
    match client.get(&url).timeout(deadline).send().await {
        Ok(r) if r.status().is_success() && !json.is_empty() => {
            let status = r.status().as_u16();
            match json_fields_match(r, json).await {
                Ok(()) => Ok(format!(
                    "GET {url} answered {status} with the required JSON fields"
                )),
                Err(why) => Err(Unhealthy::Body { url, status, why }),
            }
        }
        Ok(r) if r.status().is_success() => {
            Ok(format!("GET {url} answered {}", r.status().as_u16()))
        }
        Ok(r) => Err(Unhealthy::Status {
            url,
            status: r.status().as_u16(),
        }),
        Err(e) if e.is_timeout() => Err(Unhealthy::TimedOut { url }),
        Err(_) => Err(Unhealthy::NoConnection { url }),
    }
}

/// The largest health body read for its JSON fields.
const MAX_HEALTH_BODY: usize = 64 << 10;

/// Every `path = value` of `want` holds in the body: `path` is dotted (`status`,
/// `components.db.status`); a string compares as is, any other JSON value by its text.
async fn json_fields_match(
    mut r: reqwest::Response,
    want: &BTreeMap<String, String>,
) -> Result<(), BodyMismatch> {
    let mut body = Vec::new();
    while let Some(chunk) = r.chunk().await.map_err(|_| BodyMismatch::BrokeOff)? {
        if body.len() + chunk.len() > MAX_HEALTH_BODY {
            return Err(BodyMismatch::TooLarge {
                limit: MAX_HEALTH_BODY,
            });
        }
        body.extend_from_slice(&chunk);
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&body).map_err(|_| BodyMismatch::NotJson)?;
    for (path, value) in want {
        let found = path.split('.').try_fold(&doc, |v, key| v.get(key));
        let text = match found {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => return Err(BodyMismatch::Missing { path: path.clone() }),
        };
        if &text != value {
            return Err(BodyMismatch::Differs {
                path: path.clone(),
                want: value.clone(),
            });
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
        assert!(
            matches!(&e, BodyMismatch::Missing { path } if path == "db.ok")
                || matches!(&e, BodyMismatch::Differs { path, .. } if path == "status"),
            "{e}"
        );
        let e = json_fields_match(get().await.unwrap(), &want)
            .await
            .unwrap_err();
        assert_eq!(e, BodyMismatch::NotJson);
        assert_eq!(e.to_string(), "the body is not JSON");
    }

    #[tokio::test]
    async fn a_port_nobody_answers_times_out_with_what_the_last_probe_saw() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let url = format!("http://{addr}/health");
        let r = until_healthy::<(), _, _>(
            &probe_client(),
            &url,
            &BTreeMap::new(),
            Duration::from_millis(300),
            || async { Ok(()) },
        )
        .await;
        let Err(NotHealthy::TimedOut { probed, .. }) = r else {
            panic!("{r:?}")
        };
        assert!(probed.probes > 1, "{probed:?}");
        assert!(probed.detail.contains("no connection"), "{probed:?}");
    }
}
