//! `ferrogate http-wasm` end to end: a guest (testdata/httpwasm/route.wat) sets the routing
//! header from a request header; the command routes to the service with that value, answers
//! Traefik's 404 without one, and refuses a body whose length no longer matches Go's
//! `r.ContentLength` unless `--buffering` stands in for Traefik's buffering middleware.
#![allow(clippy::unwrap_used, missing_docs)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;

use bytes::Bytes;
use ferrogate_sidecar::httpwasm_cmd::{HttpWasmArgs, HttpWasmGateway};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// A service answering `<name> <method> <uri> host=<host> body=<body>`.
async fn service(name: &'static str) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| async move {
                    let (parts, body) = req.into_parts();
                    let body = body.collect().await.unwrap().to_bytes();
                    let host = parts.headers.get("host").map(|h| h.to_str().unwrap().to_string()).unwrap_or_default();
                    let text = format!(
                        "{name} {} {} host={host} body={}",
                        parts.method,
                        parts.uri,
                        String::from_utf8_lossy(&body)
                    );
                    Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(text))))
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    addr
}

fn args(routes: Vec<String>, buffering: bool) -> HttpWasmArgs {
    let wasm = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/httpwasm/route.wasm");
    let mut argv = vec!["http-wasm".to_string(), "--wasm".into(), wasm.display().to_string()];
    argv.extend(["--listen".into(), "127.0.0.1:0".into()]);
    for r in routes {
        argv.extend(["--route".into(), r]);
    }
    if buffering {
        argv.push("--buffering".into());
    }
    #[derive(clap::Parser)]
    struct Cmd {
        #[command(flatten)]
        args: HttpWasmArgs,
    }
    <Cmd as clap::Parser>::parse_from(argv).args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_the_header_the_guest_sets() {
    let (a, b) = (service("alpha").await, service("beta").await);
    let routes = vec![format!("alpha=http://{a}"), format!("beta=http://{b}/prefix")];
    let gw = HttpWasmGateway::start(&args(routes, false)).await.unwrap();
    let client = reqwest::Client::new();
    let url = format!("http://{}/v1/x?a=1", gw.addr);

    let resp = client.post(&url).header("x-backend", "beta").body("hello").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), format!("beta POST /prefix/v1/x?a=1 host={b} body=hello"));

    let resp = client.get(&url).header("x-backend", "alpha").send().await.unwrap();
    assert_eq!(resp.text().await.unwrap(), format!("alpha GET /v1/x?a=1 host={a} body="));

    let resp = client.get(&url).header("x-backend", "gamma").send().await.unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(resp.text().await.unwrap(), "404 page not found\n");
    let resp = client.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 404, "no routing header: no router matches");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_body_fails_content_length_unless_buffering() {
    let a = service("alpha").await;
    let client = reqwest::Client::new();
    let plain = HttpWasmGateway::start(&args(vec![format!("alpha=http://{a}")], false)).await.unwrap();
    let resp = client
        .post(format!("http://{}/", plain.addr))
        .header("x-backend", "alpha")
        .header("x-rewrite", "1")
        .body("original body")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 500);
    assert_eq!(resp.text().await.unwrap(), "Internal Server Error");

    let buffered = HttpWasmGateway::start(&args(vec![format!("alpha=http://{a}")], true)).await.unwrap();
    let resp = client
        .post(format!("http://{}/", buffered.addr))
        .header("x-backend", "alpha")
        .header("x-rewrite", "1")
        .body("original body")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), format!("alpha POST / host={a} body=rewritten"));
}
