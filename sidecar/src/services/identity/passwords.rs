//! Password hashes and the password policy.
//!
//! Hashes are argon2id PHC strings with OWASP's minimum parameters (m=19456 KiB, t=2, p=1) and
//! a random 16-byte salt each. A hash made with other parameters still verifies, and
//! [`Verified::rehash`] tells the login to store a new one. Unknown users are checked against
//! a dummy hash so a login takes as long, and says the same, whether the name exists or not.
//! Hashing is CPU-bound (tens of milliseconds): callers run it on a blocking thread
//! ([`hash_blocking`], [`verify_blocking`]).

use std::sync::OnceLock;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};

use super::IdentityError;

/// Memory cost, KiB (OWASP: 19 MiB with t=2).
pub const M_COST: u32 = 19_456;
/// Iterations.
pub const T_COST: u32 = 2;
/// Parallelism.
pub const P_COST: u32 = 1;
/// Longest password accepted, bytes: argon2 takes any length, but a megabyte of password
/// would only be a way to make the server hash a megabyte.
pub const MAX_BYTES: usize = 1024;

/// The hasher with the parameters above.
fn argon2() -> Result<Argon2<'static>, IdentityError> {
    let params = Params::new(M_COST, T_COST, P_COST, None).map_err(|e| IdentityError::Hash(e.to_string()))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

/// The PHC string of `password` with a fresh salt.
///
/// # Errors
/// [`IdentityError::Hash`] if argon2 refuses (it does not for these parameters).
pub fn hash(password: &str) -> Result<String, IdentityError> {
    let salt_bytes: [u8; 16] = rand::random();
    let salt = SaltString::encode_b64(&salt_bytes).map_err(|e| IdentityError::Hash(e.to_string()))?;
    let phc = argon2()?.hash_password(password.as_bytes(), &salt).map_err(|e| IdentityError::Hash(e.to_string()))?;
    Ok(phc.to_string())
}

/// The outcome of a password check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// The password matches.
    pub ok: bool,
    /// It matches, but the stored hash has other parameters than ours: store a new one.
    pub rehash: bool,
}

/// Checks `password` against the stored PHC string `phc`. An unreadable hash is a mismatch
/// (logged without the hash).
pub fn verify(password: &str, phc: &str) -> Verified {
    let Ok(parsed) = PasswordHash::new(phc) else {
        tracing::warn!("a stored password hash cannot be parsed; the login is refused");
        return Verified { ok: false, rehash: false };
    };
    let Ok(hasher) = argon2() else { return Verified { ok: false, rehash: false } };
    let ok = hasher.verify_password(password.as_bytes(), &parsed).is_ok();
    Verified { ok, rehash: ok && !current(&parsed) }
}

/// Whether `h` was made with this module's algorithm, version and parameters.
fn current(h: &PasswordHash<'_>) -> bool {
    let param = |name: &str| h.params.get_decimal(name);
    h.algorithm.as_str() == "argon2id"
        && h.version == Some(0x13)
        && param("m") == Some(M_COST)
        && param("t") == Some(T_COST)
        && param("p") == Some(P_COST)
}

/// A hash of a random password, made once: what unknown users are verified against.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        let random: [u8; 24] = rand::random();
        hash(&hex::encode(random)).unwrap_or_default()
    })
}

/// Makes the dummy hash now (it takes as long as a login).
pub fn warm_up() {
    let _ = dummy_hash();
}

/// Spends the time of a real check and fails: for a name with no user or no password.
pub fn dummy_verify(password: &str) -> Verified {
    let _ = verify(password, dummy_hash());
    Verified { ok: false, rehash: false }
}

/// [`hash`] on a blocking thread.
///
/// # Errors
/// As [`hash`].
pub async fn hash_blocking(password: &str) -> Result<String, IdentityError> {
    let password = password.to_string();
    tokio::task::spawn_blocking(move || hash(&password)).await.map_err(|e| IdentityError::Hash(e.to_string()))?
}

/// [`verify`] on a blocking thread; `None` for the stored hash means [`dummy_verify`].
pub async fn verify_blocking(password: &str, phc: Option<String>) -> Verified {
    let password = password.to_string();
    let checked = tokio::task::spawn_blocking(move || match phc {
        Some(phc) => verify(&password, &phc),
        None => dummy_verify(&password),
    });
    checked.await.unwrap_or(Verified { ok: false, rehash: false })
}

/// Checks a new password against the policy: at least `min_chars` characters, at most
/// [`MAX_BYTES`] bytes, not the user's name. The error names the rule broken (never the
/// password).
///
/// # Errors
/// [`IdentityError::Invalid`] naming the rule.
pub fn check_policy(password: &str, user: &str, min_chars: u32) -> Result<(), IdentityError> {
    let chars = password.chars().count();
    if chars < min_chars as usize {
        return Err(IdentityError::Invalid(format!(
            "password too short: at least {min_chars} characters (admin.login.password_min_length)"
        )));
    }
    if password.len() > MAX_BYTES {
        return Err(IdentityError::Invalid(format!("password too long: at most {MAX_BYTES} bytes")));
    }
    if password.eq_ignore_ascii_case(user) {
        return Err(IdentityError::Invalid("password must not be the user name".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_argon2id_phc_strings_with_owasp_parameters() {
        let phc = hash("correct horse battery staple").unwrap();
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        assert!(!phc.contains("correct horse"));
        assert_ne!(hash("correct horse battery staple").unwrap(), phc, "a fresh salt each time");
        assert_eq!(verify("correct horse battery staple", &phc), Verified { ok: true, rehash: false });
        assert_eq!(verify("correct horse battery stapler", &phc), Verified { ok: false, rehash: false });
        assert!(!verify("x", "not a hash").ok);
        assert!(!dummy_verify("anything").ok);
    }

    #[test]
    fn other_parameters_verify_and_ask_for_a_rehash() {
        let weak = Argon2::new(Algorithm::Argon2id, Version::V0x13, Params::new(8192, 1, 1, None).unwrap());
        let salt = SaltString::encode_b64(&[7u8; 16]).unwrap();
        let phc = weak.hash_password(b"an older password hash", &salt).unwrap().to_string();
        assert_eq!(verify("an older password hash", &phc), Verified { ok: true, rehash: true });
        assert_eq!(verify("another password", &phc), Verified { ok: false, rehash: false });
    }

    #[test]
    fn the_policy_names_the_rule() {
        let short = check_policy("short", "alice", 15).unwrap_err().to_string();
        assert!(short.contains("at least 15 characters") && !short.contains("short,"), "{short}");
        // Characters, not bytes: 15 two-byte characters pass.
        assert!(check_policy(&"é".repeat(15), "alice", 15).is_ok());
        let long = check_policy(&"a".repeat(MAX_BYTES + 1), "alice", 15).unwrap_err().to_string();
        assert!(long.contains("at most 1024 bytes"), "{long}");
        let name = check_policy("alice.example.org", "Alice.Example.org", 8).unwrap_err().to_string();
        assert!(name.contains("user name"), "{name}");
    }
}
