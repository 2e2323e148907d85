//! A TCP forwarder to PostgreSQL that can be cut and restored.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A TCP forwarder to PostgreSQL that can be cut (open connections closed, new ones dropped)
/// and restored: the database goes away without touching the real server.
pub struct Forwarder {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Forwarder {
    pub async fn start(url: &str) -> Forwarder {
        let config: tokio_postgres::Config = url.parse().unwrap();
        let host = match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            other => panic!("a TCP database is needed, not {other:?}"),
        };
        let target = format!("{host}:{}", config.get_ports().first().copied().unwrap_or(5432));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fwd = Forwarder {
            addr: listener.local_addr().unwrap(),
            up: Arc::new(AtomicBool::new(true)),
            conns: Arc::default(),
        };
        let (up, conns) = (fwd.up.clone(), fwd.conns.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !up.load(Ordering::SeqCst) {
                    continue;
                }
                let target = target.clone();
                conns.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                }));
            }
        });
        fwd
    }

    /// `url` with its host and port replaced by the forwarder's.
    pub fn url(&self, url: &str) -> String {
        let at = url.find('@').unwrap() + 1;
        let end = at + url[at..].find('/').unwrap();
        format!("{}{}{}", &url[..at], self.addr, &url[end..])
    }

    pub fn set(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            self.conns.lock().unwrap().drain(..).for_each(|c| c.abort());
        }
    }
}
