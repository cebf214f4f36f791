//! The process-wide state every call shares: the validated settings, the metrics, the two
//! caches (an optimisation only) and the decision permits with their bounded queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::cache::nodes::NodeCache;
use crate::cache::sets::SetCache;
use crate::config::Settings;
use crate::error::ServiceError;
use crate::metrics::Metrics;

/// Shared, read-only state of the service (plus the metrics and the decision permits).
#[derive(Debug)]
pub struct State {
    /// Validated settings.
    pub settings: Settings,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Converted node parts sent by reference (an optimisation; see `cache::nodes`).
    pub node_cache: NodeCache,
    /// Candidate sets kept by digest (an optimisation; see `cache::sets`).
    pub node_sets: SetCache,
    permits: Arc<Semaphore>,
    /// Calls waiting for a permit now (bounded by `limits.max_queued_requests`).
    queued: AtomicUsize,
}

impl State {
    /// State for these settings and metrics.
    pub fn new(settings: Settings, metrics: Arc<Metrics>) -> Self {
        let permits = Arc::new(Semaphore::new(settings.limits.max_concurrent_requests));
        let node_cache = NodeCache::new(&settings.node_cache, metrics.node_cache.clone());
        let node_sets = SetCache::new(settings.node_sets.clone(), metrics.node_sets.clone());
        State {
            node_cache,
            node_sets,
            settings,
            metrics,
            permits,
            queued: AtomicUsize::new(0),
        }
    }

    /// A decision slot: at once when one is free; else after waiting in the bounded queue at
    /// most `limits.queue_timeout` and half of `remaining` (so a caller with a deadline reads
    /// RESOURCE_EXHAUSTED and RetryInfo before its deadline, not DEADLINE_EXCEEDED); refused at
    /// once when `limits.max_queued_requests` calls already wait.
    pub async fn permit(
        &self,
        remaining: Duration,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, ServiceError> {
        let limits = &self.settings.limits;
        let busy = || ServiceError::Busy(limits.max_concurrent_requests);
        match Arc::clone(&self.permits).try_acquire_owned() {
            Ok(p) => return Ok(p),
            Err(tokio::sync::TryAcquireError::Closed) => return Err(ServiceError::ShuttingDown),
            Err(tokio::sync::TryAcquireError::NoPermits) => {}
        }
        let queued = self.queued.fetch_add(1, Ordering::AcqRel);
        let _leave = Leave(&self.queued);
        if queued >= limits.max_queued_requests {
            return Err(busy());
        }
        let wait = limits.queue_timeout.min(remaining / 2);
        match tokio::time::timeout(wait, Arc::clone(&self.permits).acquire_owned()).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => Err(ServiceError::ShuttingDown),
            Err(_) => Err(busy()),
        }
    }
}

/// Leaves the queue when dropped (the call got its permit, gave up or was dropped).
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(slots: usize, queue: usize) -> State {
        let mut settings = crate::config::default_settings().expect("defaults");
        settings.limits.max_concurrent_requests = slots;
        settings.limits.max_queued_requests = queue;
        settings.limits.queue_timeout = Duration::from_secs(3600);
        State::new(settings, Arc::new(Metrics::new()))
    }

    #[tokio::test]
    async fn a_full_queue_sheds_at_once() {
        let st = state(1, 0);
        let held = st
            .permit(Duration::from_secs(3600))
            .await
            .expect("free slot");
        // No queue: refused without waiting (the timeouts above are an hour).
        let e = st.permit(Duration::from_secs(3600)).await.unwrap_err();
        assert_eq!(e, ServiceError::Busy(1));
        drop(held);
        assert!(st.permit(Duration::from_secs(3600)).await.is_ok());
        assert_eq!(st.queued.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_queued_call_gets_the_slot_when_it_frees() {
        let st = Arc::new(state(1, 1));
        let held = st
            .permit(Duration::from_secs(3600))
            .await
            .expect("free slot");
        let waiter = {
            let st = Arc::clone(&st);
            tokio::spawn(async move { st.permit(Duration::from_secs(3600)).await.is_ok() })
        };
        while st.queued.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        // The queue (of one) is full: the next is shed at once.
        assert_eq!(
            st.permit(Duration::from_secs(3600)).await.unwrap_err(),
            ServiceError::Busy(1)
        );
        drop(held);
        assert!(waiter.await.expect("waiter"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_call_gives_up_at_half_its_deadline() {
        let st = state(1, 8);
        let _held = st
            .permit(Duration::from_secs(3600))
            .await
            .expect("free slot");
        let started = tokio::time::Instant::now();
        let e = st.permit(Duration::from_secs(10)).await.unwrap_err();
        assert_eq!(e, ServiceError::Busy(1));
        // Paused clock: exactly the wait the rule gives, not a measurement.
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }
}
