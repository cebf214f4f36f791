//! Telling operators about a ResourceQuota gpusched cannot read as written: one WARN log line
//! per quota version on every replica, and a Warning Event on the quota (reason
//! `GpuschedQuotaInvalid` when a value fails closed, `GpuschedQuotaScopes` when scopes are
//! not evaluated) from the leader, naming the quota, the key and what gpusched does about it.
//! The `gpusched_kube_quotas_invalid` gauge counts the quotas that block.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, ResourceQuota};
use kube::runtime::events::Recorder;

use super::hard::{Keys, read};
use crate::events::{self, Warning};
use crate::leader::Leadership;

/// Reports each quota version's findings once.
pub struct QuotaReporter {
    keys: Keys,
    recorder: Option<Recorder>,
    leader: Arc<Leadership>,
    /// uid -> the resourceVersion last reported.
    reported: HashMap<String, String>,
}

impl std::fmt::Debug for QuotaReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaReporter")
            .field("keys", &self.keys)
            .field("reported", &self.reported.len())
            .finish_non_exhaustive()
    }
}

impl QuotaReporter {
    /// A reporter for these keys; Events through `recorder` while `leader` leads.
    pub fn new(keys: Keys, recorder: Option<Recorder>, leader: Arc<Leadership>) -> Self {
        QuotaReporter {
            keys,
            recorder,
            leader,
            reported: HashMap::new(),
        }
    }

    /// A quota was listed, added or changed.
    pub fn observe(&mut self, quota: &ResourceQuota) {
        let uid = quota.metadata.uid.clone().unwrap_or_default();
        let rv = quota.metadata.resource_version.clone().unwrap_or_default();
        if self.reported.get(&uid) == Some(&rv) {
            return;
        }
        self.reported.insert(uid, rv);
        let namespace = quota.metadata.namespace.as_deref().unwrap_or("");
        let name = quota.metadata.name.as_deref().unwrap_or("");
        for f in read(quota, &self.keys).1 {
            tracing::warn!(
                quota = %format!("{namespace}/{name}"), key = %f.key, blocking = f.blocking,
                "{}", f.text
            );
            self.publish(quota, &f.text, f.blocking);
        }
    }

    /// A quota was deleted.
    pub fn forget(&mut self, quota: &ResourceQuota) {
        if let Some(uid) = &quota.metadata.uid {
            self.reported.remove(uid);
        }
    }

    fn publish(&self, quota: &ResourceQuota, text: &str, blocking: bool) {
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ResourceQuota".into()),
            name: quota.metadata.name.clone(),
            namespace: quota.metadata.namespace.clone(),
            uid: quota.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let w = Warning {
            regarding,
            reason: if blocking {
                "GpuschedQuotaInvalid"
            } else {
                "GpuschedQuotaScopes"
            },
            action: "ReadQuota",
            note: text.to_owned(),
        };
        events::warn(self.recorder.as_ref(), &self.leader, w);
    }
}
