//! Dropping unservable rows: validate, map each problem to the row its path names, remove
//! those rows, validate again (a dropped provider can strand the models that used it), until
//! the document validates. Paths in the result always name rows of the original document.

use crate::config::{Config, ConfigError, Problem, RawConfig};

use super::Built;

/// Rounds of dropping before giving up: each round removes at least one row and cascades are
/// shallow (provider → model → alias or fallback → ...).
const MAX_ROUNDS: usize = 16;

/// The sections that are lists of rows (addressed `section[i]` in problem paths).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum List {
    Providers,
    Models,
    Groups,
    Keys,
    McpServers,
    A2aAgents,
}

impl List {
    const ALL: [List; 6] = [List::Providers, List::Models, List::Groups, List::Keys, List::McpServers, List::A2aAgents];

    fn name(self) -> &'static str {
        match self {
            List::Providers => "providers",
            List::Models => "models",
            List::Groups => "groups",
            List::Keys => "keys",
            List::McpServers => "mcp_servers",
            List::A2aAgents => "a2a_agents",
        }
    }

    fn len(self, raw: &RawConfig) -> usize {
        match self {
            List::Providers => raw.providers.len(),
            List::Models => raw.models.len(),
            List::Groups => raw.groups.len(),
            List::Keys => raw.keys.len(),
            List::McpServers => raw.mcp_servers.len(),
            List::A2aAgents => raw.a2a_agents.len(),
        }
    }

    fn remove(self, raw: &mut RawConfig, i: usize) {
        match self {
            List::Providers => drop(raw.providers.remove(i)),
            List::Models => drop(raw.models.remove(i)),
            List::Groups => drop(raw.groups.remove(i)),
            List::Keys => drop(raw.keys.remove(i)),
            List::McpServers => drop(raw.mcp_servers.remove(i)),
            List::A2aAgents => drop(raw.a2a_agents.remove(i)),
        }
    }
}

/// A row of the document: list sections by index, map sections by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Row {
    Listed(List, usize),
    Aliases(String),
    Pricing(String),
}

pub(super) fn build(mut raw: RawConfig) -> Result<Built, ConfigError> {
    // Original positions of the rows still present, per list section.
    let mut origin = Origins::of(&raw);
    let mut dropped = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let problems = match Config::try_from(raw.clone()) {
            Ok(config) => return Ok(Built { config, raw, problems: dropped }),
            Err(e) => e.problems,
        };
        let mut rows = Vec::new();
        let mut structural = Vec::new();
        for p in problems {
            match row_of(&p.path, &raw) {
                Some(row) => {
                    let path = origin.rewrite(&p.path, &row);
                    dropped.push(Problem { path, message: format!("{} (row dropped)", p.message) });
                    rows.push(row);
                }
                None => structural.push(p),
            }
        }
        if !structural.is_empty() || rows.is_empty() {
            structural.extend(dropped);
            return Err(ConfigError { problems: structural });
        }
        rows.sort();
        rows.dedup();
        // Remove from the back so earlier indices stay valid.
        for row in rows.into_iter().rev() {
            origin.remove(&row);
            remove(&mut raw, &row);
        }
    }
    Err(ConfigError { problems: dropped })
}

/// The row a problem path names, if it names one of `raw`'s rows.
fn row_of(path: &str, raw: &RawConfig) -> Option<Row> {
    let indexed = |prefix: &str| -> Option<usize> {
        let rest = path.strip_prefix(prefix)?.strip_prefix('[')?;
        rest.split_once(']')?.0.parse().ok()
    };
    // Map keys may contain dots (`pricing.gpt-4.1.input_per_mtok`): match whole known names.
    let named = |prefix: &str, names: &mut dyn Iterator<Item = &String>| -> Option<String> {
        let rest = path.strip_prefix(prefix)?.strip_prefix('.')?;
        names
            .filter(|n| rest == n.as_str() || rest.strip_prefix(n.as_str()).is_some_and(|r| r.starts_with('.')))
            .max_by_key(|n| n.len())
            .cloned()
    };
    for list in List::ALL {
        if let Some(i) = indexed(list.name()) {
            return (i < list.len(raw)).then_some(Row::Listed(list, i));
        }
    }
    if let Some(n) = named("aliases", &mut raw.aliases.keys()) {
        return Some(Row::Aliases(n));
    }
    named("pricing", &mut raw.pricing.keys()).map(Row::Pricing)
}

fn remove(raw: &mut RawConfig, row: &Row) {
    match row {
        Row::Listed(list, i) => list.remove(raw, *i),
        Row::Aliases(n) => drop(raw.aliases.remove(n)),
        Row::Pricing(n) => drop(raw.pricing.remove(n)),
    }
}

/// For each list section (in [`List::ALL`]'s order), the original index of every row still
/// present.
struct Origins([Vec<usize>; 6]);

impl Origins {
    fn of(raw: &RawConfig) -> Self {
        Origins(List::ALL.map(|list| (0..list.len(raw)).collect()))
    }

    fn section(&mut self, row: &Row) -> Option<(&'static str, &mut Vec<usize>, usize)> {
        let Row::Listed(list, i) = *row else { return None };
        let at = List::ALL.iter().position(|l| *l == list)?;
        Some((list.name(), self.0.get_mut(at)?, i))
    }

    /// `path` with the current row index replaced by the original one.
    fn rewrite(&mut self, path: &str, row: &Row) -> String {
        let Some((name, list, i)) = self.section(row) else { return path.to_string() };
        let original = list.get(i).copied().unwrap_or(i);
        let rest = path.split_once(']').map_or("", |(_, r)| r);
        format!("{name}[{original}]{rest}")
    }

    fn remove(&mut self, row: &Row) {
        if let Some((_, list, i)) = self.section(row) {
            if i < list.len() {
                list.remove(i);
            }
        }
    }
}
