//! Group commit for deliveries. Every delivery that queues a deployment takes its app's
//! enqueue lock until its transaction commits, so deliveries for one app used to commit one
//! after another, each paying a WAL flush while the others waited (about 300 a second).
//! Here deliveries waiting at the same moment share one transaction: it locks every app
//! they touch once, up front and in key order (no deadlock between batches), records each
//! in arrival order (so the queue rules hold exactly as if they came one by one), and
//! commits once. The sender is still answered only after the commit that stored its
//! delivery. Deliveries for an app that a batch in flight holds wait for it and go
//! together in the next batch (`queue.rs`), so one app's pushes keep their order and share
//! commits instead of queuing one batch after another on the app's lock.
//!
//! No task runs while nothing arrives: a caller that finds work pending and fewer than
//! [`MAX_DRAINERS`] draining drains it itself, in its own task, until its own delivery is
//! answered: one delivery at a time is then stored with no hand-over to another task and
//! back. What it leaves unfinished (the client hung up mid-batch, or it was answered while
//! later batches wait) finishes in a task of its own ([`FinishOnDrop`]), so no caller can
//! cut a batch short, and a drainer ends when the queue is empty.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use super::deliveries::{
    DeliveryOutcome, DeliveryRequest, has_guard, newer_per_wanted, record_all,
};
use super::deployments::lock_apps;
use super::lanes::Lanes;
use super::{Result, Store, StoreError};
use queue::Pending;

mod plain;
mod queue;
mod reply;

/// Deliveries one transaction records at most: bounds how long a batch holds its locks.
const MAX_BATCH: usize = 64;
/// Batches in flight at once (each holds one connection while it runs).
const MAX_DRAINERS: usize = 4;
/// How long a sender waits for the commit that stores its delivery, queueing behind other
/// batches included. Past it the sender is answered 503 and retries: shorter than the
/// registries' own timeouts (Harbor's is 3 s per try and it retries; others give 5 s or
/// more), so that a commit that cannot finish (a synchronous standby missing) is a quick
/// 503 and not the sender giving up on a hung request. If the delivery was stored after
/// all, its retry is counted as a repeat: nothing is deployed twice.
pub(crate) const DELIVERY_DEADLINE: Duration = Duration::from_secs(4);
/// Deadline for the statement that records a batch (and the one for its repeats): no
/// sender of the batch waits longer, so neither does its lane.
const STATEMENT_DEADLINE: Duration = DELIVERY_DEADLINE;

type Reply = reply::Reply<Result<DeliveryOutcome>>;
type Own = reply::Own<Result<DeliveryOutcome>>;
type Job = (DeliveryRequest, Reply);

pub(super) struct Batcher {
    state: Mutex<Pending<Job>>,
    lanes: Lanes,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Batcher")
    }
}

impl Batcher {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(Pending::new(MAX_DRAINERS, MAX_BATCH)),
            lanes: Lanes::new(MAX_DRAINERS),
        })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending<Job>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Store {
    /// Records a delivery in the next group commit and waits for that commit.
    pub(super) async fn record_batched(&self, req: DeliveryRequest) -> Result<DeliveryOutcome> {
        let (reply, mut answer) = reply::channel();
        let apps = req.apps().map(str::to_owned).collect();
        let drains = self.batch.pending().push(apps, (req, reply));
        let answered = async {
            if drains {
                let (store, own) = (self.clone(), answer.own());
                let mut drain = FinishOnDrop::new(async move { store.drain(&own).await });
                std::future::poll_fn(|cx| {
                    // Registered first: another drainer may take this delivery and wake us.
                    if let Poll::Ready(out) = Pin::new(&mut answer).poll(cx) {
                        return Poll::Ready(out);
                    }
                    // Done or waiting on Postgres (which wakes us), the drain has had its turn.
                    let _: Poll<()> = Pin::new(&mut drain).poll(cx);
                    // Our own drain answers without waking us (reply.rs): look now. Nothing
                    // yet means our drain waits on Postgres, or our delivery is another
                    // drainer's, which wakes us.
                    answer.ready().map_or(Poll::Pending, Poll::Ready)
                })
                .await
            } else {
                answer.await
            }
        };
        // A drain this caller started goes on in a task of its own (FinishOnDrop).
        let Ok(answered) = tokio::time::timeout(DELIVERY_DEADLINE, answered).await else {
            return Err(no_commit_in_time());
        };
        answered.unwrap_or_else(|| {
            Err(StoreError::Query(sqlx::Error::Protocol(
                "the delivery batch ended without an answer".into(),
            )))
        })
    }

    async fn drain(&self, own: &Own) {
        // A drainer that panics mid-batch must still give back its slot and its apps, or
        // deliveries for those apps would wait for good.
        struct Slot<'a> {
            batch: &'a Batcher,
            held: Vec<String>,
        }
        impl Drop for Slot<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.batch.pending().abandon(&self.held);
                }
            }
        }
        let mut slot = Slot {
            batch: &self.batch,
            held: Vec::new(),
        };
        loop {
            let taken = self.batch.pending().take(&slot.held);
            slot.held = taken.apps;
            if taken.items.is_empty() {
                return;
            }
            self.record_batch(taken.items, own).await;
        }
    }

    /// One transaction for the whole batch. If it fails for a reason other than the
    /// database being down (a deadlock with another process, one bad row), each delivery
    /// is tried again alone, so one request's failure is never another's.
    async fn record_batch(&self, jobs: Vec<(DeliveryRequest, Reply)>, own: &Own) {
        let reqs: Vec<&DeliveryRequest> = jobs.iter().map(|(r, _)| r).collect();
        match self.record_together(&reqs).await {
            Ok(outcomes) => {
                for ((_, reply), outcome) in jobs.into_iter().zip(outcomes) {
                    reply.send(Ok(outcome), own);
                }
            }
            Err(e) if e.is_unavailable() || jobs.len() == 1 => {
                let shared = e.to_string();
                let mut first = Some(e);
                for (_, reply) in jobs {
                    let e = first.take().unwrap_or_else(|| {
                        StoreError::Unavailable(sqlx::Error::Protocol(shared.clone()))
                    });
                    reply.send(Err(e), own);
                }
            }
            Err(_) => {
                for (req, reply) in jobs {
                    let out = self
                        .record_together(&[&req])
                        .await
                        .map(|mut o| o.pop().expect("one outcome for one request, or an error"));
                    reply.send(out, own);
                }
            }
        }
    }

    async fn record_together(&self, reqs: &[&DeliveryRequest]) -> Result<Vec<DeliveryOutcome>> {
        // One statement, one round trip, one commit for the batch (migration 0028).
        if !reqs.iter().any(|r| has_guard(r)) {
            let lanes = &self.batch.lanes;
            let mut lane = self.noticed(lanes.take(&self.cluster).await)?;
            let recorded = async {
                if plain::queues_nothing(reqs) {
                    plain::record_plain(&mut lane.conn, reqs).await
                } else {
                    record_all(&mut lane.conn, reqs, &[]).await
                }
            };
            let res = match tokio::time::timeout(STATEMENT_DEADLINE, recorded).await {
                Ok(Ok(outcomes)) => {
                    lanes.give_back(lane);
                    Ok(outcomes)
                }
                // A lane that failed is closed (dropped here), whatever the reason.
                Ok(Err(e)) => Err(e),
                Err(_) => Err(no_commit_in_time()),
            };
            return self.noticed(res);
        }
        // A version guard reads the versions in play under the apps' locks, so the batch
        // takes them in a transaction and records its deliveries one statement each: each
        // delivery's guard sees what the ones before it queued.
        let mut tx = self.begin().await?;
        let apps: Vec<&str> = reqs.iter().flat_map(|r| r.apps()).collect();
        lock_apps(&mut tx, &apps).await?;
        let mut outcomes = Vec::with_capacity(reqs.len());
        for req in reqs {
            let newer = newer_per_wanted(&mut tx, req).await?;
            outcomes.extend(record_all(&mut tx, &[req], &[newer]).await?);
        }
        tx.commit().await?;
        Ok(outcomes)
    }
}

fn no_commit_in_time() -> StoreError {
    StoreError::Unavailable(sqlx::Error::Protocol(format!(
        "the delivery did not commit within {}s",
        DELIVERY_DEADLINE.as_secs()
    )))
}

/// A future that, dropped before it finished, finishes in a task of its own: a drainer
/// runs in its caller's task, and the caller going away must not cut its batch short.
struct FinishOnDrop {
    fut: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl FinishOnDrop {
    fn new(fut: impl Future<Output = ()> + Send + 'static) -> Self {
        Self {
            fut: Some(Box::pin(fut)),
        }
    }
}

impl Future for FinishOnDrop {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(fut) = self.fut.as_mut() {
            std::task::ready!(fut.as_mut().poll(cx));
            self.fut = None;
        }
        Poll::Ready(())
    }
}

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        if let Some(fut) = self.fut.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(fut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drainer_dropped_before_it_finished_finishes_in_a_task_of_its_own() {
        let (done, finished) = tokio::sync::oneshot::channel();
        let gate = Arc::new(tokio::sync::Notify::new());
        let opened = gate.clone();
        let mut drain = FinishOnDrop::new(async move {
            opened.notified().await;
            let _ = done.send(());
        });
        // It starts in its caller, which then goes away (a client hanging up).
        let polled = futures_util::poll!(&mut drain);
        assert!(polled.is_pending());
        drop(drain);
        gate.notify_one();
        tokio::time::timeout(Duration::from_secs(5), finished)
            .await
            .expect("the rest ran within 5 s")
            .expect("the drainer ran to its end, not dropped halfway");
    }

    #[tokio::test]
    async fn a_finished_drainer_is_not_run_again() {
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = runs.clone();
        let mut drain = FinishOnDrop::new(async move {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        (&mut drain).await;
        drop(drain);
        tokio::task::yield_now().await;
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
