//! `ferrogate`: the gateway's one binary (standalone gateway, simulated engine, config tools).

use std::process::ExitCode;

use clap::Parser;

// A proxy allocates and frees small buffers for every request on every worker thread;
// mimalloc's thread-local free lists make that markedly cheaper than glibc's malloc
// (scripts/bench measures it).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use ferrogate_sidecar::cli::{Cli, Command};
use ferrogate_sidecar::{admin_cmd, cli, httpwasm_cmd, serve, sim, standalone, telemetry};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check(args) => {
            let _logs_only = telemetry::init(false);
            cli::check(&args)
        }
        Command::Keys { command } => {
            let _logs_only = telemetry::init(false);
            cli::keys(&command)
        }
        Command::Guardrails { command } => cli::guardrails(&command),
        Command::Admin { command } => block_on(false, admin_cmd::run(command)),
        Command::Serve(args) => block_on(true, async move { run_serve(args).await }),
        Command::Epp(args) => block_on(true, async move { run_epp(args.picker()).await }),
        Command::Sim(args) => block_on(false, async move { run_sim(args).await }),
        Command::HttpWasm(args) => block_on(false, async move { run_http_wasm(args).await }),
        Command::Sidecar(args) => block_on(true, async move { run_sidecar(args).await }),
    }
}

/// Runs `fut` on a fresh runtime, with trace export when `traces` (and an OTLP endpoint is
/// set). The runtime outlives `fut` until the last spans are flushed: the exporter runs on it.
fn block_on(traces: bool, fut: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ferrogate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let telemetry = {
        let _in_runtime = rt.enter();
        telemetry::init(traces)
    };
    let code = rt.block_on(fut);
    telemetry.shutdown();
    code
}

async fn run_serve(args: serve::ServeArgs) -> ExitCode {
    run_gateway("serve", &args, |gateway| {
        format!(
            "ferrogate serve is listening:\n  gateway  http://{}  (--listen)\n  admin    http://{}  (--admin-listen: /healthz, /readyz, /metrics, /api/v1)\n  sidecar  http://{}  (--sidecar-listen: filter-facing, in process)",
            gateway.addr(),
            gateway.admin_addr(),
            gateway.sidecar_addr()
        )
    })
    .await
}

async fn run_epp(args: serve::ServeArgs) -> ExitCode {
    run_gateway("epp", &args, |gateway| {
        let picker = gateway.epp_addr().map_or_else(String::new, |a| a.to_string());
        format!(
            "ferrogate epp is listening:\n  picker   {picker}  (--listen: ext_proc and gRPC health, h2c)\n  admin    http://{}  (--admin-listen: /healthz, /readyz, /metrics, /api/v1)",
            gateway.admin_addr()
        )
    })
    .await
}

/// Starts the gateway of `args` (`ferrogate <command>`), prints what `listening` says of it, and
/// runs until a shutdown signal, then drains.
async fn run_gateway(
    command: &str,
    args: &serve::ServeArgs,
    listening: impl Fn(&serve::Gateway) -> String,
) -> ExitCode {
    let gateway = match serve::Gateway::start(args).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!("ferrogate {command}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", listening(&gateway));
    cli::shutdown_signal().await;
    tracing::info!("shutting down: draining in-flight requests");
    gateway.shutdown().await;
    ExitCode::SUCCESS
}

async fn run_sidecar(args: standalone::SidecarArgs) -> ExitCode {
    let sidecar = match standalone::Sidecar::start(&args).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ferrogate sidecar: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "ferrogate sidecar is listening:\n  sidecar  http://{}  (--sidecar-listen: filter-facing)\n  admin    http://{}  (--admin-listen: /healthz, /readyz, /metrics, /api/v1)",
        sidecar.sidecar_addr, sidecar.admin_addr
    );
    cli::shutdown_signal().await;
    sidecar.shutdown();
    ExitCode::SUCCESS
}

async fn run_sim(args: sim::SimArgs) -> ExitCode {
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ferrogate sim: cannot listen on {} ({e}); choose another address with --listen", args.listen);
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(addr = %args.listen, "ferrogate sim listening");
    match sim::run(args, listener, cli::shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrogate sim: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run_http_wasm(args: httpwasm_cmd::HttpWasmArgs) -> ExitCode {
    let gateway = match httpwasm_cmd::HttpWasmGateway::start(&args).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!("ferrogate http-wasm: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("listening on {}", gateway.addr);
    cli::shutdown_signal().await;
    drop(gateway);
    ExitCode::SUCCESS
}
