//! The manual is checked like code: every relative link in README.md, docs/ and envoy/README.md
//! resolves, every `ferrogate` command line in a fenced shell block parses against that
//! subcommand's real flags, and every complete configuration example (a fenced block whose
//! info string is exactly `yaml`) passes `ferrogate check`; `yaml fragment` blocks must at
//! least be YAML.

use std::path::{Path, PathBuf};

use clap::Parser;
use ferrogate_sidecar::cli::Cli;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md, envoy/README.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md"), root().join("envoy/README.md")];
    let docs = std::fs::read_dir(root().join("docs")).expect("docs/ exists");
    let mut found: Vec<PathBuf> =
        docs.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "md")).collect();
    found.sort();
    pages.extend(found);
    pages
}

/// A fenced code block: its info string, first line number and text.
struct Block {
    info: String,
    line: usize,
    text: String,
}

fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(String, String, usize)> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match (&mut open, fence) {
            (None, true) => open = Some((line.trim_start()[3..].trim().to_string(), String::new(), n + 2)),
            (Some((info, text, line)), true) => {
                out.push(Block { info: std::mem::take(info), line: *line, text: std::mem::take(text) });
                open = None;
            }
            (Some((_, text, _)), false) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, false) => {}
        }
    }
    out
}

/// Relative link targets of `[text](target)` outside code blocks, with their line numbers.
fn links(markdown: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_code = false;
    for (n, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].split_whitespace().next().unwrap_or("").to_string();
            rest = &rest[end..];
            let external = target.contains("://") || target.starts_with("mailto:") || target.starts_with('#');
            if !target.is_empty() && !external && !target.starts_with('`') {
                out.push((n + 1, target));
            }
        }
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, target) in links(&text) {
            let file = target.split('#').next().unwrap_or("");
            let resolved = page.parent().unwrap().join(file);
            if !resolved.exists() {
                broken.push(format!("{}:{line}: {target}", page.display()));
            }
            if file.contains("shared/") {
                broken.push(format!("{}:{line}: {target} points outside the repository", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Shell words of one command line (quotes and backslash escapes; no expansion).
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quote, mut started) = (Vec::new(), String::new(), None, false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, started) = (Some(c), true),
            (Some(q), _) if c == q => quote = None,
            (None | Some('"'), '\\') => {
                if let Some(next) = chars.next() {
                    word.push(next);
                    started = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (None, '#') if !started => break,
            (_, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(word);
    }
    out
}

/// Every `ferrogate ...` command of a shell block, as words (continuations joined; `&&`, `;`,
/// `|` and `&` separate commands; leading `VAR=value` assignments and `$ ` prompts dropped).
fn ferrogate_commands(script: &str) -> Vec<Vec<String>> {
    let joined = script.replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let mut current: Vec<String> = Vec::new();
        let mut all = words(line);
        all.push(";".into());
        for w in all {
            if matches!(w.as_str(), "&&" | "||" | ";" | "|" | "&") {
                let cmd: Vec<String> = std::mem::take(&mut current)
                    .into_iter()
                    .skip_while(|w| w == "$" || (w.contains('=') && !w.starts_with('-')))
                    .collect();
                if cmd.first().is_some_and(|c| c == "ferrogate" || c.ends_with("/ferrogate")) {
                    out.push(cmd);
                }
            } else {
                current.push(w);
            }
        }
    }
    out
}

#[test]
fn every_ferrogate_command_line_parses() {
    let mut bad = Vec::new();
    let mut seen = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for block in
            blocks(&text).into_iter().filter(|b| matches!(b.info.as_str(), "sh" | "bash" | "shell" | "console"))
        {
            for cmd in ferrogate_commands(&block.text) {
                seen += 1;
                if let Err(e) = Cli::try_parse_from(&cmd) {
                    let first = e.to_string().lines().next().unwrap_or("").to_string();
                    bad.push(format!("{}:{}: `{}`: {first}", page.display(), block.line, cmd.join(" ")));
                }
            }
        }
    }
    assert!(bad.is_empty(), "command lines that do not parse:\n{}", bad.join("\n"));
    assert!(seen >= 5, "only {seen} ferrogate command lines found: is the extraction broken?");
}

#[test]
fn every_configuration_example_passes_check() {
    let dir = std::env::temp_dir().join(format!("ferrogate-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut bad, mut checked) = (Vec::new(), 0);
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for block in blocks(&text) {
            let at = format!("{}:{}", page.display(), block.line);
            if block.info == "yaml" {
                checked += 1;
                let file = dir.join("example.yaml");
                std::fs::write(&file, &block.text).unwrap();
                match ferrogate_sidecar::serve::config::load(&file) {
                    Ok(_) => {}
                    Err(ferrogate_sidecar::serve::config::LoadError::Invalid { source, .. }) => {
                        bad.extend(source.problems.iter().map(|p| format!("{at}: {p}")));
                    }
                    Err(e) => bad.push(format!("{at}: {e}")),
                }
            } else if block.info.starts_with("yaml") {
                if let Err(e) = serde_saphyr::from_str::<serde_json::Value>(&block.text) {
                    bad.push(format!("{at}: not YAML: {e}"));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(bad.is_empty(), "configuration examples that fail `ferrogate check`:\n{}", bad.join("\n"));
    assert!(checked >= 3, "only {checked} configuration examples found");
}

#[test]
fn the_extractors_see_what_a_reader_sees() {
    let md = "See [a](a.md) and [b](https://x/y).\n```sh\nFOO=1 ferrogate serve --config x.yaml \\\n  --listen 127.0.0.1:1 &\ncurl x | ferrogate check --config 'my file.yaml'  # comment\n```\n";
    assert_eq!(links(md), [(1, "a.md".to_string())]);
    let b = blocks(md);
    assert_eq!((b.len(), b[0].info.as_str(), b[0].line), (1, "sh", 3));
    let cmds = ferrogate_commands(&b[0].text);
    assert_eq!(cmds[0], ["ferrogate", "serve", "--config", "x.yaml", "--listen", "127.0.0.1:1"]);
    assert_eq!(cmds[1], ["ferrogate", "check", "--config", "my file.yaml"]);
    assert!(Cli::try_parse_from(["ferrogate", "serve", "--confg", "x"]).is_err());
}
