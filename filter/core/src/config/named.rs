//! A section's entries in file order, looked up by name: MCP servers, A2A agents.

use std::collections::BTreeMap;

use super::validate::Problems;

/// Validated entries of one section, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named<T> {
    /// The entries in file order.
    pub items: Vec<T>,
    index: BTreeMap<String, usize>,
}

impl<T> Default for Named<T> {
    fn default() -> Self {
        Self { items: Vec::new(), index: BTreeMap::new() }
    }
}

impl<T> Named<T> {
    /// The entry named `name` and its index in `items`.
    pub fn get(&self, name: &str) -> Option<(usize, &T)> {
        let i = *self.index.get(name)?;
        Some((i, self.items.get(i)?))
    }

    /// True when the section has no entry.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Validates `raw` with `entry` (given each one's position); a name given twice is
    /// reported at `section[i].name` and that later entry left out.
    pub(super) fn validate<R>(
        section: &str,
        raw: &[R],
        name_of: impl Fn(&R) -> &str,
        mut entry: impl FnMut(usize, &R, &mut Problems) -> Option<T>,
        p: &mut Problems,
    ) -> Self {
        let mut out = Self::default();
        for (i, r) in raw.iter().enumerate() {
            let name = name_of(r);
            if out.index.contains_key(name) {
                p.add(format!("{section}[{i}].name"), format!("duplicate name {name:?}"));
                continue;
            }
            if let Some(item) = entry(i, r, p) {
                out.index.insert(name.to_string(), out.items.len());
                out.items.push(item);
            }
        }
        out
    }
}
