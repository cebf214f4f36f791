//! The log writer: the threads that log append their lines to one shared buffer, and one thread
//! (`gpusched-log`) writes the buffer to the sink in batches.
//!
//! A writer thread fed line by line (a channel and a blocking receive) is woken once per line:
//! at thousands of decisions a second, each with its one INFO line, those wake-ups were a fifth
//! of the server's CPU. Here a logger wakes the writer only when the buffer was empty (or has
//! grown past [`Limits::wake_at`]), and the writer, once woken, lets lines gather for
//! [`Limits::window`] before it writes them all with one `write(2)`: at most one wake-up per
//! window under load, none when idle, and a line reaches the sink within one window.
//!
//! Never lossy: above [`Limits::max_bytes`] loggers wait for the writer instead of dropping
//! lines. Dropping the [`LogGuard`] writes what is buffered and stops the thread.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// When the writer wakes and how much it may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a woken writer lets lines gather before writing them.
    pub window: Duration,
    /// A buffer this large wakes the writer even when it was not empty before.
    pub wake_at: usize,
    /// Loggers wait while the buffer holds this much.
    pub max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            window: Duration::from_millis(10),
            wake_at: 256 * 1024,
            max_bytes: 8 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    lines: Vec<u8>,
    closed: bool,
    /// The writer thread has written everything and ended.
    done: bool,
}

/// How long dropping the guard waits for the last lines to be written (a sink that blocks, such
/// as a full pipe nobody reads, must not hang the process's exit).
const FINAL_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the writer.
    lines: Condvar,
    /// Wakes loggers waiting for room.
    room: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where loggers write (a `tracing_subscriber` `MakeWriter`, and `std::io::Write` itself).
#[derive(Clone, Debug)]
pub struct BatchWriter {
    shared: Arc<Shared>,
    limits: Limits,
}

/// Writes what is buffered and stops the writer thread when dropped; keep it alive in `main`.
#[derive(Debug)]
pub struct LogGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Starts the writer thread over `sink`.
pub fn spawn<W: Write + Send + 'static>(
    sink: W,
    limits: Limits,
) -> std::io::Result<(BatchWriter, LogGuard)> {
    let shared = Arc::new(Shared::default());
    let thread = std::thread::Builder::new()
        .name("gpusched-log".into())
        .spawn({
            let shared = Arc::clone(&shared);
            move || run(&shared, sink, limits)
        })?;
    Ok((
        BatchWriter {
            shared: Arc::clone(&shared),
            limits,
        },
        LogGuard {
            shared,
            thread: Some(thread),
        },
    ))
}

fn run<W: Write>(shared: &Shared, mut sink: W, limits: Limits) {
    let mut out = Vec::new();
    loop {
        let closed = {
            let mut s = shared.lock();
            while s.lines.is_empty() && !s.closed {
                s = shared.lines.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            // Let the lines of the next moments join this write (until the window ends, the
            // buffer is large, or the guard is dropped).
            let until = Instant::now() + limits.window;
            while !s.closed && s.lines.len() < limits.wake_at {
                let now = Instant::now();
                if now >= until {
                    break;
                }
                s = shared
                    .lines
                    .wait_timeout(s, until - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            std::mem::swap(&mut s.lines, &mut out);
            shared.room.notify_all();
            s.closed
        };
        // A sink that fails (stderr closed) loses its lines; logging never stops the server.
        let _ = sink.write_all(&out);
        let _ = sink.flush();
        out.clear();
        if closed {
            let mut s = shared.lock();
            if s.lines.is_empty() {
                s.done = true;
                shared.room.notify_all();
                return;
            }
        }
    }
}

impl Write for BatchWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut s = self.shared.lock();
        while s.lines.len() >= self.limits.max_bytes && !s.closed {
            s = self.shared.room.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        let was_empty = s.lines.is_empty();
        s.lines.extend_from_slice(buf);
        let crossed =
            s.lines.len() >= self.limits.wake_at && s.lines.len() - buf.len() < self.limits.wake_at;
        let wake = was_empty || crossed;
        drop(s);
        if wake {
            self.shared.lines.notify_one();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for BatchWriter {
    type Writer = BatchWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Drop for LogGuard {
    /// Writes what is buffered, waiting at most [`FINAL_WAIT`] for the sink.
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.closed = true;
        self.shared.lines.notify_one();
        let until = Instant::now() + FINAL_WAIT;
        while !s.done {
            let now = Instant::now();
            if now >= until {
                // The thread is left to finish (or block) on its own.
                return;
            }
            s = self
                .shared
                .room
                .wait_timeout(s, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(s);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A sink that records every write (slowly, when asked).
    #[derive(Clone, Default)]
    struct Sink {
        bytes: Arc<Mutex<Vec<u8>>>,
        writes: Arc<AtomicUsize>,
        delay: Duration,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            std::thread::sleep(self.delay);
            self.bytes.lock().unwrap().extend_from_slice(buf);
            self.writes.fetch_add(1, Ordering::Relaxed);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_arrives_in_order_per_thread_in_few_writes() {
        let sink = Sink::default();
        let (w, guard) = spawn(sink.clone(), Limits::default()).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let mut w = w.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000 {
                        w.write_all(format!("t{t} line {i}\n").as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(guard);
        let text = String::from_utf8(sink.bytes.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 8_000);
        for t in 0..4 {
            let mine: Vec<usize> = text
                .lines()
                .filter_map(|l| l.strip_prefix(&format!("t{t} line ")))
                .map(|n| n.parse().unwrap())
                .collect();
            assert_eq!(mine, (0..2_000).collect::<Vec<_>>());
        }
        // Batched: far fewer writes than lines.
        let writes = sink.writes.load(Ordering::Relaxed);
        assert!(writes < 8_000 / 10, "{writes} writes for 8,000 lines");
    }

    #[test]
    fn a_slow_sink_makes_loggers_wait_instead_of_growing_or_dropping() {
        let sink = Sink {
            delay: Duration::from_millis(5),
            ..Sink::default()
        };
        let limits = Limits {
            window: Duration::from_millis(1),
            wake_at: 64,
            max_bytes: 256,
        };
        let (mut w, guard) = spawn(sink.clone(), limits).unwrap();
        let line = [b'x'; 99];
        for _ in 0..50 {
            w.write_all(&line).unwrap();
            // Never above the bound plus one line.
            assert!(w.shared.lock().lines.len() <= limits.max_bytes + line.len());
        }
        drop(guard);
        assert_eq!(sink.bytes.lock().unwrap().len(), 50 * line.len());
    }

    #[test]
    fn a_sink_that_blocks_does_not_hang_the_guard() {
        let sink = Sink {
            delay: Duration::from_secs(30),
            ..Sink::default()
        };
        let (mut w, guard) = spawn(sink, Limits::default()).unwrap();
        w.write_all(b"stuck\n").unwrap();
        let t = Instant::now();
        drop(guard);
        let waited = t.elapsed();
        assert!(waited < Duration::from_secs(10), "{waited:?}");
    }

    #[test]
    fn dropping_the_guard_writes_what_is_buffered() {
        let sink = Sink::default();
        let limits = Limits {
            window: Duration::from_secs(3600),
            ..Limits::default()
        };
        let (mut w, guard) = spawn(sink.clone(), limits).unwrap();
        w.write_all(b"last words\n").unwrap();
        drop(guard);
        assert_eq!(sink.bytes.lock().unwrap().as_slice(), b"last words\n");
    }
}
