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
    /// The other forms of a bare English word that also match it ([`word_forms`]).
    pub forms: Vec<String>,
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
/// `cjk_pieces`) are dropped unless nothing else is left. Returns no terms when nothing
/// searchable is left.
pub fn parse_query(q: &str) -> Vec<Term> {
    let terms = kept_terms(q);
    let significant = only_significant(&terms);
    if significant.is_empty() {
        terms
    } else {
        significant
    }
}

/// The significant words of `q` only, as [`parse_query`] finds them: none when every word is a
/// stop word (where a search would fall back to them).
pub fn significant_terms(q: &str) -> Vec<Term> {
    only_significant(&kept_terms(q))
}

fn kept_terms(q: &str) -> Vec<Term> {
    let mut terms = all_terms(q);
    // A single CJK character left over between question words (`改` of `为什么改了缓存`)
    // matches every word it starts, at the cost of a prefix query: kept only when alone.
    let lone =
        |t: &Term| t.plain && t.literal.chars().count() == 1 && t.literal.chars().all(is_cjk);
    if terms.iter().any(|t| !lone(t)) {
        terms.retain(|t| !lone(t));
    }
    terms
}

/// Whether `word` is one of the English words a question drops ([`STOP_WORDS`]).
pub(crate) fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.contains(&word.to_lowercase().as_str())
}

fn only_significant(terms: &[Term]) -> Vec<Term> {
    terms
        .iter()
        .filter(|t| !(t.plain && is_stop_word(&t.literal)))
        .cloned()
        .collect()
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
    let literal = tokens.join(" ");
    let forms = if plain && !prefix {
        word_forms(&literal)
    } else {
        Vec::new()
    };
    Some(Term {
        literal,
        fts: if prefix { format!("{phrase}*") } else { phrase },
        plain,
        forms,
    })
}

/// The other forms an English word takes in a transcript, so that a bare word finds them too:
/// singular and plural, and a verb's `-s`, `-ed` and `-ing` forms (`email` → `emails`,
/// `emailed`, `emailing`; `retries` → `retry`, `retried`, `retrying`; `logging` → `log`,
/// `logs`, `logged`). Only for ASCII words of three letters or more; a quoted word, a prefix
/// and a CJK word keep their exact form. The rules are deliberately few: a form no transcript
/// holds costs one index lookup and matches nothing. Never the word itself, at most
/// `MAX_FORMS`.
pub fn word_forms(word: &str) -> Vec<String> {
    let w = word.to_ascii_lowercase();
    if w.len() < 3 || !w.bytes().all(|b| b.is_ascii_lowercase()) {
        return Vec::new();
    }
    // An acronym's plural (`APIs`, `CLIs`) is its letters and an `s`.
    let acronym = word.len() >= 3
        && word.ends_with('s')
        && word[..word.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_uppercase());
    let mut bases = if acronym {
        vec![w[..w.len() - 1].to_owned()]
    } else {
        stems(&w)
    };
    if bases.is_empty() {
        bases.push(w.clone());
    }
    let mut forms: Vec<String> = Vec::new();
    for b in bases {
        let mut all = vec![plural(&b)];
        all.extend(suffixed(&b, "ed"));
        all.extend(suffixed(&b, "ing"));
        all.push(b);
        // A stop word is in nearly every text: never a form (`ours` is not `our`).
        for f in all {
            if f != w && !forms.contains(&f) && !is_stop_word(&f) {
                forms.push(f);
            }
        }
    }
    forms.truncate(MAX_FORMS);
    forms
}

/// The most forms a word is looked for in (each is one more index lookup).
const MAX_FORMS: usize = 12;

fn is_vowel(b: u8) -> bool {
    matches!(b, b'a' | b'e' | b'i' | b'o' | b'u')
}

/// The base forms `w` may be inflected from, when it ends like a plural, a past or a gerund.
fn stems(w: &str) -> Vec<String> {
    let n = w.len();
    let mut out = Vec::new();
    // `logged` → `log`, `committed` → `commit`; not `called` → `cal` (l, s, z and f end words
    // doubled).
    let undouble = |s: &str, out: &mut Vec<String>| {
        let b = s.as_bytes();
        let last = b[b.len() - 1];
        if b.len() >= 4 && last == b[b.len() - 2] && !b"lszf".contains(&last) && !is_vowel(last) {
            out.push(s[..s.len() - 1].to_owned());
        }
    };
    if n >= 5 && w.ends_with("ies") {
        out.push(format!("{}y", &w[..n - 3]));
        out.push(w[..n - 1].to_owned()); // cookies, movies
    } else if n >= 5
        && ["sses", "shes", "ches", "xes", "zes"]
            .iter()
            .any(|e| w.ends_with(e))
    {
        out.push(w[..n - 2].to_owned());
    } else if n >= 4 && w.ends_with('s') && !["ss", "us", "is"].iter().any(|e| w.ends_with(e)) {
        out.push(w[..n - 1].to_owned());
    } else if n >= 5 && w.ends_with("ied") {
        out.push(format!("{}y", &w[..n - 3]));
    } else if n >= 5 && w.ends_with("ed") && !w.ends_with("eed") {
        let s = &w[..n - 2];
        out.push(s.to_owned());
        out.push(format!("{s}e"));
        undouble(s, &mut out);
    } else if n >= 6 && w.ends_with("ing") {
        let s = &w[..n - 3];
        // `string` is not a form of `str`: a stem this short only when it was doubled.
        if s.len() >= 4 {
            out.push(s.to_owned());
            out.push(format!("{s}e"));
        }
        undouble(s, &mut out);
    }
    out.retain(|s| s.len() >= 3);
    out
}

/// How a verb ending consonant-vowel-consonant (`log`, `stop`, `commit`) takes `-ed` and
/// `-ing`: a one-syllable one doubles its last letter (`logged`); a longer one may or may not
/// (`committed`, `edited`), so both are looked for; anything else does not.
#[derive(PartialEq)]
enum Doubling {
    No,
    Yes,
    Both,
}

fn doubling(b: &[u8]) -> Doubling {
    let n = b.len();
    let cvc = n >= 3
        && !is_vowel(b[n - 1])
        && !b"wxy".contains(&b[n - 1])
        && is_vowel(b[n - 2])
        && !is_vowel(b[n - 3]);
    if !cvc {
        Doubling::No
    } else if n == 3 || (n == 4 && !is_vowel(b[0])) {
        Doubling::Yes
    } else {
        Doubling::Both
    }
}

fn plural(b: &str) -> String {
    let bytes = b.as_bytes();
    let n = bytes.len();
    if b.ends_with('y') && !is_vowel(bytes[n - 2]) {
        format!("{}ies", &b[..n - 1])
    } else if ["s", "x", "z", "ch", "sh"].iter().any(|e| b.ends_with(e)) {
        format!("{b}es")
    } else {
        format!("{b}s")
    }
}

/// `b` with `-ed` or `-ing` (`ending`) added, as English spells it.
fn suffixed(b: &str, ending: &str) -> Vec<String> {
    let bytes = b.as_bytes();
    let n = bytes.len();
    let plain = if b.ends_with('e') && !(ending == "ing" && b.ends_with("ee")) {
        format!("{}{ending}", &b[..n - 1])
    } else if ending == "ed" && b.ends_with('y') && !is_vowel(bytes[n - 2]) {
        format!("{}ied", &b[..n - 1])
    } else {
        format!("{b}{ending}")
    };
    let doubled = format!("{b}{}{ending}", &b[n - 1..]);
    match doubling(bytes) {
        Doubling::No => vec![plain],
        Doubling::Yes => vec![doubled],
        Doubling::Both => vec![plain, doubled],
    }
}

impl Term {
    /// The FTS5 expression that finds this term: its phrase, or any of its forms.
    pub fn expr(&self) -> String {
        if self.forms.is_empty() {
            return self.fts.clone();
        }
        let mut any = vec![self.fts.clone()];
        // A form is ASCII letters only: nothing in it can break out of the quotes.
        any.extend(self.forms.iter().map(|f| format!("\"{f}\"")));
        format!("({})", any.join(" OR "))
    }

    /// The word and its forms, longest first (so that a regex tries `emails` before `email`).
    fn spellings(&self) -> Vec<&str> {
        let mut all: Vec<&str> = std::iter::once(self.literal.as_str())
            .chain(self.forms.iter().map(String::as_str))
            .collect();
        all.sort_by_key(|w| std::cmp::Reverse(w.len()));
        all
    }

    /// A case-insensitive regex that finds this term in a message's text (the words of a
    /// phrase separated by anything that is not a letter or digit, or any form of a word), for
    /// counting occurrences.
    pub fn regex(&self) -> Option<regex::Regex> {
        if !self.forms.is_empty() {
            let any: Vec<String> = self.spellings().into_iter().map(regex::escape).collect();
            return regex::RegexBuilder::new(&format!("(?:{})", any.join("|")))
                .case_insensitive(true)
                .build()
                .ok();
        }
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
    /// the index splits them ([`whole_words`]): `fix` is not in `prefix`, but `redis` is in
    /// `redis_cache` and in `用redis做` (an underscore and CJK end a word there; `\b` would
    /// say otherwise).
    pub fn count(&self, re: &regex::Regex, text: &str) -> usize {
        whole_words(re, text).count()
    }
}

/// The FTS5 MATCH expression for `terms` (all required).
pub fn match_expr(terms: &[Term]) -> String {
    terms
        .iter()
        .map(Term::expr)
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The FTS5 MATCH expression for rows with any of `terms` (the partial matches).
pub fn match_any(terms: &[Term]) -> String {
    terms
        .iter()
        .map(Term::expr)
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// The words of the terms and their forms, longest first (an alternation takes the first that
/// matches), each escaped for a regular expression; a prefix's last word with the rest of the
/// word it starts (so that [`whole_words`] keeps it).
pub fn term_words(terms: &[Term]) -> Vec<String> {
    let mut words: Vec<(usize, String)> = Vec::new();
    for t in terms {
        let parts: Vec<&str> = t.literal.split(' ').filter(|w| !w.is_empty()).collect();
        for (i, w) in parts.iter().enumerate() {
            let mut pattern = regex::escape(w);
            if i + 1 == parts.len() && t.fts.ends_with('*') {
                pattern.push_str(r"[\p{L}\p{N}]*");
            }
            words.push((w.len(), pattern));
        }
        words.extend(t.forms.iter().map(|f| (f.len(), regex::escape(f))));
    }
    words.sort_by_key(|w| std::cmp::Reverse(w.0));
    words.into_iter().map(|w| w.1).collect()
}

/// The matches of `re` in `text` that are whole words the way the index splits them: not
/// glued to a letter or digit of a Latin word before or after (`use` is not in `caused`; an
/// underscore and CJK end a word).
pub fn whole_words<'t>(re: &regex::Regex, text: &'t str) -> impl Iterator<Item = regex::Match<'t>> {
    let latin = |c: char| c.is_alphanumeric() && !is_cjk(c);
    re.find_iter(text).filter(move |m| {
        let s = m.as_str();
        let glued_before = s.chars().next().is_some_and(latin)
            && text[..m.start()].chars().next_back().is_some_and(latin);
        let glued_after = s.chars().next_back().is_some_and(latin)
            && text[m.end()..].chars().next().is_some_and(latin);
        !glued_before && !glued_after
    })
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

/// A window of `text` around the first match of any term, matches wrapped in `**`. In a
/// snippet `**` only ever marks a match: the markers of the text's own Markdown bold (as in
/// Codex's reasoning titles) are left out (`without_bold`) and the rest is escaped
/// (`escaped`). [`unmarked`] gives the text back.
pub fn snippet(text: &str, terms: &[Term], width: usize) -> String {
    snippet_marked(text, marker(terms).as_ref(), width)
}

/// The expression a snippet marks `terms` with: built once per search, not once per hit
/// (building it costs more than the rest of a one-word search).
pub fn marker(terms: &[Term]) -> Option<regex::Regex> {
    any_of(&term_words(terms))
}

/// [`snippet`], with the terms' [`marker`] built already.
pub fn snippet_marked(text: &str, re: Option<&regex::Regex>, width: usize) -> String {
    let first = re
        .and_then(|r| whole_words(r, text).next())
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
    let window = without_bold(&text[start..end]);
    let mut out = Vec::with_capacity(window.len() + 8);
    if start > 0 {
        out.push(Out::Text('…'));
    }
    let mut at = 0;
    for m in re.into_iter().flat_map(|r| whole_words(r, &window)) {
        out.extend(window[at..m.start()].chars().map(Out::Text));
        out.push(Out::Mark);
        out.extend(m.as_str().chars().map(Out::Text));
        out.push(Out::Mark);
        at = m.end();
    }
    out.extend(window[at..].chars().map(Out::Text));
    if end < text.len() {
        out.push(Out::Text('…'));
    }
    escaped(&out)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a snippet is made of: the text's characters and the marks around matches.
#[derive(Clone, Copy, PartialEq)]
enum Out {
    Text(char),
    Mark,
}

/// The snippet as text: each mark is `**`, each of the text's `*` is `\*`, and a backslash of
/// the text is doubled where it would otherwise be read with what follows it (a star, a
/// backslash or a mark); elsewhere it stays as it is (`C:\Users`). [`unmarked`] reads it back.
fn escaped(out: &[Out]) -> String {
    let mut s = String::with_capacity(out.len() + 8);
    for (i, o) in out.iter().enumerate() {
        match o {
            Out::Mark => s.push_str("**"),
            Out::Text('*') => s.push_str("\\*"),
            Out::Text('\\') => {
                let next = out.get(i + 1);
                let read_with_next =
                    matches!(next, Some(Out::Mark | Out::Text('*') | Out::Text('\\')));
                s.push_str(if read_with_next { "\\\\" } else { "\\" });
            }
            Out::Text(c) => s.push(*c),
        }
    }
    s
}

/// `text` without the markers of its Markdown bold (`**words**` between characters that are
/// not letters or digits, so that `2**31 and 2**32` and `f(**a) g(**b)` are left as they are).
fn without_bold(text: &str) -> std::borrow::Cow<'_, str> {
    static BOLD: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\*\*([^*\s](?:[^*]*[^*\s])?)\*\*").expect("a valid expression")
    });
    if !text.contains("**") {
        return text.into();
    }
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut from) = (0, 0);
    while let Some(c) = BOLD.captures_at(text, from) {
        let (whole, inner) = (c.get(0).expect("the match"), c.get(1).expect("group 1"));
        if word(text[..whole.start()].chars().next_back())
            || word(text[whole.end()..].chars().next())
        {
            // Not bold: these two stars may still open a pair further on.
            from = whole.start() + 2;
            continue;
        }
        out.push_str(&text[copied..whole.start()]);
        out.push_str(inner.as_str());
        (copied, from) = (whole.end(), whole.end());
    }
    out.push_str(&text[copied..]);
    out.into()
}

/// A snippet's text without its marks, with the text's `*` and `\` as they were.
pub fn unmarked(snippet: &str) -> String {
    let mut out = String::with_capacity(snippet.len());
    let mut chars = snippet.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('\\', Some(&next @ ('*' | '\\'))) => {
                out.push(next);
                chars.next();
            }
            ('*', Some('*')) => {
                chars.next();
            }
            (c, _) => out.push(c),
        }
    }
    out
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
        // A bare word counts its forms too; a quoted one only itself; never inside a word.
        assert_eq!(count("fix", "Fixed it, then fix again; prefix"), 2);
        assert_eq!(count("\"fix\"", "Fixed it, then fix again; prefix"), 1);
        assert_eq!(
            count("email", "Emails, the email outbox; emailing; emailsx"),
            3
        );
        assert_eq!(count("redis", "redis_cache and 用redis做缓存, Redis!"), 3);
        assert_eq!(count("pref*", "prefix prefer apref"), 2);
        assert_eq!(count("缓存", "修复redis缓存的问题"), 1);
    }

    #[test]
    fn a_bare_word_finds_its_plural_and_verb_forms() {
        let forms = |w: &str| word_forms(w);
        let has = |w: &str, want: &[&str]| {
            let f = forms(w);
            for x in want {
                assert!(f.contains(&(*x).to_owned()), "{w}: {f:?} lacks {x}");
            }
        };
        has("email", &["emails", "emailed", "emailing"]);
        has("emails", &["email"]);
        has("retries", &["retry", "retried", "retrying"]);
        has("logging", &["log", "logs", "logged"]);
        has("committed", &["commit", "commits", "committing"]);
        has("cached", &["cache", "caches", "caching"]);
        has("fixes", &["fix", "fixed", "fixing"]);
        has("stop", &["stops", "stopped", "stopping"]);
        has("query", &["queries", "queried"]);
        // Not a form: `str` of `string`, `cal` of `called`, `statu` of `status`.
        assert!(!forms("string").contains(&"str".to_owned()));
        assert!(forms("called").contains(&"call".to_owned()));
        assert!(!forms("called").contains(&"cal".to_owned()));
        assert!(!forms("status").contains(&"statu".to_owned()));
        assert!(
            !forms("test").contains(&"test".to_owned()),
            "never the word itself"
        );
        for none in ["go", "utf8", "café", "认证", ""] {
            assert!(forms(none).is_empty(), "{none}");
        }
        has("edit", &["edits", "edited", "editing"]);
        has("open", &["opened", "opening"]);
        has("commit", &["committed", "committing"]);
        has("cookies", &["cookie"]);
        has("use", &["uses", "used", "using"]);
        assert!(forms("internationalisations").len() <= MAX_FORMS);
        // Bare words match any form; a quoted word, a prefix and CJK keep their exact form.
        let t = &parse_query("Emails")[0];
        assert_eq!(t.literal, "Emails");
        assert_eq!(
            t.expr(),
            "(\"Emails\" OR \"emailed\" OR \"emailing\" OR \"email\")"
        );
        for exact in ["\"emails\"", "emails*", "认证"] {
            let t = &parse_query(exact)[0];
            assert_eq!(t.expr(), t.fts, "{exact}");
        }
        let s = snippet("Emails are queued", &parse_query("email"), 40);
        assert_eq!(s, "**Emails** are queued");
        // Only whole words are marked, and the window opens at one.
        let s = snippet("it caused a crash; we use a lock", &parse_query("use"), 80);
        assert_eq!(s, "it caused a crash; we **use** a lock");
        let s = snippet("prefix and pref", &parse_query("pref*"), 40);
        assert_eq!(s, "**prefix** and **pref**");
        // Acronyms' plurals; stop words are never forms.
        has("APIs", &["api"]);
        assert!(!forms("ours").contains(&"our".to_owned()));
        assert!(significant_terms("can you do that again for all of them?").is_empty());
        assert_eq!(
            literals("can you do that again for all of them?").len(),
            significant_terms("can you do that again for all of them?").len() + 9
        );
    }

    #[test]
    fn snippet_highlights_and_respects_boundaries() {
        let t = "认证失败 when the token expired; retry the login flow";
        let s = snippet(t, &parse_query("token"), 30);
        assert!(s.contains("**token**"), "{s}");
        let s = snippet(t, &parse_query("认证"), 10);
        assert!(s.starts_with("**认证**"), "{s}");
    }

    #[test]
    fn the_texts_own_bold_is_left_out_so_that_marks_never_nest() {
        let t = "**Inspecting the failing test**\n\nThe fixture pins TZ; **do not** change it.";
        let s = snippet(t, &parse_query("failing test"), 200);
        assert_eq!(
            s,
            "Inspecting the **failing** **test** The fixture pins TZ; do not change it."
        );
        // Found by meaning: nothing is marked, and nothing looks marked.
        let s = snippet(t, &[], 200);
        assert!(!s.contains("**"), "{s}");
        assert!(s.starts_with("Inspecting the failing test"), "{s}");
        // Other stars are the text's: escaped, never taken for marks, and given back.
        for (text, query, want) in [
            ("x**2 grows fast", "grows", r"x\*\*2 **grows** fast"),
            (
                "call f(**kwargs) here",
                "call",
                r"**call** f(\*\*kwargs) here",
            ),
            ("glob src/**/*.rs", "glob", r"**glob** src/\*\*/\*.rs"),
            (
                "***bold italic*** word",
                "word",
                r"\*bold italic\* **word**",
            ),
            ("2**31 and 2**32 fit", "fit", r"2\*\*31 and 2\*\*32 **fit**"),
            ("f(**a) g(**b) ok", "ok", r"f(\*\*a) g(\*\*b) **ok**"),
            ("**Note**bar", "zzz", r"\*\*Note\*\*bar"),
            // Backslashes: left alone, doubled only before a star, a backslash or a mark.
            (r"C:\Users\me", "users", r"C:\\**Users**\me"),
            (r"a \* b", "b", r"a \\\* **b**"),
            (r"\\server\share", "share", r"\\\server\\**share**"),
        ] {
            let s = snippet(text, &parse_query(query), 200);
            assert_eq!(s, want, "{text}");
            let bold_left_out = without_bold(text);
            assert_eq!(unmarked(&s), bold_left_out, "{text}: {s}");
        }
        assert_eq!(unmarked(r"2\*\*31 is **big**"), "2**31 is big");
    }
}
