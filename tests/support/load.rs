//! A load client for zero-downtime tests: GETs one URL back to back, on loopback, bounded
//! in count and time, and records every answer (or error) in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

#[derive(Debug, Clone)]
pub enum Answer {
    Ok { status: u16, body: String },
    Failed(String),
}

pub struct Load {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Answer>>,
}

impl Load {
    /// At most `max` requests or `limit` of time, whichever comes first.
    pub fn start(url: &str, max: usize, limit: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let url = url.to_owned();
        let task = tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client");
            let deadline = Instant::now() + limit;
            let mut answers = Vec::new();
            while !flag.load(Ordering::SeqCst) && answers.len() < max && Instant::now() < deadline {
                let a = match client.get(&url).send().await {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        match r.text().await {
                            Ok(body) => Answer::Ok { status, body },
                            Err(e) => Answer::Failed(format!("body: {e}")),
                        }
                    }
                    Err(e) => Answer::Failed(chain(&e)),
                };
                answers.push(a);
            }
            answers
        });
        Load { stop, task }
    }

    pub async fn finish(self) -> Vec<Answer> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("load task")
    }
}

/// An error with its causes (reqwest's own text leaves out whether it was a timeout, a
/// refused connection or a reset).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The answers that were not a 200: failed requests and errors, with their positions.
pub fn failures(answers: &[Answer]) -> Vec<(usize, Answer)> {
    answers
        .iter()
        .enumerate()
        .filter(|(_, a)| !matches!(a, Answer::Ok { status: 200, .. }))
        .map(|(i, a)| (i, a.clone()))
        .collect()
}
