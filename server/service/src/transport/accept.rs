//! The listener as a stream of connections that never yields an accept error: tonic's accept
//! loop retries an error at once, so with the file-descriptor limit reached (EMFILE) it would
//! spin. Here an error that is not about one connection logs a warning and waits, from 5 ms
//! doubling to 1 s, before accepting again; each is counted in
//! `gpusched_accept_errors_total`.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// First wait after an accept error.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(5);
/// Longest wait after accept errors in a row.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Accepted connections (TCP_NODELAY set) with back-off on accept errors.
#[derive(Debug)]
pub struct Incoming {
    listener: TcpListener,
    backoff: Duration,
    sleeping: Option<Pin<Box<Sleep>>>,
    errors: Counter,
}

impl Incoming {
    /// Connections of `listener`; `errors` counts accept errors.
    pub fn new(listener: TcpListener, errors: Counter) -> Self {
        Incoming {
            listener,
            backoff: FIRST_BACKOFF,
            sleeping: None,
            errors,
        }
    }
}

/// Errors about one connection (it went away before it was accepted): accept the next at once.
fn per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    )
}

impl tokio_stream::Stream for Incoming {
    type Item = std::io::Result<TcpStream>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(sleep) = self.sleeping.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleeping = None;
            }
            match self.listener.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok((stream, _))) => {
                    self.backoff = FIRST_BACKOFF;
                    // Small request/response calls: without TCP_NODELAY, Nagle's algorithm and
                    // delayed ACKs add ~40 ms to a call (kube-scheduler's calls are serial).
                    let _ = stream.set_nodelay(true);
                    return Poll::Ready(Some(Ok(stream)));
                }
                Poll::Ready(Err(e)) if per_connection(&e) => {}
                Poll::Ready(Err(e)) => {
                    self.errors.inc();
                    let wait = self.backoff;
                    tracing::warn!(
                        error = %e,
                        retry_in = ?wait,
                        "cannot accept connections (at the open-files limit?): waiting before accepting again"
                    );
                    self.backoff = (wait * 2).min(MAX_BACKOFF);
                    self.sleeping = Some(Box::pin(tokio::time::sleep(wait)));
                }
            }
        }
    }
}
