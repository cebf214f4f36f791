//! When a decision must stop: its deadline passed, or nobody waits for its answer any more.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::ServiceError;

/// When a call's work must stop: its deadline passed, or nobody waits for the answer any more
/// (the caller went away, or the answer was already given as DEADLINE_EXCEEDED). The decision
/// asks [`Cancel::stopped`] before each node (`engine::*_until`). The flag is read at every ask;
/// the clock at every ask while reads come more than [`DENSE_READS`] apart (heavy nodes), and
/// at most every [`CLOCK_EVERY`]th ask while they come closer (light nodes: reading it at every
/// one was 11% of a 1,000-node decision's CPU). So the work, and the decision slot it holds,
/// end within one node's evaluation of a stop, and of the deadline within one node's or
/// [`CLOCK_EVERY`] light nodes' evaluations.
#[derive(Debug)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
    deadline: Instant,
    limit: Duration,
    /// The clock reads of one decision (each clone has its own; one decision asks from one
    /// thread, so no atomic is needed).
    reads: Cell<Reads>,
}

/// When [`Cancel::stopped`] reads the clock next.
#[derive(Clone, Copy, Debug)]
struct Reads {
    /// Asks before the next read.
    skip: u32,
    /// Asks between reads now (1 up to [`CLOCK_EVERY`]).
    stride: u32,
    /// The last read.
    last: Option<Instant>,
}

/// Most asks of [`Cancel::stopped`] that share one reading of the clock.
pub const CLOCK_EVERY: u32 = 32;

/// Reads of the clock closer than this double the asks between reads; farther, one ask each.
pub const DENSE_READS: Duration = Duration::from_micros(50);

const FIRST_READ: Reads = Reads {
    skip: 0,
    stride: 1,
    last: None,
};

impl Clone for Cancel {
    fn clone(&self) -> Self {
        Cancel {
            flag: Arc::clone(&self.flag),
            deadline: self.deadline,
            limit: self.limit,
            reads: Cell::new(FIRST_READ),
        }
    }
}

impl Cancel {
    /// Stops at `limit` after `started`, or when [`Cancel::stop`] is called.
    pub fn new(started: Instant, limit: Duration) -> Self {
        Cancel {
            flag: Arc::new(AtomicBool::new(false)),
            deadline: started + limit,
            limit,
            reads: Cell::new(FIRST_READ),
        }
    }

    /// Never stops by itself (in-process callers without a deadline).
    pub fn never() -> Self {
        Cancel::new(Instant::now(), Duration::from_secs(100 * 365 * 24 * 3600))
    }

    /// Whether the work should stop now.
    pub fn stopped(&self) -> bool {
        if self.flag.load(Ordering::Relaxed) {
            return true;
        }
        let r = self.reads.get();
        if r.skip > 0 {
            self.reads.set(Reads {
                skip: r.skip - 1,
                ..r
            });
            return false;
        }
        let now = Instant::now();
        if now >= self.deadline {
            // Latched: every later ask, of every clone, stops at once.
            self.stop();
            return true;
        }
        let dense = r.last.is_some_and(|last| now - last < DENSE_READS);
        let stride = if dense {
            (r.stride * 2).min(CLOCK_EVERY)
        } else {
            1
        };
        self.reads.set(Reads {
            skip: stride - 1,
            stride,
            last: Some(now),
        });
        false
    }

    /// Tells the work to stop.
    pub fn stop(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    /// The error of abandoned work.
    pub fn abandoned(&self) -> ServiceError {
        ServiceError::DeadlineExceeded(self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passed_deadline_stops_within_clock_every_asks_and_stays_stopped() {
        // Already past: the first ask reads the clock.
        let past = Cancel::new(Instant::now() - Duration::from_secs(1), Duration::ZERO);
        assert!(past.stopped());
        // Passes while asked: seen within CLOCK_EVERY asks, then latched.
        let soon = Cancel::new(Instant::now(), Duration::from_millis(20));
        assert!(!soon.stopped());
        std::thread::sleep(Duration::from_millis(30));
        let asks = (1..=CLOCK_EVERY).find(|_| soon.stopped());
        assert!(asks.is_some(), "not seen within {CLOCK_EVERY} asks");
        assert!((0..3 * CLOCK_EVERY).all(|_| soon.stopped()));
        // A clone shares the stop.
        assert!(soon.clone().stopped());
        // Light nodes (asks close together): the reads spread out, yet the deadline is seen
        // within CLOCK_EVERY asks.
        let light = Cancel::new(Instant::now(), Duration::from_millis(20));
        assert!((0..10_000).all(|_| !light.stopped()));
        std::thread::sleep(Duration::from_millis(30));
        assert!((1..=CLOCK_EVERY).any(|_| light.stopped()));
        // Heavy nodes (asks over DENSE_READS apart): every ask reads the clock, so no ask that
        // starts after the deadline lets the work go on.
        let limit = Duration::from_millis(20);
        let started = Instant::now();
        let heavy = Cancel::new(started, limit);
        let mut late_passes = 0;
        loop {
            let asked = Instant::now();
            if heavy.stopped() {
                break;
            }
            if asked >= started + limit {
                late_passes += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(late_passes, 0);
        // Never: no ask stops it; an explicit stop does, at the next ask.
        let never = Cancel::never();
        assert!((0..3 * CLOCK_EVERY).all(|_| !never.stopped()));
        never.clone().stop();
        assert!(never.stopped());
    }
}
