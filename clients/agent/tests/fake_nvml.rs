//! The agent's real NVML path (nvml-wrapper, `Nvml::builder().lib_path(..)`) against a fake
//! `libnvidia-ml.so.1` built from C at test time: a fixed 8-card machine (2 NUMA nodes, NVLink
//! pairs) whose cards can be made unhealthy through a state file.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{FakeMachine, Recording, healthy, start_server, uuid};
use gpusched_agent::agent::{self, AgentState, LoopSettings};
use gpusched_agent::discovery::nvml::{NvmlOptions, NvmlSource};
use gpusched_agent::discovery::{DiscoveryError, GpuSource};
use gpusched_api::v1;

fn open(m: &FakeMachine) -> NvmlSource {
    NvmlSource::open(m.options()).expect("fake NVML opens")
}

#[test]
fn reads_the_fixed_machine() {
    let m = FakeMachine::new("");
    let mut src = open(&m);
    assert!(src.watching_xid_events());
    let cards = src.read().unwrap();
    assert_eq!(cards.len(), 8);
    for (i, c) in cards.iter().enumerate() {
        let i = i as u32;
        assert_eq!(c.uuid, uuid(i));
        assert_eq!(c.index, i);
        assert_eq!(c.model_name, "NVIDIA H100 80GB HBM3");
        assert_eq!(c.total_memory_bytes, 80 << 30);
        assert_eq!(c.numa, Some(i / 4), "card {i}");
        assert!(!c.mig_enabled);
        assert!(c.healthy(), "card {i}: {:?}", c.unhealthy_reasons);
        assert_eq!(
            c.pci_bus_id.as_deref(),
            Some(format!("0000:{:02x}:00.0", (i + 1) * 16).as_str())
        );
        assert_eq!(c.minor_number, Some(i));
        let cpus: Vec<u32> = if i < 4 {
            (0..32).collect()
        } else {
            (32..64).collect()
        };
        assert_eq!(c.cpus.as_deref(), Some(cpus.as_slice()));
        let cores: Vec<u32> = if i < 4 {
            (0..16).collect()
        } else {
            (16..32).collect()
        };
        assert_eq!(c.cores.as_deref(), Some(cores.as_slice()));
    }
    // Card 0: NVLink (4 lanes) and one PCIe switch to card 1, host bridge to 2-3, system to 4-7.
    let links: Vec<(String, v1::LinkKind, u32)> = cards[0]
        .links
        .iter()
        .map(|l| (l.peer_uuid.clone(), l.kind, l.lanes))
        .collect();
    let mut want = vec![
        (uuid(1), v1::LinkKind::Nvlink, 4),
        (uuid(1), v1::LinkKind::SingleSwitch, 0),
        (uuid(2), v1::LinkKind::HostBridge, 0),
        (uuid(3), v1::LinkKind::HostBridge, 0),
    ];
    want.extend((4..8).map(|p| (uuid(p), v1::LinkKind::System, 0)));
    assert_eq!(links, want);
    // Card 7's NVLink partner is card 6.
    assert!(
        cards[7]
            .links
            .iter()
            .any(|l| l.peer_uuid == uuid(6) && l.kind == v1::LinkKind::Nvlink && l.lanes == 4)
    );
}

#[test]
fn retired_pages_and_mig_from_the_fake() {
    let m = FakeMachine::new("pending_retire 2\nretired 5 70\nretired 6 3\nmig 6\n");
    let cards = open(&m).read().unwrap();
    let unhealthy: BTreeSet<u32> = cards
        .iter()
        .filter(|c| !c.healthy())
        .map(|c| c.index)
        .collect();
    assert_eq!(unhealthy, BTreeSet::from([2, 5]));
    assert!(cards[2].unhealthy_reasons[0].contains("pending retirement"));
    assert!(cards[5].unhealthy_reasons[0].contains("70 retired pages"));
    assert!(cards[6].mig_enabled && cards[6].healthy());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xid_event_marks_the_card_unhealthy_and_wakes_the_agent() {
    let m = FakeMachine::new("");
    let mut src = open(&m);
    assert!(src.read().unwrap().iter().all(|c| c.healthy()));
    let changes = src.changes().unwrap();
    // XID 13 is an application error (ignored); 79 (fell off the bus) is critical.
    m.set_state("xid 4 13\nxid 3 79\n");
    tokio::time::timeout(Duration::from_secs(5), changes.notified())
        .await
        .expect("the XID watcher notifies");
    let cards = src.read().unwrap();
    let unhealthy: Vec<u32> = cards
        .iter()
        .filter(|c| !c.healthy())
        .map(|c| c.index)
        .collect();
    assert_eq!(unhealthy, vec![3]);
    assert_eq!(cards[3].unhealthy_reasons, vec!["critical XID 79"]);
    // Sticky: clearing the state does not make the card healthy again.
    m.set_state("");
    assert!(!src.read().unwrap()[3].healthy());
}

#[test]
fn a_lost_card_is_unhealthy_when_known_and_an_error_when_never_read() {
    let m = FakeMachine::new("");
    let mut src = open(&m);
    src.read().unwrap();
    m.set_state("lost 5\n");
    let cards = src.read().unwrap();
    assert_eq!(cards.len(), 8);
    assert_eq!(cards[5].uuid, uuid(5));
    assert!(!cards[5].healthy());
    assert!(
        cards[5].unhealthy_reasons[0].contains("lost"),
        "{:?}",
        cards[5].unhealthy_reasons
    );
    assert!(cards.iter().filter(|c| c.index != 5).all(|c| c.healthy()));
    // Its peers keep their other links and lose none to the healthy cards.
    assert!(cards[4].links.iter().any(|l| l.peer_uuid == uuid(7)));

    let fresh = FakeMachine::new("lost 5\n");
    let err = open(&fresh).read().unwrap_err();
    assert!(
        matches!(err, DiscoveryError::Card { index: 5, .. }),
        "{err}"
    );
}

#[test]
fn a_read_error_fails_the_whole_read() {
    let m = FakeMachine::new("error 2\n");
    let err = open(&m).read().unwrap_err();
    assert!(
        matches!(
            err,
            DiscoveryError::Card {
                index: 2,
                what: "name",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn unsupported_functions_degrade() {
    let m = FakeMachine::new("no_topology\nno_events\n");
    let mut src = open(&m);
    assert!(!src.watching_xid_events());
    let cards = src.read().unwrap();
    assert_eq!(cards.len(), 8);
    assert!(cards.iter().all(|c| c.links.is_empty() && c.healthy()));
}

/// A driver whose library lacks every optional function (FailedToLoadSymbol): the identity is
/// read, everything else is unknown, nothing fails.
#[test]
fn missing_symbols_degrade() {
    let m = FakeMachine::with_library(&common::minimal_fake_library(), "");
    let mut src = open(&m);
    assert!(!src.watching_xid_events());
    let cards = src.read().unwrap();
    assert_eq!(cards.len(), 8);
    for c in &cards {
        assert!(c.healthy() && !c.mig_enabled && c.links.is_empty());
        assert_eq!(c.total_memory_bytes, 80 << 30);
        assert_eq!(
            (c.numa, c.pci_bus_id.as_deref(), c.minor_number),
            (None, None, None)
        );
        assert_eq!((c.cpus.as_deref(), c.cores.as_deref()), (None, None));
    }
}

#[test]
fn missing_library_and_failed_init_are_clear_errors() {
    let err = NvmlSource::open(NvmlOptions {
        library: Some("/nonexistent/libnvidia-ml.so.1".into()),
        ..Default::default()
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("NVML unavailable"), "{text}");
    assert!(text.contains("/nonexistent/libnvidia-ml.so.1"), "{text}");
    let m = FakeMachine::new("init_fails\n");
    let err = NvmlSource::open(m.options()).unwrap_err();
    assert!(matches!(err, DiscoveryError::Unavailable(_)), "{err}");
}

fn loop_settings(node: &str) -> LoopSettings {
    LoopSettings {
        node_name: node.into(),
        interval: Duration::from_secs(3),
        poll_interval: Duration::from_millis(100),
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        withdraw_on_shutdown: true,
    }
}

/// The whole agent on the real paths (fake NVML library, real gpusched-server, the HAMi codec),
/// publishing to a recorder: a card that goes unhealthy in the fake is published unhealthy,
/// also while the service is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_publishes_the_fake_machine_and_its_failures() {
    let m = FakeMachine::new("");
    let server = start_server().await;
    let normalizer = common::normalizer(&server, Duration::from_secs(2));
    let rec = Recording::default();
    let state = Arc::new(AgentState::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(agent::run(
        open(&m),
        normalizer,
        rec.clone(),
        loop_settings("gpu-node-1"),
        Arc::clone(&state),
        async move {
            let _ = stopped.await;
        },
    ));
    let first = rec
        .wait_for("8 healthy cards", Duration::from_secs(10), |i| {
            i.normalized.cards.len() == 8
        })
        .await;
    assert!(state.ready());
    assert!((0..8).all(|i| healthy(&first, &uuid(i)) == Some(true)));
    // The HAMi register annotation as HAMi reads it.
    let register = gpusched_hami::encode_register(&first.normalized.cards);
    let decoded = gpusched_hami::decode_register(&register).unwrap();
    assert_eq!(decoded.len(), 8);
    assert!(
        decoded
            .iter()
            .all(|c| c.slots == 10 && c.total_mem_mib == 81920)
    );
    assert_eq!(decoded[5].numa, 1);
    let scores = gpusched_hami::encode_pair_scores(&first.normalized.pair_scores);
    assert!(scores.contains(&format!("\"{}\":450", uuid(1))), "{scores}");

    // An XID in the fake: published unhealthy quickly (the watcher wakes the loop).
    let count = rec.count();
    m.set_state("xid 3 79\n");
    let inv = rec
        .wait_for("card 3 unhealthy", Duration::from_secs(5), |i| {
            healthy(i, &uuid(3)) == Some(false)
        })
        .await;
    assert!(rec.count() > count);
    assert_eq!(inv.normalized.cards.len(), 8);
    let reg = gpusched_hami::encode_register(&inv.normalized.cards);
    let card3 = reg
        .split("},{")
        .find(|s| s.contains(&uuid(3)))
        .unwrap()
        .to_owned();
    assert!(!card3.contains("\"health\""), "{card3}");

    // The service goes away: the last good inventory stays, with fresh health.
    server.shutdown().await.unwrap();
    m.set_state("xid 3 79\npending_retire 1\n");
    rec.wait_for(
        "card 1 unhealthy without the service",
        Duration::from_secs(10),
        |i| healthy(i, &uuid(1)) == Some(false) && healthy(i, &uuid(3)) == Some(false),
    )
    .await;
    assert!(
        state
            .snapshot()
            .last_error
            .is_some_and(|e| e.contains("normalising")),
        "{:?}",
        state.snapshot()
    );
    assert!(state.ready());

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    assert!(rec.withdrawn.load(Ordering::SeqCst));
}

/// A machine that cannot be read completely is never published; once it can, it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_read_machine_is_never_published() {
    let m = FakeMachine::new("error 6\n");
    let server = start_server().await;
    let normalizer = common::normalizer(&server, Duration::from_secs(2));
    let rec = Recording::default();
    let state = Arc::new(AgentState::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(agent::run(
        open(&m),
        normalizer,
        rec.clone(),
        loop_settings("n"),
        Arc::clone(&state),
        async move {
            let _ = stopped.await;
        },
    ));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(rec.count(), 0);
    assert!(!state.ready());
    let snap = state.snapshot();
    assert!(
        snap.last_error
            .as_deref()
            .is_some_and(|e| e.contains("card 6")),
        "{snap:?}"
    );
    assert!(snap.failures >= 2, "{snap:?}");
    m.set_state("");
    rec.wait_for(
        "published after the error cleared",
        Duration::from_secs(5),
        |i| i.normalized.cards.len() == 8,
    )
    .await;
    stop.send(()).unwrap();
    task.await.unwrap();
}

// ---- MIG ----------------------------------------------------------------------------------

use gpusched_agent::discovery::{MigFacts, MigState};

fn layout(m: &MigState) -> &MigFacts {
    match m {
        MigState::Read(f) => f,
        other => panic!("no MIG layout: {other:?}"),
    }
}

/// `(name, MiB, compute slices, memory slices, cores, max instances, starts)` of each profile.
type Row = (String, u64, u32, u32, u32, u32, Vec<u32>);

fn rows(f: &MigFacts) -> Vec<Row> {
    f.profiles
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                p.mem_mib,
                p.compute_slices,
                p.memory_slices,
                p.cores,
                p.max_instances,
                p.placements.clone(),
            )
        })
        .collect()
}

fn row(name: &str, mib: u64, c: u32, m: u32, cores: u32, max: u32, starts: &[u32]) -> Row {
    (name.into(), mib, c, m, cores, max, starts.to_vec())
}

/// The H100 80GB and H200 141GB tables as NVML reports them, through the raw MIG calls.
#[test]
fn mig_tables_of_an_h100_and_an_h200() {
    let m = FakeMachine::new("mig 2\nmig 3\nh200 3\n");
    let cards = open(&m).read().unwrap();
    assert_eq!(cards[0].mig, MigState::Disabled);
    let ones = [0, 1, 2, 3, 4, 5, 6];
    let h100 = layout(&cards[2].mig);
    assert_eq!((h100.compute_slices, h100.memory_slices), (7, 8));
    assert_eq!(
        rows(h100),
        vec![
            row("1g.10gb", 9984, 1, 1, 13, 7, &ones),
            row("2g.20gb", 20096, 2, 2, 25, 3, &[0, 2, 4]),
            row("3g.40gb", 40448, 3, 4, 46, 2, &[0, 4]),
            row("4g.40gb", 40448, 4, 4, 49, 1, &[0]),
            row("7g.80gb", 81152, 7, 8, 100, 1, &[0]),
            row("1g.10gb+me", 9984, 1, 1, 13, 1, &ones),
            row("1g.20gb", 20096, 1, 2, 20, 4, &[0, 2, 4, 6]),
        ]
    );
    assert!(h100.profiles.iter().all(|p| p.allowed));
    assert!(h100.instances.is_empty());
    assert_eq!(cards[3].model_name, "NVIDIA H200 141GB HBM3e");
    assert_eq!(cards[3].total_memory_bytes, 143_771 << 20);
    let h200 = layout(&cards[3].mig);
    assert_eq!(
        rows(h200),
        vec![
            row("1g.18gb", 16384, 1, 1, 13, 7, &ones),
            row("2g.35gb", 33024, 2, 2, 25, 3, &[0, 2, 4]),
            row("3g.71gb", 71168, 3, 4, 46, 2, &[0, 4]),
            row("4g.71gb", 71168, 4, 4, 49, 1, &[0]),
            row("7g.141gb", 143104, 7, 8, 100, 1, &[0]),
            row("1g.18gb+me", 16384, 1, 1, 13, 1, &ones),
            row("1g.35gb", 33024, 1, 2, 20, 4, &[0, 2, 4, 6]),
        ]
    );
}

/// Existing GPU instances come with their profile and placement; the allowlist marks profiles.
#[test]
fn mig_instances_and_the_allowlist() {
    let m = FakeMachine::new("mig 1\ngi 1 2 4\ngi 1 0 0\ngi 1 0 1\n");
    let mut options = m.options();
    options.mig_allowed_profiles = vec!["1g.10gb".into(), "3g.40gb".into()];
    let cards = NvmlSource::open(options).unwrap().read().unwrap();
    let f = layout(&cards[1].mig);
    let got: Vec<(u32, &str, u32, u32)> = f
        .instances
        .iter()
        .map(|i| (i.id, i.profile.as_str(), i.start, i.size))
        .collect();
    assert_eq!(
        got,
        vec![
            (2, "1g.10gb", 0, 1),
            (3, "1g.10gb", 1, 1),
            (1, "3g.40gb", 4, 4)
        ]
    );
    let allowed: Vec<&str> = f
        .profiles
        .iter()
        .filter(|p| p.allowed)
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(allowed, vec!["1g.10gb", "3g.40gb"]);
    assert_eq!(f.hami_count(), 7);
    // MIG mode off again: no layout.
    m.set_state("gi 1 2 4\n");
    let mut src = open(&m);
    assert_eq!(src.read().unwrap()[1].mig, MigState::Disabled);
}

/// NOT_SUPPORTED and NO_PERMISSION leave the layout unknown (the card takes no MIG work, never
/// a layout that may be wrong); any other error fails the read; MIG is never read without MIG
/// mode or without the symbols.
#[test]
fn mig_errors_degrade_or_fail_the_read() {
    for (state, why) in [
        (
            "mig 4\nmig_error 4 instances no_permission\n",
            "no permission",
        ),
        (
            "mig 4\nmig_error 4 placements not_supported\n",
            "MIG placements",
        ),
        ("mig 4\nmig_error 4 profile no_permission\n", "MIG profile"),
        (
            "mig 4\nmig_error 4 profile not_supported\n",
            "no GPU instance profile",
        ),
        (
            "mig 4\ngi 4 0 3\nmig_error 4 info not_supported\n",
            "MIG GPU instances",
        ),
    ] {
        let m = FakeMachine::new(state);
        let cards = open(&m).read().unwrap();
        match &cards[4].mig {
            MigState::Unknown(reason) => assert!(reason.contains(why), "{state}: {reason}"),
            other => panic!("{state}: {other:?}"),
        }
        assert!(cards[4].mig_enabled && cards[4].healthy(), "{state}");
    }
    for (state, what) in [
        ("mig 4\nmig_error 4 placements unknown\n", "MIG placements"),
        (
            "mig 4\ngi 4 0 3\nmig_error 4 info unknown\n",
            "MIG GPU instances",
        ),
    ] {
        let m = FakeMachine::new(state);
        let err = open(&m).read().unwrap_err();
        assert!(
            matches!(err, DiscoveryError::Card { index: 4, what: w, .. } if w == what),
            "{state}: {err}"
        );
    }
    let m = FakeMachine::with_library(&common::minimal_fake_library(), "mig 4\n");
    assert!(
        open(&m)
            .read()
            .unwrap()
            .iter()
            .all(|c| c.mig == MigState::Disabled)
    );
}

/// A MIG card through the real service path, published in HAMi's MIG node form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_cards_are_published_in_hamis_node_form() {
    let m = FakeMachine::new("mig 6\ngi 6 2 4\nmig 7\nmig_error 7 instances no_permission\n");
    let mut options = m.options();
    options.mig_allowed_profiles = vec![
        "1g.10gb".into(),
        "2g.20gb".into(),
        "3g.40gb".into(),
        "7g.80gb".into(),
    ];
    let facts = NvmlSource::open(options).unwrap().read().unwrap();
    let server = start_server().await;
    let normalizer = common::normalizer(&server, Duration::from_secs(5));
    use gpusched_agent::inventory::Normalizer as _;
    let normalized = normalizer
        .normalize(gpusched_agent::inventory::request("n", &facts))
        .await
        .unwrap();
    let ann = gpusched_agent::format::hami_annotations(&normalized, &facts);
    let register = &ann[gpusched_hami::NODE_REGISTER];
    let cards = gpusched_hami::decode_registered(register).unwrap();
    let six = cards.iter().find(|c| c.id == uuid(6)).unwrap();
    assert_eq!(
        (six.mode.as_str(), six.count, six.devmem),
        ("mig", 7, 81920)
    );
    let names: Vec<&str> = six.mig_profiles.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, vec!["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]);
    let three = &six.mig_profiles[2];
    assert_eq!(
        (three.memory_mb, three.core, three.slice_count),
        (40448, 46, 3)
    );
    assert!(register.contains(
        r#""mode":"mig","migProfiles":[{"name":"1g.10gb","memoryMB":9984,"core":13,"sliceCount":1,"placements":[{"start":0,"size":1},"#
    ));
    // The card whose instances cannot be read is in mode mig without profiles; the others are
    // unchanged.
    let seven = cards.iter().find(|c| c.id == uuid(7)).unwrap();
    assert_eq!((seven.mode.as_str(), seven.mig_profiles.len()), ("mig", 0));
    let zero = cards.iter().find(|c| c.id == uuid(0)).unwrap();
    assert_eq!((zero.mode.as_str(), zero.count), ("hami-core", 10));
    assert!(zero.mig_profiles.is_empty());
    // gpusched's companion annotation: card 6's whole layout (profiles outside the allowlist
    // included, not allowed; the instance, free), none for the card whose layout is unknown;
    // HAMi's annotations are the same with or without it.
    let all = gpusched_agent::format::node_annotations(&normalized, &facts);
    assert_eq!(all[gpusched_hami::NODE_REGISTER], *register);
    let layouts =
        gpusched_hami::decode_node_mig_layouts(&all[gpusched_hami::NODE_MIG_LAYOUTS]).unwrap();
    assert_eq!(layouts.keys().collect::<Vec<_>>(), vec![&uuid(6)]);
    let l = &layouts[&uuid(6)];
    assert_eq!((l.compute_slices, l.memory_slices), (7, 8));
    let profiles: Vec<(&str, u32, bool)> = l
        .profiles
        .iter()
        .map(|p| (p.name.as_str(), p.max_instances, p.not_allowed))
        .collect();
    assert_eq!(
        profiles,
        vec![
            ("1g.10gb", 7, false),
            ("2g.20gb", 3, false),
            ("3g.40gb", 2, false),
            ("4g.40gb", 1, true),
            ("7g.80gb", 1, false),
            ("1g.10gb+me", 1, true),
            ("1g.20gb", 4, true),
        ]
    );
    assert_eq!(
        l.instances,
        vec![v1::MigInstance {
            profile: "3g.40gb".into(),
            start: 4,
            size: 4,
            in_use_by: String::new()
        }]
    );
    server.shutdown().await.unwrap();
}

/// Why the agent calls `nvmlDeviceGetGpuInstancePossiblePlacements_v2` itself: nvml-wrapper
/// 0.13's `possible_placements` never sets its vector's length and answers empty. When this
/// fails, the safe call works and `discovery/nvml_mig.rs` can use it.
#[test]
fn the_safe_possible_placements_of_nvml_wrapper_answers_empty() {
    let m = FakeMachine::new("mig 1\n");
    let nvml = nvml_wrapper::Nvml::builder()
        .lib_path(m.lib.as_os_str())
        .init()
        .unwrap();
    // Profile id 14 is the H100's 2g.20gb (3 placements).
    let dev = nvml.device_by_index(1).unwrap();
    assert_eq!(dev.possible_placements(14).unwrap(), vec![]);
    let cards = open(&m).read().unwrap();
    let two = layout(&cards[1].mig)
        .profiles
        .iter()
        .find(|p| p.id == 14)
        .unwrap();
    assert_eq!(two.placements, vec![0, 2, 4]);
}
