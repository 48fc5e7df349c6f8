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
    /// Typed as a bare word (not a `"phrase"`, not `prefix*`): a stop word of this kind carries
    /// no topic and is dropped from a question.
    pub plain: bool,
}

/// English words that carry no topic in a question to one's memory: articles, pronouns,
/// auxiliaries, prepositions, question words, and the verbs of asking to remember.
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "but", "by", "can", "could", "did", "do", "does", "doing", "done",
    "during", "for", "from", "had", "has", "have", "having", "he", "her", "here", "him", "his",
    "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my", "of", "on", "or", "our",
    "please", "recall", "remember", "she", "should", "so", "some", "than", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "those", "to", "us", "was", "we", "were",
    "what", "when", "where", "which", "while", "who", "whom", "whose", "why", "will", "with",
    "would", "you", "your",
];

/// Chinese words and particles that carry no topic in a question, longest first (each splits a
/// run of CJK characters). Single characters only where they rarely start or end a word.
const CJK_STOP_WORDS: &[&str] = &[
    "为什么",
    "怎么样",
    "有没有",
    "是不是",
    "之前",
    "以前",
    "上次",
    "怎么",
    "什么",
    "如何",
    "哪些",
    "哪个",
    "是否",
    "我们",
    "你们",
    "他们",
    "一下",
    "帮我",
    "请问",
    "记得",
    "的",
    "了",
    "吗",
    "呢",
    "吧",
    "啊",
];

fn is_hiragana(c: char) -> bool {
    ('\u{3040}'..='\u{309f}').contains(&c)
}

/// The pieces of a word with CJK in it that carry its topic: Chinese question words and
/// particles split it; in Japanese (kanji or katakana with hiragana) the hiragana runs, which
/// are its grammar, split it.
fn cjk_pieces(word: &str) -> Vec<String> {
    let japanese =
        word.chars().any(is_hiragana) && word.chars().any(|c| is_cjk(c) && !is_hiragana(c));
    let mut w: String = if japanese {
        word.chars()
            .map(|c| if is_hiragana(c) { ' ' } else { c })
            .collect()
    } else {
        word.to_owned()
    };
    for stop in CJK_STOP_WORDS {
        if w.contains(stop) {
            w = w.replace(stop, " ");
        }
    }
    // Then at punctuation and where CJK meets Latin (`修复redis缓存` asks about three things),
    // as the index splits them.
    let mut pieces = Vec::new();
    let mut cur = String::new();
    let mut cur_cjk = false;
    for c in w.chars() {
        let keep = c.is_alphanumeric() || is_cjk(c);
        if !cur.is_empty() && (!keep || is_cjk(c) != cur_cjk) {
            pieces.push(std::mem::take(&mut cur));
        }
        if keep {
            cur_cjk = is_cjk(c);
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        pieces.push(cur);
    }
    pieces
}

/// A piece of an unquoted CJK question as terms of their own: its bigrams, as the index has
/// them, so that a row with most of them is a partial match (CJK has no spaces: "修复验证码"
/// asks about 修复 and 验证码, which a row may hold apart). A piece of more than 8 characters
/// (mixed with Latin, or a pasted sentence) stays one phrase. `"Quoted"` CJK is a phrase.
fn cjk_bigrams(piece: &str) -> Vec<String> {
    let chars: Vec<char> = piece.chars().collect();
    if chars.len() <= 2 || chars.len() > 8 || !chars.iter().all(|&c| is_cjk(c)) {
        return vec![piece.to_owned()];
    }
    let mut out: Vec<String> = Vec::new();
    for w in chars.windows(2) {
        let b: String = w.iter().collect();
        if !out.contains(&b) {
            out.push(b);
        }
    }
    out
}

/// Turns what a user typed into FTS5 terms. `"quoted phrases"` stay phrases; a trailing `*` on
/// a word is a prefix search; everything else FTS5 would treat as syntax (`AND`, `NEAR(`, `:`,
/// parentheses, stray quotes) is searched as plain text or dropped. A question keeps its
/// significant words: stop words and question words (English, and Chinese and Japanese via
/// [`cjk_pieces`]) are dropped unless nothing else is left. Returns no terms when nothing
/// searchable is left.
pub fn parse_query(q: &str) -> Vec<Term> {
    let mut terms = all_terms(q);
    // A single CJK character left over between question words (`改` of `为什么改了缓存`)
    // matches every word it starts, at the cost of a prefix query: kept only when alone.
    let lone =
        |t: &Term| t.plain && t.literal.chars().count() == 1 && t.literal.chars().all(is_cjk);
    if terms.iter().any(|t| !lone(t)) {
        terms.retain(|t| !lone(t));
    }
    let significant: Vec<Term> = terms
        .iter()
        .filter(|t| !(t.plain && STOP_WORDS.contains(&t.literal.to_lowercase().as_str())))
        .cloned()
        .collect();
    if significant.is_empty() {
        terms
    } else {
        significant
    }
}

fn all_terms(q: &str) -> Vec<Term> {
    let mut terms = Vec::new();
    let mut rest = q;
    while !rest.is_empty() {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let (chunk, prefix, phrase, next) = if let Some(r) = rest.strip_prefix('"') {
            match r.find('"') {
                Some(end) => (&r[..end], false, true, &r[end + 1..]),
                None => (r, false, true, ""), // unbalanced: the rest is one phrase
            }
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let word = &rest[..end];
            let prefix = word.ends_with('*')
                && word
                    .trim_end_matches('*')
                    .chars()
                    .any(char::is_alphanumeric);
            (word.trim_end_matches('*'), prefix, false, &rest[end..])
        };
        rest = next;
        if !phrase && !prefix && chunk.chars().any(is_cjk) {
            for piece in cjk_pieces(chunk) {
                terms.extend(
                    cjk_bigrams(&piece)
                        .iter()
                        .filter_map(|p| term(p, false, true)),
                );
            }
        } else if let Some(t) = term(chunk, prefix, !phrase && !prefix) {
            terms.push(t);
        }
    }
    terms
}

fn term(chunk: &str, prefix: bool, plain: bool) -> Option<Term> {
    // Keep letters, digits and CJK; everything else separates tokens (as unicode61 does).
    let tokens: Vec<&str> = chunk
        .split(|c: char| !(c.is_alphanumeric() || is_cjk(c)))
        .filter(|t| !t.is_empty())
        .collect();
    if tokens.is_empty() {
        return None;
    }
    // The runs of CJK and of other letters and digits, in order, as the index has them: a CJK
    // run as its bigrams, and its last character too when the phrase goes on after it.
    let mut runs: Vec<(String, bool)> = Vec::new();
    for t in &tokens {
        for c in t.chars() {
            match runs.last_mut() {
                Some((r, cjk)) if *cjk == is_cjk(c) => r.push(c),
                _ => runs.push((c.to_string(), is_cjk(c))),
            }
        }
        // A token ends a run even when the next starts in the same script.
        runs.push((String::new(), false));
    }
    runs.retain(|(r, _)| !r.is_empty());
    let mut parts: Vec<String> = Vec::new();
    let mut single_cjk = None;
    for (i, (run, cjk)) in runs.iter().enumerate() {
        if !cjk {
            parts.push(run.clone());
            continue;
        }
        let chars: Vec<char> = run.chars().collect();
        if chars.len() == 1 {
            single_cjk = Some(run.clone());
            parts.push(run.clone());
            continue;
        }
        parts.extend(chars.windows(2).map(|w| w.iter().collect::<String>()));
        if i + 1 < runs.len() {
            parts.push(chars[chars.len() - 1].to_string());
        }
    }
    let phrase = format!("\"{}\"", parts.join(" "));
    // A lone CJK character is indexed only as the first half of bigrams (or a run's last
    // character): search it as a prefix.
    let prefix = prefix || (parts.len() == 1 && single_cjk.is_some());
    Some(Term {
        literal: tokens.join(" "),
        fts: if prefix { format!("{phrase}*") } else { phrase },
        plain,
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

impl Term {
    /// How often `re` (this term's [`Term::regex`]) occurs in `text` as whole words, the way
    /// the index splits them: `fix` is not in `Fixed`, but `redis` is in `redis_cache` and in
    /// `用redis做` (an underscore and CJK end a word there; `\b` would say otherwise).
    pub fn count(&self, re: &regex::Regex, text: &str) -> usize {
        let latin = |c: char| c.is_alphanumeric() && !is_cjk(c);
        let start = self.literal.chars().next().is_some_and(latin);
        let end = !self.fts.ends_with('*') && self.literal.chars().last().is_some_and(latin);
        re.find_iter(text)
            .filter(|m| {
                let glued_before =
                    start && text[..m.start()].chars().next_back().is_some_and(latin);
                let glued_after = end && text[m.end()..].chars().next().is_some_and(latin);
                !glued_before && !glued_after
            })
            .count()
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

/// The FTS5 MATCH expression for rows with any of `terms` (the partial matches).
pub fn match_any(terms: &[Term]) -> String {
    terms
        .iter()
        .map(|t| t.fts.as_str())
        .collect::<Vec<_>>()
        .join(" OR ")
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
        assert_eq!(all_terms("\"认证失败\"")[0].fts, "\"认证 证失 失败\"");
        assert_eq!(parse_query("认")[0].fts, "\"认\"*");
        // A run followed by more of the phrase carries its last character, as indexed
        // (`修复redis缓存` → `修复 复 redis 缓存 存`).
        assert_eq!(
            all_terms("\"修复redis缓存\"")[0].fts,
            "\"修复 复 redis 缓存\""
        );
        assert_eq!(
            all_terms("\"登录失败，验证码\"")[0].fts,
            "\"登录 录失 失败 败 验证 证码\""
        );
        // Unquoted, CJK meeting Latin or punctuation splits the words.
        assert_eq!(literals("修复redis缓存"), ["修复", "redis", "缓存"]);
        assert_eq!(
            literals("登录失败，验证码错误"),
            ["登录", "录失", "失败", "验证", "证码", "码错", "错误"]
        );
    }

    fn literals(q: &str) -> Vec<String> {
        parse_query(q).into_iter().map(|t| t.literal).collect()
    }

    #[test]
    fn a_question_keeps_its_significant_words() {
        assert_eq!(
            literals("How do I fix the failing test in CI?"),
            ["fix", "failing", "test", "CI"]
        );
        // Only stop words: they are what was asked for.
        assert_eq!(literals("the where"), ["the", "where"]);
        // A phrase or a prefix is kept as typed.
        assert_eq!(literals("\"the end\" what*"), ["the end", "what"]);
        // Chinese: question words and particles split the run; each piece is a phrase.
        // Chinese: question words and particles split the run; each piece is searched by its
        // bigrams, as the index holds it.
        assert_eq!(
            literals("如何修复登录页面的验证码"),
            ["修复", "复登", "登录", "录页", "页面", "验证", "证码"]
        );
        // A lone character left between question words goes when there is more.
        assert_eq!(literals("上次我们为什么改了缓存"), ["缓存"]);
        assert_eq!(
            literals("我们之前怎么修复验证码的"),
            ["修复", "复验", "验证", "证码"]
        );
        // Quoted, a phrase.
        assert_eq!(parse_query("\"认证失败\"")[0].fts, "\"认证 证失 失败\"");
        // Japanese: the hiragana between the kanji and katakana words are grammar.
        assert_eq!(
            literals("ログインの不具合を直した"),
            ["ログ", "グイ", "イン", "不具", "具合"]
        );
        // All hiragana: not split at its hiragana (its bigrams, like any CJK word).
        assert_eq!(literals("ありがとう"), ["あり", "りが", "がと", "とう"]);
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
            let got: Vec<String> = all_terms(q).into_iter().map(|t| t.fts).collect();
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
    fn terms_count_whole_words_as_the_index_splits_them() {
        let count = |q: &str, text: &str| {
            let t = &parse_query(q)[0];
            t.count(&t.regex().unwrap(), text)
        };
        assert_eq!(count("fix", "Fixed it, then fix again; prefix"), 1);
        assert_eq!(count("redis", "redis_cache and 用redis做缓存, Redis!"), 3);
        assert_eq!(count("pref*", "prefix prefer apref"), 2);
        assert_eq!(count("缓存", "修复redis缓存的问题"), 1);
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
