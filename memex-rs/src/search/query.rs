//! How what a user typed becomes FTS5 queries, and the snippets that show where it matched.
//!
//! Queries are never passed through: every word becomes a quoted FTS5 string, so no user input
//! can produce an FTS5 syntax error. A CJK query word becomes the phrase of its bigrams, the
//! way `store::fts` indexes CJK text.

use crate::store::fts::is_cjk;

/// One parsed query word: its literal form (for highlighting) and its FTS5 expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    pub literal: String,
    pub fts: String,
}

/// Turns what a user typed into FTS5 terms, all required (AND). `"quoted phrases"` stay
/// phrases; a trailing `*` on a word is a prefix search; everything else FTS5 would treat as
/// syntax (`AND`, `NEAR(`, `:`, parentheses, stray quotes) is searched as plain text or
/// dropped. Returns no terms when nothing searchable is left.
pub fn parse_query(q: &str) -> Vec<Term> {
    let mut terms = Vec::new();
    let mut rest = q;
    while !rest.is_empty() {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let (chunk, prefix, next) = if let Some(r) = rest.strip_prefix('"') {
            match r.find('"') {
                Some(end) => (&r[..end], false, &r[end + 1..]),
                None => (r, false, ""), // unbalanced: the rest is one phrase
            }
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let word = &rest[..end];
            let prefix = word.ends_with('*')
                && word
                    .trim_end_matches('*')
                    .chars()
                    .any(char::is_alphanumeric);
            (word.trim_end_matches('*'), prefix, &rest[end..])
        };
        rest = next;
        if let Some(t) = term(chunk, prefix) {
            terms.push(t);
        }
    }
    terms
}

fn term(chunk: &str, prefix: bool) -> Option<Term> {
    // Keep letters, digits and CJK; everything else separates tokens (as unicode61 does).
    let tokens: Vec<&str> = chunk
        .split(|c: char| !(c.is_alphanumeric() || is_cjk(c)))
        .filter(|t| !t.is_empty())
        .collect();
    if tokens.is_empty() {
        return None;
    }
    let mut parts: Vec<String> = Vec::new();
    let mut single_cjk = None;
    for t in &tokens {
        // Split each token into Latin pieces and CJK runs.
        let mut cur = String::new();
        let mut cur_cjk = false;
        let mut push = |s: &mut String, cjk: bool, parts: &mut Vec<String>| {
            if s.is_empty() {
                return;
            }
            if cjk {
                let chars: Vec<char> = s.chars().collect();
                if chars.len() == 1 {
                    single_cjk = Some(s.clone());
                    parts.push(s.clone());
                } else {
                    parts.extend(chars.windows(2).map(|w| w.iter().collect::<String>()));
                }
            } else {
                parts.push(s.clone());
            }
            s.clear();
        };
        for c in t.chars() {
            let c_cjk = is_cjk(c);
            if c_cjk != cur_cjk {
                push(&mut cur, cur_cjk, &mut parts);
                cur_cjk = c_cjk;
            }
            cur.push(c);
        }
        push(&mut cur, cur_cjk, &mut parts);
    }
    let phrase = format!("\"{}\"", parts.join(" "));
    // A lone CJK character is indexed only as the first half of bigrams (or a run's last
    // character): search it as a prefix.
    let prefix = prefix || (parts.len() == 1 && single_cjk.is_some());
    Some(Term {
        literal: tokens.join(" "),
        fts: if prefix { format!("{phrase}*") } else { phrase },
    })
}

impl Term {
    /// A case-insensitive regex that finds this term in a message's text (the words of a
    /// phrase separated by anything that is not a letter or digit), for counting occurrences.
    pub fn regex(&self) -> Option<regex::Regex> {
        let words: Vec<String> = self.literal.split(' ').map(regex::escape).collect();
        let mut pattern = words.join(r"[^\p{L}\p{N}]+");
        if self.fts.ends_with('*') {
            pattern.push_str(r"[\p{L}\p{N}]*");
        }
        regex::RegexBuilder::new(&pattern)
            .case_insensitive(true)
            .build()
            .ok()
    }
}

/// The FTS5 MATCH expression for `terms` (all required).
pub fn match_expr(terms: &[Term]) -> String {
    terms
        .iter()
        .map(|t| t.fts.as_str())
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The words of the terms, each escaped for a regular expression.
pub fn term_words(terms: &[Term]) -> Vec<String> {
    terms
        .iter()
        .flat_map(|t| t.literal.split(' ').map(str::to_owned).collect::<Vec<_>>())
        .filter(|w| !w.is_empty())
        .map(|w| regex::escape(&w))
        .collect()
}

/// A case-insensitive expression matching any of `patterns` (the first that matches wins), or
/// none when there is nothing to match.
pub fn any_of(patterns: &[String]) -> Option<regex::Regex> {
    (!patterns.is_empty())
        .then(|| {
            regex::RegexBuilder::new(&patterns.join("|"))
                .case_insensitive(true)
                .build()
                .ok()
        })
        .flatten()
}

/// A window of `text` around the first match of any term, matches wrapped in `**`.
pub fn snippet(text: &str, terms: &[Term], width: usize) -> String {
    let re = any_of(&term_words(terms));
    let first = re
        .as_ref()
        .and_then(|r| r.find(text))
        .map_or(0, |m| m.start());
    // Start a little before the match, on a char boundary.
    let mut start = first.saturating_sub(width / 3);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (start + width).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    let window = &text[start..end];
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    match &re {
        Some(r) => out.push_str(&r.replace_all(window, "**$0**")),
        None => out.push_str(window),
    }
    if end < text.len() {
        out.push('…');
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cjk_words_become_the_phrase_of_their_bigrams() {
        let q = parse_query("认证");
        assert_eq!(q[0].fts, "\"认证\"");
        assert_eq!(parse_query("认证失败")[0].fts, "\"认证 证失 失败\"");
        assert_eq!(parse_query("认")[0].fts, "\"认\"*");
    }

    #[test]
    fn hostile_queries_become_plain_terms() {
        let cases = [
            ("\"unbalanced", vec!["\"unbalanced\""]),
            ("AND OR NOT", vec!["\"AND\"", "\"OR\"", "\"NOT\""]),
            ("foo*bar:", vec!["\"foo bar\""]),
            ("(((", vec![]),
            ("NEAR(a b", vec!["\"NEAR\"", "\"b\""]),
            ("*", vec![]),
            ("snake_case", vec!["\"snake case\""]),
            ("pref*", vec!["\"pref\"*"]),
        ];
        for (q, want) in cases {
            let got: Vec<String> = parse_query(q).into_iter().map(|t| t.fts).collect();
            let want: Vec<String> = want.into_iter().map(str::to_owned).collect();
            // NEAR(a b: "NEAR(a" is one chunk → tokens NEAR, a → phrase "NEAR a".
            if q.starts_with("NEAR") {
                assert_eq!(got, vec!["\"NEAR a\"".to_owned(), "\"b\"".to_owned()]);
            } else {
                assert_eq!(got, want, "{q}");
            }
        }
    }

    #[test]
    fn snippet_highlights_and_respects_boundaries() {
        let t = "认证失败 when the token expired; retry the login flow";
        let s = snippet(t, &parse_query("token"), 30);
        assert!(s.contains("**token**"), "{s}");
        let s = snippet(t, &parse_query("认证"), 10);
        assert!(s.starts_with("**认证**"), "{s}");
    }
}
