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
                let Some((s0, e0)) = locs.get(g) else {
                    continue;
                };
                let (s, e) = unquote(hay, base + s0, base + e0);
                // Quoted on both sides: `"-abc"` is a value, `-abc` the next flag.
                let quoted = s > base + s0 && e < base + e0;
                let braced = s > 0 && hay[s - 1] == b'{';
                let e = if !quoted && !braced && FREE_RULES.contains(&slot.name) {
                    trim_closers(hay, s, e)
                } else {
                    e
                };
                if s >= e || s < out.done {
                    continue;
                }
                if depth < 4 && kept < s {
                    self.scan(hay, kept, s, out, t, depth + 1);
                }
                let name = name_before(&hay[..s]);
                let ctx = Ctx {
                    quoted,
                    braced,
                    code_style: s > 0 && matches!(hay[s - 1], b' ' | b'\t') || !is_env_name(name),
                    statement: hay.get(e) == Some(&b';') && after_spaced_eq(&hay[..s]),
                    next: hay.get(e).copied(),
                    rust_ref: after_rust_ref(&hay[..s]),
                    own_name: name.eq_ignore_ascii_case(&hay[s..e]),
                };
                if !vetoed(slot.name, &hay[s..e], ctx) && out.replace(hay, s, e, slot.name, t) {
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

/// A value ends at a closing bracket it did not open: that bracket belongs to the code around
/// it (`f(password=abc)`, `User{password=abc}`, `def f(password=None):`).
fn trim_closers(h: &[u8], s: usize, e: usize) -> usize {
    let mut depth = [0usize; 3];
    for (i, &c) in h[s..e].iter().enumerate() {
        let (k, open) = match c {
            b'(' => (0, true),
            b'[' => (1, true),
            b'{' => (2, true),
            b')' => (0, false),
            b']' => (1, false),
            b'}' => (2, false),
            _ => continue,
        };
        if open {
            depth[k] += 1;
        } else if depth[k] == 0 {
            return s + i;
        } else {
            depth[k] -= 1;
        }
    }
    e
}

/// The identifier a value is assigned to: `pwd` of `pwd=`, `api_key` of `"api_key": `.
fn name_before(h: &[u8]) -> &[u8] {
    let mut i = h.len();
    while i > 0 && b" \t\"'`\\=:>".contains(&h[i - 1]) {
        i -= 1;
    }
    let end = i;
    while i > 0 && (h[i - 1].is_ascii_alphanumeric() || h[i - 1] == b'_') {
        i -= 1;
    }
    &h[i..end]
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
    "aws-configure-set",
    "login-password-p",
    "redis-cli-password",
    "docker-config-auth",
    "pgpass",
    "odbc-password",
    "cookie",
    "url-query-token",
    "json-token",
];

/// Of [`VALUE_RULES`], those whose value may be anything a person types, code included: too
/// short, a flag (`-p --next`), a code reference or a call are no values there.
const FREE_RULES: &[&str] = &[
    "env-secret",
    "cli-secret-flag",
    "cli-password-p",
    "netrc-password",
    "aws-configure-set",
    "login-password-p",
    "redis-cli-password",
    "odbc-password",
];

/// Where a value stands.
#[derive(Clone, Copy)]
struct Ctx {
    /// Quotes on both sides: `"-abc"` is a value, `-abc` the next flag.
    quoted: bool,
    /// After a `{`: `Pwd={pwd}` is a template.
    braced: bool,
    /// After a blank (`name = value`, `name: value`) or a name not in upper case
    /// (`proxy_pass=url.password`): the style of code and YAML, where `a.b` is a reference;
    /// `NAME=a.b` (shell, `.env`) is more likely a literal.
    code_style: bool,
    /// `= value;`: a statement of code (a shell assignment has no blank after `=`).
    statement: bool,
    /// The byte after the value.
    next: Option<u8>,
    /// After Rust's `&mut ` or `&dyn ` (not a YAML anchor).
    rust_ref: bool,
    /// The value is its own name: `pwd=pwd`, `api_key=api_key` (a keyword argument).
    own_name: bool,
}

/// `DB_PASSWORD`, not `password` or `apiKey`.
fn is_env_name(n: &[u8]) -> bool {
    n.iter().any(u8::is_ascii_uppercase) && !n.iter().any(u8::is_ascii_lowercase)
}

/// Whether `h` ends with `&mut` or `&dyn` and blanks.
fn after_rust_ref(h: &[u8]) -> bool {
    let h = h.trim_ascii_end();
    h.ends_with(b"&mut") || h.ends_with(b"&dyn")
}

/// Whether `h` ends with `=` and blanks.
fn after_spaced_eq(h: &[u8]) -> bool {
    let blanks = h
        .iter()
        .rev()
        .take_while(|c| matches!(c, b' ' | b'\t'))
        .count();
    blanks > 0 && h.len() > blanks && h[h.len() - blanks - 1] == b'='
}

/// Values that are not secrets: a variable, a template, a placeholder, a type, code.
fn vetoed(rule: &str, v: &[u8], ctx: Ctx) -> bool {
    let Ctx {
        quoted,
        braced,
        code_style,
        statement,
        next,
        rust_ref,
        own_name,
    } = ctx;
    if v.starts_with(b"[REDACTED") {
        return true;
    }
    match rule {
        // 40 lowercase hex digits near a key id: a git SHA, not a secret (base64, mixed case).
        "aws-secret-access-key" => return v.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
        // `hvs.compute_hessian`: code.
        "vault-token" => {
            return v.starts_with(b"hv") && v[4..].iter().all(|c| matches!(c, b'a'..=b'z' | b'_'));
        }
        // Random base36 has a digit and a letter; all hex is a hash (`inline.9eb8192c0fafd823`).
        "kubernetes-bootstrap-token" => {
            return !(v.iter().any(u8::is_ascii_digit) && v.iter().any(u8::is_ascii_lowercase))
                || v.iter().all(u8::is_ascii_hexdigit);
        }
        // `"auth": "authentication"`.
        "docker-config-auth" if v.iter().all(u8::is_ascii_alphabetic) => return true,
        // `{"token": "STRING_LITERAL_KIND"}`.
        "json-token" if !v.iter().any(u8::is_ascii_digit) => return true,
        // `http://host:8080?next=a@b`: a port, then a query.
        "url-password" => {
            let digits = v.iter().take_while(|c| c.is_ascii_digit()).count();
            if digits > 0 && matches!(v.get(digits), Some(b'?' | b'#')) {
                return true;
            }
        }
        // `f"…;PWD={pwd};"`, `Password={self.password}`, `{password!r}`, `{0}`.
        "odbc-password" if braced && (v.iter().all(u8::is_ascii_digit) || is_format_field(v)) => {
            return true;
        }
        _ => {}
    }
    if !VALUE_RULES.contains(&rule) {
        return false;
    }
    let free = FREE_RULES.contains(&rule);
    if free && v.len() < 3 {
        return true;
    }
    // A PEM armor line is left to the private-key rules, which take its body too.
    if matches!(v[0], b'$' | b'%' | b'<' | b'{') || v.starts_with(b"-----") {
        return true;
    }
    // `-p --next-flag`; `AttachedToken::empty()` seen from `AttachedToken:`.
    if free && matches!(v[0], b'-' | b':') && !quoted {
        return true;
    }
    // `--jobserver-auth=3,4`: numbers, not a password; binary data has control bytes (but an
    // ANSI colour may follow a value).
    if v.contains(&b',') && v.iter().all(|c| c.is_ascii_digit() || *c == b',')
        || v.iter().any(|&c| c < b' ' && c != 0x1b)
    {
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
    if is_placeholder(&lower) {
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
    // Code, not a literal: `os.environ`, `self.password`, `getpass()`, `= savedApiKey;`,
    // `= (a + b)`, `state->key`, `Token![;]` (a Rust macro, the value cut at the bracket).
    let macro_call = v.ends_with(b"!")
        && is_ident(&v[..v.len() - 1])
        && matches!(next, Some(b'(' | b'[' | b'{'));
    let arrow = is_ident(&v[..1]) && v.windows(2).any(|w| w == b"->");
    free && !quoted
        && (is_code_reference(v, code_style)
            || is_call(v, code_style)
            || statement && is_ident(v)
            || code_style && matches!(v[0], b'(' | b'[' | b'&' | b'*' | b'!' | b'|')
            || macro_call
            || arrow
            || rust_ref
            || own_name)
}

/// The inside of a format string's field: `pwd`, `self.password`, `password!r`, `pw:>8`.
fn is_format_field(v: &[u8]) -> bool {
    let name = v
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || b"_.".contains(c))
        .count();
    (v[0].is_ascii_lowercase() || v[0] == b'_')
        && (name == v.len() || matches!(v[name], b'!' | b':' | b'[') && !v.contains(&b';'))
}

fn is_ident(v: &[u8]) -> bool {
    v.first()
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
        && v.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// `your-api-key`, `YOUR_TOKEN`, `yourpassword`, `my-token`, `insert-key-here`, `replace_me`
/// (`lower` is lowercase), but not `yourself-2024` or `yourtown9`.
fn is_placeholder(lower: &[u8]) -> bool {
    const AFTER_YOUR: &[&str] = &[
        "api", "key", "token", "secret", "pass", "pw", "access", "app", "client", "own", "real",
        "actual", "account", "user", "db", "database", "project", "org", "personal", "private",
        "service", "auth", "bot", "webhook", "name", "email", "host", "server", "domain", "tenant",
        "company", "id", "value", "new", "pat", "bearer", "jwt", "cookie", "session",
    ];
    let sep = |rest: &[u8]| matches!(rest.first(), None | Some(b'-' | b'_' | b' ' | b'.'));
    if let Some(rest) = lower.strip_prefix(b"your") {
        return sep(rest) || AFTER_YOUR.iter().any(|w| rest.starts_with(w.as_bytes()));
    }
    // `my-token`, `my_secret`, `mypassword`.
    if let Some(rest) = lower.strip_prefix(b"my") {
        let rest = rest
            .strip_prefix(b"-")
            .or(rest.strip_prefix(b"_"))
            .unwrap_or(rest);
        return ["token", "secret", "pass", "key", "api", "pw", "auth"]
            .iter()
            .any(|w| rest.starts_with(w.as_bytes()));
    }
    for verb in [&b"insert"[..], b"replace"] {
        if let Some(rest) = lower.strip_prefix(verb) {
            return sep(rest)
                || ["me", "with", "this", "your", "here"]
                    .iter()
                    .any(|w| rest.starts_with(w.as_bytes()));
        }
    }
    false
}

/// First segments that name an object in code, not a literal (`os.environ`, `self.key`).
const CODE_ROOTS: &[&str] = &[
    "self",
    "this",
    "cls",
    "os",
    "sys",
    "env",
    "process",
    "config",
    "conf",
    "cfg",
    "settings",
    "options",
    "opts",
    "opt",
    "args",
    "argv",
    "kwargs",
    "params",
    "props",
    "ctx",
    "context",
    "app",
    "request",
    "req",
    "res",
    "resp",
    "response",
    "secrets",
    "vars",
    "inputs",
    "credentials",
    "creds",
    "auth",
    "user",
    "account",
    "db",
    "data",
    "form",
    "values",
    "payload",
    "body",
    "obj",
    "record",
    "row",
    "result",
    "deno",
    "bun",
    "system",
    "environment",
    "window",
    "document",
    "module",
    "exports",
    "import",
    "st",
    "rails",
    "flags",
    "state",
    "store",
    "session",
    "client",
    "keyring",
    "vault",
    "global",
    "globals",
    "current",
    "github",
    "matrix",
    "steps",
    "needs",
    "ENV",
];

/// `os.environ`, `self.password`, `settings.SECRET_KEY`, `this.apiKey`: identifiers joined by
/// dots. Not a token with a dotted prefix (`s.ZC9Ecf4M5g9o34Q6…`: a long segment mixes
/// letters and digits). Unless `code_style`, it must also be led by a known object
/// or be written in snake or camel case: `DB_PASSWORD=correct.horse.battery.staple` is a
/// passphrase.
fn is_code_reference(v: &[u8], code_style: bool) -> bool {
    let v = v.strip_prefix(b"&").unwrap_or(v);
    let parts: Vec<&[u8]> = v.split(|&c| c == b'.').collect();
    if parts.len() < 2 || !parts.iter().all(|p| is_ident(p)) {
        return false;
    }
    // Letters and digits alternating 3+ times (`ZC9Ecf4M5g…`, not `Ed25519PrivateKey`), or
    // 24+ characters with digits.
    let tokenish = |p: &[u8]| {
        let turns = p
            .windows(2)
            .filter(|w| w[0].is_ascii_digit() != w[1].is_ascii_digit())
            .count();
        p.len() >= 12 && !p.contains(&b'_') && (turns >= 3 || p.len() >= 24 && turns >= 1)
    };
    if parts.iter().any(|p| tokenish(p)) {
        return false;
    }
    if code_style {
        return true;
    }
    let root = CODE_ROOTS
        .iter()
        .any(|r| r.as_bytes().eq_ignore_ascii_case(parts[0]));
    let styled = |p: &[u8]| {
        p.contains(&b'_')
            || p.windows(2)
                .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
    };
    root || parts.iter().any(|p| styled(p))
}

/// A call, an index, a path or a macro, maybe cut by a quote or a comma: `getpass()`,
/// `os.environ[`, `bcrypt.hashpw(pw`, `input().strip()`, `String::from(`, `Token![;]`,
/// `input.parse()?`. Not `pa(ss)word`; unless `code_style`, not `Summer(2024)` either.
fn is_call(v: &[u8], code_style: bool) -> bool {
    let v = v.strip_prefix(b"&").unwrap_or(v);
    let head = v
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || b"_.:".contains(c))
        .count();
    if head == 0 || !v[0].is_ascii_alphabetic() && v[0] != b'_' {
        return false;
    }
    let h = &v[..head];
    if h.windows(2).any(|w| w == b"::") {
        return true;
    }
    match v.get(head) {
        Some(b'!') => return matches!(v.get(head + 1), Some(b'(' | b'[' | b'{')),
        Some(b'(' | b'[') => {}
        _ => return false,
    }
    let count = |c: u8| v.iter().filter(|&&x| x == c).count();
    let unbalanced = count(b'(') != count(b')') || count(b'[') != count(b']');
    let chained = v.windows(2).any(|w| w == b")." || w == b"].");
    h.iter().any(|c| b"_.".contains(c))
        || unbalanced
        || code_style && (chained || matches!(v.last(), Some(b')' | b']' | b'?')))
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
