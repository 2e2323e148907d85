//! Limits per Responses conversation: `tokens_per_conversation` and
//! `cost_usd_per_conversation` on a key, its groups or the org stop one runaway agent run
//! without stopping the key.
//!
//! A conversation is a `previous_response_id` chain. What it has used is what its stored
//! responses used, as their providers billed them (the sidecar sums them when it walks the
//! chain, [`crate::stored::chain::Chain`]). A follow-up is refused once that sum has reached a
//! limit: the turn that crosses a limit runs to its end (its size is not known before), the
//! next one is refused. Nothing frees a conversation's use, so the refusal says not to retry.

use crate::auth::Caller;
use crate::config::{Config, Limits};
use crate::error::ApiError;

/// What a conversation has used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    /// Input + output tokens.
    pub tokens: u64,
    /// Micro-USD, of the responses whose model is priced.
    pub micro_usd: u64,
}

/// Whether `caller` may go on with a conversation that has used `spent`.
///
/// # Errors
/// 429 naming the first limit reached (key, then its groups, then the org).
pub fn check(config: &Config, caller: Caller, spent: Spent) -> Result<(), ApiError> {
    let key = caller.key_index().and_then(|i| config.keys.get(i));
    if let Some(k) = key {
        reached(&k.limits, "key", &k.name, spent)?;
        for g in k.groups.iter().filter_map(|&g| config.groups.get(g)) {
            reached(&g.limits, "group", &g.name, spent)?;
        }
    }
    reached(&config.limits, "org", "", spent)
}

/// Whether any configuration has a conversation limit (else nothing needs summing).
pub fn any(config: &Config) -> bool {
    let set = |l: &Limits| l.tokens_per_conversation.is_some() || l.cost_usd_per_conversation.is_some();
    set(&config.limits) || config.keys.iter().any(|k| set(&k.limits)) || config.groups.iter().any(|g| set(&g.limits))
}

fn reached(limits: &Limits, scope: &str, name: &str, spent: Spent) -> Result<(), ApiError> {
    let whose = if name.is_empty() { scope.to_string() } else { format!("{scope} '{name}'") };
    if let Some(limit) = limits.tokens_per_conversation.filter(|&l| spent.tokens >= l) {
        let used = spent.tokens;
        return Err(refusal(format!(
            "This conversation has used {used} tokens, the limit of {limit} per conversation of {whose}"
        )));
    }
    let micro = limits.cost_usd_per_conversation.map(|usd| (usd * 1e6).round() as u64);
    if let Some(limit) = micro.filter(|&l| spent.micro_usd >= l) {
        let (used, limit) = (spent.micro_usd as f64 / 1e6, limit as f64 / 1e6);
        return Err(refusal(format!(
            "This conversation has cost {used:.6} USD, the limit of {limit:.6} USD per conversation of {whose}"
        )));
    }
    Ok(())
}

fn refusal(reason: String) -> ApiError {
    ApiError::conversation_limit(format!("{reason}; start a new conversation to go on."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, RawConfig};

    fn config() -> Config {
        let yaml = r#"
providers: [{ name: p, kind: openai_compatible, base_url: "http://p" }]
models: [{ name: m, targets: [{ provider: p, model: m }] }]
groups: [{ name: team, models: ["*"], limits: { cost_usd_per_conversation: 0.5 } }]
keys:
  - { name: a, digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111", groups: [team], limits: { tokens_per_conversation: 100 } }
  - { name: b, digest: "sha256:2222222222222222222222222222222222222222222222222222222222222222", models: ["*"] }
"#;
        Config::try_from(serde_saphyr::from_str::<RawConfig>(yaml).unwrap()).unwrap()
    }

    #[test]
    fn a_conversation_is_stopped_at_its_keys_or_groups_limit() {
        let c = config();
        assert!(any(&c));
        let a = Caller::Key(0);
        assert_eq!(check(&c, a, Spent { tokens: 99, micro_usd: 499_999 }), Ok(()));
        let e = check(&c, a, Spent { tokens: 100, micro_usd: 0 }).unwrap_err();
        assert_eq!((e.status, e.code), (429, Some("conversation_limit_exceeded")));
        assert!(e.message.contains("100 tokens") && e.message.contains("key 'a'"), "{}", e.message);
        let e = check(&c, a, Spent { tokens: 0, micro_usd: 500_000 }).unwrap_err();
        assert!(e.message.contains("group 'team'") && e.message.contains("0.500000 USD"), "{}", e.message);
        assert_eq!(check(&c, Caller::Key(1), Spent { tokens: u64::MAX, micro_usd: u64::MAX }), Ok(()));
        assert!(!any(&Config::default()));
    }
}
