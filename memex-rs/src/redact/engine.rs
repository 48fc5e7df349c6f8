//! The engine that runs [`RULES`]: the block pass for `<private>` and one combined regex
//! for the other rules, the rewritten `\b`, the placeholder vetoes and the JSON-string
//! guard for raw bytes.

use std::sync::LazyLock;

use regex::bytes::{CaptureLocations, Regex, RegexBuilder};

use super::{PRIVATE, RULES, Rule, SECRET, Tally};

/// What a leading `\b` of a pattern becomes: start of input, a non-word character other than a
/// backslash, a backslash escape (any depth: the escaped letter is then not part of the
/// secret), escaped backslashes, an ANSI colour. Matched and kept.
const BOUNDARY: &str = concat!(
    r"(?:^|[^A-Za-z0-9_\\]",
    r"|(?:^|[^\\])(?:\\\\)+",
    r#"|(?:^|[^\\])\\+(?:[nrtbfe"'/]|x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|033)(?:\[[0-9;]*m)?"#,
    r"|\x1b\[[0-9;]*m)"
);

/// In raw JSON, "any character" of a block body: anything but a quote, or an escape pair.
const JSON_ANY: &str = r#"(?:[^"\\]|\\[\s\S])"#;

/// Rules whose matches may be long and end far away (`<private>…</private>`). They get their
/// own pass, which finds them by a literal and reads each at most once; the other rules run
/// between them. In the combined regex, one unclosed tag would keep a candidate match alive to
/// the end of the input at every later match.
const BLOCK_RULES: &[&str] = &["private"];

pub(super) static TEXT: LazyLock<Engine> = LazyLock::new(|| Engine::new(RULES, false));
pub(super) static RAW: LazyLock<Engine> = LazyLock::new(|| Engine::new(RULES, true));

pub(super) struct Slots {
    name: &'static str,
    /// The group of the whole rule.
    whole: usize,
    /// The `secret` groups; one around the whole rule (after its boundary) if it has none.
    pub(super) secrets: Vec<usize>,
    /// Whether the rule keeps part of its match (it has `secret` groups).
    keyed: bool,
}

/// One regex of several rules, and where each rule's groups are.
pub(super) struct Matcher {
    pub(super) re: Regex,
    pub(super) slots: Vec<Slots>,
}

pub(super) struct Engine {
    blocks: Matcher,
    shapes: Matcher,
}

/// Where a scan has got to: the output so far (`None` while nothing was replaced) covers the
/// input up to `done`.
struct Out {
    buf: Option<Vec<u8>>,
    done: usize,
    /// For a JSON document: replace only inside one string.
    json: Option<JsonCursor>,
}

impl Out {
    /// Replaces `hay[s..e]` (found by `rule`), unless that would break the JSON document.
    fn replace(
        &mut self,
        hay: &[u8],
        s: usize,
        e: usize,
        rule: &'static str,
        t: &mut Tally,
    ) -> bool {
        if s < self.done
            || !self
                .json
                .as_mut()
                .is_none_or(|j| j.inside_string(hay, s, e))
        {
            return false;
        }
        let buf = self
            .buf
            .get_or_insert_with(|| Vec::with_capacity(hay.len()));
        buf.extend_from_slice(&hay[self.done..s]);
        let with = if rule == "private" { PRIVATE } else { SECRET };
        buf.extend_from_slice(with.as_bytes());
        self.done = e;
        t.add(rule);
        true
    }
}

impl Engine {
    /// `raw`: block bodies do not cross an unescaped quote.
    fn new(rules: &'static [Rule], raw: bool) -> Engine {
        let (blocks, shapes): (Vec<usize>, Vec<usize>) =
            (0..rules.len()).partition(|&i| BLOCK_RULES.contains(&rules[i].name));
        Engine {
            blocks: Matcher::new(rules, &blocks, raw),
            shapes: Matcher::new(rules, &shapes, raw),
        }
    }

    /// The redacted copy of `hay`, `None` if nothing was found. `json`: `hay` is a JSON
    /// document.
    pub(super) fn run(&self, hay: &[u8], json: bool, tally: &mut Tally) -> Option<Vec<u8>> {
        let mut out = Out {
            buf: None,
            done: 0,
            json: json.then(JsonCursor::default),
        };
        let mut locs = self.blocks.re.capture_locations();
        let (mut from, mut at) = (0, 0);
        while at < hay.len() {
            let Some(m) = self.blocks.re.captures_read_at(&mut locs, hay, at) else {
                break;
            };
            let Some(slot) = self
                .blocks
                .slots
                .iter()
                .find(|s| locs.get(s.whole).is_some())
            else {
                break;
            };
            let (s, e) = (m.start(), m.end());
            self.shapes.scan(hay, from, s, &mut out, tally, 0);
            if out.replace(hay, s, e, slot.name, tally) {
                (from, at) = (e, e);
            } else {
                at = s + 1;
            }
        }
        self.shapes.scan(hay, from, hay.len(), &mut out, tally, 0);
        let mut buf = out.buf?;
        buf.extend_from_slice(&hay[out.done..]);
        Some(buf)
    }
}

impl Matcher {
    /// One regex of `rules[which]`, in order; consecutive `\b` rules share one boundary.
    pub(super) fn new(rules: &'static [Rule], which: &[usize], raw: bool) -> Matcher {
        let mut src = String::new();
        let mut i = 0;
        while i < which.len() {
            if !src.is_empty() {
                src.push('|');
            }
            let mut alts = Vec::new();
            while let Some(rest) = which
                .get(i)
                .and_then(|&k| rules[k].pattern.strip_prefix(r"\b"))
            {
                alts.push(piece(which[i], rest, raw));
                i += 1;
            }
            if alts.is_empty() {
                src.push_str(&piece(which[i], rules[which[i]].pattern, raw));
                i += 1;
            } else {
                src.push_str(&format!("{BOUNDARY}(?:{})", alts.join("|")));
            }
        }
        debug_assert!(!src.is_empty(), "no rules");
        let re = RegexBuilder::new(&src)
            .unicode(false)
            .size_limit(1 << 26)
            .dfa_size_limit(1 << 24)
            .build()
            .expect("valid redaction patterns");
        let mut slots: Vec<Slots> = Vec::new();
        let mut index = vec![usize::MAX; rules.len()];
        for (g, name) in re.capture_names().enumerate() {
            let Some(name) = name else { continue };
            let (kind, rest) = name.split_at(1);
            let k: usize = rest
                .split('_')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("own group");
            if index[k] == usize::MAX {
                index[k] = slots.len();
                slots.push(Slots {
                    name: rules[k].name,
                    whole: 0,
                    secrets: Vec::new(),
                    keyed: rules[k].pattern.contains("(?P<secret>"),
                });
            }
            let slot = &mut slots[index[k]];
            match kind {
                "r" => slot.whole = g,
                _ => slot.secrets.push(g),
            }
        }
        Matcher { re, slots }
    }

    /// Redacts the matches in `hay[from..to]`, seeing `hay[..from]` as context; but right
    /// after a replacement the input starts afresh (what follows is not glued to a word).
    fn scan(&self, hay: &[u8], from: usize, to: usize, out: &mut Out, t: &mut Tally, depth: u8) {
        let mut locs: CaptureLocations = self.re.capture_locations();
        let mut base = if from == out.done { from } else { 0 };
        let mut at = from;
        while at < to {
            let Some(m) = self
                .re
                .captures_read_at(&mut locs, &hay[base..to], at - base)
            else {
                break;
            };
            let Some(slot) = self.slots.iter().find(|s| locs.get(s.whole).is_some()) else {
                break;
            };
            // The kept stretch before a secret (a name, a URL's user) is scanned too, for
            // shapes that are whole tokens: cut where the secret starts, it would show a keyed
            // rule a value that is not one (`X_TOKEN: Bearer` of `X_TOKEN: Bearer abc`).
            let mut kept = base + m.start();
            let mut next = kept + 1;
            if depth > 0 && slot.keyed {
                at = next;
                continue;
            }
            let mut resume = None;
            for &g in &slot.secrets {
                let Some((s, e)) = locs.get(g) else { continue };
                let (s, e) = unquote(hay, base + s, base + e);
                if s >= e || s < out.done {
                    continue;
                }
                if depth < 4 && kept < s {
                    self.scan(hay, kept, s, out, t, depth + 1);
                }
                if !vetoed(slot.name, &hay[s..e]) && out.replace(hay, s, e, slot.name, t) {
                    kept = e;
                    resume = Some(e);
                } else {
                    // Not a secret after all: other rules may still match from its boundary.
                    kept = s;
                    next = next.max(s.saturating_sub(1));
                }
            }
            match resume {
                Some(e) => (base, at) = (e, e),
                None => at = next,
            }
        }
    }
}

/// The regex source of rule `k`: groups `r{k}` (whole) and `s{k}_{n}` (secrets).
fn piece(k: usize, pattern: &str, raw: bool) -> String {
    let mut p = if raw {
        pattern.replace(r"[\s\S]", JSON_ANY)
    } else {
        pattern.to_string()
    };
    let parts: Vec<&str> = p.split("(?P<secret>").collect();
    p = if parts.len() == 1 {
        format!("(?P<s{k}_0>{p})")
    } else {
        let mut s = parts[0].to_string();
        for (n, part) in parts[1..].iter().enumerate() {
            s.push_str(&format!("(?P<s{k}_{n}>{part}"));
        }
        s
    };
    format!("(?P<r{k}>{p})")
}

/// Leaves a secret's surrounding quotes (maybe JSON-escaped) out of it.
pub(super) fn unquote(h: &[u8], mut s: usize, mut e: usize) -> (usize, usize) {
    let quote = |c: u8| matches!(c, b'"' | b'\'' | b'`');
    let mut i = s;
    while i < e && h[i] == b'\\' {
        i += 1;
    }
    if i < e && quote(h[i]) {
        s = i + 1;
    }
    if e > s && quote(h[e - 1]) {
        e -= 1;
        while e > s && h[e - 1] == b'\\' {
            e -= 1;
        }
    }
    (s, e)
}

/// Rules whose values are free-form, where placeholders are left alone.
const VALUE_RULES: &[&str] = &[
    "env-secret",
    "cli-secret-flag",
    "curl-user",
    "url-password",
    "authorization",
    "bearer-token",
    "azure-sas-signature",
    "cli-password-p",
    "netrc-password",
];

/// Values that are not secrets: a variable, a template, a placeholder, a type, code.
fn vetoed(rule: &str, v: &[u8]) -> bool {
    if v.starts_with(b"[REDACTED") {
        return true;
    }
    if rule == "aws-secret-access-key" {
        // 40 lowercase hex digits near a key id: a git SHA, not a secret (base64, mixed case).
        return v.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    }
    if !VALUE_RULES.contains(&rule) {
        return false;
    }
    let free = matches!(
        rule,
        "env-secret" | "cli-secret-flag" | "cli-password-p" | "netrc-password"
    );
    if free && v.len() < 3 {
        return true;
    }
    if matches!(v[0], b'$' | b'%' | b'<' | b'{' | b'*') || (free && v[0] == b'-') {
        return true;
    }
    if v.iter().all(|&c| c == v[0]) {
        return true;
    }
    let has = |n: &[u8]| v.windows(n.len()).any(|w| w == n);
    if has(b"***") || has(b"...") || has(b"${") || has(b"{{") || has(b"\xe2\x80\xa6") {
        return true;
    }
    let lower = v.to_ascii_lowercase();
    if lower.starts_with(b"your") || lower.starts_with(b"insert") || lower.starts_with(b"replace") {
        return true;
    }
    const WORDS: &[&str] = &[
        "changeme",
        "change_me",
        "change-me",
        "changeit",
        "example",
        "placeholder",
        "redacted",
        "dummy",
        "secret",
        "password",
        "passwd",
        "token",
        "none",
        "null",
        "nil",
        "undefined",
        "true",
        "false",
        "yes",
        "no",
        "on",
        "off",
        "string",
        "str",
        "bytes",
        "int",
        "number",
        "bool",
        "boolean",
        "any",
        "unknown",
        "optional",
        "required",
        "object",
        "todo",
        "tbd",
        "empty",
        "hidden",
        "masked",
        "secretstr",
        "sensitive",
    ];
    if WORDS.iter().any(|w| w.as_bytes() == lower.as_slice()) {
        return true;
    }
    // `os.environ`, `self.password`, `process.env.API_KEY`: code, not a literal.
    free && is_code_reference(v)
}

fn is_code_reference(v: &[u8]) -> bool {
    let mut parts = 0;
    for part in v.split(|&c| c == b'.') {
        let ident = part
            .first()
            .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
            && part.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
        if !ident {
            return false;
        }
        parts += 1;
    }
    parts > 1
}

/// Tracks, left to right, whether a position of a JSON document is inside a string.
#[derive(Default)]
struct JsonCursor {
    pos: usize,
    in_string: bool,
    escaped: bool,
}

impl JsonCursor {
    fn step(&mut self, c: u8) {
        if !self.in_string {
            self.in_string = c == b'"';
        } else if self.escaped {
            self.escaped = false;
        } else if c == b'\\' {
            self.escaped = true;
        } else if c == b'"' {
            self.in_string = false;
        }
    }

    fn advance(&mut self, h: &[u8], to: usize) {
        if to < self.pos {
            *self = JsonCursor::default();
        }
        for &c in &h[self.pos..to] {
            self.step(c);
        }
        self.pos = to;
    }

    /// Whether `h[s..e]` lies inside one string and starts and ends between escapes.
    fn inside_string(&mut self, h: &[u8], s: usize, e: usize) -> bool {
        self.advance(h, s);
        if !self.in_string || self.escaped {
            return false;
        }
        let mut probe = JsonCursor {
            pos: s,
            in_string: true,
            escaped: false,
        };
        for &c in &h[s..e] {
            probe.step(c);
            if !probe.in_string {
                return false;
            }
        }
        !probe.escaped
    }
}
