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
//! - Values of generic rules (`X_TOKEN=…`, `Authorization: …`, a URL's password) are left
//!   alone when they are placeholders: `${VAR}`, `$VAR`, `<your-token>`, `changeme`, `xxxx`,
//!   `null`, a type name, a code reference like `os.environ`, an already redacted value.
//! - Unbounded parts of patterns stop at a delimiter that is never far (a blank, a quote, a
//!   line break, the next `-----` of a PEM), so no match rescans a long input to its end.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::bytes::{CaptureLocations, Regex, RegexBuilder};

pub const SECRET: &str = "[REDACTED_SECRET]";
pub const PRIVATE: &str = "[REDACTED]";

/// One secret shape.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// What [`Tally`] counts this rule as.
    pub name: &'static str,
    /// A regex (bytes, ASCII classes); see the module doc for `\b` and `(?P<secret>…)`. Rule
    /// `private` is replaced by [`PRIVATE`], every other one by [`SECRET`].
    pub pattern: &'static str,
    /// A realistic but fake secret of this shape.
    pub example: &'static str,
}

// Pattern fragments, as macros so `concat!` can build the patterns at compile time.

/// `/`, or JSON's `\/` (at any depth of escaping).
macro_rules! sl {
    () => {
        r"(?:\\*/)"
    };
}
/// One standard base64 character (`/` maybe escaped).
macro_rules! b64 {
    () => {
        r"(?:[A-Za-z0-9+=]|\\*/)"
    };
}
/// Between a name and its value: the name's closing quote, then `=`, `:`, `:=` or `=>`.
macro_rules! assign {
    () => {
        r#"(?:\\*["'`])?[ \t]*(?::=|=>|[=:])[ \t]*"#
    };
}
/// A configured value: quoted (spaces allowed) or up to a blank or a delimiter. Not empty, not
/// starting with `$`, `<`, `{`, `*`, `#`, `[` (a variable, a placeholder, a redaction).
macro_rules! value {
    () => {
        concat!(
            r#"(?P<secret>\\*"(?:[^"\\\r\n]|\\+[^"\\nrtbfu\s])+\\*""#,
            r#"|\\*'(?:[^'\\\r\n]|\\+[^'\\nrtbfu\s])+\\*'"#,
            r#"|(?:\\*["'`])?[^\s"'`\\,;(){}\[\]<>$*#=|&](?:[^\s"'`\\,;(){}\[\]&]|\\+/)*)"#
        )
    };
}
/// Line breaks inside a PEM body (real or escaped), and the indentation around them.
macro_rules! pem_nl {
    () => {
        r"(?:[ \t]|\r?\n|\\+[rn])+"
    };
}
/// A PEM body up to its END line: base64, headers, line breaks (maybe escaped); it stops at
/// the next `-----`, so a BEGIN without END costs no scan to the end of the input.
macro_rules! pem_body {
    () => {
        r"(?:[A-Za-z0-9+/=:,. \t\r\n]|\\+[nrt/]|-{1,4}[A-Za-z0-9])*?"
    };
}
/// A PEM body with no END line (a cut tool output): headers and base64 lines.
macro_rules! pem_rest {
    () => {
        concat!(
            "(?:",
            pem_nl!(),
            r#"(?:(?:Proc-Type|DEK-Info|Version|Comment|Hash|Charset):[^\r\n\\"]*|"#,
            b64!(),
            "+))*"
        )
    };
}

/// The rules, most specific first: at one position the first rule that matches wins.
pub const RULES: &[Rule] = &[
    Rule {
        name: "private",
        // Also when a JSON writer escaped the angle brackets or the slash.
        pattern: concat!(
            r"(?:<|\\*u003[cC])private(?:>|\\*u003[eE])[\s\S]*?",
            r"(?:<|\\*u003[cC])",
            sl!(),
            r"private(?:>|\\*u003[eE])"
        ),
        example: "<private>my home address is 12 Example Street, Springfield</private>",
    },
    Rule {
        name: "private-key",
        // PEM (RSA, EC, DSA, OPENSSH, ENCRYPTED, PKCS#8); without END to the end of the body.
        pattern: concat!(
            r"-----BEGIN[ A-Z0-9]{0,24}PRIVATE KEY-----",
            "(?:",
            pem_body!(),
            r"-----END[ A-Z0-9]{0,24}PRIVATE KEY-----|",
            pem_rest!(),
            ")"
        ),
        example: "-----BEGIN RSA PRIVATE KEY-----\nMIIEpQIBAAKCAQEA3FakeKeyBodyLine0nlyForTestsXq9vJ2kLmN8pQrStUvWxYz01\n\
                  AbCdEfGhIjKlMnOpQrStUvWxYz0123456789+/FakeFakeFakeFakeFakeFakeFa==\n\
                  -----END RSA PRIVATE KEY-----",
    },
    Rule {
        name: "pgp-private-key",
        pattern: concat!(
            r"-----BEGIN PGP PRIVATE KEY BLOCK-----",
            "(?:",
            pem_body!(),
            r"-----END PGP PRIVATE KEY BLOCK-----|",
            pem_rest!(),
            ")"
        ),
        example: "-----BEGIN PGP PRIVATE KEY BLOCK-----\nComment: fake key for tests\n\n\
                  lQOYBGFakePgpKeyBodyQgCqYx0p7ZkWvN3sTuHbLmJ4rE9dCaXyF2oK8iGhM5nB1\n\
                  =Fk3Y\n-----END PGP PRIVATE KEY BLOCK-----",
    },
    Rule {
        name: "anthropic-api-key",
        pattern: r"\bsk-ant-[A-Za-z0-9_\-]{20,}",
        example: "sk-ant-api03-ErQHQwjyaxErPZDS3MoJaQNjCxkv5ndK0meGR0vRFAKEzZ1fb6d06QGofB8ChQBiIu4NJkS4dJkG0fzMAQME-EMyIbPAA",
    },
    Rule {
        name: "openrouter-api-key",
        pattern: r"\bsk-or-v1-[A-Za-z0-9]{32,}",
        example: "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",
    },
    Rule {
        name: "openai-api-key",
        pattern: r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
        example: "sk-proj-Uf9mYQqw8x3SyRthqpvxxGKZWGlby0FAKE2BcHboRBcynXMgWJoleSrcBrFwMOUdGDxnvsDES9",
    },
    Rule {
        name: "github-token",
        pattern: r"\bgh[pousr]_[A-Za-z0-9]{30,}",
        example: "ghp_5bZc5e6AImY7yYgTwmtr7YSRIFNNhnIMFAKE",
    },
    Rule {
        name: "github-pat",
        pattern: r"\bgithub_pat_[A-Za-z0-9_]{22,}",
        example: "github_pat_11SRzLpeAwufRvjRfUttSl_WRQO7BxlbnFNCFldQMvDp4ug8oa9xxr2mSBsoH6jG5SvkGDyMG1TpDD",
    },
    Rule {
        name: "gitlab-token",
        pattern: r"\bgl(?:pat|dt|rt|ptt|ft|soat)-[A-Za-z0-9_\-]{20,}",
        example: "glpat-GFtMf7mj1oy3H6q79H0x",
    },
    Rule {
        name: "slack-token",
        pattern: r"\bxox[abposre]-[A-Za-z0-9\-]{10,}",
        example: "xoxb-036868701894-5057542273824-FcBZxsA7OMsy03Y5MujiqPc1",
    },
    Rule {
        name: "slack-app-token",
        pattern: r"\bxapp-[0-9]+-[A-Za-z0-9\-]{10,}",
        example: "xapp-1-AY01QV0Y5YZ-2234148054243-09105656965903bf6e304cf9ebcd0804fb3dcb24b173d21070307f6eada7c2a1",
    },
    Rule {
        name: "slack-webhook",
        // The host and path stay readable; the team, channel and secret go.
        pattern: concat!(
            r"\bhttps:",
            sl!(),
            sl!(),
            r"hooks\.slack\.com",
            sl!(),
            r"services",
            sl!(),
            r"(?P<secret>T[A-Z0-9]{6,}",
            sl!(),
            r"B[A-Z0-9]{6,}",
            sl!(),
            r"[A-Za-z0-9]{16,})"
        ),
        example: "https://hooks.slack.com/services/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",
    },
    Rule {
        name: "discord-webhook",
        pattern: concat!(
            r"\bhttps:",
            sl!(),
            sl!(),
            r"(?:ptb\.|canary\.)?discord(?:app)?\.com",
            sl!(),
            r"api",
            sl!(),
            r"webhooks",
            sl!(),
            r"[0-9]{15,21}",
            sl!(),
            r"(?P<secret>[A-Za-z0-9_\-]{40,})"
        ),
        example: "https://discord.com/api/webhooks/1234567890123456789/zgrQ7OJryJmRznupg7knUFMD4X2mWkOhIdfXKjFakeWebhookTokenForTests00",
    },
    Rule {
        name: "stripe-key",
        pattern: r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}",
        example: "sk_live_OA3ev3hcF2Rg4dE5P9BX0LtPFAKEHEF2BLpJEziOmLa8DXvkUoZErHMUXenj0l1NbkFJZ4PB3oMSAQBkl6R5w5JFuRl7Clb87I",
    },
    Rule {
        name: "stripe-webhook-secret",
        pattern: r"\bwhsec_[A-Za-z0-9]{24,}",
        example: "whsec_g38pYMq9TAKsCvO8DBQeSNahOQTH3hIG",
    },
    Rule {
        name: "aws-secret-access-key",
        // Named (`aws_secret_access_key = …`, `"SecretAccessKey": "…"`), or 40 base64
        // characters shortly after an access key id (a CSV, `aws sts` output); the id is then
        // counted as `aws-access-key-id`.
        pattern: concat!(
            r"\b(?:(?i:(?:aws)?[_.\-]?secret[_.\-]?access[_.\-]?key)",
            assign!(),
            r#"(?:\\*["'`])?(?P<secret>"#,
            b64!(),
            r"{40})",
            r#"|(?:AKIA|ASIA)[A-Z0-9]{16}(?s:.){0,100}?(?:[^A-Za-z0-9+/=\\]|\\+[nrt"'])(?P<secret>"#,
            b64!(),
            r"{40}))(?:[^A-Za-z0-9+/=]|$)"
        ),
        example: "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    },
    Rule {
        name: "aws-access-key-id",
        pattern: r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
        example: "AKIAIOSFODNN7EXAMPLE",
    },
    Rule {
        name: "google-api-key",
        pattern: r"\bAIza[0-9A-Za-z_\-]{35}",
        example: "AIzaAghVLOFlxJjMNKryvtxw66v8GMDelNz4n8u",
    },
    Rule {
        name: "google-oauth-token",
        pattern: r"\bya29\.[0-9A-Za-z_\-]{20,}",
        example: "ya29.a0NxNw28jsvvQPzcHvPIe1QHg3qkZFfRtkYCose1SommrOhOnLlEV9tDi7EzCD",
    },
    Rule {
        name: "google-oauth-client-secret",
        pattern: r"\bGOCSPX-[0-9A-Za-z_\-]{20,}",
        example: "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",
    },
    Rule {
        name: "npm-token",
        pattern: r"\bnpm_[A-Za-z0-9]{36}\b",
        example: "npm_QYsyR9s5EjS1HAKulqBA1djdChHtpknhX1Jy",
    },
    Rule {
        name: "huggingface-token",
        pattern: r"\bhf_[A-Za-z0-9]{30,}",
        example: "hf_Ymi6nW2JgYpqcII6CgFNHl91K12PdBtbFy",
    },
    Rule {
        name: "groq-api-key",
        pattern: r"\bgsk_[A-Za-z0-9]{40,}",
        example: "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",
    },
    Rule {
        name: "xai-api-key",
        pattern: r"\bxai-[A-Za-z0-9]{40,}",
        example: "xai-xSswfPh0chZjeMjiY9GIklJ053wo1zbQjsDKDSuWk0qWasBWWBnk9b7NwwsgNFxAwucKtI3HNJ5atN3J",
    },
    Rule {
        name: "digitalocean-token",
        pattern: r"\bdo[opr]_v1_[a-f0-9]{64}\b",
        example: "dop_v1_a41a763225da81d7baa1af6723ff56eca645fe436d6582afe2dc655425a517ff",
    },
    Rule {
        name: "shopify-token",
        pattern: r"\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}\b",
        example: "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",
    },
    Rule {
        name: "pypi-token",
        pattern: r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}",
        example: "pypi-AgEIcHlwaS5vcmcfCP6T11I0fGlYseYk6zb1v9ajgfarW4xqtUwh6QLkCMZVg4SB0YAx8r6xggu",
    },
    Rule {
        name: "databricks-token",
        pattern: r"\bdapi[a-f0-9]{32}(?:-[0-9]+)?\b",
        example: "dapi87a8ffa032c057efcc225e5e997106af",
    },
    Rule {
        name: "twilio-api-key",
        // `SK…` API key SIDs; `AC…` account SIDs are not secret. Auth tokens: `env-secret`.
        pattern: r"\bSK[0-9a-fA-F]{32}\b",
        example: "SKca542d42ac0ae8b29aa03ad7861d4607",
    },
    Rule {
        name: "sendgrid-api-key",
        pattern: r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}",
        example: "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",
    },
    Rule {
        name: "discord-bot-token",
        pattern: r"\b[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38}",
        example: "MIcjWmI56db51hByCN8bNC2Z7y.clwdm8.zgrQ7OJryJmRznupg7knUFMD4X2mWkOhIdfXKj",
    },
    Rule {
        name: "telegram-bot-token",
        pattern: r"\b[0-9]{8,10}:AA[A-Za-z0-9_\-]{33}\b",
        example: "8383399500:AAK3WMGZOThDDYlxEVNMPZVhtI0i0GBUTzA",
    },
    Rule {
        name: "age-secret-key",
        pattern: r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b",
        example: "AGE-SECRET-KEY-1LH5HANKQAT3UPKG6H2F59MWGN36Q9WMLSXDC73UKWX592U8M7ZG7LMCW0W",
    },
    Rule {
        name: "jwt",
        pattern: r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
        example: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    },
    Rule {
        name: "azure-storage-key",
        pattern: concat!(
            r"\b(?i:AccountKey|SharedAccessKey)=(?P<secret>",
            b64!(),
            "{20,})"
        ),
        example: "AccountKey=BYWXyxhGyM1JFNQBdRojrZEChR8ZvsanpSGANN0ifcz2bG7PrtojcaN914TCWMNEcSwgOWalrLZN62NFli0FxK==",
    },
    Rule {
        name: "azure-sas-signature",
        // The `sig=` of a shared access signature (SAS URL, `SharedAccessSignature=…`).
        pattern: r"\bsig=(?P<secret>(?:[A-Za-z0-9%+=_\-]|\\*/){16,})",
        example: "sv=2022-11-02&ss=b&srt=co&sp=rl&se=2030-01-01T00:00:00Z&sig=MZc8g1DxuX26zo67YKA3%2BWTRuhosEi71Xz0tOT4je%3D",
    },
    Rule {
        name: "url-password",
        // `scheme://user:password@host`: the password goes, the user and host stay.
        pattern: concat!(
            r"\b[A-Za-z][A-Za-z0-9+.\-]*:",
            sl!(),
            sl!(),
            r#"[^\s:/@\\"'`<>\[\]{}]*:(?P<secret>[^\s/\\"'`<>\[\]{}?#]+)@"#
        ),
        example: "postgres://app_user:s3cr3t-Pa55word@db.internal:5432/app",
    },
    Rule {
        name: "authorization",
        // The header name and scheme stay, the credential goes.
        pattern: concat!(
            r"\b(?i:(?:proxy-)?authorization)",
            assign!(),
            r#"(?:\\*["'`])?[ \t]*(?:(?i:bearer|basic|token|bot|apikey|api-key|sso-key|key)[ \t]+)?"#,
            r"(?P<secret>(?:[A-Za-z0-9._~+=\-]|\\*/){8,})"
        ),
        example: "Authorization: Bearer 8f4e1c2d9a7b6e5f4a3b2c1d0e9f8a7bFakeOpaqueToken",
    },
    Rule {
        name: "bearer-token",
        pattern: r"\b(?i:bearer)[ \t]+(?P<secret>(?:[A-Za-z0-9._~+=\-]|\\*/){20,})",
        example: "Bearer Qm9ndXNCZWFyZXJUb2tlbkZha2UxMjM0",
    },
    Rule {
        name: "curl-user",
        pattern: concat!(
            // Within 16 arguments of `curl`, so a long line costs no scan to its end.
            r#"\bcurl(?:[ \t]+(?:[^\s|;&\\]|\\+["'/])+){0,16}?[ \t]+(?:-u|--user)(?:[ \t]+|=)"#,
            r#"(?:\\*["'])?[^\s:"'\\]+:(?P<secret>[^\s"'`\\@]+)"#
        ),
        example: "curl -u admin:hunter2-fake-Pw https://api.example.com/v1/items",
    },
    Rule {
        name: "cli-secret-flag",
        // A leading `\b` here means "not glued to a word" before the dashes.
        pattern: concat!(
            r"\b--?(?i:password|passwd|pass|token|api[_\-]?key|secret|client[_\-]secret|auth[_\-]token|access[_\-]token)",
            r"(?:=|[ \t]+)",
            value!()
        ),
        example: "--password=Zq8-fake-pass-9",
    },
    Rule {
        name: "cli-password-p",
        // `mysql -pPASSWORD` (glued: `-p pw` prompts), `sshpass -p PASSWORD`.
        pattern: concat!(
            r#"\b(?:(?:mysql|mysqldump|mysqladmin|mariadb)(?:[ \t]+(?:[^\s|;&\\]|\\+["'/])+){0,16}?"#,
            r"[ \t]+-p|sshpass[ \t]+-p[ \t]+)",
            value!()
        ),
        example: "mysql -h db.internal -u root -pS3cure-fake-Pw app",
    },
    Rule {
        name: "netrc-password",
        pattern: concat!(
            r"\bmachine[ \t]+[^\s\\]+[ \t]+login[ \t]+[^\s\\]+[ \t]+password[ \t]+",
            value!()
        ),
        example: "machine api.example.com login deploy password n3trc-fake-Pw",
    },
    Rule {
        name: "env-secret",
        // `X_PASSWORD=…`, `export X_TOKEN="…"`, `x_api_key: …` (YAML), `"password": "…"`,
        // `apiKey = '…'`; the name stays. `*_TOKEN` needs a prefix (`token: …` is prose too),
        // `*_TOKENS`, `*_LIMIT` and the like are not names of secrets.
        pattern: concat!(
            r"\b(?i:[A-Za-z0-9_.\-]*(?:passw(?:or)?d|passphrase|secret",
            r"|(?:api|access|secret|private|signing|encryption|master|auth)[_.\-]?key",
            r"|secret[_.\-]?key[_.\-]?base",
            r"|api[_.\-]?token|[_.\-](?:pass|pwd|auth)|[A-Za-z0-9_.\-]token))",
            assign!(),
            // `X_AUTH_TOKEN: Bearer …`: the credential is after the scheme.
            r"(?:(?i:bearer|basic|token)[ \t]+)?",
            value!()
        ),
        example: "DB_PASSWORD=Tr0ub4dor-and-3-fake",
    },
];

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

static TEXT: LazyLock<Engine> = LazyLock::new(|| Engine::new(RULES, false));
static RAW: LazyLock<Engine> = LazyLock::new(|| Engine::new(RULES, true));

struct Slots {
    name: &'static str,
    /// The group of the whole rule.
    whole: usize,
    /// The `secret` groups; one around the whole rule (after its boundary) if it has none.
    secrets: Vec<usize>,
    /// Whether the rule keeps part of its match (it has `secret` groups).
    keyed: bool,
}

/// One regex of several rules, and where each rule's groups are.
struct Matcher {
    re: Regex,
    slots: Vec<Slots>,
}

struct Engine {
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
    fn run(&self, hay: &[u8], json: bool, tally: &mut Tally) -> Option<Vec<u8>> {
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
    fn new(rules: &'static [Rule], which: &[usize], raw: bool) -> Matcher {
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
fn unquote(h: &[u8], mut s: usize, mut e: usize) -> (usize, usize) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// The secret parts of `hay` by `rule` alone (its `secret` groups, unquoted).
    fn secret_spans(rule: &'static Rule, hay: &str) -> Vec<String> {
        let e = Matcher::new(std::slice::from_ref(rule), &[0], false);
        let mut locs = e.re.capture_locations();
        let mut spans = Vec::new();
        let mut at = 0;
        while let Some(m) = e.re.captures_read_at(&mut locs, hay.as_bytes(), at) {
            for &g in &e.slots[0].secrets {
                if let Some((s, e)) = locs.get(g) {
                    let (s, e) = unquote(hay.as_bytes(), s, e);
                    spans.push(hay[s..e].to_string());
                }
            }
            at = m.end();
        }
        spans
    }

    /// Pieces of the secrets that must not survive: each run of 6+ token characters.
    fn fragments(rule: &'static Rule) -> Vec<String> {
        let spans = secret_spans(rule, rule.example);
        assert!(!spans.is_empty(), "{}: example not matched", rule.name);
        let mut out = Vec::new();
        for s in spans {
            for run in s.split(|c: char| !(c.is_ascii_alphanumeric() || "+/=_.%-".contains(c))) {
                if run.len() >= 6 && !run.starts_with("-----") {
                    out.push(run.to_string());
                }
            }
        }
        assert!(!out.is_empty(), "{}: no fragment", rule.name);
        out
    }

    fn text_contexts(s: &str) -> Vec<String> {
        vec![
            s.to_string(),
            format!("key is {s} here"),
            format!("line one\n{s}\nline two"),
            format!("key:\\n{s}\\n"),
            format!("a\\t{s}\\tb"),
            format!("a\\r\\n{s}\\r\\n"),
            format!("\x1b[31m{s}\x1b[0m"),
            format!("\\u001b[1;31m{s}\\u001b[0m"),
            format!("x\\\\n{s}\\\\n"),
            format!("x\\\\\\n{s}\\\\\\n"),
            format!("\\u003c{s}\\u003e"),
            format!("\\\"{s}\\\""),
            format!("\"{s}\""),
            format!("'{s}'"),
            format!("`{s}`"),
            format!("({s})"),
            format!("{s}\n{s}"),
            format!("{s} {s}"),
        ]
    }

    fn json_contexts(s: &str) -> Vec<String> {
        let j = |v: Value| v.to_string();
        let base = j(json!({"t": format!("see {s} <b> & more")}));
        vec![
            j(json!({"type": "user", "message": {"role": "user",
                "content": format!("key:\n{s}\tend")}})),
            j(json!({"t": s})),
            j(json!({"t": format!("{s}\n")})),
            j(json!({"t": format!("\r\n{s}\r\n")})),
            j(json!({"t": format!("\x1b[31m{s}\x1b[0m")})),
            j(json!({"t": format!("\"{s}\"")})),
            j(json!({"t": format!("'{s}'")})),
            j(json!({"out": j(json!({"text": format!("x\n{s}\n")}))})),
            j(json!({"out": j(json!({"out": j(json!({"text": format!("\n{s}\t")}))}))})),
            j(json!({"content": [{"type": "tool_result",
                "content": format!("$ env\nHOME=/root\n{s}\nPATH=/usr/bin")}]})),
            base.replace('/', "\\/"),
            base.replace('<', "\\u003c")
                .replace('>', "\\u003e")
                .replace('&', "\\u0026"),
            base,
            serde_json::to_string_pretty(&json!({"messages": [{"text": s}, {"text": "x"}]}))
                .unwrap(),
        ]
    }

    /// Every string of a JSON value, and of JSON documents inside its strings.
    fn strings(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => {
                out.push(s.clone());
                if let Ok(inner) = serde_json::from_str::<Value>(s) {
                    strings(&inner, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
            Value::Object(o) => o.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }

    fn assert_gone(rule: &Rule, ctx: &str, out: &str, frags: &[String]) {
        for f in frags {
            assert!(
                !out.contains(f.as_str()),
                "{}: {f:?} survived\n  in:  {ctx:?}\n  out: {out:?}",
                rule.name
            );
        }
    }

    #[test]
    fn rule_names_are_unique_and_examples_match_their_own_rule() {
        let mut names: Vec<_> = RULES.iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RULES.len());
        for rule in RULES {
            fragments(rule);
            let mut t = Tally::default();
            let out = redact_text_tally(rule.example, &mut t);
            assert!(
                t.get(rule.name) >= 1,
                "{}: tallied {t:?} for {out:?}",
                rule.name
            );
            let mut b = Tally::default();
            redact_bytes_tally(rule.example.as_bytes(), &mut b);
            assert_eq!(t, b, "{}", rule.name);
        }
    }

    #[test]
    fn every_rule_in_every_text_context() {
        for rule in RULES {
            let frags = fragments(rule);
            for ctx in text_contexts(rule.example) {
                let (out, n) = redact_text(&ctx);
                assert!(n >= 1, "{}: nothing found in {ctx:?}", rule.name);
                assert_gone(rule, &ctx, &out, &frags);
                assert_eq!(
                    redact_text(&out),
                    (Cow::Borrowed(out.as_ref()), 0),
                    "idempotent"
                );
                let (raw, m) = redact_bytes(ctx.as_bytes());
                assert_eq!(m, n, "{}: text and bytes agree on {ctx:?}", rule.name);
                assert_eq!(raw.as_ref(), out.as_bytes(), "{}: {ctx:?}", rule.name);
            }
        }
    }

    #[test]
    fn every_rule_in_every_json_context_and_the_json_stays_valid() {
        for rule in RULES {
            let frags = fragments(rule);
            for ctx in json_contexts(rule.example) {
                let (out, n) = redact_bytes(ctx.as_bytes());
                assert!(n >= 1, "{}: nothing found in {ctx}", rule.name);
                let out = String::from_utf8(out.into_owned()).unwrap();
                let v: Value = serde_json::from_str(&out)
                    .unwrap_or_else(|e| panic!("{}: invalid JSON ({e}): {out}", rule.name));
                let mut decoded = Vec::new();
                strings(&v, &mut decoded);
                assert_gone(rule, &ctx, &out, &frags);
                for d in &decoded {
                    assert_gone(rule, &ctx, d, &frags);
                }
                assert_eq!(
                    redact_bytes(out.as_bytes()).1,
                    0,
                    "{}: idempotent",
                    rule.name
                );
                // A tool input is JSON text.
                let (text, _) = redact_text(&ctx);
                assert_gone(rule, &ctx, &text, &frags);
            }
        }
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        let mut b64 = String::from("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA");
        let abc = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b64.push(abc[(x % 64) as usize] as char);
        }
        b64.push_str("==");
        let negatives = [
            "3f786850e387550fdab836ed7e6dc881de23001b",
            "commit 3f78685 fixes it; see 3f786850e387550fdab836ed7e6dc881de23001b",
            "123e4567-e89b-12d3-a456-426614174000",
            b64.as_str(),
            "deadbeefcafebabe0123456789abcdef deadbeefcafebabe0123456789abcdef01234567",
            "the task-scheduler-configuration-file",
            "ask-me-anything",
            "skeleton",
            "sk-abc and sk-12345",
            "Please enter your password to continue.",
            "The password is stored in the keychain; the token expires hourly.",
            "MAX_TOKENS=4096",
            "max_tokens: 4096",
            "TOKEN_LIMIT=4096",
            r#"{"max_tokens": 4096, "tokens": 12}"#,
            "https://user@host.example.com/path",
            "git@github.com:org/repo.git",
            "ssh://git@github.com:22/org/repo.git",
            "http://localhost:8080/api",
            "https://example.com:8443/a@b",
            "export GITHUB_TOKEN=$(gh auth token)",
            "API_KEY=${API_KEY}",
            "API_KEY=$API_KEY",
            "DB_PASSWORD=",
            "DB_PASSWORD=\"\"",
            "SECRET_KEY=<your-secret-key>",
            "OPENAI_API_KEY=your-api-key-here",
            "password: changeme",
            "password: ********",
            "secret: true",
            "password = os.environ['DB_PASSWORD']",
            "api_key = self.api_key",
            "api_key: str = None",
            "token = process.env.GITHUB_TOKEN",
            "kind: Secret",
            "secretName: my-secret",
            "passwordless login",
            "docker login --password-stdin",
            "Authorization: Bearer $TOKEN",
            "-H 'Authorization: Bearer ${API_KEY}'",
            "Authorization: Bearer <token>",
            "Bearer tokens are short-lived",
            "AC0123456789abcdef0123456789abcdef",
            "AKIA is the prefix of an access key id",
            "eyJhbGciOiJIUzI1NiJ9",
            "ghp_short",
            "sig=inspect.signature(f)",
            "[REDACTED_SECRET] and DB_PASSWORD=[REDACTED_SECRET]",
            "postgres://app:[REDACTED_SECRET]@db/app",
            "Authorization: Bearer [REDACTED_SECRET]",
            "[REDACTED]",
            "mysql -u root -p app",
            "secret=ab",
            "Übergrößenträger — naïve café ✓",
        ];
        for s in negatives {
            assert_eq!(redact_text(s), (Cow::Borrowed(s), 0), "{s}");
            let j = json!({"t": s, "u": format!("x\n{s}\n")}).to_string();
            assert_eq!(redact_bytes(j.as_bytes()).1, 0, "{j}");
        }
    }

    #[test]
    fn counts_every_secret_of_a_line() {
        let line = format!(
            "a {} b {}\\n{} c\\t{},{} {}",
            RULES[6].example, // github
            RULES[3].example, // anthropic
            "AKIAIOSFODNN7EXAMPLE",
            "npm_QYsyR9s5EjS1HAKulqBA1djdChHtpknhX1Jy",
            "ghp_5bZc5e6AImY7yYgTwmtr7YSRIFNNhnIMFAKE",
            "DB_PASSWORD=hunter2hunter2",
        );
        let mut t = Tally::default();
        let out = redact_text_tally(&line, &mut t);
        assert_eq!(t.total(), 6, "{out}");
        assert_eq!(t.get("github-token"), 2);
        assert_eq!(t.get("env-secret"), 1);
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            [
                ("anthropic-api-key", 1),
                ("aws-access-key-id", 1),
                ("env-secret", 1),
                ("github-token", 2),
                ("npm-token", 1)
            ]
        );
        assert_eq!(
            out,
            format!("a {SECRET} b {SECRET}\\n{SECRET} c\\t{SECRET},{SECRET} DB_PASSWORD={SECRET}")
        );
        assert_eq!(redact_text(&line).1, 6);
        let mut all = Tally::default();
        all.merge(&t);
        all.merge(&t);
        assert_eq!(all.total(), 12);
    }

    #[test]
    fn keeps_names_headers_users_and_hosts() {
        for (input, want) in [
            (
                "export GH_TOKEN=\"abc123def456\"",
                "export GH_TOKEN=\"[REDACTED_SECRET]\"",
            ),
            (
                "DB_PASSWORD='correct horse battery'",
                "DB_PASSWORD='[REDACTED_SECRET]'",
            ),
            (
                "  twilio_auth_token: 0123456789abcdef",
                "  twilio_auth_token: [REDACTED_SECRET]",
            ),
            (
                r#"{"password": "hunter2!"}"#,
                r#"{"password": "[REDACTED_SECRET]"}"#,
            ),
            (
                "$env:OPENAI_APIKEY = 'k-123456'",
                "$env:OPENAI_APIKEY = '[REDACTED_SECRET]'",
            ),
            ("x-api-key: 0a1b2c3d4e", "x-api-key: [REDACTED_SECRET]"),
            (
                "X-Auth-Token: Bearer 0a1b2c3d4e",
                "X-Auth-Token: Bearer [REDACTED_SECRET]",
            ),
            (
                "mongodb+srv://admin:p%40ss@cluster0.example.net/db",
                "mongodb+srv://admin:[REDACTED_SECRET]@cluster0.example.net/db",
            ),
            (
                "redis://:s3cret@cache:6379/0",
                "redis://:[REDACTED_SECRET]@cache:6379/0",
            ),
            (
                "amqp://guest:gue@st@rabbit/vhost",
                "amqp://guest:[REDACTED_SECRET]@rabbit/vhost",
            ),
            (
                r#"curl -H 'Authorization: Bearer abcdef123456' https://x"#,
                r#"curl -H 'Authorization: Bearer [REDACTED_SECRET]' https://x"#,
            ),
            (
                r#""authorization": "Basic dXNlcjpwYXNzd29yZA==""#,
                r#""authorization": "Basic [REDACTED_SECRET]""#,
            ),
            (
                "https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sp=r&sig=AbCdEf0123456789%2Bxyz%3D",
                "https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sp=r&sig=[REDACTED_SECRET]",
            ),
            (
                "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=AbCdEf0123456789+/AbCdEf0123456789==;EndpointSuffix=core.windows.net",
                "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=[REDACTED_SECRET];EndpointSuffix=core.windows.net",
            ),
            (
                "SECRET_KEY_BASE=abcdef0123456789",
                "SECRET_KEY_BASE=[REDACTED_SECRET]",
            ),
            (
                "mysql -u root -pS3cure app",
                "mysql -u root -p[REDACTED_SECRET] app",
            ),
            (
                "sshpass -p 'pw-12345' ssh host",
                "sshpass -p '[REDACTED_SECRET]' ssh host",
            ),
            (
                "machine example.com login me password n3trc-Pw",
                "machine example.com login me password [REDACTED_SECRET]",
            ),
            (
                "<private>unclosed sk-ant-api03-ErQHQwjyaxErPZDS3MoJaQNjCxkv5ndK0m",
                "<private>unclosed [REDACTED_SECRET]",
            ),
            (
                "x<private>a</private>ghp_5bZc5e6AImY7yYgTwmtr7YSRIFNNhnIMFAKE",
                "x[REDACTED][REDACTED_SECRET]",
            ),
        ] {
            assert_eq!(redact_text(input).0, want, "{input}");
        }
    }

    #[test]
    fn a_token_as_the_user_of_a_url_goes_too() {
        let s = "https://ghp_5bZc5e6AImY7yYgTwmtr7YSRIFNNhnIMFAKE:x-oauth-basic@github.com/o/r";
        let mut t = Tally::default();
        let out = redact_text_tally(s, &mut t);
        assert_eq!(out, format!("https://{SECRET}:{SECRET}@github.com/o/r"));
        assert_eq!((t.get("github-token"), t.get("url-password")), (1, 1));
    }

    #[test]
    fn aws_secret_near_its_key_id() {
        let csv = "Access key ID,Secret access key\nAKIAIOSFODNN7EXAMPLE,wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n";
        let mut t = Tally::default();
        let out = redact_text_tally(csv, &mut t);
        assert_eq!(
            out,
            format!("Access key ID,Secret access key\n{SECRET},{SECRET}\n")
        );
        assert_eq!(
            (t.get("aws-access-key-id"), t.get("aws-secret-access-key")),
            (1, 1)
        );
        let sts = json!({"Credentials": {
            "AccessKeyId": "ASIAIOSFODNN7EXAMPLE",
            "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "SessionToken": "FwoGZXIvYXdzEFakeSessionTokenBody0123456789"}});
        for doc in [sts.to_string(), serde_json::to_string_pretty(&sts).unwrap()] {
            let rec = json!({"toolUseResult": {"stdout": doc}}).to_string();
            for out in [
                String::from_utf8(redact_bytes(rec.as_bytes()).0.into_owned()).unwrap(),
                redact_text(&doc).0.into_owned(),
            ] {
                serde_json::from_str::<Value>(&out).unwrap();
                for f in ["ASIAIOSFODNN7EXAMPLE", "EXAMPLEKEY", "FakeSessionToken"] {
                    assert!(!out.contains(f), "{f} in {out}");
                }
            }
        }
        // A git SHA near a key id is not its secret; the id still goes.
        let (out, n) = redact_text("AKIAIOSFODNN7EXAMPLE,3f786850e387550fdab836ed7e6dc881de23001b");
        assert_eq!(
            (out.as_ref(), n),
            (
                format!("{SECRET},3f786850e387550fdab836ed7e6dc881de23001b").as_str(),
                1
            )
        );
        let ini = "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\nAWS_SECRET_ACCESS_KEY: \"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\"\n";
        assert_eq!(
            redact_text(ini).0,
            format!(
                "[default]\naws_access_key_id = {SECRET}\nAWS_SECRET_ACCESS_KEY: \"{SECRET}\"\n"
            )
        );
    }

    #[test]
    fn truncated_private_key() {
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACDFakeFakeFakeFake";
        let text = format!("$ cat id_ed25519\n{key}");
        let (out, n) = redact_text(&text);
        assert_eq!(
            (out.as_ref(), n),
            (format!("$ cat id_ed25519\n{SECRET}").as_str(), 1)
        );
        let rec = json!({"t": format!("{key}\n"), "u": "next"}).to_string();
        let (out, n) = redact_bytes(rec.as_bytes());
        let out = std::str::from_utf8(&out).unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            serde_json::from_str::<Value>(out).unwrap(),
            json!({"t": format!("{SECRET}\n"), "u": "next"})
        );
    }

    #[test]
    fn replacements_never_cross_a_json_string() {
        for rec in [
            r#"{"a":"my password:","b":"not the password"}"#,
            r#"{"a":"x <private>one","b":"two</private> y"}"#,
            r#"{"a":"-----BEGIN RSA PRIVATE KEY-----","b":"-----END RSA PRIVATE KEY-----"}"#,
        ] {
            let (out, _) = redact_bytes(rec.as_bytes());
            serde_json::from_slice::<Value>(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        }
    }

    #[test]
    fn mixed_records_stay_valid_json() {
        let bits: Vec<&str> = RULES
            .iter()
            .map(|r| r.example)
            .chain([
                "\n",
                "\t",
                "\r\n",
                "\"",
                "'",
                "\\",
                "\\n",
                "\u{1b}[31m",
                "\u{1b}[0m",
                "<private>",
                "</private>",
                "password: ",
                "X_TOKEN=",
                "Authorization: Bearer ",
                "://u:",
                "@h",
                "-----BEGIN RSA PRIVATE KEY-----",
                "-----END RSA PRIVATE KEY-----",
                " ",
                "=",
                "é",
                "\u{0}",
                "/",
                "AKIAIOSFODNN7EXAMPLE",
                ",",
                "{",
                "}",
            ])
            .collect();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for i in 0..400 {
            let mut parts = [String::new(), String::new()];
            // Tokens glued together (`AKIA…aws_secret…`) are not a shape anyone writes.
            let seps = [
                " ",
                "\n",
                "\t",
                "\"",
                "'",
                ", ",
                "\\n",
                "\u{1b}[0m",
                "(",
                "\r\n",
            ];
            for p in &mut parts {
                for _ in 0..next(12) {
                    p.push_str(bits[next(bits.len())]);
                    p.push_str(seps[next(seps.len())]);
                }
            }
            let [a, b] = parts;
            let inner = json!({"text": a.clone()}).to_string();
            let rec = json!({"i": i, "a": a, "b": [b, inner]}).to_string();
            for raw in [
                rec.clone(),
                rec.replace('/', "\\/"),
                rec.replace('<', "\\u003c").replace('>', "\\u003e"),
            ] {
                let (out, _) = redact_bytes(raw.as_bytes());
                if let Err(e) = serde_json::from_slice::<Value>(&out) {
                    panic!(
                        "{e}\n  in:  {raw}\n  out: {}",
                        String::from_utf8_lossy(&out)
                    );
                }
            }
        }
    }

    #[test]
    fn private_tags_and_escaped_json_forms() {
        let (out, n) = redact_text("a <private>my \"address\"\nline 2</private> b");
        assert_eq!((out.as_ref(), n), ("a [REDACTED] b", 1));
        let mut raw = br#"{"t":"x \u003cprivate\u003esecret\u003c/private\u003e -----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"#.to_vec();
        raw.extend_from_slice(b" \xff\"}");
        let (out, n) = redact_bytes(&raw);
        assert_eq!(n, 2);
        let out = String::from_utf8_lossy(&out);
        assert!(!out.contains("secret") && !out.contains("AAAA"), "{out}");
        assert!(out.ends_with(" \u{fffd}\"}"), "invalid UTF-8 kept: {out}");
    }
}
