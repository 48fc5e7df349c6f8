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
/// After `=` (shell, `.env`, INI, a connection string, a URL query): quoted, or unquoted up to a
/// blank or a quote, where a `;`, `&` or `,` ends the value only before the next `Name=`, a
/// blank or the end (`abc;def` is one value, `pw;Database=x` is `pw`). The first character may
/// be anything but a blank, a quote, `, ; { } < > $ =` (`#`, `*`, `(`, `[`, `&`, `|` are
/// literal there). Consumes the character after an unquoted value.
macro_rules! value_eq {
    () => {
        concat!(
            r#"(?:(?P<secret>\\*"(?:[^"\\\r\n]|\\+[^"\\nrtbfu\s])+\\*""#,
            r#"|\\*'(?:[^'\\\r\n]|\\+[^'\\nrtbfu\s])+\\*')"#,
            r#"|(?P<secret>(?:\\*["'`])?[^\s"'`\\,;{}<>$=]"#,
            r#"(?:[^\s"'`\\;&,]|\\+/"#,
            r#"|[;&,](?:[^\sA-Za-z_;&,"'`\\]|[A-Za-z_][A-Za-z0-9_]*(?:[^\sA-Za-z0-9_=;&,"'`\\]|\\+/)))*"#,
            r#"(?:[;&,][A-Za-z_][A-Za-z0-9_]*)?)(?:[\s"'`\\;&,]|$))"#
        )
    };
}
/// After `:` (YAML, JSON): [`value!`], past a YAML anchor (`&pw value`); or the first line of a
/// `|`/`>` block scalar. `#` (a comment), `*alias`, `[`/`{` (collections) are not values.
macro_rules! value_colon {
    () => {
        concat!(
            r"(?:[|>][+\-]?[0-9]?[ \t]*",
            nl!(),
            r"[ \t]+(?P<secret>[^\s\\\-][^\r\n\\]*)",
            r"|(?:&[A-Za-z0-9_\-]+[ \t]+)?",
            value!(),
            ")"
        )
    };
}
/// Up to 16 more arguments of a command (not past `|`, `;`, `&` or a line break), so a long
/// line costs no scan to its end.
macro_rules! args {
    () => {
        r#"(?:[ \t]+(?:[^\s|;&\\]|\\+["'/])+){0,16}?"#
    };
}
/// A line break, real or JSON-escaped.
macro_rules! nl {
    () => {
        r"(?:\r?\n|\\+r\\+n|\\+n)"
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
        // Named (`aws_secret_access_key = …`, `"SecretAccessKey": "…"`, the prompt of
        // `aws configure`: `AWS Secret Access Key [None]: …`), or 40 base64 characters shortly
        // after an access key id (a CSV, `aws sts` output); the id is then counted as
        // `aws-access-key-id`.
        pattern: concat!(
            r"\b(?:(?i:(?:aws)?[ _.\-]?secret[ _.\-]?access[ _.\-]?key)",
            r"(?:[ \t]*\[[^\]\r\n]{0,40}\])?",
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
        // A macaroon: `AgE` (version 2, location field), then the location (`pypi.org`,
        // `test.pypi.org`, a self-hosted Warehouse).
        pattern: r"\bpypi-AgE[A-Za-z0-9_\-]{50,}",
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
        // Also glued to `bot` in the API's URLs (`https://api.telegram.org/bot<token>/getMe`).
        pattern: r"\b(?:bot)?[0-9]{8,10}:AA[A-Za-z0-9_\-]{33}\b",
        example: "8383399500:AAK3WMGZOThDDYlxEVNMPZVhtI0i0GBUTzA",
    },
    Rule {
        name: "age-secret-key",
        pattern: r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b",
        example: "AGE-SECRET-KEY-1LH5HANKQAT3UPKG6H2F59MWGN36Q9WMLSXDC73UKWX592U8M7ZG7LMCW0W",
    },
    Rule {
        name: "vault-token",
        // HashiCorp Vault / OpenBao service, batch and recovery tokens; a legacy `s.…` token
        // after `vault login` (alone it looks like code: `s.AcceptanceTimeoutSeconds`).
        pattern: concat!(
            r"\b(?:(?P<secret>hv[sbr]\.[A-Za-z0-9_\-]{24,})",
            r#"|vault[ \t]+login(?:[ \t]+-[^\s=\\]+(?:=[^\s\\]+)?)*[ \t]+(?:\\*["'])?"#,
            r"(?P<secret>[sbr]\.[A-Za-z0-9]{24,})(?:[^A-Za-z0-9_.\-]|$))"
        ),
        example: "hvs.CAESIKBJHFhMpKYolVviUsb6QFake4-fMBwmDwe1tHBNG_oLrM_4m76ARO55EF8WX9-WfRRb7yjiSdA9XBGEgBWwv8G69DGV",
    },
    Rule {
        name: "atlassian-api-token",
        // Since 2023 of varied length (192 characters when gitleaks measured them).
        pattern: r"\bATATT3[A-Za-z0-9_\-=]{150,}",
        example: "ATATT3xFfGF0cKqHNbXeQm1juCRsx0Y8oydIrxaRF4B9tzLtvmPXymKPD7euvZF6qCTmaiFJFakeAtlassian_5rH31WT3sZGg8PNnAI-QaPce1Edjvx8ryeyUS6nl3nGud23KsPJsKMWF24Oq0Mdk-9LESvRS7mjOj-AuUcZoSCw1T69kqFIHSO=A63B5134",
    },
    Rule {
        name: "heroku-token",
        // 65 characters since 2025, 41 before (`HRKU-` and a UUID).
        pattern: r"\bHRKU-[A-Za-z0-9_\-]{36,}",
        example: "HRKU-AASze0frUHs_nBccFAwfOeFakeB1Ei8_0ZAhN1tLk7PQvLIfeGdjYi91Ifr-",
    },
    Rule {
        name: "docker-config-base64",
        // A whole Docker `config.json` in base64 (a `.dockerconfigjson` Secret): `{"auths":`
        // written compact, or indented by a tab, 2 or 4 spaces.
        pattern: concat!(
            r"\b(?:eyJhdXRocyI6|ewoJImF1dGhzIj|ewogICJhdXRocyI6|ewogICAgImF1dGhzIj)",
            b64!(),
            "+"
        ),
        example: "eyJhdXRocyI6eyJnaGNyLmlvIjp7ImF1dGgiOiJZMmt0WW05ME9rWmhhMlZIYUdOeVVHRnpjM2R2Y21ReU1ESTAifX19",
    },
    Rule {
        name: "private-key-base64",
        // A PEM private key in base64 (kubeconfig `client-key-data`, a Secret's `tls.key`):
        // `-----BEGIN`, then `PRIVATE` at one of the three base64 alignments. Certificates and
        // public keys do not match.
        pattern: concat!(
            r"\bLS0tLS1CRUdJTi",
            b64!(),
            r"{1,24}?(?:UFJJVkFURS|QUklWQVRF|BSSVZBVEU)",
            b64!(),
            "*"
        ),
        example: "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFRmFrZUt1YmVjb25maWdDbGllbnRLZXlGb3JUZXN0c09ubHkwMTIzNDU2Nzg5YWJjZGVmZ2gKLS0tLS1FTkQgUlNBIFBSSVZBVEUgS0VZLS0tLS0K",
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
        // `scheme://user:password@host`: the password goes, the user and host stay. It may
        // hold `?` and `#` (then no `@`: `pw@host?q=a@b` is `pw`); a port before a query
        // (`host:8080?next=a@b`) is vetoed.
        pattern: concat!(
            r"\b[A-Za-z][A-Za-z0-9+.\-]*:",
            sl!(),
            sl!(),
            r#"[^\s:/@\\"'`<>\[\]{}]*:(?P<secret>[^\s/\\"'`<>\[\]{}?#]+"#,
            r#"|[^\s/\\"'`<>\[\]{}?#@]*[?#][^\s/\\"'`<>\[\]{}@]*)@"#
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
        name: "aws-configure-set",
        // `aws configure set [--profile p] [profile.p.]aws_secret_access_key VALUE`.
        pattern: concat!(
            r"\baws[ \t]+configure[ \t]+set",
            args!(),
            r"[ \t]+(?:[A-Za-z0-9_\-]+\.)*(?i:[a-z0-9_]*(?:secret|password|token)[a-z0-9_]*)[ \t]+",
            value!()
        ),
        example: "aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYFAKEKEY0 --profile ci",
    },
    Rule {
        name: "login-password-p",
        // `-p PASSWORD` of a registry or cloud login (`--password` is `cli-secret-flag`), and
        // skopeo's `--creds USER:PASSWORD`.
        pattern: concat!(
            r"\b(?:(?:(?:docker|podman|nerdctl|buildah|skopeo|oras|finch)[ \t]+login",
            r"|helm[ \t]+registry[ \t]+login|crane[ \t]+auth[ \t]+login|az[ \t]+login",
            r"|twine[ \t]+upload|mongosh?)",
            args!(),
            r"[ \t]+-p(?:[ \t]+|=)",
            value!(),
            r#"|--(?:src-|dest-)?creds(?:=|[ \t]+)(?:\\*["'])?[^\s:"'\\]+:(?P<secret>[^\s"'`\\@]+))"#
        ),
        example: "docker login -u deploy-bot -p Fake-Registry-Pw-2024 registry.example.com",
    },
    Rule {
        name: "redis-cli-password",
        pattern: concat!(
            r"\b(?:redis|valkey|keydb)-cli",
            args!(),
            r"[ \t]+-a[ \t]+",
            value!()
        ),
        example: "redis-cli -h cache.internal -p 6379 -a Fake-Redis-Pw-2024 --no-auth-warning PING",
    },
    Rule {
        name: "docker-config-auth",
        // `"auth": "<base64 of user:password>"` of a Docker or Podman `config.json`.
        pattern: concat!(
            r#"\bauth\\*"[ \t]*:[ \t]*\\*"(?P<secret>"#,
            b64!(),
            r#"{12,})\\*""#
        ),
        example: r#""auth": "ZGVwbG95LWJvdDpGYWtlUmVnaXN0cnlQdy0yMDI0""#,
    },
    Rule {
        name: "putty-private-key",
        // The `Private-Lines: N` lines of a PuTTY `.ppk` key, and its `Private-MAC`. Each body
        // line ends in a line break, so the `Private` of `Private-MAC:` is never taken.
        pattern: concat!(
            r"\b(?:Private-Lines:[ \t]*[0-9]{1,4}",
            nl!(),
            "(?P<secret>(?:",
            b64!(),
            "+",
            nl!(),
            ")*",
            b64!(),
            r"+)(?:\r?\n|\\+[rn]|$)",
            r"|Private-MAC:[ \t]*(?P<secret>[0-9a-fA-F]{40,64}))"
        ),
        example: "Private-Lines: 1\nAAAAIEZha2VQdVRUWVByaXZhdGVTY2FsYXJGb3JUZXN0cyEh\n",
    },
    Rule {
        name: "pgpass",
        // `host:port:database:user:password` of `~/.pgpass`; `\:` escapes a colon. The host is
        // `*`, `localhost` or dotted, the port `*` or 4–5 digits (not `file.py:12:a:b:c`).
        pattern: concat!(
            r"\b(?:\*|localhost|[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+):(?:\*|[0-9]{4,5}):",
            r"(?:\*|[A-Za-z_][A-Za-z0-9_.\-]*):(?:\*|[A-Za-z_][A-Za-z0-9_.@\-]*):",
            r#"(?P<secret>(?:[^\s:\\"'`]|\\+:|\\+\\[^\s:\\"'`nrtbfu])+)"#
        ),
        example: "db.internal.example.com:5432:orders:app_user:Fake-Pg-Pass-2024",
    },
    Rule {
        name: "odbc-password",
        // `Pwd=` / `PWDDBMS=` of an ODBC connection string (no blank around `=`), up to `;`
        // or a blank; a braced value (`Pwd={a;b}}c}`, `}}` for `}`) after `Password=` too.
        // Not the shell's `PWD=/path`, not code (`let pwd = …;`).
        pattern: concat!(
            r"\b(?:(?i:pwd|pwddbms)=(?:",
            r#"\{(?P<secret>(?:[^}\r\n"'`{\\]|\}\})(?:[^}\r\n"'`\\]|\}\})*)\}"#,
            r#"|(?P<secret>[^\s;"'`{}$%<\\/~(),][^\s;"'`\\(),]*))"#,
            r#"|(?i:password)[ \t]*=[ \t]*\{(?P<secret>(?:[^}\r\n"'`{\\]|\}\})(?:[^}\r\n"'`\\]|\}\})*)\})"#
        ),
        example: "Driver={ODBC Driver 18 for SQL Server};Server=tcp:sql-prod.database.windows.net,1433;\
                  Database=orders;Uid=app_reader;Pwd={FakeOdbc;Pw}}2024-x9};Encrypt=yes;",
    },
    Rule {
        name: "cookie",
        // A `Cookie:` / `Set-Cookie:` header's value (all its pairs), curl's `-b name=value`.
        // A value holds `=`: not `Cookie: <cookie>`, not a cookie-jar file name.
        pattern: concat!(
            r#"\b(?:(?i:set-cookie|cookie)(?:\\*["'`])?[ \t]*:[ \t]*(?:\\*["'`])?"#,
            r#"(?P<secret>[^\s=;"'`\\]{1,64}=(?:[^\r\n"'`\\]|\\+/)+)"#,
            r#"|(?:-b|--cookie)(?:[ \t]+|=)(?:"#,
            r#"\\*"(?P<secret>[^\s=;"'`\\\-][^\s=;"'`\\]{0,63}=(?:[^"\\\r\n]|\\+/)+)\\*""#,
            r#"|'(?P<secret>[^\s=;"'`\\\-][^\s=;"'`\\]{0,63}=[^'\r\n]+)'"#,
            r#"|(?P<secret>[^\s=;"'`\\\-][^\s=;"'`\\]{0,63}=(?:[^\s"'`\\]|\\+/)+)))"#
        ),
        example: "Cookie: sessionid=Fk9sE55i0nIdFake2024abc; csrftoken=FakeCsrf0123456789",
    },
    Rule {
        name: "url-query-token",
        // `?token=…`, `&auth=…` (Firebase), `&private_token=…` (GitLab), a signed URL's
        // `signature`; `access_token=`, `api_key=` and the like are `env-secret`. Not `key`,
        // `code`, `state`, `session`.
        pattern: concat!(
            r"(?:[?&#;]|\\*u0026)(?i:token|auth|auth_token|private_token|session_token|jwt|pass|pwd",
            r"|signature|x-amz-signature|x-goog-signature)=(?P<secret>(?:[A-Za-z0-9._~+=%\-]|\\*/){8,})"
        ),
        example: "https://api.example.com/v2/export?format=csv&token=9f8e7d6c5b4a3f2e1d0cFakeUrlToken&limit=10",
    },
    Rule {
        name: "json-token",
        // A JSON `"token": "…"` of 16+ characters, a YAML `token: …` of 20+ alone on its line
        // (kubeconfig); the value holds a digit. `token: …` in prose has blanks.
        pattern: concat!(
            r#"\b(?:(?i:token)\\*["'][ \t]*:[ \t]*\\*["'](?P<secret>(?:[A-Za-z0-9._~+=:\-]|\\*/){16,})\\*["']"#,
            r#"|token:[ \t]+(?:\\*["'])?(?P<secret>(?:[A-Za-z0-9._~+=:\-]|\\*/){20,})(?:\\*["'])?[ \t]*"#,
            r"(?:\r?\n|\\+[rn]|$))"
        ),
        example: r#"{"user": "ci-bot", "token": "tok_9F8e7D6c5B4a3F2e1D0cFakeJsonToken", "expires_in": 3600}"#,
    },
    Rule {
        name: "kubernetes-bootstrap-token",
        // `token-id.token-secret` (kubeadm); the id is public. Not a domain label
        // (`static.cloudfront123456.net`); the secret holds a digit and a letter.
        pattern: r"\b[a-z0-9]{6}\.(?P<secret>[a-z0-9]{16})(?:[^A-Za-z0-9_.]|\.(?:[^A-Za-z]|$)|$)",
        example: "kubeadm token create prints 2g9d9r.j62wzmyitltfh59k",
    },
    Rule {
        name: "env-secret",
        // `X_PASSWORD=…`, `export X_TOKEN="…"`, `x_api_key: …` (YAML), `"password": "…"`,
        // `apiKey = '…'`; the name stays. `*_TOKEN` needs a prefix (`token: …` is prose too),
        // `*_TOKENS`, `*_LIMIT` and the like are not names of secrets.
        // After `=` the value is literal to a blank ([`value_eq!`]); after `:` (YAML, JSON) it
        // is [`value_colon!`].
        pattern: concat!(
            r"\b(?i:[A-Za-z0-9_.\-]*(?:passw(?:or)?d|passphrase|secret",
            r"|(?:api|access|secret|private|signing|encryption|master|auth)[_.\-]?key",
            r"|secret[_.\-]?key[_.\-]?base",
            r"|api[_.\-]?token|[_.\-](?:pass|pwd|auth)|[A-Za-z0-9_.\-]token",
            // Terraform's `TF_TOKEN_app_terraform_io`.
            r"|tf_token_[a-z0-9_\-]+))",
            r#"(?:\\*["'`])?[ \t]*(?:(?::=|=>|=)[ \t]*"#,
            // `X_AUTH_TOKEN: Bearer …`: the credential is after the scheme.
            r"(?:(?i:bearer|basic|token)[ \t]+)?",
            value_eq!(),
            r"|:[ \t]*(?:(?i:bearer|basic|token)[ \t]+)?",
            value_colon!(),
            ")"
        ),
        example: "DB_PASSWORD=Tr0ub4dor-and-3-fake",
    },
];
