//! The Service stand-in (kube-proxy): forwards the extender and webhook ports to the replica
//! whose `/readyz` is 200 and cuts the connections of a replica that stops being ready.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::http::is_ready;
use super::shim::Shim;

#[derive(Clone)]
struct Backend {
    name: String,
    ext: SocketAddr,
    webhook: SocketAddr,
    ready: Arc<AtomicBool>,
    down: watch::Sender<u64>,
}

/// The stand-in for the shim's Service.
#[derive(Clone, Default)]
pub struct Proxy {
    backends: Arc<Mutex<Vec<Backend>>>,
}

impl Proxy {
    pub async fn start(ext_port: u16, wh_port: u16) -> Proxy {
        let p = Proxy::default();
        for (port, webhook) in [(ext_port, false), (wh_port, true)] {
            let l = TcpListener::bind(("127.0.0.1", port))
                .await
                .unwrap_or_else(|e| panic!("proxy cannot bind 127.0.0.1:{port}: {e}"));
            let p2 = p.clone();
            tokio::spawn(async move {
                while let Ok((conn, _)) = l.accept().await {
                    let p3 = p2.clone();
                    tokio::spawn(async move { p3.forward(conn, webhook).await });
                }
            });
        }
        let p2 = p.clone();
        tokio::spawn(async move {
            loop {
                let list: Vec<Backend> = p2.backends.lock().unwrap().clone();
                for b in list {
                    let ready = is_ready(b.ext).await;
                    let was = b.ready.swap(ready, Ordering::SeqCst);
                    if was && !ready {
                        b.down.send_modify(|v| *v += 1);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        p
    }

    pub fn add(&self, s: &Shim) {
        let (down, _) = watch::channel(0);
        self.backends.lock().unwrap().push(Backend {
            name: s.identity.clone(),
            ext: s.ext,
            webhook: s.webhook,
            ready: Arc::new(AtomicBool::new(false)),
            down,
        });
    }

    pub fn remove(&self, identity: &str) {
        let mut l = self.backends.lock().unwrap();
        for b in l.iter().filter(|b| b.name == identity) {
            b.down.send_modify(|v| *v += 1);
        }
        l.retain(|b| b.name != identity);
    }

    pub async fn forward(&self, mut conn: TcpStream, webhook: bool) {
        let deadline = Instant::now() + Duration::from_secs(3);
        let backend = loop {
            let b = self
                .backends
                .lock()
                .unwrap()
                .iter()
                .find(|b| b.ready.load(Ordering::SeqCst))
                .cloned();
            match b {
                Some(b) => break b,
                None if Instant::now() > deadline => return,
                None => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let target = if webhook {
            backend.webhook
        } else {
            backend.ext
        };
        let Ok(mut up) = TcpStream::connect(target).await else {
            return;
        };
        let _ = conn.set_nodelay(true);
        let _ = up.set_nodelay(true);
        let mut down = backend.down.subscribe();
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut conn, &mut up) => {}
            _ = down.changed() => {}
        }
    }
}
