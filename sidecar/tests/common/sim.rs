//! A `ferrogate sim` in the test process, on an ephemeral port.

use clap::Parser;
use ferrogate_sidecar::sim::SimArgs;

#[derive(Parser)]
struct SimCli {
    #[command(flatten)]
    args: SimArgs,
}

/// Starts a sim with `extra` command-line options; returns its address.
#[allow(dead_code)] // Not every test binary including this module uses it.
pub async fn start_sim(extra: &[&str]) -> std::net::SocketAddr {
    start_sim_on("127.0.0.1", extra).await
}

/// [`start_sim`] on loopback address `ip` (any of 127.0.0.0/8), so engines can differ by IP.
#[allow(dead_code)] // Not every test binary including this module uses it.
pub async fn start_sim_on(ip: &str, extra: &[&str]) -> std::net::SocketAddr {
    let mut argv = vec!["sim", "--listen", "127.0.0.1:0"];
    argv.extend_from_slice(extra);
    let args = SimCli::parse_from(argv).args;
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(ferrogate_sidecar::sim::run(args, listener, std::future::pending()));
    addr
}

/// Sims at `ips` sharing one port (as the pods of a pool share their target port), each with
/// `extra`; new ports when one was taken on some address. Returns that port.
#[allow(dead_code)] // Not every test binary including this module uses it.
pub async fn start_sims_sharing_a_port(ips: &[&str], extra: &[&str]) -> u16 {
    'attempt: for _ in 0..10 {
        let port = std::net::TcpListener::bind((ips[0], 0)).unwrap().local_addr().unwrap().port();
        let mut listeners = Vec::new();
        for ip in ips {
            match tokio::net::TcpListener::bind((*ip, port)).await {
                Ok(listener) => listeners.push(listener),
                Err(_) => continue 'attempt,
            }
        }
        for listener in listeners {
            let mut argv = vec!["sim", "--listen", "127.0.0.1:0"];
            argv.extend_from_slice(extra);
            let args = SimCli::parse_from(argv).args;
            tokio::spawn(ferrogate_sidecar::sim::run(args, listener, std::future::pending()));
        }
        return port;
    }
    panic!("no port free on every one of {ips:?}");
}
