//! Warning Events on objects (a pod whose bind failed, a quota that cannot be read), written by
//! the leader only: a standby's would repeat what the leader says. The note is cut to 1,000
//! bytes (the API's limit is 1 KiB), and publishing runs in the background.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

use crate::leader::Leadership;

/// What a Warning Event says.
#[derive(Clone, Debug)]
pub struct Warning {
    /// The object.
    pub regarding: ObjectReference,
    /// Machine-readable reason, e.g. `GpuschedBindFailed`.
    pub reason: &'static str,
    /// What gpusched-kube was doing, e.g. `Bind`.
    pub action: &'static str,
    /// The text.
    pub note: String,
}

/// Publishes `w` through `recorder` when this replica leads.
pub fn warn(recorder: Option<&Recorder>, leader: &Leadership, w: Warning) {
    let Some(recorder) = recorder.cloned() else {
        return;
    };
    if !leader.is_leader() {
        return;
    }
    let mut note = w.note;
    if note.len() > 1000 {
        let mut cut = 1000;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
    let ev = Event {
        type_: EventType::Warning,
        reason: w.reason.into(),
        note: Some(note),
        action: w.action.into(),
        secondary: None,
    };
    let regarding = w.regarding;
    tokio::spawn(async move {
        if let Err(e) = recorder.publish(&ev, &regarding).await {
            tracing::debug!(error = %e, "could not publish event");
        }
    });
}
