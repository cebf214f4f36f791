//! Leader election with a `coordination.k8s.io/v1` Lease, written with kube-rs: acquire when the
//! lease is free or expired, renew every retry period, step down when renewals fail for longer
//! than the renew deadline, release on clean shutdown. Expiry is judged on the local clock from
//! when this instance last saw the lease change (like client-go), never on the other holder's
//! clock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;

use crate::config::LeaderSettings;

/// Whether this instance leads, shared with the request handlers.
#[derive(Debug)]
pub struct Leadership {
    enabled: bool,
    identity: String,
    leading: AtomicBool,
    until: Mutex<Option<Instant>>,
}

impl Leadership {
    /// Always leading (leader election off).
    pub fn always(identity: &str) -> Self {
        Leadership {
            enabled: false,
            identity: identity.to_owned(),
            leading: AtomicBool::new(true),
            until: Mutex::new(None),
        }
    }

    /// Not leading until a lease is held.
    pub fn elected(identity: &str) -> Self {
        Leadership {
            enabled: true,
            identity: identity.to_owned(),
            leading: AtomicBool::new(false),
            until: Mutex::new(None),
        }
    }

    /// This instance's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this instance may do real work now.
    pub fn is_leader(&self) -> bool {
        if !self.enabled {
            return true;
        }
        if !self.leading.load(Ordering::SeqCst) {
            return false;
        }
        match self.until.lock() {
            Ok(u) => u.is_some_and(|t| Instant::now() < t),
            Err(_) => false,
        }
    }

    fn set(&self, leading: bool, until: Option<Instant>) {
        if let Ok(mut u) = self.until.lock() {
            *u = until;
        }
        let was = self.leading.swap(leading, Ordering::SeqCst);
        if was != leading {
            if leading {
                tracing::info!(identity = %self.identity, "became the leader");
            } else {
                tracing::info!(identity = %self.identity, "not the leader any more");
            }
        }
    }
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn secs(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// The last lease record seen and when it changed (local clock).
#[derive(Debug, Default)]
struct Observed {
    record: Option<(Option<String>, Option<MicroTime>, Option<i32>)>,
    at: Option<Instant>,
}

/// One acquire-or-renew attempt. Ok(true) = we hold the lease now.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    s: &LeaderSettings,
    observed: &mut Observed,
) -> Result<bool, kube::Error> {
    let now = Instant::now();
    let Some(mut lease) = api.get_opt(&s.lease_name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(s.lease_name.clone()),
                namespace: Some(s.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(s.identity.clone()),
                lease_duration_seconds: Some(secs(s.lease_duration)),
                acquire_time: Some(now_micro()),
                renew_time: Some(now_micro()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let record = (
        spec.holder_identity.clone(),
        spec.renew_time.clone(),
        spec.lease_duration_seconds,
    );
    if observed.record.as_ref() != Some(&record) {
        observed.record = Some(record);
        observed.at = Some(now);
    }
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let duration = spec
        .lease_duration_seconds
        .and_then(|d| u64::try_from(d).ok())
        .map_or(s.lease_duration, Duration::from_secs);
    let expired = observed
        .at
        .is_none_or(|t| now.duration_since(t) >= duration);
    if !holder.is_empty() && holder != s.identity && !expired {
        return Ok(false);
    }
    let mut new_spec = spec.clone();
    if holder != s.identity {
        new_spec.acquire_time = Some(now_micro());
        new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
    }
    new_spec.holder_identity = Some(s.identity.clone());
    new_spec.lease_duration_seconds = Some(secs(s.lease_duration));
    new_spec.renew_time = Some(now_micro());
    lease.spec = Some(new_spec);
    // replace carries the resourceVersion we read: a concurrent writer makes this a 409.
    match api
        .replace(&s.lease_name, &PostParams::default(), &lease)
        .await
    {
        Ok(l) => {
            let sp = l.spec.unwrap_or_default();
            observed.record = Some((sp.holder_identity, sp.renew_time, sp.lease_duration_seconds));
            observed.at = Some(now);
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives the lease up (clean shutdown) so another replica takes over at once.
async fn release(api: &Api<Lease>, s: &LeaderSettings) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(&s.lease_name).await? else {
        return Ok(());
    };
    let mut spec = lease.spec.clone().unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(s.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now_micro());
    lease.spec = Some(spec);
    api.replace(&s.lease_name, &PostParams::default(), &lease)
        .await
        .map(|_| ())
}

/// Runs the election until `shutdown` turns true; then releases the lease if held.
pub async fn run(
    client: Client,
    s: LeaderSettings,
    state: std::sync::Arc<Leadership>,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &s.namespace);
    let mut observed = Observed::default();
    let mut last_renew: Option<Instant> = None;
    loop {
        let attempt_start = Instant::now();
        match tokio::time::timeout(
            s.renew_deadline,
            try_acquire_or_renew(&api, &s, &mut observed),
        )
        .await
        {
            Ok(Ok(true)) => {
                last_renew = Some(attempt_start);
                state.set(true, Some(attempt_start + s.renew_deadline));
            }
            Ok(Ok(false)) => {
                last_renew = None;
                state.set(false, None);
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, lease = %s.lease_name, "lease acquire/renew failed");
                if last_renew.is_none_or(|t| t.elapsed() >= s.renew_deadline) {
                    state.set(false, None);
                }
            }
            Err(_) => {
                tracing::warn!(lease = %s.lease_name, "lease acquire/renew timed out");
                if last_renew.is_none_or(|t| t.elapsed() >= s.renew_deadline) {
                    state.set(false, None);
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(s.retry_period) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
    }
    let was_leader = state.is_leader();
    state.set(false, None);
    if was_leader {
        match tokio::time::timeout(Duration::from_secs(5), release(&api, &s)).await {
            Ok(Ok(())) => tracing::info!(lease = %s.lease_name, "lease released"),
            Ok(Err(e)) => tracing::warn!(error = %e, "could not release the lease"),
            Err(_) => tracing::warn!("releasing the lease timed out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leadership_expires_without_renewal() {
        let l = Leadership::elected("a");
        assert!(!l.is_leader());
        l.set(true, Some(Instant::now() + Duration::from_secs(60)));
        assert!(l.is_leader());
        l.set(true, Some(Instant::now()));
        assert!(!l.is_leader(), "past the renew deadline");
        l.set(false, None);
        assert!(!l.is_leader());
        assert!(Leadership::always("b").is_leader());
        assert_eq!(Leadership::always("b").identity(), "b");
    }
}
