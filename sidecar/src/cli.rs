//! Small commands and helpers of the `ferrogate` binary: `check`, `keys new`, signals.

use std::path::PathBuf;
use std::process::ExitCode;

use sha2::{Digest, Sha256};

/// Options of `ferrogate check`.
#[derive(clap::Args, Clone, Debug)]
pub struct CheckArgs {
    /// Configuration file (YAML or JSON).
    #[arg(long)]
    pub config: PathBuf,
}

/// `ferrogate keys` subcommands.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum KeysCommand {
    /// Print a new virtual key and the `sha256:` digest to put in the config.
    New {
        /// A label printed with the key (not part of it).
        #[arg(long)]
        name: Option<String>,
    },
}

/// Validates a config file; prints every problem, one per line; non-zero exit on error.
pub fn check(args: &CheckArgs) -> ExitCode {
    match crate::serve::config::load(&args.config) {
        Ok(loaded) => {
            println!(
                "{}: ok ({} providers, {} models, {} keys)",
                args.config.display(),
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

    #[test]
    fn key_digest_matches_sha256_of_key() {
        let (key, digest) = new_key();
        assert!(key.starts_with("fg-") && key.len() == 67);
        let expected = format!("sha256:{}", hex::encode(Sha256::digest(key.as_bytes())));
        assert_eq!(digest, expected);
        assert_ne!(new_key().0, key);
    }
}
