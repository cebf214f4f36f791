//! Starting `gpusched-server` (SERVER-CONTRACT.md) and reading CPU time from `/proc`.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// The server binary: next to this executable (same build profile), else the workspace target
/// directory (`$CARGO_TARGET_DIR` or `<workspace>/target`), release before debug.
pub fn default_server_bin() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        candidates.push(dir.join("gpusched-server"));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    candidates.push(target.join("release/gpusched-server"));
    candidates.push(target.join("debug/gpusched-server"));
    candidates.into_iter().find(|p| p.is_file())
}

/// A `gpusched-server` started by this tool; stopped (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub struct SpawnedServer {
    child: Child,
    /// `host:port` of the gRPC listener.
    pub grpc_addr: String,
    /// The binary.
    pub bin: PathBuf,
}

impl SpawnedServer {
    /// Starts `bin --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 ARGS...` and waits for its
    /// `listening grpc=...` line. Its log (stderr) goes to `log` or is discarded.
    pub fn start(bin: &Path, args: &[String], log: Option<&Path>) -> anyhow::Result<Self> {
        let stderr = match log {
            Some(p) => Stdio::from(
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
            ),
            None => Stdio::null(),
        };
        let mut child = Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().context("server stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = tx.send(reader.read_line(&mut line).map(|_| line));
            // Keep draining so the server never blocks on a full pipe.
            let mut rest = String::new();
            while matches!(reader.read_line(&mut rest), Ok(n) if n > 0) {
                rest.clear();
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => {
                let _ = child.kill();
                bail!("reading the server's first line: {e}");
            }
            Err(_) => {
                let _ = child.kill();
                bail!("{} printed no `listening` line within 30 s", bin.display());
            }
        };
        let Some(grpc_addr) = parse_grpc_addr(&line) else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("unexpected first line from the server: {line:?}");
        };
        Ok(SpawnedServer {
            child,
            grpc_addr,
            bin: bin.to_owned(),
        })
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the server: SIGTERM, then SIGKILL after 5 s.
    pub fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let term = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if term.is_ok() {
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SpawnedServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `grpc=(\S+)` of the server's `listening` line.
pub fn parse_grpc_addr(line: &str) -> Option<String> {
    if !line.contains("listening") {
        return None;
    }
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
}

fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// CPU seconds of a process (all its threads).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTimes {
    /// User mode.
    pub user: f64,
    /// Kernel mode (system calls: the network, here).
    pub system: f64,
}

impl CpuTimes {
    /// user + system.
    pub fn total(self) -> f64 {
        self.user + self.system
    }
}

/// CPU seconds of a process, from `/proc/<pid>/stat`.
pub fn cpu_times(pid: u32) -> anyhow::Result<CpuTimes> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let (utime, stime) =
        parse_stat_cpu(&text).with_context(|| format!("parsing /proc/{pid}/stat"))?;
    let tick = clock_ticks();
    Ok(CpuTimes {
        user: utime as f64 / tick,
        system: stime as f64 / tick,
    })
}

/// user + system CPU seconds of a process.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    cpu_times(pid).map(CpuTimes::total)
}

/// Busy and total CPU seconds of the whole machine (all CPUs), from `/proc/stat`.
pub fn machine_cpu() -> Option<(f64, f64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    parse_proc_stat(&text).map(|(busy, total)| {
        let tick = clock_ticks();
        (busy as f64 / tick, total as f64 / tick)
    })
}

/// (busy, total) clock ticks of the `cpu` line of `/proc/stat` (idle and iowait are not busy).
pub fn parse_proc_stat(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().sum();
    let idle = v.get(3)? + v.get(4)?;
    Some((total - idle, total))
}

/// (utime, stime) in clock ticks of a `/proc/<pid>/stat` line.
pub fn parse_stat_cpu(stat: &str) -> Option<(u64, u64)> {
    // The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime, stime))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn grpc_address_from_the_contract_line() {
        assert_eq!(
            parse_grpc_addr("gpusched-server listening grpc=127.0.0.1:41234 metrics=off\n"),
            Some("127.0.0.1:41234".to_owned())
        );
        assert_eq!(parse_grpc_addr("something else"), None);
    }

    #[test]
    fn stat_cpu_fields() {
        let line = "1234 (gpusched server) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 4 0";
        assert_eq!(parse_stat_cpu(line), Some((250, 50)));
        let stat = "cpu  100 5 20 800 10 1 2 3 0 0\ncpu0 50 2 10 400 5 0 1 1 0 0\n";
        assert_eq!(parse_proc_stat(stat), Some((131, 941)));
        assert!(machine_cpu().is_some());
        assert!(cpu_seconds(std::process::id()).unwrap() >= 0.0);
    }
}
