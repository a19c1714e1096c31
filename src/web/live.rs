//! Live pages: server-sent events fed by Postgres LISTEN/NOTIFY (`pier_live`, announced by
//! triggers on `deployments` and `deployment_steps`), so the work of every Pier process
//! sharing the database shows up, not only this one's.
//!
//! One listening connection per process, and only while some page listens: the hub starts
//! it for the first stream and closes it once the last one has gone, so an idle Pier with
//! no page open holds no extra connection and sends nothing. Streams are bounded: at most
//! [`MAX_STREAMS`] at once (then 503), each ends when its deployment is final, at shutdown,
//! or after [`MAX_STREAM_LIFE`] (the browser reconnects), with keep-alive comments between.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::backoff::Backoff;
use crate::store::Store;

/// Event streams open at once, all pages together.
pub(crate) const MAX_STREAMS: usize = 64;
/// A stream (of the overview, or of a deployment that runs for long) ends after this; the
/// browser's `EventSource` opens a new one.
pub(crate) const MAX_STREAM_LIFE: Duration = Duration::from_secs(600);
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Changes arriving together (a step's result and the next step's intent) are shown once.
const SETTLE: Duration = Duration::from_millis(150);

/// A change to this deployment; [`Uuid::nil`] means "anything may have changed" (the
/// listener reconnected, or this stream fell behind).
pub(crate) type Change = Uuid;

pub struct Hub {
    store: Store,
    changes: broadcast::Sender<Change>,
    /// Whether the hub's LISTEN is in place: a stream reads its first state only then, so
    /// no change can fall between that read and the first notification.
    ready: watch::Sender<bool>,
    running: Mutex<bool>,
    slots: Arc<Semaphore>,
    shutdown: CancellationToken,
}

impl Hub {
    pub(crate) fn new(store: Store, shutdown: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            store,
            changes: broadcast::channel(256).0,
            ready: watch::channel(false).0,
            running: Mutex::new(false),
            slots: Arc::new(Semaphore::new(MAX_STREAMS)),
            shutdown,
        })
    }

    /// A slot for one more stream, or `None` when [`MAX_STREAMS`] are open.
    pub(crate) fn slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    /// Subscribes to changes, starting the listener if none runs, and waits (a few seconds
    /// at most) until it listens.
    pub(crate) async fn subscribe(self: &Arc<Self>) -> broadcast::Receiver<Change> {
        let rx = {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            let rx = self.changes.subscribe();
            if !*running {
                *running = true;
                self.ready.send_replace(false);
                tokio::spawn(self.clone().listen());
            }
            rx
        };
        let mut ready = self.ready.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(3), ready.wait_for(|r| *r)).await;
        rx
    }

    /// Stops when nobody subscribes any more (checked under the same lock `subscribe`
    /// takes, so a new subscriber either sees this listener or starts the next one).
    fn stop_if_unwatched(&self) -> bool {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if self.changes.receiver_count() == 0 || self.shutdown.is_cancelled() {
            *running = false;
            self.ready.send_replace(false);
            true
        } else {
            false
        }
    }

    async fn listen(self: Arc<Self>) {
        let mut backoff = Backoff::outage();
        loop {
            match self.store.own_listener(crate::store::Channel::Live).await {
                Ok(mut listener) => {
                    backoff = Backoff::outage();
                    self.ready.send_replace(true);
                    // Whatever happened while not listening, pages read it again.
                    let _ = self.changes.send(Uuid::nil());
                    loop {
                        tokio::select! {
                            msg = listener.try_recv() => match msg {
                                Ok(Some(n)) => {
                                    let id = Uuid::parse_str(n.payload()).unwrap_or(Uuid::nil());
                                    let _ = self.changes.send(id);
                                }
                                // The connection was lost: a new listener, on whichever
                                // host is usable now, and pages read everything again.
                                Ok(None) => {
                                    tracing::warn!("live-page listener lost its connection; reconnecting");
                                    break;
                                }
                                Err(e) => {
                                    tracing::warn!(error = %e, "live-page listener failed; reconnecting");
                                    break;
                                }
                            },
                            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                            _ = self.shutdown.cancelled() => {}
                        }
                        if self.stop_if_unwatched() {
                            return;
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "live-page listener cannot connect; retrying"),
            }
            self.ready.send_replace(false);
            let _ = self.changes.send(Uuid::nil());
            tokio::select! {
                _ = backoff.wait() => {}
                _ = self.shutdown.cancelled() => {}
            }
            if self.stop_if_unwatched() {
                return;
            }
        }
    }
}

/// What a stream renders each time something changed: the HTML fragment to show, and
/// whether it is the last (the deployment is final).
pub(crate) struct Frame {
    pub html: String,
    pub last: bool,
}

/// An event stream: `render` now, then again after every change `wanted` accepts, until a
/// frame is the last, the stream's life ends, or Pier shuts down. A render that fails
/// ends the stream (the browser reconnects and tries again). `wanted` may ask the
/// database (whose app a deployment is): the payload names only a deployment.
pub(crate) async fn stream<W, WF, R, F>(
    hub: &Arc<Hub>,
    slot: OwnedSemaphorePermit,
    event: &'static str,
    wanted: W,
    render: R,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<W, WF, R, F>>
where
    W: Fn(Change) -> WF + Send + Sync + 'static,
    WF: Future<Output = bool> + Send,
    R: Fn() -> F + Send + 'static,
    F: Future<Output = Option<Frame>> + Send,
{
    let mut rx = hub.subscribe().await;
    // The first frame is rendered after this, so it shows every change announced so far
    // (the listener's own start among them): those would only repeat it.
    while rx.try_recv().is_ok() {}
    let state = Streaming {
        rx,
        first: true,
        done: false,
        until: tokio::time::Instant::now() + MAX_STREAM_LIFE,
        shutdown: hub.shutdown.clone(),
        _slot: slot,
    };
    let events = futures_util::stream::unfold(
        (state, wanted, render),
        move |(mut st, wanted, mut render)| async move {
            if st.done {
                return None;
            }
            if !st.first && !st.next_change(&wanted).await {
                return None;
            }
            st.first = false;
            let frame = st.render_patiently(&mut render).await?;
            st.done = frame.last;
            let name = if frame.last { "final" } else { event };
            let ev = Event::default()
                .event(name)
                .retry(Duration::from_secs(5))
                .data(frame.html);
            Some((Ok(ev), (st, wanted, render)))
        },
    );
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

struct Streaming {
    rx: broadcast::Receiver<Change>,
    first: bool,
    done: bool,
    until: tokio::time::Instant,
    shutdown: CancellationToken,
    _slot: OwnedSemaphorePermit,
}

impl Streaming {
    /// A frame, asked again twice (after 0.5 s, then 1 s) when it could not be rendered:
    /// a statement that lost its race for a pooled connection on a loaded host would
    /// otherwise end the viewer's stream, and with it the page's liveness until the
    /// browser reconnects. Still nothing after that (the deployment is gone, the database
    /// is away), the stream ends.
    async fn render_patiently<R, F>(&self, render: &mut R) -> Option<Frame>
    where
        R: Fn() -> F,
        F: Future<Output = Option<Frame>>,
    {
        let mut pause = Duration::from_millis(500);
        for _ in 0..2 {
            if let Some(frame) = render().await {
                return Some(frame);
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.shutdown.cancelled() => return None,
            }
            pause *= 2;
        }
        render().await
    }

    /// Waits for a change worth a new frame; `false` when the stream should end.
    async fn next_change<WF: Future<Output = bool>>(
        &mut self,
        wanted: &impl Fn(Change) -> WF,
    ) -> bool {
        loop {
            tokio::select! {
                r = self.rx.recv() => match r {
                    Ok(c) if c.is_nil() => break,
                    Ok(c) if wanted(c).await => break,
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => return false,
                },
                _ = tokio::time::sleep_until(self.until) => return false,
                _ = self.shutdown.cancelled() => return false,
            }
        }
        tokio::time::sleep(SETTLE).await;
        while self.rx.try_recv().is_ok() {}
        true
    }
}
