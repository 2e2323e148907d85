//! The `ferrogate` binary as a user runs it: `check` lists every problem of a file in one run;
//! two `serve` processes that differ only in `--listen` both start and answer (their sidecar
//! and admin listeners take free ports and say where); a busy port is named in the error with
//! the flag that moves it; no arguments print what the tool is; `ferrogate epp` serves the
//! endpoint picker on `--listen`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/wasm.rs"]
mod wasm;

const BIN: &str = env!("CARGO_BIN_EXE_ferrogate");

fn scratch(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("ferrogate-cli-{name}-{}-{}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn check_lists_an_unknown_key_and_two_other_problems_in_one_run() {
    let dir = scratch("check");
    let file = dir.join("config.yaml");
    let text = "providers:\n  - { name: local, kind: openai_compatible, base_url: 'http://127.0.0.1:8000' }\n\
                models:\n  - name: chat\n    targets: [{ provider: nowhere, model: m, wieght: 2 }]\n    strategy: fastest\n";
    std::fs::write(&file, text).unwrap();
    let out = Command::new(BIN).args(["check", "--config"]).arg(&file).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains("models[0]")).collect();
    assert!(lines.iter().any(|l| l.contains("models[0].targets[0].wieght: unknown key")), "{stdout}");
    assert!(lines.iter().any(|l| l.contains("models[0].targets[0].provider")), "{stdout}");
    assert!(lines.iter().any(|l| l.contains("models[0].strategy")), "{stdout}");
    assert_eq!(lines.len(), 3, "{stdout}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_plugin_config_uses_the_filters_parser_and_names_nested_problems() {
    let dir = scratch("plugin");
    let good = dir.join("good.yaml");
    std::fs::write(&good, "sidecar_cluster: ferrogate_sidecar\nmax_body_bytes: 16777216\n").unwrap();
    let out = Command::new(BIN).args(["check", "--plugin-config"]).arg(&good).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    // An unknown plugin key, and a problem inside the inline config document, by path.
    // Every unknown key with its path, the inline config's included, in one run.
    let typo = dir.join("typo.json");
    let doc = r#"{"sidecar_clustr": "x", "config": {"providers": [{"name": "p", "kind": "openai",
        "base_url": "https://api.openai.com", "endpoint_dns": "x:1"}], "limts": {}}}"#;
    std::fs::write(&typo, doc).unwrap();
    let out = Command::new(BIN).args(["check", "--plugin-config"]).arg(&typo).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    for line in
        ["sidecar_clustr: unknown key", "config.providers[0].endpoint_dns: unknown key", "config.limts: unknown key"]
    {
        assert!(stdout.contains(line), "{line} in {stdout}");
    }
    let nested = dir.join("nested.json");
    let doc = r#"{"config": {"providers": [{"name": "p", "kind": "openai", "base_url": "https://api.openai.com"}],
        "models": [{"name": "m", "targets": [{"provider": "nowhere", "model": "x"}]}]}}"#;
    std::fs::write(&nested, doc).unwrap();
    let out = Command::new(BIN).args(["check", "--plugin-config"]).arg(&nested).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && stdout.contains("config.models[0].targets[0].provider"), "{stdout}");
    // One of the two documents must be named.
    let out = Command::new(BIN).arg("check").output().unwrap();
    assert!(!out.status.success());
    let _ = std::fs::remove_dir_all(dir);
}

/// A `ferrogate serve` child; killed when dropped.
struct Serve {
    child: Child,
    lines: Vec<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `serve` with only `--config` and `--listen` and reads its start-up lines until the
/// three listener addresses are printed.
fn serve(config: &std::path::Path, listen: &str) -> Serve {
    start("serve", config, listen, "sidecar")
}

/// Starts `command` (`serve` or `epp`) with one worker, `--config` and `--listen`, and reads
/// its start-up lines through the one starting with `last`.
fn start(command: &str, config: &std::path::Path, listen: &str, last: &str) -> Serve {
    let mut child = Command::new(BIN)
        .args([command, "--workers", "1", "--config"])
        .arg(config)
        .args(["--listen", listen, "--filter"])
        .arg(wasm::filter_wasm())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let done = line.trim_start().starts_with(last);
        lines.push(line);
        if done {
            break;
        }
    }
    Serve { child, lines }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET /v1/models` on `port`, retried until the gateway answers (or 60 s pass).
fn models(port: u16) -> String {
    let started = Instant::now();
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let _ = s.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                return answer;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no answer on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn two_serves_differing_only_in_listen_both_answer_and_print_their_addresses() {
    let dir = scratch("two");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "providers: [{ name: local, kind: openai_compatible, base_url: 'http://127.0.0.1:9' }]\n\
         models: [{ name: chat, targets: [{ provider: local, model: m }] }]\n",
    )
    .unwrap();
    let (a, b) = (free_port(), free_port());
    let first = serve(&config, &format!("127.0.0.1:{a}"));
    let second = serve(&config, &format!("127.0.0.1:{b}"));
    for (s, port) in [(&first, a), (&second, b)] {
        let printed = s.lines.join("\n");
        assert!(printed.contains(&format!("gateway  http://127.0.0.1:{port}")), "{printed}");
        assert!(
            printed.contains("admin    http://127.0.0.1:") && printed.contains("sidecar  http://127.0.0.1:"),
            "{printed}"
        );
        assert!(models(port).contains("\"chat\""));
    }
    assert_ne!(first.lines, second.lines, "the two admin/sidecar listeners must differ");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_busy_port_is_named_with_its_listener_and_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = scratch("busy");
    let config = dir.join("config.yaml");
    std::fs::write(&config, "providers: []\nmodels: []\n").unwrap();
    for (flag, what) in [("--listen", "gateway"), ("--admin-listen", "admin API"), ("--sidecar-listen", "sidecar API")]
    {
        let out = Command::new(BIN)
            .args(["serve", "--workers", "1", "--config"])
            .arg(&config)
            .arg("--filter")
            .arg(wasm::filter_wasm())
            .args(if flag == "--listen" { vec![flag, &addr] } else { vec!["--listen", "127.0.0.1:0", flag, &addr] })
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains(&format!("cannot listen on {addr} for the"))
                && stderr.contains(what)
                && stderr.contains(flag),
            "{flag}: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn no_arguments_print_what_ferrogate_is_and_the_quickstart() {
    let out = Command::new(BIN).output().unwrap();
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(all.contains("AI gateway") && all.contains("proxy-wasm"), "{all}");
    for command in ["serve", "sidecar", "sim", "check", "keys"] {
        assert!(all.contains(command), "{command} missing: {all}");
    }
    assert!(all.contains("Quickstart") && all.contains("examples/quickstart.yaml"), "{all}");
}

/// `ferrogate epp` is the endpoint picker alone: `--listen` (by default the Inference
/// Extension's `0.0.0.0:9002`) serves ext_proc and gRPC health, and nothing else is opened on
/// a public address.
#[test]
fn ferrogate_epp_serves_the_picker_on_listen() {
    let help = Command::new(BIN).args(["epp", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("[default: 0.0.0.0:9002]") && !help.contains("--epp-listen <"), "{help}");
    let dir = scratch("epp");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "providers: [{ name: pool, kind: openai_compatible, base_url: 'http://127.0.0.1:9', endpoints: ['127.0.0.1:9'] }]\n\
         models: [{ name: chat, targets: [{ provider: pool, model: m }] }]\n",
    )
    .unwrap();
    let epp = start("epp", &config, "127.0.0.1:0", "admin");
    let lines = &epp.lines;
    let picker = lines.iter().find_map(|l| l.trim_start().strip_prefix("picker")).map(|rest| rest.trim_start());
    let picker = picker.and_then(|rest| rest.split_whitespace().next()).unwrap_or_else(|| panic!("{lines:?}"));
    assert!(!lines.iter().any(|l| l.contains("gateway")), "no gateway listener is announced: {lines:?}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let status = runtime.block_on(async {
        use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
        let channel =
            tonic::transport::Channel::from_shared(format!("http://{picker}")).unwrap().connect().await.unwrap();
        let request = HealthCheckRequest { service: "envoy.service.ext_proc.v3.ExternalProcessor".into() };
        HealthClient::new(channel).check(request).await.unwrap().into_inner().status
    });
    assert_eq!(status, tonic_health::pb::health_check_response::ServingStatus::Serving as i32);
    let _ = std::fs::remove_dir_all(dir);
}
