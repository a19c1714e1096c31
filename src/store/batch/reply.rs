//! Where a drainer leaves each delivery's outcome for the sender waiting on it.
//!
//! A sender usually drains its own delivery, in its own task (`mod.rs`). A task woken while
//! it runs is polled again at once, and on the multi-thread runtime that re-poll also
//! wakes an idle worker thread, which finds nothing to do and sleeps again: two futex calls
//! and a context switch on the other core for each delivery, paid while Postgres and the
//! sender share that core. So the outcome of the drainer's own delivery wakes nobody: the
//! sender that started the drain looks at its slot as soon as each drain step returns
//! ([`Answer::ready`]). Every other waiter is woken, even one in the same task: a future
//! beside it (`join!`) may have been polled already in this pass and would never be again.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    out: Option<T>,
    waker: Option<Waker>,
    /// The giving side went away without an outcome (a drainer that panicked).
    dropped: bool,
}

type Shared<T> = Arc<Mutex<Slot<T>>>;

fn lock<T>(s: &Shared<T>) -> MutexGuard<'_, Slot<T>> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// The drainer's end: gives one outcome, once.
pub(super) struct Reply<T>(Option<Shared<T>>);

/// The sender's end: a future of the outcome, `None` if none will come.
pub(super) struct Answer<T>(Shared<T>);

/// Which waiter a drainer serves itself: the sender that started it.
pub(super) struct Own<T>(Shared<T>);

pub(super) fn channel<T>() -> (Reply<T>, Answer<T>) {
    let s = Arc::new(Mutex::new(Slot {
        out: None,
        waker: None,
        dropped: false,
    }));
    (Reply(Some(s.clone())), Answer(s))
}

impl<T> Reply<T> {
    /// Leaves the outcome and wakes its waiter, unless the waiter is `own`: the sender
    /// whose drain is giving it, which looks without being woken.
    pub(crate) fn send(mut self, out: T, own: &Own<T>) {
        if let Some(s) = self.0.take() {
            let waker = {
                let mut slot = lock(&s);
                slot.out = Some(out);
                slot.waker.take()
            };
            if let Some(w) = waker.filter(|_| !Arc::ptr_eq(&s, &own.0)) {
                w.wake();
            }
        }
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            let waker = {
                let mut slot = lock(&s);
                slot.dropped = true;
                slot.waker.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}

impl<T> Answer<T> {
    /// What the sender's own drain carries, to answer it without a wake-up.
    pub(crate) fn own(&self) -> Own<T> {
        Own(self.0.clone())
    }

    /// The outcome if it is there (or `Some(None)` if none will come), without waiting.
    /// The sender's task calls this after each step of its own drain, which does not wake it.
    pub(crate) fn ready(&self) -> Option<Option<T>> {
        let mut slot = lock(&self.0);
        match slot.out.take() {
            Some(out) => Some(Some(out)),
            None if slot.dropped => Some(None),
            None => None,
        }
    }
}

impl<T> Future for Answer<T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut slot = lock(&self.0);
        if let Some(out) = slot.out.take() {
            return Poll::Ready(Some(out));
        }
        if slot.dropped {
            return Poll::Ready(None);
        }
        match &slot.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => slot.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    #[test]
    fn the_drainers_own_sender_is_not_woken() {
        let (reply, mut answer) = channel::<u32>();
        let (wakes, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut answer).poll(&mut cx).is_pending());
        reply.send(7, &answer.own());
        assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
        assert_eq!(answer.ready(), Some(Some(7)));
    }

    #[test]
    fn another_sender_is_woken_once_even_in_the_same_task() {
        // Two senders polled with one waker, as by `join!`: the drainer's own is `first`.
        let (_, first) = channel::<u32>();
        let (reply, mut second) = channel::<u32>();
        let (wakes, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut second).poll(&mut cx).is_pending());
        reply.send(7, &first.own());
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert_eq!(Pin::new(&mut second).poll(&mut cx), Poll::Ready(Some(7)));
    }

    #[test]
    fn a_reply_dropped_unsent_wakes_the_waiter_with_nothing() {
        let (reply, mut answer) = channel::<u32>();
        let (wakes, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut answer).poll(&mut cx).is_pending());
        drop(reply);
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert_eq!(Pin::new(&mut answer).poll(&mut cx), Poll::Ready(None));
        assert_eq!(answer.ready(), Some(None));
    }
}
