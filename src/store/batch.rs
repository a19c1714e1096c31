//! Group commit for deliveries. Every delivery that queues a deployment takes its app's
//! enqueue lock until its transaction commits, so deliveries for one app used to commit one
//! after another, each paying a WAL flush while the others waited (about 300 a second).
//! Here deliveries waiting at the same moment share one transaction: it locks every app
//! they touch once, up front and in key order (no deadlock between batches), records each
//! in arrival order (so the queue rules hold exactly as if they came one by one), and
//! commits once. The sender is still answered only after the commit that stored its
//! delivery.
//!
//! No task runs while nothing arrives: a drainer is spawned when work is pending and fewer
//! than [`MAX_DRAINERS`] run, and it ends when the queue is empty. A drainer runs in a task
//! of its own, so a caller that gives up (the client hung up) cannot cut a batch short.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::deliveries::{
    DeliveryOutcome, DeliveryRequest, one_statement_can_record, record_all, record_in,
};
use super::deployments::lock_apps;
use super::{Result, Store, StoreError};

/// Deliveries one transaction records at most: bounds how long a batch holds its locks.
const MAX_BATCH: usize = 64;
/// Batches in flight at once (each holds one pooled connection while it runs).
const MAX_DRAINERS: usize = 4;

type Reply = oneshot::Sender<Result<DeliveryOutcome>>;

#[derive(Default)]
pub(super) struct Batcher {
    state: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    queue: VecDeque<(DeliveryRequest, Reply)>,
    drainers: usize,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Batcher")
    }
}

impl Batcher {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Queues a request; `true` when the caller must spawn a drainer for it.
    fn push(&self, req: DeliveryRequest, reply: Reply) -> bool {
        let mut p = self.state.lock().unwrap_or_else(|e| e.into_inner());
        p.queue.push_back((req, reply));
        if p.drainers < MAX_DRAINERS {
            p.drainers += 1;
            true
        } else {
            false
        }
    }

    /// The next batch, or none (and this drainer is done) when nothing waits.
    fn take(&self) -> Vec<(DeliveryRequest, Reply)> {
        let mut p = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let n = p.queue.len().min(MAX_BATCH);
        if n == 0 {
            p.drainers -= 1;
        }
        p.queue.drain(..n).collect()
    }
}

impl Store {
    /// Records a delivery in the next group commit and waits for that commit.
    pub(super) async fn record_batched(&self, req: DeliveryRequest) -> Result<DeliveryOutcome> {
        let (reply, answer) = oneshot::channel();
        if self.batch.push(req, reply) {
            let store = self.clone();
            tokio::spawn(async move { store.drain().await });
        }
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Query(sqlx::Error::Protocol(
                "the delivery batch ended without an answer".into(),
            )))
        })
    }

    async fn drain(&self) {
        // A panic mid-batch must still give the drainer's slot back, or after a few the
        // queue would stall for good.
        struct Slot<'a>(&'a Batcher);
        impl Drop for Slot<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    let mut p = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
                    p.drainers -= 1;
                }
            }
        }
        let _slot = Slot(&self.batch);
        loop {
            let jobs = self.batch.take();
            if jobs.is_empty() {
                return;
            }
            self.record_batch(jobs).await;
        }
    }

    /// One transaction for the whole batch. If it fails for a reason other than the
    /// database being down (a deadlock with another process, one bad row), each delivery
    /// is tried again alone, so one request's failure is never another's.
    async fn record_batch(&self, jobs: Vec<(DeliveryRequest, Reply)>) {
        let reqs: Vec<&DeliveryRequest> = jobs.iter().map(|(r, _)| r).collect();
        match self.record_together(&reqs).await {
            Ok(outcomes) => {
                for ((_, reply), outcome) in jobs.into_iter().zip(outcomes) {
                    let _ = reply.send(Ok(outcome));
                }
            }
            Err(e) if e.is_unavailable() || jobs.len() == 1 => {
                let shared = e.to_string();
                let mut first = Some(e);
                for (_, reply) in jobs {
                    let e = first.take().unwrap_or_else(|| {
                        StoreError::Unavailable(sqlx::Error::Protocol(shared.clone()))
                    });
                    let _ = reply.send(Err(e));
                }
            }
            Err(_) => {
                for (req, reply) in jobs {
                    let _ =
                        reply.send(self.record_together(&[&req]).await.map(|mut o| {
                            o.pop().expect("one outcome for one request, or an error")
                        }));
                }
            }
        }
    }

    async fn record_together(&self, reqs: &[&DeliveryRequest]) -> Result<Vec<DeliveryOutcome>> {
        // One statement, one round trip, one commit for the batch (migration 0015); a
        // batch with a version guard takes the transaction below, with the same rules.
        if reqs.iter().all(|r| one_statement_can_record(r)) {
            return record_all(&self.pool, reqs).await;
        }
        let mut tx = self.begin().await?;
        let apps: Vec<&str> = reqs.iter().flat_map(|r| r.apps()).collect();
        lock_apps(&mut tx, &apps).await?;
        let mut outcomes = Vec::with_capacity(reqs.len());
        for req in reqs {
            outcomes.push(record_in(&mut tx, req).await?);
        }
        tx.commit().await?;
        Ok(outcomes)
    }
}
