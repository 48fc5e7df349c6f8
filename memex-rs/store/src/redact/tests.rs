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
        // Command lines that take no secret.
        "aws configure set region eu-west-1",
        "aws configure set default.s3.max_concurrent_requests 20",
        "aws configure set aws_secret_access_key \"$AWS_SECRET_ACCESS_KEY\"",
        "aws configure get aws_secret_access_key",
        "docker run -p 8080:80 nginx",
        "docker compose up -p myproj",
        "ssh -p 2222 host",
        "psql -p 5432",
        "redis-cli -p 6379",
        "docker login -u bot -p \"$REGISTRY_PASSWORD\" ghcr.io",
        "docker login -u bot --password-stdin ghcr.io",
        "mongosh -u admin -p --authenticationDatabase admin",
        "docker login host && docker run -p 5432:5432 pg",
        "az login",
        "az login --identity",
        "az login -u $env:AZURE_CLIENT_ID -p $env:AZURE_CLIENT_SECRET --tenant t",
        "redis-cli -a $REDIS_PASSWORD ping",
        "redis-cli -a \"${REDIS_PASS}\" info",
        "redis-cli --askpass",
        "git commit -a -m fix",
        "ls -a",
        "tar -a -cf x.tgz .",
        "rsync -b --suffix=.bak a b",
        "curl -b cookies.txt https://x.example.com",
        // Config files.
        r#""auth": "required""#,
        r#""auth": "oauth2-proxy""#,
        r#""auths": {}"#,
        r#""credsStore": "desktop""#,
        r#""auth": "authentication""#,
        "client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=",
        "certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=",
        "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0K",
        "LS0tLS1CRUdJTiBSU0EgUFVCTElDIEtFWS0tLS0tCk1JSUU=",
        "Public-Lines: 2\nAAAAC3NzaC1lZDI1NTE5AAAAIEZha2VQdVRUWVB1YmxpY0tleUJ5dGVzMDEyMzQ1\nNiEh",
        "the Private-Lines header gives a count",
        "Private-MAC: <hex>",
        "main.c:12:5: error: expected ';'",
        "00:1a:2b:3c:4d:5e",
        "root:x:0:0:root:/root:/bin/bash",
        "fe80::1:2:3:4",
        "2024-05-01 12:34:56:789",
        "https://db.example.com:5432/app",
        "src/a.py:12:foo:bar:baz",
        "PWD=/home/alice/project",
        "OLDPWD=/tmp",
        "cd $(pwd)",
        r#""password": {"type": "string"}"#,
        "Password={{ .Values.db.password }};",
        r#"f"Driver=x;PWD={pwd};""#,
        r#"conn = f"Server={host};Password={self.password};""#,
        r#"print(f"password={password!r}")"#,
        "zf.extractall(path, members=None, pwd=None)",
        "stream = self.root.open(self.at, zip_mode, pwd=pwd)",
        "let pwd = std::env::current_dir()?;",
        // Headers, URLs, JSON fields.
        "document.cookie = \"a=b\"",
        "Cookie: <cookie>",
        "Cookie: $COOKIE",
        "Cookie: session=${SESSION}",
        "the cookie consent banner",
        "Set-Cookie headers are stripped",
        "https://x.example.com/?token=${TOKEN}",
        "https://x.example.com/?token=<token>",
        "https://x.example.com/?token=abc",
        "https://x.example.com/?token=YOUR_TOKEN_HERE",
        "https://x.example.com/?token=%7B%7Btoken%7D%7D",
        "https://x.example.com/?auth=my-token",
        "https://x.example.com/authorize?response_type=token",
        "https://x.example.com/?token_type=bearer",
        r#"{"type": "token"}"#,
        r#"{"token": null}"#,
        r#"{"token": "IDENT"}"#,
        r#"{"token": "STRING_LITERAL_KIND"}"#,
        r#"{"max_tokens": 4096}"#,
        r#"{"tokens": ["a"]}"#,
        r#"{"token": "<redacted>"}"#,
        r#"{"token": "${{ secrets.X }}"}"#,
        "token: the smallest unit of text",
        "http://host:8080?next=a@b.com",
        "http://host:8080#x@y",
        // Token prefixes alone.
        "hvs.example",
        "the hvs. prefix",
        "hvs.CAES...",
        "hvs.compute_hessian_vector_product",
        "s.thisstringisalllowercase",
        "pypi-AgENdGVzdC5weXBpLm9yZw...",
        "pypi-token",
        "pypi-YOUR-TEST-TOKEN-HERE",
        "ATATT3xFfGF0...",
        "ATATT3",
        "HRKU-",
        "HRKU-AA...",
        "sha256:32ca742c924113a1eb28c44005caae25950932d4736361ffac33983ac9170912",
        "static.cloudfront123456.net",
        "v1.2.3",
        "import foobar.verylongmodulename",
        ".gnu.lto_.inline.9eb8192c0fafd823",
        // Code, not values.
        "password=getpass()",
        "password = getpass.getpass(\"x\")",
        "password = bcrypt.hashpw(pw, salt)",
        "password = input().strip()",
        "connect(password=get_pw())",
        "connect(user=u, password=self.password)",
        "def load(self, certfile, keyfile=None, password=None):",
        "proxy_pass=url.password or None,",
        "password=config.password",
        "secret: settings.SECRET_KEY",
        r#""apiKey": this.apiKey"#,
        "this.apiKey = savedApiKey;",
        "password: *db_pw",
        "password: # set later",
        "password: [a, b]",
        "PASSWORD=$(cat /run/secrets/pw)",
        "export X=${Y}",
        "semi_token: input.parse()?,",
        "semi_token: Token![;],",
        "let pub_token = input.parse::<Token![pub]>()?;",
        "signing_key: &dyn sign::SigningKey,",
        "password: &mut buf,",
        "let page_token = (end < 130).then(|| 1);",
        "const unsigned char* const secret = (a == NULL) ? state->customSecret : state->x;",
        "cancellation_token: CancellationToken::new(),",
        "private_key: ed25519.Ed25519PrivateKey,",
        "MAKEFLAGS=-j --jobserver-auth=3,4",
        // Placeholders.
        "API_KEY=YOUR_API_KEY",
        "password=yourpassword",
        "token=your_token_here",
        "SECRET=YourSecretKey",
        "password=replace-me",
        "API_TOKEN=insert-token-here",
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
        // Values after `=` run to a blank: `;`, `&`, `,` end them only before `Name=`.
        ("DB_PASSWORD=abc;def", "DB_PASSWORD=[REDACTED_SECRET]"),
        (
            "Server=x;Password=abc;Database=x;",
            "Server=x;Password=[REDACTED_SECRET];Database=x;",
        ),
        (
            "https://x.example.com/cb?access_token=abc123&x=1",
            "https://x.example.com/cb?access_token=[REDACTED_SECRET]&x=1",
        ),
        (
            "export PASSWORD=hunter2; make",
            "export PASSWORD=[REDACTED_SECRET]; make",
        ),
        ("f(password=Hunter2x)", "f(password=[REDACTED_SECRET])"),
        (
            "User{name=bob, password=Hunter2x}",
            "User{name=bob, password=[REDACTED_SECRET]}",
        ),
        (
            "password: |\n  Fake-Block-Pw\nuser: x",
            "password: |\n  [REDACTED_SECRET]\nuser: x",
        ),
        (
            "az login -u me --password \"-6fkdUrc:x-]M63JPPosVWJS47cWiiUX\"",
            "az login -u me --password \"[REDACTED_SECRET]\"",
        ),
        (
            "postgres://app_user:p#ss?w0rd@db.internal:5432/app",
            "postgres://app_user:[REDACTED_SECRET]@db.internal:5432/app",
        ),
        (
            "http://u:pw@host.example.com?next=a@b.com",
            "http://u:[REDACTED_SECRET]@host.example.com?next=a@b.com",
        ),
        ("w8ur2k.j62wzmyitltfh59k", "w8ur2k.[REDACTED_SECRET]"),
        (
            "Uid=app;Pwd={FakeOdbc;Pw}}2024};Encrypt=yes;",
            "Uid=app;Pwd={[REDACTED_SECRET]};Encrypt=yes;",
        ),
        (
            "Set-Cookie: __Host-sid=FakeSetCookie0123; Path=/; Secure",
            "Set-Cookie: [REDACTED_SECRET]",
        ),
        (
            "Private-Lines: 2\nAAAAIEZha2VQdVRU\nWVByaXZhdGU=\nPrivate-MAC: 0bb18c58388828c52063f725d8cf3568e48f4d74",
            "Private-Lines: 2\n[REDACTED_SECRET]\nPrivate-MAC: [REDACTED_SECRET]",
        ),
        (
            "*:*:*:replicator:Fake\\:Repl\\\\Pw",
            "*:*:*:replicator:[REDACTED_SECRET]",
        ),
        (
            "vault login -method=token s.ZC9Ecf4M5g9o34Q6RkzGsj0z",
            "vault login -method=token [REDACTED_SECRET]",
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

/// One line per common secret shape, written the way a developer pastes it: `(line, the
/// secret that must go, a part that must stay)`.
const CORPUS: &[(&str, &str, &str)] = &[
    // Provider keys.
    (
        "export ANTHROPIC_API_KEY=sk-ant-api03-ErQHQwjyaxErPZDS3MoJaQNjCxkv5ndK0meGR0vRFAKEzZ1fb6d06QGofB8ChQBiIu4NJkS4dJkG0fzMAQME-EMyIbPAA",
        "ErQHQwjyaxErPZDS3MoJaQNjCxkv5ndK0meGR0vRFAKE",
        "export ANTHROPIC_API_KEY=",
    ),
    (
        r#"client = OpenAI(api_key="sk-proj-Uf9mYQqw8x3SyRthqpvxxGKZWGlby0FAKE2BcHboRBcynXMgWJoleSrcBrFwMOUdGDxnvsDES9")"#,
        "Uf9mYQqw8x3SyRthqpvxxGKZWGlby0FAKE",
        "client = OpenAI(api_key=",
    ),
    (
        r#"curl https://openrouter.ai/api/v1/chat/completions -H "Authorization: Bearer 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""#,
        "f75eb56708a570173b40a837ffb8e5e918ae69800048d476df181dd2c6bbc504",
        "https://openrouter.ai/api/v1/chat/completions",
    ),
    (
        "GROQ_API_KEY=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 python app.py",
        "w1zfeI66HDJY15WJzIa2GxA5jbvYeHRNrtotArZGVzHfXRRc3sP9",
        "python app.py",
    ),
    (
        "huggingface-cli login --token hf_Ymi6nW2JgYpqcII6CgFNHl91K12PdBtbFy",
        "Ymi6nW2JgYpqcII6CgFNHl91K12PdBtbFy",
        "huggingface-cli login --token",
    ),
    (
        "https://maps.googleapis.com/maps/api/geocode/json?address=Berlin&key=AIzaAghVLOFlxJjMNKryvtxw66v8GMDelNz4n8u",
        "AghVLOFlxJjMNKryvtxw66v8GMDelNz4n8u",
        "maps.googleapis.com/maps/api/geocode/json?address=Berlin&key=",
    ),
    (
        r#"{"installed": {"client_id": "123-abc.apps.googleusercontent.com", "client_secret": "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"}}"#,
        "yxrT5WmpLHYUFGQQTN2Tvwztibe4",
        "123-abc.apps.googleusercontent.com",
    ),
    // Code hosts, registries, chat.
    (
        "git remote set-url origin https://ghp_5bZc5e6AImY7yYgTwmtr7YSRIFNNhnIMFAKE@github.com/acme/app.git",
        "5bZc5e6AImY7yYgTwmtr7YSRIFNNhnIMFAKE",
        "@github.com/acme/app.git",
    ),
    (
        "echo github_pat_11SRzLpeAwufRvjRfUttSl_WRQO7BxlbnFNCFldQMvDp4ug8oa9xxr2mSBsoH6jG5SvkGDyMG1TpDD | gh auth login --with-token",
        "11SRzLpeAwufRvjRfUttSl_WRQO7BxlbnFNCFldQMvDp4ug8oa9xxr2mSBsoH6jG5SvkGDyMG1TpDD",
        "gh auth login --with-token",
    ),
    (
        "  GITLAB_TOKEN: glpat-GFtMf7mj1oy3H6q79H0x",
        "GFtMf7mj1oy3H6q79H0x",
        "GITLAB_TOKEN:",
    ),
    (
        "//registry.npmjs.org/:_authToken=npm_QYsyR9s5EjS1HAKulqBA1djdChHtpknhX1Jy",
        "QYsyR9s5EjS1HAKulqBA1djdChHtpknhX1Jy",
        "//registry.npmjs.org/:_authToken=",
    ),
    (
        "twine upload -r testpypi -u __token__ -p pypi-AgENdGVzdC5weXBpLm9yZwIk3bmlQvT_0AEpFJjeMltb8auBNmdHTJFakeTestPyPI2vUb335elQsqfYM89I1z7dDoiwRS9ozF15k dist/*",
        "AgENdGVzdC5weXBpLm9yZwIk3bmlQvT_0AEpFJjeMltb8auBNmdHTJFakeTestPyPI",
        "-u __token__ -p",
    ),
    (
        "SLACK_BOT_TOKEN=xoxb-036868701894-5057542273824-FcBZxsA7OMsy03Y5MujiqPc1",
        "5057542273824-FcBZxsA7OMsy03Y5MujiqPc1",
        "SLACK_BOT_TOKEN=",
    ),
    (
        r#"curl -X POST -d '{"text":"deployed"}' https://hooks.slack.com/services/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"#,
        "m4NOINxeovyrNKi1IQ8CVrqv",
        "https://hooks.slack.com/services/",
    ),
    (
        "curl https://api.telegram.org/bot8383399500:AAK3WMGZOThDDYlxEVNMPZVhtI0i0GBUTzA/getMe",
        "AAK3WMGZOThDDYlxEVNMPZVhtI0i0GBUTzA",
        "https://api.telegram.org/",
    ),
    (
        r#"client.run("MIcjWmI56db51hByCN8bNC2Z7y.clwdm8.zgrQ7OJryJmRznupg7knUFMD4X2mWkOhIdfXKj")"#,
        "zgrQ7OJryJmRznupg7knUFMD4X2mWkOhIdfXKj",
        "client.run(",
    ),
    (
        r#"stripe.api_key = "sk_live_OA3ev3hcF2Rg4dE5P9BX0LtPFAKEHEF2BLpJEziOmLa8DXvkUoZErHMUXenj0l1NbkFJZ4PB3oMSAQBkl6R5w5JFuRl7Clb87I""#,
        "OA3ev3hcF2Rg4dE5P9BX0LtPFAKE",
        "stripe.api_key = ",
    ),
    (
        "SENDGRID_API_KEY=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",
        "f2f7WJw1EliOlUFvBglVjtCWh6dbEddGUpXuTa8tkIA",
        "SENDGRID_API_KEY=",
    ),
    // Clouds.
    (
        "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
        "AKIAIOSFODNN7EXAMPLE",
        "aws_access_key_id = ",
    ),
    (
        "aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY --profile ci",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws configure set aws_secret_access_key",
    ),
    (
        "AWS Secret Access Key [None]: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "AWS Secret Access Key [None]:",
    ),
    (
        "az login --service-principal -u 4f1c0e2a-9b7d-4c55-8e3a-2d6f0b1a7c90 -p 'Fk8Q~spSecretValue.2024_abcdefghijklmn' --tenant 00000000-1111-2222-3333-444444444444",
        "Fk8Q~spSecretValue.2024_abcdefghijklmn",
        "--tenant 00000000-1111-2222-3333-444444444444",
    ),
    (
        "DefaultEndpointsProtocol=https;AccountName=acmestore;AccountKey=BYWXyxhGyM1JFNQBdRojrZEChR8ZvsanpSGANN0ifcz2bG7PrtojcaN914TCWMNEcSwgOWalrLZN62NFli0FxK==;EndpointSuffix=core.windows.net",
        "BYWXyxhGyM1JFNQBdRojrZEChR8ZvsanpSGANN0ifcz2bG7PrtojcaN914TCWMNEcSwgOWalrLZN62NFli0FxK",
        "AccountName=acmestore",
    ),
    (
        "https://acmestore.blob.core.windows.net/backups/db.tar?sv=2022-11-02&sp=r&se=2030-01-01T00:00:00Z&sig=MZc8g1DxuX26zo67YKA3%2BWTRuhosEi71Xz0tOT4je%3D",
        "MZc8g1DxuX26zo67YKA3%2BWTRuhosEi71Xz0tOT4je",
        "acmestore.blob.core.windows.net/backups/db.tar",
    ),
    (
        "doctl auth init --access-token dop_v1_a41a763225da81d7baa1af6723ff56eca645fe436d6582afe2dc655425a517ff",
        "a41a763225da81d7baa1af6723ff56eca645fe436d6582afe2dc655425a517ff",
        "doctl auth init",
    ),
    (
        "heroku auth:token\nHRKU-AASze0frUHs_nBccFAwfOeFakeB1Ei8_0ZAhN1tLk7PQvLIfeGdjYi91Ifr-",
        "AASze0frUHs_nBccFAwfOeFakeB1Ei8_0ZAhN1tLk7PQvLIfeGdjYi91Ifr",
        "heroku auth:token",
    ),
    (
        "Initial Root Token: hvs.CAESIKBJHFhMpKYolVviUsb6QFake4-fMBwmDwe1tHBNG_oLrM_4m76ARO55EF8WX9-WfRRb7yjiSdA9XBGEgBWwv8G69DGV",
        "CAESIKBJHFhMpKYolVviUsb6QFake4-fMBwmDwe1tHBNG_oLrM_4m76ARO55EF8WX9",
        "Initial Root Token:",
    ),
    (
        "VAULT_TOKEN=s.ZC9Ecf4M5g9o34Q6RkzGsj0z vault kv get secret/app",
        "ZC9Ecf4M5g9o34Q6RkzGsj0z",
        "vault kv get secret/app",
    ),
    (
        "curl -u dev@acme.example:ATATT3xFfGF0cKqHNbXeQm1juCRsx0Y8oydIrxaRF4B9tzLtvmPXymKPD7euvZF6qCTmaiFJFakeAtlassian_5rH31WT3sZGg8PNnAI-QaPce1Edjvx8ryeyUS6nl3nGud23KsPJsKMWF24Oq0Mdk-9LESvRS7mjOj-AuUcZoSCw1T69kqFIHSO=A63B5134 https://acme.atlassian.net/rest/api/3/myself",
        "ATATT3xFfGF0cKqHNbXeQm1juCRsx0Y8oydIrxaRF4B9tzLtvmPXymKPD7euvZF6qCTmaiFJFakeAtlassian",
        "curl -u dev@acme.example:",
    ),
    // Containers and clusters.
    (
        "docker login -u deploy-bot -p 'Fake-Registry-Pw-2024' registry.example.com",
        "Fake-Registry-Pw-2024",
        "-u deploy-bot -p '",
    ),
    (
        "{\n\t\"auths\": {\n\t\t\"https://index.docker.io/v1/\": {\n\t\t\t\"auth\": \"ZGVwbG95LWJvdDpGYWtlUmVnaXN0cnlQdy0yMDI0\"\n\t\t}\n\t}\n}",
        "ZGVwbG95LWJvdDpGYWtlUmVnaXN0cnlQdy0yMDI0",
        "https://index.docker.io/v1/",
    ),
    (
        "  .dockerconfigjson: eyJhdXRocyI6eyJnaGNyLmlvIjp7ImF1dGgiOiJZMmt0WW05ME9rWmhhMlZIYUdOeVVHRnpjM2R2Y21ReU1ESTAifX19",
        "eyJhdXRocyI6eyJnaGNyLmlvIjp7ImF1dGgiOiJZMmt0WW05ME9r",
        ".dockerconfigjson:",
    ),
    (
        "users:\n- name: ci-admin\n  user:\n    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFRmFrZUt1YmVjb25maWdDbGllbnRLZXlGb3JUZXN0c09ubHkwMTIzNDU2Nzg5YWJjZGVmZ2gKLS0tLS1FTkQgUlNBIFBSSVZBVEUgS0VZLS0tLS0K",
        "NSUlFRmFrZUt1YmVjb25maWdDbGllbnRLZXlGb3JUZXN0c09ubHkwMTIz",
        "client-key-data:",
    ),
    (
        "users:\n- name: rancher\n  user:\n    token: kubeconfig-user-fk9x2:FakeRancherToken0123456789abcdef\n",
        "FakeRancherToken0123456789abcdef",
        "- name: rancher",
    ),
    (
        "kubeadm token create\nw8ur2k.j62wzmyitltfh59k",
        "j62wzmyitltfh59k",
        "kubeadm token create",
    ),
    (
        "kubeadm join 10.0.0.10:6443 --token abcdef.kq4gihvszzgn1p0r --discovery-token-ca-cert-hash sha256:32ca742c924113a1eb28c44005caae25950932d4736361ffac33983ac9170912",
        "kq4gihvszzgn1p0r",
        "sha256:32ca742c924113a1eb28c44005caae25950932d4736361ffac33983ac9170912",
    ),
    (
        "skopeo copy --dest-creds deploy:FakeSkopeoPw-2024 docker-archive:img.tar docker://ghcr.io/acme/app",
        "FakeSkopeoPw-2024",
        "--dest-creds deploy:",
    ),
    // Databases and services.
    (
        "DATABASE_URL=postgres://app_user:p#ss?w0rd-Fake@db.internal:5432/app",
        "p#ss?w0rd-Fake",
        "@db.internal:5432/app",
    ),
    (
        "mongosh \"mongodb+srv://admin:Fk9%40Mongo2024@cluster0.example.net/app\"",
        "Fk9%40Mongo2024",
        "@cluster0.example.net/app",
    ),
    (
        "mysql -h db.internal -u root -pS3cure-fake-Pw app",
        "S3cure-fake-Pw",
        "-h db.internal -u root",
    ),
    (
        "redis-cli -h cache.internal -p 6379 -a 'Fake-Redis-Pw-2024' --no-auth-warning PING",
        "Fake-Redis-Pw-2024",
        "-h cache.internal -p 6379",
    ),
    (
        "$ cat ~/.pgpass\ndb.internal.example.com:5432:orders:app_user:Fake-Pg-Pass-2024",
        "Fake-Pg-Pass-2024",
        "db.internal.example.com:5432:orders:app_user:",
    ),
    (
        "Driver={ODBC Driver 18 for SQL Server};Server=tcp:sql-prod.database.windows.net,1433;Database=orders;Uid=app_reader;Pwd={Fake;Odbc}}Pw-2024};Encrypt=yes;",
        "Fake;Odbc}}Pw-2024",
        "Uid=app_reader;Pwd={",
    ),
    (
        "Server=db01;Database=app;User Id=sa;Password=Fake-Ado-Pw9;TrustServerCertificate=true",
        "Fake-Ado-Pw9",
        "TrustServerCertificate=true",
    ),
    // HTTP.
    (
        "curl -u admin:hunter2-fake-Pw https://api.example.com/v1/items",
        "hunter2-fake-Pw",
        "curl -u admin:",
    ),
    (
        "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U' https://api.example.com/me",
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "https://api.example.com/me",
    ),
    (
        r#"{"headers": {"Authorization": "Basic ZGVwbG95OkZha2VCYXNpY1B3MjAyNA=="}}"#,
        "ZGVwbG95OkZha2VCYXNpY1B3MjAyNA",
        r#""Authorization": "Basic "#,
    ),
    (
        "curl -H 'Cookie: sessionid=Fk9sE55i0nIdFake2024abc; csrftoken=FakeCsrf0123456789' https://app.example.com/api/me",
        "Fk9sE55i0nIdFake2024abc",
        "https://app.example.com/api/me",
    ),
    (
        r#"curl "https://api.example.com/v2/export?format=csv&token=9f8e7d6c5b4a3f2e1d0cFakeUrlToken&limit=10""#,
        "9f8e7d6c5b4a3f2e1d0cFakeUrlToken",
        "&limit=10",
    ),
    (
        r#"{"user": "ci-bot", "token": "tok_9F8e7D6c5B4a3F2e1D0cFakeJsonToken", "expires_in": 3600}"#,
        "9F8e7D6c5B4a3F2e1D0cFakeJsonToken",
        r#""expires_in": 3600"#,
    ),
    (
        "https://discord.com/api/webhooks/1234567890123456789/zgrQ7OJryJmRznupg7knUFMD4X2mWkOhIdfXKjFakeWebhookTokenForTests00",
        "zgrQ7OJryJmRznupg7knUFMD4X2mWkOhIdfXKjFakeWebhookTokenForTests00",
        "https://discord.com/api/webhooks/",
    ),
    // Files and flags.
    (
        "$ cat ~/.ssh/id_ed25519\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACDFakeFakeFakeFake\n-----END OPENSSH PRIVATE KEY-----",
        "QyNTUxOQAAACDFakeFakeFakeFake",
        "$ cat ~/.ssh/id_ed25519",
    ),
    (
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: deploy@ci\nPublic-Lines: 1\nAAAAC3NzaC1lZDI1NTE5AAAAIEZha2VQdVRUWVB1YmxpY0tleQ==\nPrivate-Lines: 1\nAAAAIEZha2VQdVRUWVByaXZhdGVTY2FsYXJGb3JUZXN0cyEh\nPrivate-MAC: 0bb18c58388828c52063f725d8cf3568e48f4d74a88fd86f85c5a4ec69736b4c",
        "AAAAIEZha2VQdVRUWVByaXZhdGVTY2FsYXJGb3JUZXN0cyEh",
        "AAAAC3NzaC1lZDI1NTE5AAAAIEZha2VQdVRUWVB1YmxpY0tleQ==",
    ),
    (
        "machine api.heroku.com login dev@acme.example password n3trc-fake-Pw",
        "n3trc-fake-Pw",
        "machine api.heroku.com login dev@acme.example password",
    ),
    (
        "psql \"host=db.internal dbname=app user=app\" --password=Zq8-fake-pass-9",
        "Zq8-fake-pass-9",
        "--password=",
    ),
    (
        "age-keygen -o key.txt\nAGE-SECRET-KEY-1LH5HANKQAT3UPKG6H2F59MWGN36Q9WMLSXDC73UKWX592U8M7ZG7LMCW0W",
        "LH5HANKQAT3UPKG6H2F59MWGN36Q9WMLSXDC73UKWX592U8M7ZG7LMCW0W",
        "age-keygen -o key.txt",
    ),
    // Values the generic rules used to cut or veto.
    (
        "DB_PASSWORD=abc;Fake-Semicolon-Pw",
        "Fake-Semicolon-Pw",
        "DB_PASSWORD=",
    ),
    (
        "SMTP_PASSWORD=#Fk-hash-start-2024",
        "Fk-hash-start-2024",
        "SMTP_PASSWORD=",
    ),
    (
        "DB_PASSWORD=correct.horse.battery.staple",
        "correct.horse.battery.staple",
        "DB_PASSWORD=",
    ),
    (
        "MAIL_PASSWORD=Yourself-Fake-2024!",
        "Yourself-Fake-2024",
        "MAIL_PASSWORD=",
    ),
    (
        "database:\n  password: &db_pw Fake-Anchored-Pw-2024\n",
        "Fake-Anchored-Pw-2024",
        "password: &db_pw",
    ),
];

/// `line` redacted as text, and inside a JSON record (one and two levels deep): the redacted
/// line as read back, and the raw output.
fn redacted_in_context(line: &str) -> Vec<(String, String)> {
    let (text, n) = redact_text(line);
    assert!(n >= 1, "nothing found in {line:?}");
    let mut outs = vec![(text.clone().into_owned(), text.into_owned())];
    let once = json!({"t": line}).to_string();
    let twice = json!({"t": once}).to_string();
    for (doc, depth) in [(once, 1), (twice, 2)] {
        let (raw, n) = redact_bytes(doc.as_bytes());
        assert!(n >= 1, "nothing found in {doc}");
        let mut v: Value = serde_json::from_slice(&raw).unwrap_or_else(|e| panic!("{e}: {doc}"));
        for _ in 1..depth {
            v = serde_json::from_str(v["t"].as_str().unwrap()).unwrap();
        }
        let read = v["t"].as_str().unwrap().to_owned();
        outs.push((read, String::from_utf8(raw.into_owned()).unwrap()));
    }
    outs
}

#[test]
fn the_fifty_shape_corpus_is_caught_in_context() {
    assert!(CORPUS.len() >= 50, "{} shapes", CORPUS.len());
    for &(line, secret, kept) in CORPUS {
        assert!(line.contains(secret) && line.contains(kept), "{line}");
        for (read, raw) in redacted_in_context(line) {
            for out in [&read, &raw] {
                assert!(
                    !out.contains(secret),
                    "{secret:?} survived\n  in:  {line:?}\n  out: {out:?}"
                );
            }
            assert!(
                read.contains(kept),
                "{kept:?} lost\n  in:  {line:?}\n  out: {read:?}"
            );
            assert_eq!(redact_text(&read).1, 0, "idempotent: {read:?}");
        }
    }
}
