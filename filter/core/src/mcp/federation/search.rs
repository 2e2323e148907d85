//! The ranking behind the federated endpoint's `search_tools` meta-tool: which granted tools
//! match a query, best first, so a client with hundreds of tools can hand the model a few.
//!
//! Okapi BM25 over each tool's words: its name (split at `_`, `-`, `.`, `/` and camelCase,
//! counted three times, since a name says most about what a tool does) and its description.
//! Words are lowercased, common English words left out and a plural `s` dropped, so "files"
//! finds `read_file`. No model and no
//! index: a list of tools is small enough to score whole at each call.

/// BM25's term-frequency saturation.
const K1: f64 = 1.2;
/// BM25's length normalisation.
const B: f64 = 0.75;
/// How many times a name's words count against the description's.
const NAME_WEIGHT: usize = 3;
/// The most of a query read, in bytes, and the most distinct words of it scored: a query is a
/// few words, and the client sends it, so it must not cost more than a few words do.
pub const MAX_QUERY_BYTES: usize = 1024;
/// See [`MAX_QUERY_BYTES`].
pub const MAX_QUERY_WORDS: usize = 32;
/// English words too common to tell tools apart ("the weather in Paris" is about weather).
const STOP_WORDS: [&str; 16] =
    ["an", "and", "are", "at", "by", "for", "from", "in", "is", "it", "of", "on", "or", "the", "to", "with"];

/// A tool to rank: its (federated) name and its description.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// The tool's name.
    pub name: &'a str,
    /// Its description (may be empty).
    pub description: &'a str,
}

/// The indices of the `limit` candidates that best match `query`, best first; candidates
/// sharing no word with the query are left out.
pub fn rank(query: &str, candidates: &[Candidate<'_>], limit: usize) -> Vec<usize> {
    let mut end = query.len().min(MAX_QUERY_BYTES);
    while !query.is_char_boundary(end) {
        end -= 1;
    }
    let mut terms = dedup(words(query.get(..end).unwrap_or_default()));
    terms.truncate(MAX_QUERY_WORDS);
    if terms.is_empty() || limit == 0 {
        return Vec::new();
    }
    let docs: Vec<Vec<String>> = candidates.iter().map(document).collect();
    let avg = docs.iter().map(Vec::len).sum::<usize>() as f64 / docs.len().max(1) as f64;
    let idf: Vec<f64> = terms.iter().map(|t| inverse_frequency(t, &docs)).collect();
    let mut scored: Vec<(usize, f64)> =
        docs.iter().enumerate().map(|(i, doc)| (i, score(doc, &terms, &idf, avg))).filter(|(_, s)| *s > 0.0).collect();
    // Best first; equal scores keep the list's order.
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.into_iter().take(limit).map(|(i, _)| i).collect()
}

fn document(c: &Candidate<'_>) -> Vec<String> {
    let name = words(c.name);
    let mut doc = Vec::with_capacity(name.len() * NAME_WEIGHT);
    for _ in 0..NAME_WEIGHT {
        doc.extend(name.iter().cloned());
    }
    doc.extend(words(c.description));
    doc
}

fn inverse_frequency(term: &str, docs: &[Vec<String>]) -> f64 {
    let n = docs.len() as f64;
    let df = docs.iter().filter(|d| d.iter().any(|w| w == term)).count() as f64;
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

fn score(doc: &[String], terms: &[String], idf: &[f64], avg: f64) -> f64 {
    let len = doc.len() as f64;
    terms
        .iter()
        .zip(idf)
        .map(|(t, idf)| {
            let tf = doc.iter().filter(|w| *w == t).count() as f64;
            idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg.max(1.0)))
        })
        .sum()
}

/// The words of a text: runs of letters and digits, split at camelCase, lowercased, a plural
/// `s` dropped; one-letter and [`STOP_WORDS`] are left out.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            push_word(&mut out, &mut word);
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            push_word(&mut out, &mut word);
        }
        prev_lower = c.is_lowercase() || c.is_numeric();
        word.extend(c.to_lowercase());
    }
    push_word(&mut out, &mut word);
    out
}

fn push_word(out: &mut Vec<String>, word: &mut String) {
    let w = std::mem::take(word);
    if w.chars().count() < 2 || STOP_WORDS.contains(&w.as_str()) {
        return;
    }
    let stem = match w.strip_suffix('s') {
        Some(s) if s.len() >= 3 && !s.ends_with('s') => s.to_string(),
        _ => w,
    };
    out.push(stem);
}

fn dedup(mut words: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::with_capacity(words.len());
    words.retain(|w| seen.insert(w.clone()));
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c<'a>(name: &'a str, description: &'a str) -> Candidate<'a> {
        Candidate { name, description }
    }

    #[test]
    fn words_split_names_and_drop_plurals() {
        assert_eq!(words("files__readFile"), ["file", "read", "file"]);
        assert_eq!(words("get-weather.v2 Forecasts"), ["get", "weather", "v2", "forecast"]);
        assert_eq!(words("a class of the tools"), ["class", "tool"]);
    }

    #[test]
    fn the_tool_named_for_the_query_comes_first() {
        let tools = [
            c("github__create_issue", "Open an issue in a repository"),
            c("files__read_file", "Read a file from disk"),
            c("weather__forecast", "The weather forecast for a city"),
            c("files__write_file", "Write text to a file"),
        ];
        assert_eq!(rank("weather in Paris", &tools, 5), [2]);
        let files = rank("read files", &tools, 5);
        assert_eq!(files.first(), Some(&1));
        assert!(files.contains(&3));
        assert_eq!(rank("read files", &tools, 1), [1]);
        // A name outweighs a description's passing mention.
        let issue = rank("issue", &[c("notes__add", "add a note about an issue"), tools[0]], 2);
        assert_eq!(issue, [1, 0]);
    }

    #[test]
    fn a_long_query_is_read_only_in_part() {
        let tools = [c("files__read_file", "Read a file")];
        let long = format!("{} read", "padding ".repeat(200));
        assert!(rank(&long, &tools, 5).is_empty(), "words past MAX_QUERY_BYTES are not read");
        let many: String = (0..40).map(|i| format!("w{i} ")).collect::<String>() + "read";
        assert!(rank(&many, &tools, 5).is_empty(), "words past MAX_QUERY_WORDS are not scored");
        assert_eq!(rank(&format!("read {}", "é".repeat(600)), &tools, 5), [0]);
    }

    #[test]
    fn no_shared_word_no_match() {
        let tools = [c("files__read_file", "Read a file")];
        assert!(rank("kubernetes", &tools, 5).is_empty());
        assert!(rank("", &tools, 5).is_empty());
        assert!(rank("read", &tools, 0).is_empty());
        assert!(rank("read", &[], 5).is_empty());
    }
}
