//! A webhook recorder, to see what a real sender sends.

use super::*;

// ---------------------------------------------------------------------------------------------
// A webhook recorder (to see what a real sender sends)
// ---------------------------------------------------------------------------------------------

/// One request the recorder received.
#[derive(Debug, Clone)]
pub struct RecordedHook {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl RecordedHook {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("hook body is JSON")
    }
}

/// A tiny HTTP server on a loopback port that answers 200 to every POST and keeps what it got.
pub struct HookRecorder {
    pub addr: SocketAddr,
    rx: tokio::sync::mpsc::UnboundedReceiver<RecordedHook>,
    server: tokio::task::JoinHandle<()>,
}

impl HookRecorder {
    pub async fn start() -> HookRecorder {
        use axum::extract::{OriginalUri, State};
        use axum::http::HeaderMap;

        type Tx = tokio::sync::mpsc::UnboundedSender<RecordedHook>;
        async fn record(
            State(tx): State<Tx>,
            OriginalUri(uri): OriginalUri,
            headers: HeaderMap,
            body: axum::body::Bytes,
        ) -> &'static str {
            let headers = headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            let _ = tx.send(RecordedHook {
                path: uri.path().to_owned(),
                headers,
                body: body.to_vec(),
            });
            "ok"
        }

        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind recorder");
        let addr = listener.local_addr().expect("recorder addr");
        let app = axum::Router::new()
            .fallback(axum::routing::post(record))
            .with_state(tx);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        HookRecorder { addr, rx, server }
    }

    /// `http://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The next request, or `None` if none arrives within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<RecordedHook> {
        tokio::time::timeout(timeout, self.rx.recv())
            .await
            .ok()
            .flatten()
    }

    /// Collects requests until `done(all so far)` holds; panics after `timeout`.
    pub async fn collect_until(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(&[RecordedHook]) -> bool,
    ) -> Vec<RecordedHook> {
        let deadline = Instant::now() + timeout;
        let mut got = Vec::new();
        while !done(&got) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Some(h) => got.push(h),
                None => panic!(
                    "timed out after {timeout:?} collecting hooks; got {} so far: {:#?}",
                    got.len(),
                    got.iter()
                        .map(|h| String::from_utf8_lossy(&h.body).into_owned())
                        .collect::<Vec<_>>()
                ),
            }
        }
        got
    }
}

impl Drop for HookRecorder {
    fn drop(&mut self) {
        self.server.abort();
    }
}
