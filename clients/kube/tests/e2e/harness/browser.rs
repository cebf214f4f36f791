//! A real browser: headless Chromium (Debian's `chromium`) driven through the DevTools protocol
//! over `--remote-debugging-pipe` (JSON messages separated by NUL on fds 3 and 4, here two
//! FIFOs), so that a test loads pages, fills forms, reads the rendered DOM and takes
//! screenshots as a person's browser would, with nothing to download.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A running headless Chromium with one page (killed on drop).
pub struct Browser {
    child: tokio::process::Child,
    to: tokio::fs::File,
    from: tokio::fs::File,
    buf: Vec<u8>,
    next: u64,
    session: String,
    log: PathBuf,
}

const STEP: Duration = Duration::from_secs(30);

impl Browser {
    /// Starts `chromium` (profile and FIFOs under `dir`) and opens a blank page.
    pub async fn start(chromium: &Path, dir: &Path) -> Browser {
        std::fs::create_dir_all(dir).unwrap();
        let (to_path, from_path) = (dir.join("cdp-in"), dir.join("cdp-out"));
        for p in [&to_path, &from_path] {
            let _ = std::fs::remove_file(p);
            let ok = std::process::Command::new("mkfifo")
                .arg(p)
                .status()
                .unwrap()
                .success();
            assert!(ok, "mkfifo {}", p.display());
        }
        let log = dir.join("chromium.log");
        let script = format!(
            "exec \"$0\" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
             --no-first-run --no-default-browser-check --hide-scrollbars --window-size=1440,900 \
             --user-data-dir={} --remote-debugging-pipe about:blank 3<{} 4>{}",
            dir.join("profile").display(),
            to_path.display(),
            from_path.display()
        );
        let child = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg(chromium)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromium");
        // The shell opens fd 3 (our writing end) first, then fd 4: open in the same order.
        let open = |p: PathBuf, write: bool| {
            tokio::task::spawn_blocking(move || {
                std::fs::OpenOptions::new()
                    .write(write)
                    .read(!write)
                    .open(&p)
                    .unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
            })
        };
        let to = tokio::time::timeout(STEP, open(to_path, true))
            .await
            .expect("chromium did not open its DevTools pipe")
            .unwrap();
        let from = tokio::time::timeout(STEP, open(from_path, false))
            .await
            .expect("chromium did not open its DevTools pipe")
            .unwrap();
        let mut b = Browser {
            child,
            to: tokio::fs::File::from_std(to),
            from: tokio::fs::File::from_std(from),
            buf: Vec::new(),
            next: 0,
            session: String::new(),
            log,
        };
        let target = b
            .call("Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let id = target["targetId"].as_str().expect("targetId").to_owned();
        let attached = b
            .call(
                "Target.attachToTarget",
                json!({"targetId": id, "flatten": true}),
            )
            .await;
        b.session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned();
        b.call("Page.enable", json!({})).await;
        b
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "chromium: {what}; its log:\n{}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }

    /// The next message from the browser.
    async fn message(&mut self) -> Value {
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == 0) {
                let msg: Vec<u8> = self.buf.drain(..=end).collect();
                return serde_json::from_slice(&msg[..end]).unwrap();
            }
            let mut chunk = vec![0u8; 1 << 16];
            let n = match tokio::time::timeout(STEP, self.from.read(&mut chunk)).await {
                Ok(Ok(n)) => n,
                Ok(Err(e)) => self.fail(&format!("reading the pipe: {e}")),
                Err(_) => self.fail("no message within 30 s"),
            };
            if n == 0 {
                self.fail("the pipe closed (chromium exited)");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    async fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let mut m = json!({"id": self.next, "method": method, "params": params});
        if !self.session.is_empty() {
            m["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&m).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).await.unwrap();
        self.to.flush().await.unwrap();
        self.next
    }

    /// Calls a DevTools method on the page and returns its result (panics on an error).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        loop {
            let m = self.message().await;
            if m["id"].as_u64() == Some(id) {
                if let Some(e) = m.get("error") {
                    self.fail(&format!("{method}: {e}"));
                }
                return m["result"].clone();
            }
        }
    }

    /// Waits for the page's next load event, after `start` (a navigation or a click).
    async fn loaded_after(&mut self, start: &str, params: Value) {
        let id = self.send(start, params).await;
        let (mut answered, mut loaded) = (false, false);
        while !(answered && loaded) {
            let m = self.message().await;
            if m["id"].as_u64() == Some(id) {
                if let Some(e) = m.get("error") {
                    self.fail(&format!("{start}: {e}"));
                }
                if let Some(err) = m["result"]["errorText"].as_str() {
                    self.fail(&format!("{start}: {err}"));
                }
                answered = true;
            } else if m["method"] == "Page.loadEventFired" {
                loaded = true;
            }
        }
    }

    /// Opens `url` and waits until it has loaded.
    pub async fn goto(&mut self, url: &str) {
        self.loaded_after("Page.navigate", json!({"url": url}))
            .await;
    }

    /// Evaluates `expr` in the page; its value (JSON).
    pub async fn eval(&mut self, expr: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        if let Some(e) = r.get("exceptionDetails") {
            self.fail(&format!("{expr}: {e}"));
        }
        r["result"]["value"].clone()
    }

    /// Runs `expr` (which submits a form or follows a link) and waits for the next page.
    pub async fn submit(&mut self, expr: &str) {
        let params = json!({"expression": expr, "returnByValue": true});
        self.loaded_after("Runtime.evaluate", params).await;
    }

    /// A PNG of the whole page (up to `max_height` CSS pixels), written to `path`.
    pub async fn screenshot(&mut self, path: &Path, max_height: f64) -> usize {
        let m = self.call("Page.getLayoutMetrics", json!({})).await;
        let w = m["cssContentSize"]["width"].as_f64().unwrap_or(1440.0);
        let h = m["cssContentSize"]["height"]
            .as_f64()
            .unwrap_or(900.0)
            .min(max_height);
        let r = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true,
                       "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}}),
            )
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("screenshot data"))
            .unwrap();
        std::fs::write(path, &png).unwrap();
        png.len()
    }

    /// Closes the browser.
    pub async fn close(mut self) {
        self.session.clear();
        let _ = self.send("Browser.close", json!({})).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}
