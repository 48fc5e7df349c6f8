use super::engine::{Matcher, unquote};
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
        serde_json::to_string_pretty(&json!({"messages": [{"text": s}, {"text": "x"}]})).unwrap(),
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
        format!("[default]\naws_access_key_id = {SECRET}\nAWS_SECRET_ACCESS_KEY: \"{SECRET}\"\n")
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
