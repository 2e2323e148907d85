//! Scoped grants: which entries of a named section (MCP servers, A2A agents) a key may reach,
//! and per entry which names inside it (tools, methods). Patterns are `*` (everything),
//! `entry` or `entry/*` (everything of one entry) and `entry/<glob>` (the names matching the
//! glob: `*` any run of characters, `?` one). The first `/` splits, so an A2A 0.3 method such
//! as `message/send` is granted as `agent/message/send` or `agent/message/*`.

use std::collections::BTreeMap;

use super::named::Named;
use super::validate::Problems;

/// What one key may reach in one section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scoped {
    /// `*`: every name of every entry.
    all: bool,
    /// Entry index → name patterns (`None`: every name).
    entries: BTreeMap<usize, Option<Vec<String>>>,
}

/// The names a key may use on one entry.
#[derive(Debug, Clone, Copy)]
pub struct Access<'a> {
    all: bool,
    patterns: &'a [String],
}

impl Access<'_> {
    /// Every name of the entry.
    pub const ALL: Access<'static> = Access { all: true, patterns: &[] };

    /// True when `name` may be used (a tool listed and called, a method called).
    pub fn allows(&self, name: &str) -> bool {
        self.all || self.patterns.iter().any(|p| crate::mcp::glob_match(p, name))
    }

    /// True when every name is allowed (nothing to check or filter).
    pub fn is_all(&self) -> bool {
        self.all
    }
}

impl Scoped {
    /// The names of entry `i` this key may use; `None` when the entry is not granted.
    pub fn entry(&self, i: usize) -> Option<Access<'_>> {
        if self.all {
            return Some(Access::ALL);
        }
        Some(match self.entries.get(&i)? {
            None => Access::ALL,
            Some(patterns) => Access { all: false, patterns },
        })
    }

    /// True when no entry is granted.
    pub fn is_empty(&self) -> bool {
        !self.all && self.entries.is_empty()
    }

    /// Flattens validated patterns (unknown entries cannot occur and are ignored).
    pub fn flatten<'a, T>(section: &Named<T>, patterns: impl Iterator<Item = &'a String>) -> Self {
        let mut g = Self::default();
        for pattern in patterns {
            if pattern == "*" {
                g.all = true;
                continue;
            }
            let (entry, name) = pattern.split_once('/').unwrap_or((pattern, "*"));
            let Some((i, _)) = section.get(entry) else { continue };
            match (name, g.entries.entry(i).or_insert_with(|| Some(Vec::new()))) {
                ("*", every) => *every = None,
                (name, Some(list)) => list.push(name.to_string()),
                (_, None) => {}
            }
        }
        g
    }
}

/// Checks grant patterns at `at` (e.g. `keys[0].mcp`) against `section`'s entries; `what`
/// names an entry in messages (`MCP server`), `inner` what the glob matches (`tool`).
pub(super) fn check<T>(at: &str, patterns: &[String], section: &Named<T>, what: (&str, &str), p: &mut Problems) {
    let (what, inner) = what;
    for (j, pattern) in patterns.iter().enumerate() {
        if pattern == "*" {
            continue;
        }
        let (entry, name) = pattern.split_once('/').unwrap_or((pattern, "*"));
        if section.get(entry).is_none() {
            p.add(format!("{at}[{j}]"), format!("unknown {what} {entry:?}"));
        } else if name.is_empty() || name.chars().any(char::is_control) {
            p.add(format!("{at}[{j}]"), format!("the {inner} pattern after '/' is empty or has control characters"));
        }
    }
}
