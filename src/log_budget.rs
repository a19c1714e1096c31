//! A bounded number of log lines per window for events that can come in floods (rejected
//! webhooks, requests to an app that is down): a few lines in full, then a count. A flood
//! costs a counter increment per event, not a log line.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) struct LogBudget {
    per_window: u64,
    window: Duration,
    state: Mutex<Window>,
}

struct Window {
    started: Instant,
    logged: u64,
    left_out: u64,
}

/// What to log for one event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Admit {
    /// This event gets its own line.
    pub log: bool,
    /// Events of the window that just ended which got no line of their own: the caller
    /// logs this count once, as a summary, when it is not 0.
    pub left_out: u64,
}

impl LogBudget {
    pub(crate) fn new(per_window: u64, window: Duration) -> Self {
        LogBudget {
            per_window,
            window,
            state: Mutex::new(Window {
                started: Instant::now(),
                logged: 0,
                left_out: 0,
            }),
        }
    }

    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    pub(crate) fn admit(&self) -> Admit {
        let mut w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut left_out = 0;
        if w.started.elapsed() >= self.window {
            left_out = w.left_out;
            *w = Window {
                started: Instant::now(),
                logged: 0,
                left_out: 0,
            };
        }
        let log = w.logged < self.per_window;
        if log {
            w.logged += 1;
        } else {
            w.left_out += 1;
        }
        Admit { log, left_out }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_gets_a_few_lines_per_window_then_one_count() {
        let b = LogBudget::new(3, Duration::from_millis(50));
        let logged = (0..1000).filter(|_| b.admit().log).count();
        assert_eq!(logged, 3);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            b.admit(),
            Admit {
                log: true,
                left_out: 997
            }
        );
    }
}
