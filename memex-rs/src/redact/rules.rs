//! The secret shapes: one [`Rule`] per shape, in one table, [`RULES`].

/// One secret shape.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// What [`Tally`](super::Tally) counts this rule as.
    pub name: &'static str,
    /// A regex (bytes, ASCII classes); see the module doc for `\b` and `(?P<secret>…)`. Rule
    /// `private` is replaced by [`PRIVATE`](super::PRIVATE), every other one by [`SECRET`](super::SECRET).
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
