//! The `guardrails:` block and the `guardrails` lists of models, keys and groups: which
//! policies a request goes through, each policy's detector rules (compiled into
//! [`RuleSet`]s) and external checks (webhooks, moderation endpoints).
//!
//! Indexed here on its own: it reads the raw document (models, keys and groups in file
//! order, which is the validated order whenever the configuration is valid) and asks the
//! caller about providers, so it never needs [`super::Config`].

use serde::{Deserialize, Serialize};

use super::named::Named;
use super::syntax;
use super::validate::Problems;
use super::RawConfig;
use crate::guard::detect::Detector;
use crate::guard::scan::{Action, Rule, RuleSet};

/// The prefix of a webhook's upstream cluster name (`guardrail:<policy>:<rule>`).
pub const CLUSTER_PREFIX: &str = "guardrail:";
/// A check's deadline when none is configured, ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 1_000;
/// The longest deadline a check may have, ms.
const MAX_TIMEOUT_MS: u64 = 60_000;

/// One entry of `guardrails:` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawGuardrail {
    /// Slug, named by models, keys and groups.
    #[cfg_attr(feature = "schema", schemars(regex(pattern = super::syntax::SLUG_PATTERN)))]
    pub name: String,
    /// Rules for the request's text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input: Vec<RawGuardRule>,
    /// Rules for the answer's text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<RawGuardRule>,
    /// A request whose text parts hold more characters is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_prompt_chars: Option<u64>,
    /// Put the originals of this policy's input placeholders back into the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<bool>,
}

/// One rule of a policy as written: a detector with an action, or an external check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawGuardRule {
    /// The rule's name in errors, records and metrics (default: the detector or the kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `detector` (default), `webhook` or `moderation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `email`, `phone`, `card`, `iban`, `ip`, `ssn`, `secret`, `regex` or `keywords`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detector: Option<String>,
    /// `block`, `redact`, `mask` or `log`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The expression of a `regex` detector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The words and phrases of a `keywords` detector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub words: Vec<String>,
    /// A webhook's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A moderation check's provider (an `openai` or `openai_compatible` one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// A moderation check's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A check's deadline, ms (default 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// What an unanswered check means: `closed` (refuse, the default) or `open` (let through).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail: Option<String>,
}

/// A validated policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Name.
    pub name: String,
    /// Detector rules on the request.
    pub input: RuleSet,
    /// Detector rules on the answer.
    pub output: RuleSet,
    /// External checks of the request, in order.
    pub input_checks: Vec<Check>,
    /// External checks of a (non-streamed) answer, in order.
    pub output_checks: Vec<Check>,
    /// The most characters the request's text parts may hold.
    pub max_prompt_chars: Option<u64>,
    /// Input placeholders are restored in the answer.
    pub restore: bool,
}

impl Policy {
    /// True when the policy looks at answers.
    pub fn has_output(&self) -> bool {
        !self.output.is_empty() || !self.output_checks.is_empty() || self.restore
    }
}

/// An external check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The rule's name.
    pub name: String,
    /// Whom to ask.
    pub target: CheckTarget,
    /// Deadline, ms.
    pub timeout_ms: u64,
    /// An unanswered check lets the request through.
    pub fail_open: bool,
}

/// Whom a [`Check`] asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckTarget {
    /// A webhook: `POST` its URL ([`CLUSTER_PREFIX`] cluster).
    Webhook {
        /// Cluster name: `guardrail:<policy>:<rule>`.
        cluster: String,
        /// The URL, for `serve`'s cluster and the `:authority`/`:path` of the call.
        url: syntax::BaseUrl,
    },
    /// An OpenAI-compatible `/v1/moderations` endpoint of a configured provider.
    Moderation {
        /// Provider name (its cluster).
        provider: String,
        /// Moderation model, when one is named.
        model: Option<String>,
    },
}

/// Every policy, and which apply to each model, key and group (by their file index).
#[derive(Debug, Clone, Default)]
pub struct Guardrails {
    /// The policies by name.
    pub policies: Named<Policy>,
    by_model: Vec<Vec<usize>>,
    by_group: Vec<Vec<usize>>,
    by_key: Vec<Vec<usize>>,
}

impl PartialEq for Guardrails {
    // Compiled rule sets have no equality; two configurations compare by what was written.
    fn eq(&self, other: &Self) -> bool {
        let names = |g: &Guardrails| g.policies.items.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        names(self) == names(other)
            && (self.by_model == other.by_model && self.by_group == other.by_group && self.by_key == other.by_key)
    }
}

impl Guardrails {
    /// True when no policy is configured (the data path then skips guardrails entirely).
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The policies of a request to model `model` by key `key` in `groups`: the model's, then
    /// each group's, then the key's, each once.
    pub fn for_request(&self, model: Option<usize>, key: Option<usize>, groups: &[usize]) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        let lists = model
            .and_then(|m| self.by_model.get(m))
            .into_iter()
            .chain(groups.iter().filter_map(|g| self.by_group.get(*g)))
            .chain(key.and_then(|k| self.by_key.get(k)));
        for list in lists {
            for p in list {
                if !out.contains(p) {
                    out.push(*p);
                }
            }
        }
        out
    }

    /// The policy at `i`.
    pub fn policy(&self, i: usize) -> Option<&Policy> {
        self.policies.items.get(i)
    }
}

/// Checks `guardrails:` and every `guardrails` list; `openai_provider` says whether a provider
/// of that name exists and speaks OpenAI's API (`Some(false)`: exists, another API).
pub(super) fn validate(
    raw: &RawConfig,
    openai_provider: &dyn Fn(&str) -> Option<bool>,
    p: &mut Problems,
) -> Guardrails {
    let policies = Named::validate(
        "guardrails",
        &raw.guardrails,
        |g| g.name.as_str(),
        |i, g, p| policy(i, g, openai_provider, p),
        p,
    );
    let mut lists = |section: &str, names: &mut dyn Iterator<Item = &Vec<String>>| -> Vec<Vec<usize>> {
        names
            .enumerate()
            .map(|(i, list)| {
                let mut out = Vec::with_capacity(list.len());
                for (j, name) in list.iter().enumerate() {
                    match policies.get(name) {
                        Some((index, _)) => out.push(index),
                        None => p.add(
                            format!("{section}[{i}].guardrails[{j}]"),
                            format!("unknown guardrail policy {name:?}"),
                        ),
                    }
                }
                out
            })
            .collect()
    };
    let by_model = lists("models", &mut raw.models.iter().map(|m| &m.guardrails));
    let by_group = lists("groups", &mut raw.groups.iter().map(|g| &g.guardrails));
    let by_key = lists("keys", &mut raw.keys.iter().map(|k| &k.guardrails));
    Guardrails { policies, by_model, by_group, by_key }
}

fn policy(i: usize, raw: &RawGuardrail, openai: &dyn Fn(&str) -> Option<bool>, p: &mut Problems) -> Option<Policy> {
    let at = format!("guardrails[{i}]");
    p.check(format!("{at}.name"), syntax::check_slug(&raw.name));
    if raw.max_prompt_chars == Some(0) {
        p.add(format!("{at}.max_prompt_chars"), "must be at least 1");
    }
    let restore = raw.restore.unwrap_or(false);
    let (input, input_checks) = direction(&format!("{at}.input"), &raw.name, &raw.input, openai, p);
    let (output, output_checks) = direction(&format!("{at}.output"), &raw.name, &raw.output, openai, p);
    Some(Policy {
        name: raw.name.clone(),
        input: RuleSet::new(input, restore),
        output: RuleSet::new(output, false),
        input_checks,
        output_checks,
        max_prompt_chars: raw.max_prompt_chars,
        restore,
    })
}

/// One direction's rules: the detector rules and the checks.
fn direction(
    at: &str,
    policy: &str,
    raw: &[RawGuardRule],
    openai: &dyn Fn(&str) -> Option<bool>,
    p: &mut Problems,
) -> (Vec<Rule>, Vec<Check>) {
    let (mut rules, mut checks) = (Vec::new(), Vec::new());
    let mut names: Vec<String> = Vec::new();
    for (j, r) in raw.iter().enumerate() {
        let at = format!("{at}[{j}]");
        let kind = r.kind.as_deref().unwrap_or("detector");
        let name = r.name.clone().unwrap_or_else(|| r.detector.clone().unwrap_or_else(|| kind.to_string()));
        if let Err(e) = syntax::check_slug(&name) {
            p.add(format!("{at}.name"), e);
        } else if names.contains(&name) {
            p.add(format!("{at}.name"), format!("two rules named {name:?} (name one with `name:`)"));
        }
        names.push(name.clone());
        match kind {
            "detector" => rules.extend(detector_rule(&at, name, r, p)),
            "webhook" | "moderation" => checks.extend(check(&at, policy, name, kind, r, openai, p)),
            other => p.add(format!("{at}.kind"), format!("unknown kind {other:?} (detector, webhook or moderation)")),
        }
    }
    (rules, checks)
}

fn detector_rule(at: &str, name: String, r: &RawGuardRule, p: &mut Problems) -> Option<Rule> {
    let check_fields = [
        ("url", r.url.is_some()),
        ("provider", r.provider.is_some()),
        ("model", r.model.is_some()),
        ("timeout_ms", r.timeout_ms.is_some()),
        ("fail", r.fail.is_some()),
    ];
    for (field, _) in check_fields.into_iter().filter(|(_, set)| *set) {
        p.add(format!("{at}.{field}"), "only webhook and moderation rules take it");
    }
    let action = match r.action.as_deref().map(|a| (a, Action::parse(a))) {
        None => no(p, format!("{at}.action"), "a detector rule needs an action: block, redact, mask or log"),
        Some((_, Some(action))) => Some(action),
        Some((a, None)) => no(p, format!("{at}.action"), format!("unknown action {a:?} (block, redact, mask or log)")),
    };
    let detector = detector(at, r, p);
    Some(Rule { name, detector: detector?, action: action? })
}

fn detector(at: &str, r: &RawGuardRule, p: &mut Problems) -> Option<Detector> {
    let name = r.detector.as_deref().unwrap_or_default();
    let detector = match name {
        "regex" => Detector::regex(r.pattern.as_deref().unwrap_or_default())
            .map_err(|e| (format!("{at}.pattern"), e.to_string())),
        "keywords" => Detector::keywords(&r.words).map_err(|e| (format!("{at}.words"), e.to_string())),
        "" => Err((format!("{at}.detector"), "a detector rule needs a detector".to_string())),
        other => Detector::builtin(other).ok_or_else(|| {
            let known = "email, phone, card, iban, ip, ssn, secret, regex or keywords";
            (format!("{at}.detector"), format!("unknown detector {other:?} ({known})"))
        }),
    };
    if name != "regex" && r.pattern.is_some() {
        p.add(format!("{at}.pattern"), "only a regex detector takes a pattern");
    }
    if name != "keywords" && !r.words.is_empty() {
        p.add(format!("{at}.words"), "only a keywords detector takes words");
    }
    match detector {
        Ok(d) => Some(d),
        Err((path, e)) => no(p, path, e),
    }
}

fn check(
    at: &str,
    policy: &str,
    name: String,
    kind: &str,
    r: &RawGuardRule,
    openai: &dyn Fn(&str) -> Option<bool>,
    p: &mut Problems,
) -> Option<Check> {
    for (field, set) in [
        ("detector", r.detector.is_some()),
        ("action", r.action.is_some()),
        ("pattern", r.pattern.is_some()),
        ("words", !r.words.is_empty()),
    ] {
        if set {
            p.add(format!("{at}.{field}"), "only detector rules take it");
        }
    }
    let timeout_ms = r.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        p.add(format!("{at}.timeout_ms"), format!("must be between 1 and {MAX_TIMEOUT_MS}"));
    }
    let fail_open = match r.fail.as_deref() {
        None | Some("closed") => false,
        Some("open") => true,
        Some(other) => {
            no(p, format!("{at}.fail"), format!("unknown value {other:?} (open or closed)")).unwrap_or(false)
        }
    };
    let target = if kind == "webhook" { webhook(at, policy, &name, r, p) } else { moderation(at, r, openai, p) };
    Some(Check { name, target: target?, timeout_ms, fail_open })
}

fn webhook(at: &str, policy: &str, name: &str, r: &RawGuardRule, p: &mut Problems) -> Option<CheckTarget> {
    for (field, set) in [("provider", r.provider.is_some()), ("model", r.model.is_some())] {
        if set {
            p.add(format!("{at}.{field}"), "only moderation rules take it");
        }
    }
    let Some(url) = &r.url else { return no(p, format!("{at}.url"), "a webhook needs a url") };
    let url = p.check(format!("{at}.url"), syntax::parse_base_url(url))?;
    Some(CheckTarget::Webhook { cluster: format!("{CLUSTER_PREFIX}{policy}:{name}"), url })
}

fn moderation(
    at: &str,
    r: &RawGuardRule,
    openai: &dyn Fn(&str) -> Option<bool>,
    p: &mut Problems,
) -> Option<CheckTarget> {
    if r.url.is_some() {
        p.add(format!("{at}.url"), "a moderation rule names a provider, not a url");
    }
    let Some(provider) = &r.provider else {
        return no(p, format!("{at}.provider"), "a moderation rule needs a provider");
    };
    match openai(provider) {
        None => no(p, format!("{at}.provider"), format!("unknown provider {provider:?}")),
        Some(false) => no(
            p,
            format!("{at}.provider"),
            format!("provider {provider:?} does not speak OpenAI's API (/v1/moderations)"),
        ),
        Some(true) => Some(CheckTarget::Moderation { provider: provider.clone(), model: r.model.clone() }),
    }
}

/// Records a problem where a value was expected.
fn no<T>(p: &mut Problems, path: String, message: impl Into<String>) -> Option<T> {
    p.add(path, message);
    None
}

#[cfg(test)]
mod tests;
