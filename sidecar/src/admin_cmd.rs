//! `ferrogate admin`: admin users from the command line, for the first owner (before anyone
//! can log in to make one through the API) and for recovery.
//!
//! `ferrogate admin create-user --config ferrogate.yaml --name alice --password-stdin`
//! connects to the database the configuration's `store:` names (as `serve` does, the URL from
//! the variable `store.url_env`, default `FERROGATE_DATABASE_URL`; or `--database-url`),
//! applies pending migrations, creates the user and writes an audit record (actor `cli`). The
//! password comes from standard input or `FERROGATE_ADMIN_PASSWORD`, never from an argument
//! (arguments are visible to every local user in the process list).

use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::services::identity::audit::{self, Who};
use crate::services::identity::users::{self, NewUser, UserView};
use crate::services::identity::{passwords, AdminSettings, AuditEvent, IdentityError, RequestMeta, Role};
use crate::services::pg::{PgStore, StoreError};

/// The variable holding the new user's password when `--password-stdin` is not given.
pub const PASSWORD_ENV: &str = "FERROGATE_ADMIN_PASSWORD";

/// `ferrogate admin` subcommands.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum AdminCommand {
    /// Create an admin user in the PostgreSQL store (the first owner, typically).
    CreateUser(CreateUserArgs),
}

/// Options of `ferrogate admin create-user`.
#[derive(clap::Args, Clone, Debug)]
pub struct CreateUserArgs {
    /// Configuration file whose `store:` names the database (and whose `admin.login` sets the
    /// shortest password); no default: this or --database-url.
    #[arg(long, required_unless_present = "database_url", conflicts_with = "database_url")]
    pub config: Option<PathBuf>,
    /// PostgreSQL URL of the store, instead of --config; no default.
    #[arg(long)]
    pub database_url: Option<String>,
    /// The user's name: 1 to 64 of a-z, 0-9, '.', '_', '@', '-', starting with a letter or digit.
    #[arg(long)]
    pub name: String,
    /// The user's role: owner, admin, key-manager or viewer.
    #[arg(long, default_value = "owner")]
    pub role: String,
    /// Key groups a key-manager may manage (repeatable); default: none (every group).
    #[arg(long = "key-group")]
    pub key_groups: Vec<String>,
    /// Read the password from the first line of standard input (default: the variable
    /// FERROGATE_ADMIN_PASSWORD).
    #[arg(long)]
    pub password_stdin: bool,
}

/// Why `ferrogate admin` failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminCmdError {
    /// The arguments or the configuration do not say enough.
    #[error("{0}")]
    Usage(String),
    /// The store could not be reached or migrated.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The user could not be made.
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

/// Runs an `admin` subcommand; prints the result or the error.
pub async fn run(cmd: AdminCommand) -> ExitCode {
    let AdminCommand::CreateUser(args) = cmd;
    match create_user(&args).await {
        Ok(user) => {
            println!("{}", serde_json::to_string_pretty(&user).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferrogate admin create-user: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Creates the user `args` describe; returns it as the API shows it (no secret).
///
/// # Errors
/// See [`AdminCmdError`].
pub async fn create_user(args: &CreateUserArgs) -> Result<UserView, AdminCmdError> {
    let role = Role::parse(&args.role).map_err(|e| AdminCmdError::Usage(format!("--role: {e}")))?;
    users::check_name(&args.name)?;
    users::check_groups(&args.key_groups)?;
    let (url, settings) = database(args)?;
    let password = password(args)?;
    passwords::check_policy(&password, &args.name, settings.password_min_length)?;
    let password_hash = Some(passwords::hash_blocking(&password).await?);
    let store = PgStore::connect(&url, None).await?;
    let new = NewUser { name: args.name.clone(), role, key_groups: args.key_groups.clone(), password_hash };
    let made = users::create(store.pool(), &new).await?;
    let meta = RequestMeta {
        method: "CLI".into(),
        path: "ferrogate admin create-user".into(),
        user_agent: Some(format!("ferrogate/{}", env!("CARGO_PKG_VERSION"))),
        source_ip: None,
    };
    let event = AuditEvent {
        action: "user_created".into(),
        object: Some(format!("users/{}", made.name)),
        after: serde_json::to_value(&made).ok(),
        status: 200,
        ..AuditEvent::default()
    };
    if let Err(e) = audit::write(store.pool(), &Who::cli(), &meta, event, settings.audit_retention_days).await {
        eprintln!("ferrogate admin create-user: the user was made, but its audit record was not written: {e}");
    }
    Ok(made)
}

/// The database URL and the `admin:` settings (defaults with `--database-url`).
fn database(args: &CreateUserArgs) -> Result<(String, AdminSettings), AdminCmdError> {
    if let Some(url) = &args.database_url {
        return Ok((url.clone(), AdminSettings::default()));
    }
    let Some(path) = &args.config else {
        return Err(AdminCmdError::Usage("pass --config FILE or --database-url URL".into()));
    };
    let raw = crate::serve::config::read_raw(path).map_err(|e| AdminCmdError::Usage(e.to_string()))?;
    let settings = crate::services::admin::settings_of(path).map_err(|e| AdminCmdError::Usage(e.to_string()))?;
    if !crate::services::source::is_postgres(&raw) {
        return Err(AdminCmdError::Usage(format!(
            "{}: admin users need store: {{ kind: postgres }} (the file store has only FERROGATE_ADMIN_TOKEN)",
            path.display()
        )));
    }
    let var = raw.store.and_then(|s| s.url_env).unwrap_or_else(|| "FERROGATE_DATABASE_URL".into());
    let url = std::env::var(&var).map_err(|_| AdminCmdError::Usage(format!("{var} is not set")))?;
    Ok((url, settings))
}

/// The password: the first line of standard input, or the variable.
fn password(args: &CreateUserArgs) -> Result<String, AdminCmdError> {
    if !args.password_stdin {
        return std::env::var(PASSWORD_ENV).map_err(|_| {
            AdminCmdError::Usage(format!(
                "no password: pass --password-stdin (one line on stdin) or set {PASSWORD_ENV}"
            ))
        });
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| AdminCmdError::Usage(format!("standard input cannot be read: {e}")))?;
    let password = line.trim_end_matches(['\n', '\r']).to_string();
    if password.is_empty() {
        return Err(AdminCmdError::Usage("no password on standard input".into()));
    }
    Ok(password)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<CreateUserArgs, clap::Error> {
        let cli = Cli::try_parse_from([&["ferrogate", "admin", "create-user"], args].concat())?;
        match cli.command {
            Command::Admin { command: AdminCommand::CreateUser(a) } => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_command_line_needs_a_database_and_a_name() {
        let a = parse(&["--config", "f.yaml", "--name", "alice", "--password-stdin"]).unwrap();
        assert_eq!((a.role.as_str(), a.password_stdin), ("owner", true));
        assert!(parse(&["--name", "alice"]).is_err(), "no --config nor --database-url");
        assert!(parse(&["--config", "f", "--database-url", "postgres://x", "--name", "a"]).is_err());
        assert!(parse(&["--database-url", "postgres://x"]).is_err(), "no --name");
    }

    #[tokio::test]
    async fn bad_roles_names_and_stores_are_refused_before_connecting() {
        let mut a = parse(&["--database-url", "postgres://nowhere.invalid/x", "--name", "alice"]).unwrap();
        a.role = "root".into();
        let e = create_user(&a).await.unwrap_err().to_string();
        assert!(e.contains("owner, admin, key-manager or viewer"), "{e}");
        a.role = "admin".into();
        a.name = "Alice Smith".into();
        assert!(create_user(&a).await.unwrap_err().to_string().contains("a-z, 0-9"));
        let dir = std::env::temp_dir().join(format!("fg-admin-cmd-{:x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f.yaml");
        std::fs::write(&file, "providers: []\n").unwrap();
        let b = parse(&["--config", file.to_str().unwrap(), "--name", "alice"]).unwrap();
        let e = create_user(&b).await.unwrap_err().to_string();
        assert!(e.contains("kind: postgres"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
