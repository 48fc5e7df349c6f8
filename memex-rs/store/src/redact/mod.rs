//! Secret redaction, applied before anything reaches disk: to message text, tool input and the
//! raw record bytes alike, so no search, no `sessions show` and no grep of the data directory
//! can find a planted key.
//!
//! Every shape is one [`Rule`] of [`RULES`]: a name (what a [`Tally`] counts), a pattern, and
//! a fake example the tests plant in many contexts. `<private>…</private>` blocks (rule
//! `private`, replaced by [`PRIVATE`]) are found first, in a pass led by a literal; all other
//! rules (replaced by [`SECRET`]) are joined into one regex that runs once over the text
//! between the blocks, whatever the number of rules.
//!
//! - A pattern may mark what is secret with groups named `secret` (alternatives may each have
//!   one); the rest of its match (a variable name, a header, a URL's user and host) is kept,
//!   and is itself scanned for secrets. Without a `secret` group the whole match goes. Quotes
//!   around a secret are kept.
//! - A leading `\b` means "not glued to a word" and is rewritten into a boundary that also
//!   holds after the escapes raw records are spelled with: a JSON escape at any depth (`\n`,
//!   `\t`, `\"`, `\\n`, `\u003c`, …), escaped backslashes, an ANSI colour (`ESC[31m` or
//!   `\u001b[31m`). The regex crate has no look-behind, so that boundary is matched and kept.
//! - Text and raw bytes are redacted on their decoded meaning with the same patterns (a tool
//!   input is JSON text too): a secret takes an escape's backslash only with the character it
//!   escapes (`/` spelled `\/`, a PEM body's `\n`), so a match never cuts an escape in half.
//! - Raw bytes that are a JSON document (they start with `{` or `[`) stay valid JSON: a
//!   replacement that would not lie inside one JSON string is skipped, and a `<private>` block
//!   does not cross an unescaped `"` there (in text it may contain quotes).
//! - Values of generic rules (`X_TOKEN=…`, `Authorization: …`, a URL's password,
//!   `docker login -p …`) are left alone when they are placeholders: `${VAR}`, `$VAR`,
//!   `<your-token>`, `YOUR_API_KEY`, `changeme`, `xxxx`, `null`, a type name, an already
//!   redacted value; or code: `os.environ`, `self.api_key`, `getpass()`, `Token![;]`, a value
//!   that is its own name (`pwd=pwd`). `NAME=a.b.c` (an upper-case name, no blank: shell,
//!   `.env`) is a literal (a passphrase, `s.…` of Vault); `name = a.b` and `name: a.b` are code.
//! - After `=` a value is literal up to a blank or a quote: `abc;def`, `#abc`, `*abc` are
//!   values; `;`, `&` or `,` before the next `Name=` ends one (`Pwd=x;Database=y`), and so
//!   does a closing bracket it did not open (`f(password=x)`). After `:` (YAML, JSON), `#`,
//!   `*`, `[` and `{` are a comment, an alias and collections. A value starting with `-` is
//!   the next flag, unless quoted.
//! - Unbounded parts of patterns stop at a delimiter that is never far (a blank, a quote, a
//!   line break, the next `-----` of a PEM), so no match rescans a long input to its end.
//!
//! Here: the entry points and [`Tally`]; `rules` holds the table, `engine` runs it, `tests`
//! walks every rule through every context.

use std::borrow::Cow;
use std::collections::BTreeMap;

pub const SECRET: &str = "[REDACTED_SECRET]";
pub const PRIVATE: &str = "[REDACTED]";

mod engine;
mod rules;
#[cfg(test)]
mod tests;

use engine::{RAW, TEXT};
pub use rules::{RULES, Rule};

/// Secrets found, per rule name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    counts: BTreeMap<&'static str, u64>,
}

impl Tally {
    pub fn add(&mut self, rule: &'static str) {
        *self.counts.entry(rule).or_default() += 1;
    }

    /// Adds another tally (e.g. one per thread).
    pub fn merge(&mut self, other: &Tally) {
        for (rule, n) in other.iter() {
            *self.counts.entry(rule).or_default() += n;
        }
    }

    pub fn get(&self, rule: &str) -> u64 {
        self.counts.get(rule).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// `(rule name, count)` by name, rules that found nothing left out.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts.iter().map(|(k, v)| (*k, *v))
    }
}

/// Redacts `s`; returns the text and how many secrets were replaced.
pub fn redact_text(s: &str) -> (Cow<'_, str>, u32) {
    let mut t = Tally::default();
    let out = redact_text_tally(s, &mut t);
    (out, count(&t))
}

/// Redacts raw record bytes (which may be invalid UTF-8); returns them and how many secrets
/// were replaced. A JSON document (bytes starting with `{` or `[`) stays valid JSON.
pub fn redact_bytes(b: &[u8]) -> (Cow<'_, [u8]>, u32) {
    let mut t = Tally::default();
    let out = redact_bytes_tally(b, &mut t);
    (out, count(&t))
}

/// [`redact_text`], counting per rule into `tally`.
pub fn redact_text_tally<'a>(s: &'a str, tally: &mut Tally) -> Cow<'a, str> {
    match TEXT.run(s.as_bytes(), false, tally) {
        None => Cow::Borrowed(s),
        // Every replaced span starts and ends at an ASCII byte, so this never fails.
        Some(b) => Cow::Owned(
            String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into()),
        ),
    }
}

/// [`redact_bytes`], counting per rule into `tally`.
pub fn redact_bytes_tally<'a>(b: &'a [u8], tally: &mut Tally) -> Cow<'a, [u8]> {
    let json = matches!(b.trim_ascii_start().first(), Some(b'{' | b'['));
    match RAW.run(b, json, tally) {
        None => Cow::Borrowed(b),
        Some(out) => Cow::Owned(out),
    }
}

fn count(t: &Tally) -> u32 {
    u32::try_from(t.total()).unwrap_or(u32::MAX)
}
