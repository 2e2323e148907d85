//! A real DNS server for tests: Debian's `dnsmasq` on a free loopback port, answering names
//! from a hosts file the test rewrites (then `SIGHUP` makes dnsmasq read it again), with no
//! upstream servers and TTL 0.

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running dnsmasq; stopped when dropped.
pub struct Dnsmasq {
    /// Where it listens (UDP and TCP).
    pub addr: SocketAddr,
    hosts: PathBuf,
    child: Child,
}

/// Where Debian's `dnsmasq-base` puts the binary (`make test` installs it: scripts/test-tools).
const DNSMASQ: &str = "/usr/sbin/dnsmasq";

impl Dnsmasq {
    /// Starts dnsmasq answering `name` with `addrs`; retries on new ports when the one picked
    /// was taken meanwhile. Returns once it answers.
    pub async fn start(name: &str, addrs: &[&str]) -> Dnsmasq {
        assert!(
            std::path::Path::new(DNSMASQ).exists(),
            "{DNSMASQ} is missing: `scripts/test-tools` installs Debian's dnsmasq-base"
        );
        for attempt in 1..=5 {
            let dir =
                std::env::temp_dir().join(format!("ferrogate-dns-{}-{}", std::process::id(), rand::random::<u64>()));
            std::fs::create_dir_all(&dir).unwrap();
            let hosts = dir.join("hosts");
            write(&hosts, name, addrs);
            let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let mut dns = Dnsmasq { addr: ([127, 0, 0, 1], port).into(), child: spawn(port, &hosts), hosts };
            match dns.ready(name).await {
                Ok(()) => return dns,
                Err(why) if attempt < 5 => eprintln!("dnsmasq on port {port}: {why}; another port"),
                Err(why) => panic!("dnsmasq would not start: {why}"),
            }
        }
        unreachable!()
    }

    /// Answers `name` with `addrs` from now on.
    pub fn set(&mut self, name: &str, addrs: &[&str]) {
        write(&self.hosts, name, addrs);
        let status = Command::new("kill").args(["-HUP", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "SIGHUP to dnsmasq");
    }

    /// Waits until dnsmasq answers `name` (the gateway's own resolver asks), or it exits.
    async fn ready(&mut self, name: &str) -> Result<(), String> {
        let resolver = ferrogate_sidecar::services::dns::server_resolver(self.addr).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    std::io::Read::read_to_string(&mut e, &mut err).ok();
                }
                return Err(format!("exited with {status}: {err}"));
            }
            if resolver(format!("{name}:1")).await.is_ok_and(|a| !a.is_empty()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("no answer within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The hosts file answering `name` with `addrs`, written whole then renamed: dnsmasq never
/// reads half a file.
fn write(hosts: &std::path::Path, name: &str, addrs: &[&str]) {
    let lines: String = addrs.iter().map(|a| format!("{a} {name}\n")).collect();
    let tmp = hosts.with_extension("tmp");
    std::fs::write(&tmp, lines).unwrap();
    std::fs::rename(&tmp, hosts).unwrap();
}

fn spawn(port: u16, hosts: &std::path::Path) -> Child {
    Command::new(DNSMASQ)
        .args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            &format!("--port={port}"),
            "--listen-address=127.0.0.1",
            "--bind-interfaces",
            "--no-resolv",
            "--no-hosts",
            "--no-negcache",
            "--local-ttl=0",
            "--pid-file",
            "--user=root",
            &format!("--addn-hosts={}", hosts.display()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dnsmasq starts")
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = self.hosts.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
