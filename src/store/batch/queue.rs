//! Which waiting deliveries the next batch takes. Deliveries for one app are recorded in
//! arrival order (each newer push supersedes the one before), and two batches touching one
//! app would only queue on its enqueue lock, each paying its own commit. So a batch takes
//! no delivery for an app that a batch in flight holds: that delivery waits here, with
//! every later one for the same app, and the next batch takes them all together. A
//! delivery that queues nothing is never held back.

use std::collections::{HashSet, VecDeque};

/// The waiting deliveries and the drainers working on them.
#[derive(Debug)]
pub(super) struct Pending<T> {
    queue: VecDeque<Waiting<T>>,
    /// Apps of the batches in flight.
    busy: HashSet<String>,
    drainers: usize,
    max_drainers: usize,
    max_batch: usize,
}

#[derive(Debug)]
struct Waiting<T> {
    apps: Vec<String>,
    item: T,
}

/// What a drainer took: its items, and the apps it holds until it comes back for more.
#[derive(Debug)]
pub(super) struct Taken<T> {
    pub items: Vec<T>,
    pub apps: Vec<String>,
}

impl<T> Pending<T> {
    pub(crate) fn new(max_drainers: usize, max_batch: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            busy: HashSet::new(),
            drainers: 0,
            max_drainers,
            max_batch,
        }
    }

    /// Queues an item; `true` when the caller is to drain (it holds a drainer's slot).
    pub(crate) fn push(&mut self, apps: Vec<String>, item: T) -> bool {
        self.queue.push_back(Waiting { apps, item });
        if self.drainers < self.max_drainers {
            self.drainers += 1;
            true
        } else {
            false
        }
    }

    /// A drainer is back: it releases the apps of its last batch and takes the next one.
    /// Empty means this drainer is done (its slot is given back). What stays queued then
    /// waits only on apps another drainer holds, and that drainer comes back for it.
    pub(crate) fn take(&mut self, released: &[String]) -> Taken<T> {
        for app in released {
            self.busy.remove(app);
        }
        let mut items = Vec::new();
        let mut apps = Vec::new();
        // Apps of an item left waiting: no later item for them may go ahead of it.
        let mut held_back: HashSet<String> = HashSet::new();
        let mut left = VecDeque::with_capacity(self.queue.len());
        for w in self.queue.drain(..) {
            let free = w
                .apps
                .iter()
                .all(|a| !self.busy.contains(a) && !held_back.contains(a));
            if free && items.len() < self.max_batch {
                apps.extend(w.apps);
                items.push(w.item);
            } else {
                held_back.extend(w.apps.iter().cloned());
                left.push_back(w);
            }
        }
        self.queue = left;
        if items.is_empty() {
            self.drainers -= 1;
        } else {
            apps.sort_unstable();
            apps.dedup();
            self.busy.extend(apps.iter().cloned());
        }
        Taken { items, apps }
    }

    /// A drainer that ended without coming back (it panicked): its slot and its apps are
    /// given back, or deliveries for those apps would wait for good.
    pub(crate) fn abandon(&mut self, held: &[String]) {
        for app in held {
            self.busy.remove(app);
        }
        self.drainers -= 1;
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apps(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_delivery_for_an_app_in_flight_waits_with_every_later_one_for_it() {
        let mut p = Pending::new(4, 64);
        assert!(p.push(apps(&["a"]), 1));
        let first = p.take(&[]);
        assert_eq!(first.items, vec![1]);
        assert_eq!(first.apps, apps(&["a"]));
        // While `a`'s batch is in flight: more for `a`, one for nobody, one for `b`, and one
        // for `b` and `a` together, which must not pass the earlier ones for `a`.
        assert!(p.push(apps(&["a"]), 2));
        assert!(p.push(vec![], 3));
        assert!(p.push(apps(&["b"]), 4));
        assert!(!p.push(apps(&["b", "a"]), 5));
        assert!(!p.push(apps(&["b"]), 6));
        let second = p.take(&[]);
        assert_eq!(
            second.items,
            vec![3, 4],
            "nothing for `a`, nor after 5 for `b`"
        );
        assert_eq!(p.waiting(), 3);
        // `b` is now busy too; once both batches are done, the rest go in arrival order.
        let third = p.take(&first.apps);
        assert_eq!(third.items, vec![2], "5 and 6 wait for `b`");
        let fourth = p.take(&second.apps);
        assert!(fourth.items.is_empty(), "5 needs `a`, still held");
        let fifth = p.take(&third.apps);
        assert_eq!(fifth.items, vec![5, 6]);
        assert_eq!(fifth.apps, apps(&["a", "b"]));
        assert!(p.take(&fifth.apps).items.is_empty());
        assert_eq!(p.waiting(), 0);
        assert_eq!(
            p.drainers, 2,
            "the two drainers that found nothing gave their slots back"
        );
    }

    #[test]
    fn a_batch_is_capped_and_the_rest_keep_their_order() {
        let mut p = Pending::new(1, 3);
        assert!(p.push(vec![], 0));
        for i in 1..7 {
            assert!(!p.push(vec![], i), "one drainer at most");
        }
        assert_eq!(p.take(&[]).items, vec![0, 1, 2]);
        assert_eq!(p.take(&[]).items, vec![3, 4, 5]);
        assert_eq!(p.take(&[]).items, vec![6]);
        assert!(p.take(&[]).items.is_empty());
        assert!(p.push(vec![], 7), "its slot is free again");
    }

    #[test]
    fn an_abandoned_drainer_gives_back_its_apps() {
        let mut p = Pending::new(1, 64);
        assert!(p.push(apps(&["a"]), 1));
        let held = p.take(&[]).apps;
        p.abandon(&held);
        assert!(p.push(apps(&["a"]), 2));
        assert_eq!(p.take(&[]).items, vec![2]);
    }
}
