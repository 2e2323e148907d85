//! Shell-style name patterns for granting MCP tools, prompts and resources (`add*`,
//! `*_admin`, `file:///docs/*`).

/// Whether `name` matches `pattern`: `*` matches any run of characters (including none), `?`
/// exactly one character; everything else matches itself. Compares chars, not bytes, so `?`
/// matches one non-ASCII character.
///
/// Two-pointer algorithm with a single backtrack point: on a mismatch only the last `*` seen is
/// retried one character further (earlier stars never need retrying), so the work is at most
/// `pattern.len() × name.len()` steps, linear for patterns with few literals, and a pattern like
/// `a*a*a*…b` cannot take exponential time.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (mut p, mut n) = (0, 0);
    // Just after the last `*` seen, and where in `name` that star's run currently ends.
    let mut star: Option<(usize, usize)> = None;
    loop {
        let pc = pattern.get(p..).and_then(|s| s.chars().next());
        let nc = name.get(n..).and_then(|s| s.chars().next());
        match (pc, nc) {
            (Some('*'), _) => {
                p += 1;
                star = Some((p, n));
            }
            (Some(c), Some(d)) if c == '?' || c == d => {
                p += c.len_utf8();
                n += d.len_utf8();
            }
            (None, None) => return true,
            _ => {
                // Mismatch: let the last star swallow one more character and retry after it.
                let Some((after_star, run_end)) = star else { return false };
                let Some(d) = name.get(run_end..).and_then(|s| s.chars().next()) else { return false };
                p = after_star;
                n = run_end + d.len_utf8();
                star = Some((after_star, n));
            }
        }
    }
}
