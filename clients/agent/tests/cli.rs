//! The `gpusched-agent` binary: `inventory` in every format against the fake NVML library and
//! a live gpusched-server, failure modes and exit codes, and `run` with a file output, the
//! health endpoint and SIGTERM.

mod common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{FakeMachine, start_server, uuid};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_gpusched-agent");

fn agent(m: Option<&FakeMachine>, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("NODE_NAME")
        .env("GPUSCHED_AGENT_TELEMETRY__LOG_LEVEL", "warn")
        .args(["--node-name", "gpu-node-1"]);
    if let Some(m) = m {
        c.env("FAKE_NVML_STATE", &m.state)
            .arg("--nvml-library")
            .arg(&m.lib)
            .arg("--sysfs-root")
            .arg(&m.sysfs);
    }
    c.args(args);
    c
}

fn run(mut c: impl std::borrow::BorrowMut<Command>) -> Output {
    c.borrow_mut().output().expect("run gpusched-agent")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_in_every_format() {
    let m = FakeMachine::new("retired 2 64\n");
    let server = start_server().await;
    let addr = server.grpc_addr.to_string();
    let out = |format: &str| {
        let o = run(agent(
            Some(&m),
            &["inventory", "--format", format, "--service-address", &addr],
        )
        .stdin(Stdio::null()));
        assert!(o.status.success(), "{format}: {}", text(&o.stderr));
        text(&o.stdout)
    };

    let json: Value = serde_json::from_str(&out("json")).unwrap();
    assert_eq!(json["nodeName"], "gpu-node-1");
    let cards = json["cards"].as_array().unwrap();
    assert_eq!(cards.len(), 8);
    assert_eq!(cards[0]["id"], uuid(0));
    assert_eq!(cards[0]["slots"], 10);
    assert_eq!(cards[0]["totalMemMib"], "81920");
    assert_eq!(cards[2]["health"], "CARD_HEALTH_UNHEALTHY");
    assert_eq!(cards[7]["numa"], 1);
    assert_eq!(json["effectiveConfig"]["splitCount"], 10);
    assert!(json["pairScores"].as_array().unwrap().len() == 56);
    assert_eq!(json["devices"][4]["slurmCores"], "16-31");
    assert_eq!(
        json["devices"][2]["unhealthyReasons"][0],
        "64 retired pages (limit 60)"
    );

    let hami = out("hami");
    let lines: Vec<&str> = hami.lines().collect();
    assert_eq!(lines.len(), 2);
    let register = lines[0]
        .strip_prefix("hami.io/node-nvidia-register=")
        .unwrap();
    let reg: Value = serde_json::from_str(register).unwrap();
    assert_eq!(reg[0]["id"], uuid(0));
    assert!(reg[0].get("index").is_none(), "zero values are omitted");
    assert_eq!(reg[0]["health"], true);
    assert!(reg[2].get("health").is_none(), "unhealthy = health absent");
    assert_eq!(reg[5]["numa"], 1);
    assert_eq!(reg[5]["devmem"], 81920);
    assert!(lines[1].starts_with("hami.io/node-nvidia-score=[{\"uuid\":\"GPU-"));

    let gres = out("slurm-gres");
    let card_lines: Vec<&str> = gres.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(card_lines.len(), 8);
    assert_eq!(
        card_lines[0],
        "NodeName=gpu-node-1 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia0 Cores=0-15"
    );
    assert_eq!(
        card_lines[7],
        "NodeName=gpu-node-1 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia7 Cores=16-31"
    );
    assert!(gres.contains("# unhealthy: GPU-5a1e0000-0000-4000-8000-000000000002 (index 2)"));

    // raw needs no service: it is the request gpuschedctl normalize reads.
    let o = run(agent(
        Some(&m),
        &[
            "inventory",
            "--format",
            "raw",
            "--service-address",
            "127.0.0.1:1",
        ],
    ));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let raw: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(raw["cards"].as_array().unwrap().len(), 8);
    assert_eq!(raw["cards"][0]["links"][0]["kind"], "LINK_KIND_NVLINK");
}

#[test]
fn failure_modes_and_exit_codes() {
    // NVML missing: a clear error and exit 1.
    let o = run(agent(
        None,
        &[
            "inventory",
            "--nvml-library",
            "/nonexistent/libnvidia-ml.so.1",
        ],
    ));
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.contains("NVML unavailable") && err.contains("/nonexistent/libnvidia-ml.so.1"),
        "{err}"
    );
    assert!(err.contains("publish_empty_when_missing"), "{err}");

    // NVML missing, zero cards allowed: the empty inventory (raw: no service needed).
    let o = run(agent(
        None,
        &[
            "inventory",
            "--format",
            "raw",
            "--nvml-library",
            "/nonexistent/libnvidia-ml.so.1",
            "--publish-empty-when-missing",
        ],
    ));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let raw: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(raw["nodeName"], "gpu-node-1");
    assert!(raw.get("cards").is_none());

    // The service unreachable in a one-shot inventory: exit 1 naming the address.
    let m = FakeMachine::new("");
    let o = run(agent(
        Some(&m),
        &["inventory", "--service-address", "127.0.0.1:1"],
    ));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("127.0.0.1:1"),
        "{}",
        text(&o.stderr)
    );

    // A half-read machine is not printed.
    m.set_state("error 3\n");
    let o = run(agent(Some(&m), &["inventory", "--format", "raw"]));
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("card 3"), "{}", text(&o.stderr));

    // Bad configuration: exit 2 naming the key.
    let o = run(agent(None, &["--interval", "0s", "inventory"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("config error: interval:"),
        "{}",
        text(&o.stderr)
    );
    let o = run(agent(None, &["inventory", "--format", "yaml"]));
    assert_eq!(o.status.code(), Some(2));

    // run with nothing to publish to.
    let o = run(agent(Some(&m), &["--no-kubernetes", "--health-listen", ""]));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("nothing to publish to"),
        "{}",
        text(&o.stderr)
    );

    // --print-config shows the layered result.
    let o = run(agent(None, &["--print-config", "--interval", "45s"]).env(
        "GPUSCHED_AGENT_SERVICE__ADDRESS",
        "http://gpusched.example:50051",
    ));
    assert!(o.status.success());
    let cfg = text(&o.stdout);
    assert!(cfg.contains("interval = \"45s\""), "{cfg}");
    assert!(
        cfg.contains("address = \"http://gpusched.example:50051\""),
        "{cfg}"
    );
}

fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect health");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("response");
    let code = body
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_writes_the_file_serves_health_and_stops_on_sigterm() {
    let m = FakeMachine::new("");
    let server = start_server().await;
    let out_file = m.dir.path().join("gres.conf");
    let mut child = agent(
        Some(&m),
        &[
            "run",
            "--no-kubernetes",
            "--service-address",
            &server.grpc_addr.to_string(),
            "--output-path",
            out_file.to_str().unwrap(),
            "--output-format",
            "slurm-gres",
            "--health-listen",
            "127.0.0.1:0",
            "--poll-interval",
            "200ms",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(
        first.starts_with("gpusched-agent running node=gpu-node-1 health=127.0.0.1:"),
        "{first}"
    );
    let health = first.trim().rsplit("health=").next().unwrap().to_owned();
    let (code, _) = http_get(&health, "/healthz");
    assert_eq!(code, 200);
    let t = Instant::now();
    while !out_file.exists() {
        assert!(t.elapsed() < Duration::from_secs(10), "no output file");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        std::fs::read_to_string(&out_file)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("NodeName="))
            .count(),
        8
    );
    let (code, body) = http_get(&health, "/readyz");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("ready: 8 card(s), 8 healthy"), "{body}");
    // A card goes unhealthy in the fake: the file says so.
    m.set_state("xid 6 48\n");
    let t = Instant::now();
    while !std::fs::read_to_string(&out_file)
        .unwrap()
        .contains("# unhealthy: GPU-5a1e0000-0000-4000-8000-000000000006")
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "unhealthy card not written"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "agent did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
}

/// Every `GPUSCHED_AGENT_...` variable of the systemd env file (commented ones too) and of the
/// DaemonSet is a valid key: the configuration loads and validates with them.
#[test]
fn deploy_files_use_valid_keys() {
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/agent");
    let env_file = std::fs::read_to_string(format!("{deploy}/gpusched-agent.env")).unwrap();
    let mut vars: Vec<(String, String)> = env_file
        .lines()
        .map(|l| l.trim().trim_start_matches('#'))
        .filter(|l| l.starts_with("GPUSCHED_AGENT_"))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert!(vars.len() >= 10, "{vars:?}");
    let ds = std::fs::read_to_string(format!("{deploy}/daemonset.yaml")).unwrap();
    let lines: Vec<&str> = ds.lines().map(str::trim).collect();
    let mut ds_vars = 0;
    for (i, l) in lines.iter().enumerate() {
        if let Some(k) = l
            .strip_prefix("- name: ")
            .filter(|k| k.starts_with("GPUSCHED_AGENT_"))
        {
            let v = lines[i + 1]
                .strip_prefix("value: ")
                .unwrap()
                .trim_matches('"');
            vars.push((k.to_owned(), v.to_owned()));
            ds_vars += 1;
        }
    }
    assert!(ds_vars >= 4);
    // Loaded and validated (a one-shot raw inventory of an empty machine).
    let mut c = agent(
        None,
        &[
            "inventory",
            "--format",
            "raw",
            "--nvml-library",
            "/nonexistent/libnvidia-ml.so.1",
            "--publish-empty-when-missing",
        ],
    );
    c.envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let o = run(&mut c);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut c = agent(None, &["--print-config"]);
    c.envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let o = run(&mut c);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let cfg = text(&o.stdout);
    assert!(cfg.contains("format = \"slurm-gres\""), "{cfg}");
    assert!(cfg.contains("remove_on_shutdown = false"), "{cfg}");
}

/// `inventory --format facts`: the read-only discovery report (MIG layouts included), without
/// a service; the MIG allowlist from the environment; a bad profile name is exit 2.
#[test]
fn facts_show_mig_layouts_without_a_service() {
    let m = FakeMachine::new("mig 0\ngi 0 4 0\nmig 1\nmig_error 1 instances no_permission\n");
    let o = run(agent(Some(&m), &["inventory", "--format", "facts"])
        .env("GPUSCHED_AGENT_MIG__ALLOWED_PROFILES", "1g.10gb,7g.80gb")
        .env("GPUSCHED_AGENT_SERVICE__ADDRESS", "http://127.0.0.1:1"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: Value = serde_json::from_str(&text(&o.stdout)).unwrap();
    assert_eq!(v["nodeName"], "gpu-node-1");
    let mig = &v["devices"][0]["mig"];
    assert_eq!(mig["state"], "read");
    assert_eq!(
        (mig["computeSlices"].as_u64(), mig["memorySlices"].as_u64()),
        (Some(7), Some(8))
    );
    let allowed: Vec<&str> = mig["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["allowed"] == true)
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(allowed, vec!["1g.10gb", "7g.80gb"]);
    assert_eq!(mig["instances"][0]["profile"], "7g.80gb");
    assert_eq!(v["devices"][1]["mig"]["state"], "unknown");
    assert!(
        v["devices"][1]["mig"]["reason"]
            .as_str()
            .unwrap()
            .contains("no permission")
    );
    assert_eq!(v["devices"][2]["mig"]["state"], "disabled");
    let o = run(agent(Some(&m), &["inventory", "--format", "facts"])
        .env("GPUSCHED_AGENT_MIG__ALLOWED_PROFILES", "big"));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("mig.allowed_profiles"),
        "{}",
        text(&o.stderr)
    );
}
