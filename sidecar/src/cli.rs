//! The `ferrogate` command line (every subcommand and flag), and its small commands:
//! `check`, `keys new`, `guardrails detect`, signals.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use sha2::{Digest, Sha256};

/// What `ferrogate` with no arguments (or `--help`) says after the command list.
const QUICKSTART: &str = "\
Quickstart (no provider key needed; the upstream is the simulated engine):
  ferrogate sim --listen 127.0.0.1:8000 --model sim-small &
  ferrogate serve --config examples/quickstart.yaml --listen 127.0.0.1:8080
  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \\
    -d '{\"model\":\"chat\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'

Logs: FERROGATE_LOG (default info). Manual: docs/ in the source tree (docs/cli.md for every flag).";

/// ferrogate: an OpenAI/Anthropic/Gemini-compatible AI gateway whose data plane is a
/// proxy-wasm filter, for Envoy, Istio and Envoy Gateway, or standalone with `ferrogate serve`.
#[derive(clap::Parser, Debug)]
#[command(name = "ferrogate", version, arg_required_else_help = true, after_help = QUICKSTART)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Standalone gateway: the filter in an embedded proxy-wasm host, forwarding to upstreams.
    Serve(crate::serve::ServeArgs),
    /// Companion of a filter running in Envoy/Istio: config snapshots, usage, admin API.
    Sidecar(crate::standalone::SidecarArgs),
    /// Endpoint picker for Gateway API Inference Extension gateways (Istio, kgateway,
    /// agentgateway, GKE): Envoy's ext_proc gRPC on `--listen`, answering each request with the
    /// filter's pick; `serve --epp-listen` without the gateway listener.
    #[command(
        mut_arg("listen", |a| a
            .default_value("0.0.0.0:9002")
            .help("Endpoint picker listener: ext_proc and gRPC health, h2c (the Inference Extension's port)")),
        mut_arg("epp_listen", |a| a.hide(true)),
        after_help = "Same flags as `ferrogate serve`; its HTTP gateway listener is not opened (a loopback port                       is taken for it). Manual: docs/endpoint-picker.md."
    )]
    Epp(crate::serve::ServeArgs),
    /// Simulated OpenAI-compatible engine (vLLM-like) for demos, tests and benchmarks.
    Sim(crate::sim::SimArgs),
    /// Run an http-wasm middleware (such as the Traefik build) in front of HTTP services the
    /// way Traefik runs it, where no Traefik is installed.
    HttpWasm(crate::httpwasm_cmd::HttpWasmArgs),
    /// Validate a configuration file and print every problem.
    Check(CheckArgs),
    /// Virtual key tools.
    Keys {
        /// What to do with keys.
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Guardrail tools.
    Guardrails {
        /// What to do.
        #[command(subcommand)]
        command: GuardrailsCommand,
    },
    /// Admin users of the PostgreSQL store (the first owner).
    Admin {
        /// What to do.
        #[command(subcommand)]
        command: crate::admin_cmd::AdminCommand,
    },
}

/// `ferrogate guardrails` subcommands.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum GuardrailsCommand {
    /// Run a built-in detector over standard input and print its matches as JSON lines
    /// (`{"start":…,"end":…,"text":…}`, byte offsets).
    Detect {
        /// The detector.
        #[arg(value_parser = ["email", "phone", "card", "iban", "ip", "ssn", "secret"])]
        detector: String,
        /// Scan each input line by itself and print one JSON array of its matches per line
        /// (offsets within the line).
        #[arg(long)]
        lines: bool,
    },
}

/// Options of `ferrogate check`: one of the three documents.
#[derive(clap::Args, Clone, Debug)]
#[group(required = true, multiple = false)]
pub struct CheckArgs {
    /// Configuration file (YAML or JSON); no default: this, --plugin-config or --traefik-settings.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The filter's plugin configuration as Envoy, Istio or Envoy Gateway would pass it (JSON,
    /// or YAML), checked by the filter's own parser, its inline `config` included; no default:
    /// this or --config.
    #[arg(long)]
    pub plugin_config: Option<PathBuf>,
    /// The Traefik middleware's settings (`http.middlewares.<name>.plugin.ferrogate`, JSON or
    /// YAML), checked by the Traefik build's own parser; no default: this, --config or
    /// --plugin-config.
    #[arg(long)]
    pub traefik_settings: Option<PathBuf>,
}

/// `ferrogate keys` subcommands.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum KeysCommand {
    /// Print a new virtual key and the `sha256:` digest to put in the config.
    New {
        /// A label printed with the key (not part of it); default: none.
        #[arg(long)]
        name: Option<String>,
    },
}

/// Validates a config file (or a plugin configuration); prints every problem, one per line;
/// non-zero exit on error.
pub fn check(args: &CheckArgs) -> ExitCode {
    match (&args.config, &args.plugin_config, &args.traefik_settings) {
        (Some(config), _, _) => check_config(config),
        (None, Some(plugin), _) => check_plugin_config(plugin),
        (None, None, Some(settings)) => check_traefik_settings(settings),
        (None, None, None) => ExitCode::FAILURE, // clap's group requires one
    }
}

/// Checks Traefik middleware settings with `ferrogate_core::traefik::Settings`, the guest's own
/// parser (YAML is turned into the JSON Traefik would hand the guest).
fn check_traefik_settings(path: &std::path::Path) -> ExitCode {
    let shown = path.display();
    let parsed = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_saphyr::from_str::<serde_json::Value>(&text).map_err(|e| e.to_string()))
        .and_then(|value| {
            ferrogate_core::traefik::Settings::from_json_slice(value.to_string().as_bytes()).map_err(|e| match e {
                ferrogate_core::traefik::SettingsError::Invalid(e) => {
                    e.problems.iter().map(ToString::to_string).collect::<Vec<_>>().join(&format!("\n{shown}: "))
                }
                e => e.to_string(),
            })
        });
    match parsed {
        Ok(_) => {
            println!("{shown}: ok (Traefik middleware settings)");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{shown}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check_config(path: &std::path::Path) -> ExitCode {
    match crate::serve::config::load(path) {
        Ok(loaded) => {
            println!(
                "{}: ok ({} providers, {} models, {} keys)",
                path.display(),
                loaded.config.providers.len(),
                loaded.config.models.len(),
                loaded.config.keys.len()
            );
            ExitCode::SUCCESS
        }
        Err(crate::serve::config::LoadError::Invalid { path, source }) => {
            for p in &source.problems {
                println!("{path}: {p}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Checks a plugin configuration with `PluginConfig::from_json_slice`, the filter's own parser
/// (YAML is turned into the JSON the proxy would hand the filter).
fn check_plugin_config(path: &std::path::Path) -> ExitCode {
    let shown = path.display();
    let json = match std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_saphyr::from_str::<serde_json::Value>(&text).map_err(|e| e.to_string()))
    {
        Ok(value) => value.to_string(),
        Err(e) => {
            println!("{shown}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(problems) = shape_problems(&json) {
        for p in &problems {
            println!("{shown}: {p}");
        }
        return ExitCode::FAILURE;
    }
    match ferrogate_core::plugin::PluginConfig::from_json_slice(json.as_bytes()) {
        Ok(_) => {
            println!("{shown}: ok (plugin configuration)");
            ExitCode::SUCCESS
        }
        Err(ferrogate_core::plugin::PluginConfigError::Invalid(e)) => {
            for p in &e.problems {
                println!("{shown}: {p}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("{shown}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Every unknown key of a plugin configuration with its path, before the filter's parser (which
/// stops at the first and names no path): the inline `config` as `ferrogate check --config`
/// reads it, under `config.`, then the plugin's own keys. `None` when the shape is right.
fn shape_problems(json: &str) -> Option<Vec<ferrogate_core::config::Problem>> {
    let mut value: serde_json::Value = serde_json::from_str(json).ok()?;
    let mut problems = Vec::new();
    if let Some(config) = value.as_object_mut().and_then(|o| o.remove("config")) {
        if let Ok(read) = crate::serve::config::shape::read(&config.to_string()) {
            let nested = read.problems.into_iter();
            problems
                .extend(nested.map(|p| ferrogate_core::config::Problem { path: format!("config.{}", p.path), ..p }));
        }
    }
    if let Err(e) = serde_json::from_value::<ferrogate_core::plugin::RawPluginConfig>(value) {
        // serde names an unknown field in its message: make it the path, as for the config.
        let message = e.to_string();
        let field = message.strip_prefix("unknown field `").and_then(|rest| rest.split('`').next());
        let path = field.unwrap_or("plugin configuration").to_string();
        let message = if field.is_some() { "unknown key".to_string() } else { message };
        problems.push(ferrogate_core::config::Problem { path, message });
    }
    (!problems.is_empty()).then_some(problems)
}

/// Runs a `keys` subcommand.
pub fn keys(cmd: &KeysCommand) -> ExitCode {
    match cmd {
        KeysCommand::New { name } => {
            let (key, digest) = new_key();
            if let Some(n) = name {
                println!("name:   {n}");
            }
            println!("key:    {key}");
            println!("digest: {digest}");
            ExitCode::SUCCESS
        }
    }
}

/// Runs a `guardrails` subcommand.
pub fn guardrails(cmd: &GuardrailsCommand) -> ExitCode {
    let GuardrailsCommand::Detect { detector, lines } = cmd;
    let Some(detector) = ferrogate_core::guard::detect::Detector::builtin(detector) else {
        eprintln!("ferrogate guardrails detect: unknown detector {detector}");
        return ExitCode::FAILURE;
    };
    let mut input = String::new();
    if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut input) {
        eprintln!("ferrogate guardrails detect: cannot read standard input as UTF-8 text: {e}");
        return ExitCode::FAILURE;
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = if *lines {
        input.lines().try_for_each(|line| json_line(&mut out, &detect_json(&detector, line)))
    } else {
        detect_json(&detector, &input).iter().try_for_each(|m| json_line(&mut out, m))
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrogate guardrails detect: cannot write the matches: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One match as `guardrails detect` prints it.
#[derive(serde::Serialize)]
struct Found<'a> {
    start: usize,
    end: usize,
    text: &'a str,
}

/// The matches of `detector` in `text`.
fn detect_json<'a>(detector: &ferrogate_core::guard::detect::Detector, text: &'a str) -> Vec<Found<'a>> {
    let mut found = Vec::new();
    detector.find(text, &mut found);
    found
        .iter()
        .map(|m| Found { start: m.start, end: m.end, text: text.get(m.start..m.end).unwrap_or_default() })
        .collect()
}

/// `value` as one line of JSON.
fn json_line(out: &mut impl std::io::Write, value: &impl serde::Serialize) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n")
}

/// A fresh virtual key (`fg-` + 32 random bytes in hex) and its `sha256:` digest.
pub fn new_key() -> (String, String) {
    let bytes: [u8; 32] = rand::random();
    let key = format!("fg-{}", hex::encode(bytes));
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(key.as_bytes())));
    (key, digest)
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every optional flag of every subcommand says what happens when it is not given.
    #[test]
    fn every_flag_names_its_default() {
        let mut missing = Vec::new();
        let root = Cli::command();
        let mut commands: Vec<&clap::Command> = root.get_subcommands().collect();
        while let Some(cmd) = commands.pop() {
            commands.extend(cmd.get_subcommands());
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") || arg.is_required_set() || arg.is_positional() {
                    continue;
                }
                let help = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default();
                let is_switch = matches!(arg.get_action(), clap::ArgAction::SetTrue | clap::ArgAction::Count);
                if arg.get_default_values().is_empty() && !is_switch && !help.contains("default") {
                    missing.push(format!("{} --{id}", cmd.get_name()));
                }
            }
        }
        assert!(missing.is_empty(), "flags whose help names no default: {missing:?}");
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn key_digest_matches_sha256_of_key() {
        let (key, digest) = new_key();
        assert!(key.starts_with("fg-") && key.len() == 67);
        let expected = format!("sha256:{}", hex::encode(Sha256::digest(key.as_bytes())));
        assert_eq!(digest, expected);
        assert_ne!(new_key().0, key);
    }
}
