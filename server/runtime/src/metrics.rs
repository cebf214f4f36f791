//! The Prometheus endpoint: `GET /metrics` serves a prometheus-client [`Registry`] plus the
//! process metrics (`process_*`, read from `/proc`) and `gpusched_build_info`, in the format the
//! scrape asks for: OpenMetrics 1.0 for `Accept: application/openmetrics-text` (and when no
//! `Accept` is sent), the Prometheus text format 0.0.4 for `text/plain` (the highest `q` wins;
//! a tie goes to OpenMetrics).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::response::IntoResponse;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Content type of the OpenMetrics exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Content type of the Prometheus text exposition 0.0.4.
pub const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// An exposition format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text.
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    Text004,
}

impl Format {
    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => CONTENT_TYPE,
            Format::Text004 => CONTENT_TYPE_TEXT,
        }
    }

    /// The format for an `Accept` header (`None`: OpenMetrics).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::OpenMetrics;
        };
        let mut best: Option<(f32, Format)> = None;
        for range in accept.split(',') {
            let mut params = range.split(';').map(str::trim);
            let media = params.next().unwrap_or("").to_ascii_lowercase();
            let q = params
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .and_then(|(_, v)| v.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            let format = match media.as_str() {
                "application/openmetrics-text" => Format::OpenMetrics,
                "text/plain" => Format::Text004,
                _ => continue,
            };
            if q <= 0.0 {
                continue;
            }
            let better = match best {
                None => true,
                Some((bq, bf)) => {
                    q > bq || (q == bq && bf == Format::Text004 && format == Format::OpenMetrics)
                }
            };
            if better {
                best = Some((q, format));
            }
        }
        best.map_or(Format::OpenMetrics, |(_, f)| f)
    }
}

/// Process metrics from `/proc/self` in OpenMetrics text (nothing where `/proc` is absent).
pub fn process_metrics() -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut family =
        |name: &str, kind: &str, unit: Option<&str>, help: &str, sample: &str, value: f64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            if let Some(u) = unit {
                let _ = writeln!(out, "# UNIT {name} {u}");
            }
            let _ = writeln!(out, "{sample} {value}");
        };
    // Linux reports times in clock ticks (USER_HZ, 100 on every Linux ABI) and memory in pages.
    const TICKS: f64 = 100.0;
    const PAGE: f64 = 4096.0;
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces) in ")": state is field 3.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    if let (Some(utime), Some(stime)) = (field(14), field(15)) {
        family(
            "process_cpu_seconds",
            "counter",
            Some("seconds"),
            "Total user and system CPU time spent in seconds.",
            "process_cpu_seconds_total",
            (utime + stime) / TICKS,
        );
    }
    if let Some(vsize) = field(23) {
        family(
            "process_virtual_memory_bytes",
            "gauge",
            Some("bytes"),
            "Virtual memory size in bytes.",
            "process_virtual_memory_bytes",
            vsize,
        );
    }
    if let Some(rss) = field(24) {
        family(
            "process_resident_memory_bytes",
            "gauge",
            Some("bytes"),
            "Resident memory size in bytes.",
            "process_resident_memory_bytes",
            rss * PAGE,
        );
    }
    let btime = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    if let (Some(btime), Some(start)) = (btime, field(22)) {
        family(
            "process_start_time_seconds",
            "gauge",
            Some("seconds"),
            "Start time of the process since unix epoch in seconds.",
            "process_start_time_seconds",
            btime + start / TICKS,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        family(
            "process_open_fds",
            "gauge",
            None,
            "Number of open file descriptors.",
            "process_open_fds",
            fds.count() as f64,
        );
    }
    let max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse::<f64>().ok())
        });
    if let Some(max) = max_fds {
        family(
            "process_max_fds",
            "gauge",
            None,
            "Maximum number of open file descriptors.",
            "process_max_fds",
            max,
        );
    }
    family(
        "gpusched_build_info",
        "gauge",
        None,
        "Build information of this gpusched binary: its version; the value is 1.",
        &format!(
            "gpusched_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        ),
        1.0,
    );
    out
}

/// Rewrites OpenMetrics text as Prometheus text 0.0.4: counters' `HELP`/`TYPE` name the
/// `_total` sample, `info` becomes a `_info` gauge, `unknown` is `untyped`; `UNIT`, `_created`
/// samples, exemplars and `# EOF` are dropped.
pub fn openmetrics_to_text004(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<(String, String)> = None;
    let mut counters: Vec<String> = Vec::new();
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name.to_owned(), text.replace("\\\"", "\"")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, kind) = match kind {
                "counter" => {
                    counters.push(name.to_owned());
                    (format!("{name}_total"), "counter")
                }
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_owned(), "untyped"),
                "gaugehistogram" => (name.to_owned(), "histogram"),
                "stateset" => (name.to_owned(), "gauge"),
                other => (name.to_owned(), other),
            };
            if let Some((h, text)) = help.take()
                && (h == name || format!("{h}_total") == name || format!("{h}_info") == name)
            {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let sample = line.split_once(" # {").map_or(line, |(s, _)| s);
        let name = sample.split(['{', ' ']).next().unwrap_or("");
        if counters
            .iter()
            .any(|c| name.strip_prefix(c.as_str()) == Some("_created"))
        {
            continue;
        }
        out.push_str(sample);
        out.push('\n');
    }
    out
}

/// The registry and the process metrics in `format` (a collector may fail to encode).
pub fn encode_as(registry: &Registry, format: Format) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode_registry(&mut out, registry)?;
    out.push_str(&process_metrics());
    out.push_str("# EOF\n");
    Ok(match format {
        Format::OpenMetrics => out,
        Format::Text004 => openmetrics_to_text004(&out),
    })
}

/// The registry (and the process metrics) as OpenMetrics text.
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    encode_as(registry, Format::OpenMetrics)
}

/// A `GET /metrics` response for `registry` in the format `accept` asks for (to mount on a
/// router of one's own); 500 when a collector fails to encode.
pub fn response_for(registry: &Registry, accept: Option<&str>) -> axum::response::Response {
    let format = Format::negotiate(accept);
    match encode_as(registry, format) {
        Ok(text) => (
            [(axum::http::header::CONTENT_TYPE, format.content_type())],
            text,
        )
            .into_response(),
        Err(e) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("metrics: {e}"),
        )
            .into_response(),
    }
}

/// A `GET /metrics` response for `registry` in OpenMetrics.
pub fn response(registry: &Registry) -> axum::response::Response {
    response_for(registry, None)
}

/// A router with `GET /metrics` (negotiating the format).
pub fn router(registry: Arc<Registry>) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let registry = Arc::clone(&registry);
            async move {
                let accept = headers
                    .get(axum::http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok());
                response_for(&registry, accept)
            }
        }),
    )
}

/// Checks an exposition against promtool's `check metrics` (promlint) rules and the format's
/// own: every family has `HELP` and `TYPE`, names are snake_case, counters end in `_total`
/// and nothing else does, units are base units in the name (`_seconds`, `_bytes`, never
/// milliseconds or kilobytes), a declared `UNIT` ends the name, every sample belongs to the
/// family declared before it, OpenMetrics ends with `# EOF`. Returns the problems.
pub fn lint(text: &str, format: Format) -> Vec<String> {
    let mut problems = Vec::new();
    let mut helps = std::collections::BTreeSet::new();
    let mut family: Option<(String, String)> = None;
    let mut seen = std::collections::BTreeSet::new();
    const NON_BASE: [&str; 10] = [
        "milliseconds",
        "microseconds",
        "nanoseconds",
        "minutes",
        "hours",
        "days",
        "kilobytes",
        "megabytes",
        "gigabytes",
        "percent",
    ];
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            if help.trim().is_empty() {
                problems.push(format!("{name}: empty HELP"));
            }
            helps.insert(name.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if !helps.contains(name) {
                problems.push(format!("{name}: no HELP"));
            }
            if !seen.insert(name.to_owned()) {
                problems.push(format!("{name}: declared twice"));
            }
            let valid = name.chars().enumerate().all(|(i, c)| {
                c.is_ascii_lowercase() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            });
            if !valid {
                problems.push(format!("{name}: not a snake_case metric name"));
            }
            let counter_name = match format {
                Format::Text004 => name.ends_with("_total"),
                Format::OpenMetrics => false,
            };
            if kind == "counter" && format == Format::Text004 && !counter_name {
                problems.push(format!("{name}: counter names should end in _total"));
            }
            if kind != "counter" && name.ends_with("_total") {
                problems.push(format!(
                    "{name}: non-counter names should not end in _total"
                ));
            }
            if kind != "histogram"
                && kind != "summary"
                && ["_count", "_sum", "_bucket"]
                    .iter()
                    .any(|s| name.ends_with(s))
            {
                problems.push(format!("{name}: reserved suffix"));
            }
            for unit in NON_BASE {
                if name.split('_').any(|w| w == unit) {
                    problems.push(format!("{name}: use base units, not {unit}"));
                }
            }
            if (name.contains("duration") || name.contains("latency"))
                && !name.split('_').any(|w| w == "seconds")
            {
                problems.push(format!("{name}: a duration is named in _seconds"));
            }
            if name.contains("size") && !name.split('_').any(|w| w == "bytes") {
                problems.push(format!("{name}: a size is named in _bytes"));
            }
            family = Some((name.to_owned(), kind.to_owned()));
        } else if let Some(rest) = line.strip_prefix("# UNIT ") {
            let (name, unit) = rest.split_once(' ').unwrap_or((rest, ""));
            if format == Format::Text004 {
                problems.push(format!("{name}: UNIT is not part of text format 0.0.4"));
            } else if !name.ends_with(&format!("_{unit}")) {
                problems.push(format!("{name}: the name does not end in its unit {unit}"));
            }
        } else if line.starts_with('#') {
            if line != "# EOF" || format == Format::Text004 {
                problems.push(format!("unexpected line {line:?}"));
            }
        } else if !line.trim().is_empty() {
            let sample = line.split(['{', ' ']).next().unwrap_or("");
            let ok = family.as_ref().is_some_and(|(f, kind)| {
                let suffixes: &[&str] = match (kind.as_str(), format) {
                    ("counter", Format::OpenMetrics) => &["_total", "_created"],
                    ("histogram", _) => &["_bucket", "_sum", "_count", "_created"],
                    ("info", _) => &["_info"],
                    _ => &[""],
                };
                suffixes.iter().any(|s| sample == format!("{f}{s}"))
            });
            if !ok {
                problems.push(format!("{sample}: sample outside its family {family:?}"));
            }
        }
    }
    if format == Format::OpenMetrics && text.lines().last() != Some("# EOF") {
        problems.push("OpenMetrics text must end with # EOF".to_owned());
    }
    problems
}

/// The metrics listener could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("metrics endpoint: cannot listen on {addr}: {source}")]
pub struct MetricsError {
    /// The address.
    pub addr: SocketAddr,
    /// Why.
    pub source: std::io::Error,
}

/// A running metrics endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    /// The bound address.
    pub addr: SocketAddr,
    /// The serving task; it ends after `shutdown` resolves and open requests finish.
    pub task: JoinHandle<std::io::Result<()>>,
}

/// Binds `addr` (port 0 picks one) and serves `/metrics` until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    registry: Arc<Registry>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<MetricsServer, MetricsError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsError { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| MetricsError { addr, source })?;
    let app = router(registry);
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok(MetricsServer { addr: bound, task })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[test]
    fn negotiates_the_format() {
        use Format::*;
        for (accept, want) in [
            (None, OpenMetrics),
            (Some("text/plain; version=0.0.4"), Text004),
            (Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.1"), Text004),
            (
                Some("application/openmetrics-text; version=1.0.0"),
                OpenMetrics,
            ),
            // What Prometheus sends.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;q=0.3,text/plain;q=0.9"),
                Text004,
            ),
            (Some("*/*"), OpenMetrics),
            (Some("application/json"), OpenMetrics),
        ] {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
    }

    fn sample_registry() -> Registry {
        use prometheus_client::metrics::gauge::Gauge;
        use prometheus_client::metrics::histogram::Histogram;
        let mut registry = Registry::with_prefix("test");
        let c = Counter::<u64>::default();
        registry.register("hits", "Hits \"quoted\"", c.clone());
        c.inc_by(3);
        let g = Gauge::<i64>::default();
        registry.register("queue_bytes", "Bytes queued", g.clone());
        g.set(7);
        let h = Histogram::new([0.1, 1.0]);
        registry.register("wait_duration_seconds", "Waits", h.clone());
        h.observe(0.5);
        registry
    }

    #[test]
    fn both_formats_pass_the_lint_rules() {
        let registry = sample_registry();
        let om = encode_as(&registry, Format::OpenMetrics).unwrap();
        assert_eq!(lint(&om, Format::OpenMetrics), Vec::<String>::new(), "{om}");
        assert!(
            om.contains("# TYPE test_hits counter\ntest_hits_total 3\n"),
            "{om}"
        );
        let text = encode_as(&registry, Format::Text004).unwrap();
        assert_eq!(lint(&text, Format::Text004), Vec::<String>::new(), "{text}");
        assert!(text.contains("# HELP test_hits_total Hits \"quoted\".\n# TYPE test_hits_total counter\ntest_hits_total 3\n"), "{text}");
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        assert!(
            text.contains("test_wait_duration_seconds_bucket{le=\"0.1\"} 0"),
            "{text}"
        );
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_start_time_seconds ",
            "gpusched_build_info{version=\"",
        ] {
            assert!(om.contains(name) && text.contains(name), "{name}: {text}");
        }
        // The lint catches what promtool would.
        let bad = "# TYPE x_requests counter\nx_requests 1\n# HELP y_latency_milliseconds h\n# TYPE y_latency_milliseconds gauge\ny_latency_milliseconds 1\n";
        let problems = lint(bad, Format::Text004);
        assert!(
            problems.iter().any(|p| p.contains("no HELP")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("_total")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("base units")),
            "{problems:?}"
        );
    }

    #[tokio::test]
    async fn serves_the_registry() {
        let mut registry = Registry::with_prefix("test");
        let c = Counter::<u64>::default();
        registry.register("hits", "Hits", c.clone());
        c.inc_by(3);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = serve(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(registry),
            async move {
                let _ = stopped.await;
            },
        )
        .await
        .unwrap();
        let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(body.contains("test_hits_total 3"), "{body}");
        assert!(body.contains("openmetrics-text"), "{body}");
        let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain; version=0.0.4\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(body.contains("text/plain; version=0.0.4"), "{body}");
        assert!(body.contains("# TYPE test_hits_total counter"), "{body}");
        assert!(!body.contains("# EOF"), "{body}");
        stop.send(()).unwrap();
        server.task.await.unwrap().unwrap();
    }
}
