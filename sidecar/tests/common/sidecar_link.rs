//! A standalone sidecar for integration tests, and the filter's callouts carried to it over
//! real HTTP, as Envoy's async client would.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use ferrogate_host::{Headers, HttpCallResponse};
use ferrogate_sidecar::standalone::{Sidecar, SidecarArgs};

/// The `ferrogate sidecar` command line, parsed by the real parser.
#[derive(Parser)]
struct SidecarCli {
    #[command(flatten)]
    args: SidecarArgs,
}

/// A sidecar on `listen` for the config file `config`, its internal API behind `token`, its
/// store polled every 100 ms, its admin listener on a free port without a token.
pub async fn start_sidecar(config: &Path, listen: &str, token: &str) -> Sidecar {
    let argv = ["sidecar", "--config", config.to_str().unwrap(), "--sidecar-listen", listen];
    let mut args =
        SidecarCli::parse_from(argv.iter().chain(&["--admin-listen", "127.0.0.1:0", "--poll-interval-ms", "100"])).args;
    args.internal_token = Some(token.into());
    args.admin_token = None;
    Sidecar::start(&args).await.expect("sidecar starts")
}

/// One callout answered by the sidecar at `sidecar`, or 503 when nothing answers there (what
/// Envoy's async client answers for a refused connection).
pub async fn carry(sidecar: &str, headers: &Headers, body: Vec<u8>) -> HttpCallResponse {
    let path = headers.get_str(":path").unwrap_or("/").to_string();
    let method = headers.get_str(":method").unwrap_or("GET").to_string();
    let mut req = reqwest::Client::new().request(method.parse().unwrap(), format!("http://{sidecar}{path}"));
    for (name, value) in headers.iter().filter(|(n, _)| !n.starts_with(':')) {
        req = req.header(name, value);
    }
    match req.body(body).timeout(Duration::from_secs(2)).send().await {
        Ok(resp) => {
            let mut head = vec![(":status".to_string(), resp.status().as_u16().to_string())];
            for (k, v) in resp.headers() {
                head.push((k.to_string(), v.to_str().unwrap_or_default().to_string()));
            }
            let body = resp.bytes().await.unwrap_or_default().to_vec();
            HttpCallResponse { headers: Headers::from_pairs(head), body, trailers: Headers::new() }
        }
        Err(_) => HttpCallResponse {
            headers: Headers::from_pairs([(":status", "503")]),
            body: b"upstream connect error".to_vec(),
            trailers: Headers::new(),
        },
    }
}
