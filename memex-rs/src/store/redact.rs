//! Secret redaction, applied before anything reaches disk: to message text, tool input and the
//! raw record bytes alike, so no search, no `sessions show` and no grep of the data directory
//! can find a planted key.

use std::borrow::Cow;
use std::sync::LazyLock;

pub const SECRET: &str = "[REDACTED_SECRET]";
pub const PRIVATE: &str = "[REDACTED]";

/// Secrets by shape. Anthropic before OpenAI (both start `sk-`).
const SECRET_PATTERNS: &[&str] = &[
    r"\bsk-ant-[A-Za-z0-9_\-]{20,}",
    r"\bsk-(?:proj-)?[A-Za-z0-9_\-]{20,}",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",
    r"\bgithub_pat_[A-Za-z0-9_]{22,}",
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bAIza[0-9A-Za-z_\-]{35}",
    r"\bnpm_[A-Za-z0-9]{36}",
    r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
    // PEM private keys; in raw JSON the newlines are `\n` escapes, which `[\s\S]` also spans.
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
];

/// `<private>…</private>`, also when a JSON writer escaped the angle brackets.
const PRIVATE_PATTERN: &str =
    r"(?:<|\\u003[cC])private(?:>|\\u003[eE])[\s\S]*?(?:<|\\u003[cC])/private(?:>|\\u003[eE])";

fn combined() -> String {
    format!(
        "(?P<private>{PRIVATE_PATTERN})|(?:{})",
        SECRET_PATTERNS.join("|")
    )
}

static TEXT_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(&combined()).expect("valid redaction patterns"));
static BYTES_RE: LazyLock<regex::bytes::Regex> =
    LazyLock::new(|| regex::bytes::Regex::new(&combined()).expect("valid redaction patterns"));

/// Redacts `s`; returns the text and how many secrets were replaced.
pub fn redact_text(s: &str) -> (Cow<'_, str>, u32) {
    let mut n = 0;
    let out = TEXT_RE.replace_all(s, |c: &regex::Captures<'_>| {
        n += 1;
        if c.name("private").is_some() {
            PRIVATE
        } else {
            SECRET
        }
    });
    (out, n)
}

/// Redacts raw record bytes (which may be invalid UTF-8).
pub fn redact_bytes(b: &[u8]) -> (Cow<'_, [u8]>, u32) {
    let mut n = 0;
    let out = BYTES_RE.replace_all(b, |c: &regex::bytes::Captures<'_>| {
        n += 1;
        if c.name("private").is_some() {
            PRIVATE.as_bytes()
        } else {
            SECRET.as_bytes()
        }
    });
    (out, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_secret_shape_is_redacted() {
        let secrets = [
            "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            "sk-AbCdEfGhIjKlMnOpQrStUvWx",
            "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
            "xoxb-1234567890-abcdefghij",
            "AKIAIOSFODNN7EXAMPLE",
            "AIzaSyA-1234567890abcdefghijklmnopqrstu",
            "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        ];
        for s in secrets {
            let text = format!("key: {s} end");
            let (out, n) = redact_text(&text);
            assert_eq!(n, 1, "{s}");
            assert_eq!(out, format!("key: {SECRET} end"), "{s}");
        }
    }

    #[test]
    fn private_tags_and_escaped_json_forms() {
        let (out, n) = redact_text("a <private>my address\nline 2</private> b");
        assert_eq!((out.as_ref(), n), ("a [REDACTED] b", 1));
        let raw = br#"{"t":"x \u003cprivate\u003esecret\u003c/private\u003e -----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY----- \xff"}"#;
        let (out, n) = redact_bytes(raw);
        assert_eq!(n, 2);
        let out = String::from_utf8_lossy(&out);
        assert!(!out.contains("secret") && !out.contains("AAAA"), "{out}");
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for s in [
            "the task-scheduler-configuration-file",
            "ask-me-anything",
            "skeleton",
        ] {
            assert_eq!(redact_text(s).1, 0, "{s}");
        }
    }
}
