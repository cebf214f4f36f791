//! The agent loop: read the whole machine, have the service normalise it, publish.
//!
//! - A round reads every card first; if the read fails, nothing is published this round (a
//!   half-read machine is never published) and the round is retried with backoff.
//! - The service is asked when the raw cards changed, and at least every `interval` (so a
//!   change of its configuration shows up). When it cannot be reached, the last good inventory
//!   is kept, with the health of the fresh read applied to it.
//! - The inventory is published when it changed, when a consumer asks (HAMi's handshake), and
//!   at least every `interval`.
//! - Rounds run every `poll_interval`, at once when the source reports a change (an XID event),
//!   and after failures with exponential backoff.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use gpusched_api::v1;
use tokio::sync::Notify;

use crate::discovery::{CardFacts, DiscoveryError, GpuSource};
use crate::format::NodeInventory;
use crate::inventory::{self, Normalizer, overlay_health};
use crate::publish::Publisher;

/// Timing and shutdown behaviour of the loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopSettings {
    /// Node name.
    pub node_name: String,
    /// Longest time between publications (and between service calls).
    pub interval: Duration,
    /// Time between reads.
    pub poll_interval: Duration,
    /// First backoff after a failed round.
    pub initial_backoff: Duration,
    /// Largest backoff.
    pub max_backoff: Duration,
    /// Withdraw the publication on clean shutdown.
    pub withdraw_on_shutdown: bool,
}

impl LoopSettings {
    /// Backoff after `failures` consecutive failed rounds (1-based), doubling from
    /// `initial_backoff` up to `max_backoff`.
    pub fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(16));
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// What the health endpoint reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Published at least once.
    pub ready: bool,
    /// Last error, if the last round failed.
    pub last_error: Option<String>,
    /// When the last publication happened.
    pub last_publish: Option<SystemTime>,
    /// Cards in the last publication.
    pub cards: usize,
    /// Healthy cards in it.
    pub healthy_cards: usize,
    /// Rounds that failed in a row.
    pub failures: u32,
}

/// State shared with the health endpoint.
#[derive(Debug, Default)]
pub struct AgentState {
    ready: AtomicBool,
    snapshot: Mutex<Snapshot>,
    /// The loop's metrics (served at `/metrics`).
    pub metrics: crate::metrics::AgentMetrics,
}

impl AgentState {
    /// Whether the first publication succeeded.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// A copy of the current state.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn update(&self, f: impl FnOnce(&mut Snapshot)) {
        f(&mut self.snapshot.lock().unwrap_or_else(PoisonError::into_inner));
    }

    fn failed(&self, error: String, failures: u32) {
        self.update(|s| {
            s.last_error = Some(error);
            s.failures = failures;
        });
    }

    fn published(&self, normalized: &v1::NormalizeInventoryResponse, degraded: Option<String>) {
        self.ready.store(true, Ordering::SeqCst);
        self.update(|s| {
            s.ready = true;
            s.last_publish = Some(SystemTime::now());
            s.cards = normalized.cards.len();
            s.healthy_cards = normalized
                .cards
                .iter()
                .filter(|c| c.health == v1::CardHealth::Healthy as i32)
                .count();
            if degraded.is_none() {
                s.failures = 0;
            }
            s.last_error = degraded;
        });
    }
}

/// What the loop remembers between rounds.
#[derive(Debug, Default)]
struct Memory {
    last_request: Option<v1::NormalizeInventoryRequest>,
    last_good: Option<v1::NormalizeInventoryResponse>,
    last_normalized_at: Option<Instant>,
    last_published: Option<NodeInventory>,
    last_published_at: Option<Instant>,
    failures: u32,
}

fn due(at: Option<Instant>, every: Duration) -> bool {
    at.is_none_or(|t| t.elapsed() >= every)
}

async fn notified(n: &Option<Arc<Notify>>) {
    match n {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

/// Reads the machine on the blocking pool.
async fn read<S: GpuSource + 'static>(
    source: &Arc<Mutex<S>>,
) -> Result<Vec<CardFacts>, DiscoveryError> {
    let src = Arc::clone(source);
    tokio::task::spawn_blocking(move || src.lock().unwrap_or_else(PoisonError::into_inner).read())
        .await
        .unwrap_or_else(|e| {
            Err(DiscoveryError::Machine {
                what: "cards",
                message: format!("reader panicked: {e}"),
            })
        })
}

/// Awaits `f`, recording its duration and result as `step`.
async fn timed<T, E>(
    metrics: &crate::metrics::AgentMetrics,
    step: &'static str,
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let t = Instant::now();
    let r = f.await;
    metrics.step(step, r.is_ok(), t.elapsed());
    r
}

/// One round; true when everything succeeded.
async fn round<S, N, P>(
    source: &Arc<Mutex<S>>,
    normalizer: &N,
    publisher: &P,
    cfg: &LoopSettings,
    state: &AgentState,
    mem: &mut Memory,
    force_publish: bool,
) -> bool
where
    S: GpuSource + 'static,
    N: Normalizer,
    P: Publisher,
{
    let failures = mem.failures + 1;
    let metrics = &state.metrics;
    let t = Instant::now();
    let facts = read(source).await;
    metrics.step("read", facts.is_ok(), t.elapsed());
    let facts = match facts {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "cards not read completely: nothing published this round");
            state.failed(format!("reading the cards: {e}"), failures);
            return false;
        }
    };
    let req = inventory::request(&cfg.node_name, &facts);
    let mut degraded: Option<String> = None;
    let ask = mem.last_good.is_none()
        || mem.last_request.as_ref() != Some(&req)
        || due(mem.last_normalized_at, cfg.interval);
    let normalized = match (&mem.last_good, ask) {
        (Some(good), false) => good.clone(),
        _ => match timed(metrics, "normalize", normalizer.normalize(req.clone())).await {
            Ok(resp) => {
                for s in &resp.skipped {
                    tracing::warn!(uuid = %s.uuid, reason = %s.reason, "card left out by the service");
                }
                mem.last_good = Some(resp.clone());
                mem.last_request = Some(req);
                mem.last_normalized_at = Some(Instant::now());
                resp
            }
            Err(e) => {
                let msg = format!("normalising the inventory: {e}");
                match &mem.last_good {
                    Some(good) => {
                        tracing::warn!(error = %e, "service unavailable: keeping the last good inventory (health from this read)");
                        degraded = Some(msg);
                        overlay_health(good, &facts)
                    }
                    None => {
                        tracing::warn!(error = %e, "service unavailable and no inventory yet: nothing published");
                        state.failed(msg, failures);
                        return false;
                    }
                }
            }
        },
    };
    let inv = NodeInventory {
        node_name: cfg.node_name.clone(),
        normalized,
        facts,
    };
    let changed = mem.last_published.as_ref() != Some(&inv);
    if !(force_publish || changed || due(mem.last_published_at, cfg.interval)) {
        return degraded.is_none();
    }
    let t = Instant::now();
    let published = publisher.publish(&inv).await;
    metrics.step("publish", published.is_ok(), t.elapsed());
    match published {
        Ok(()) => {
            let healthy = inv
                .normalized
                .cards
                .iter()
                .filter(|c| c.health == v1::CardHealth::Healthy as i32)
                .count();
            if changed {
                tracing::info!(
                    cards = inv.normalized.cards.len(),
                    healthy,
                    pair_scores = inv.normalized.pair_scores.len(),
                    "inventory published"
                );
            } else {
                tracing::debug!(cards = inv.normalized.cards.len(), "inventory refreshed");
            }
            metrics.published(inv.normalized.cards.len(), healthy);
            state.published(&inv.normalized, degraded.clone());
            mem.last_published = Some(inv);
            mem.last_published_at = Some(Instant::now());
            degraded.is_none()
        }
        Err(e) => {
            tracing::warn!(error = %e, "publishing failed");
            state.failed(format!("publishing: {e}"), failures);
            false
        }
    }
}

/// Runs until `shutdown` completes, then withdraws the publication when configured.
pub async fn run<S, N, P>(
    source: S,
    normalizer: N,
    publisher: P,
    cfg: LoopSettings,
    state: Arc<AgentState>,
    shutdown: impl Future<Output = ()>,
) where
    S: GpuSource + 'static,
    N: Normalizer,
    P: Publisher,
{
    tracing::info!(
        node = %cfg.node_name,
        source = %source.describe(),
        interval = ?cfg.interval,
        poll_interval = ?cfg.poll_interval,
        "agent started"
    );
    let changes = source.changes();
    let requests = publisher.requests();
    let source = Arc::new(Mutex::new(source));
    let mut mem = Memory::default();
    let mut force_publish = true;
    tokio::pin!(shutdown);
    loop {
        let published_before = mem.last_published_at;
        let started = Instant::now();
        let ok = tokio::select! {
            _ = &mut shutdown => break,
            ok = round(&source, &normalizer, &publisher, &cfg, &state, &mut mem, force_publish) => ok,
        };
        state.metrics.step("round", ok, started.elapsed());
        // A requested publication stays requested until one succeeds.
        if mem.last_published_at != published_before {
            force_publish = false;
        }
        let delay = if ok {
            mem.failures = 0;
            cfg.poll_interval
        } else {
            mem.failures += 1;
            cfg.backoff(mem.failures)
        };
        state.metrics.failures(mem.failures);
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tokio::time::sleep(delay) => {}
            _ = notified(&changes) => tracing::debug!("cards changed: reading now"),
            _ = notified(&requests) => force_publish = true,
        }
    }
    tracing::info!("shutting down");
    if cfg.withdraw_on_shutdown {
        match tokio::time::timeout(Duration::from_secs(15), publisher.withdraw()).await {
            Ok(Ok(())) => tracing::info!("published inventory withdrawn"),
            Ok(Err(e)) => tracing::warn!(error = %e, "withdrawing the inventory failed"),
            Err(_) => tracing::warn!("withdrawing the inventory timed out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let cfg = LoopSettings {
            node_name: "n".into(),
            interval: Duration::from_secs(30),
            poll_interval: Duration::from_secs(5),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            withdraw_on_shutdown: false,
        };
        let secs: Vec<u64> = (1..=7).map(|n| cfg.backoff(n).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(cfg.backoff(1000), Duration::from_secs(30));
    }
}
