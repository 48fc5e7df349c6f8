//! `memex export` and `GET /api/sessions/{id}/export`: a session written as Markdown, one
//! self-contained HTML file and JSON, one at a time or a project's worth with an index; what a
//! transcript says is text in every format (never markup), and what redaction removed stays out.

use crate::common;

use common::{Home, claude_answer, claude_prompt};
use serde_json::{Value, json};

const PROJECT: &str = "/home/dev/parser";
const SESSION: &str = "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
const OTHER: &str = "8b2c3d4e-5f6a-4b7c-9d8e-0f1a2b3c4d5e";

/// A session whose prompt and tool output carry markup, a secret, Chinese text, a tool call
/// with its result, thinking and a second talk.
fn write_sessions(home: &Home) {
    let secret = format!("sk-ant-api03-{}", "A".repeat(40));
    home.write_claude(
        PROJECT,
        SESSION,
        &[
            claude_prompt(
                SESSION,
                "u1",
                PROJECT,
                "<script>alert('x')</script> Fix the **parser** for 中文标题 please",
            ),
            json!({
                "type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": SESSION,
                "cwd": PROJECT, "timestamp": "2026-06-05T10:00:03.000Z",
                "message": {"id": "msg_a1", "role": "assistant", "model": "claude-opus-4-7",
                    "content": [
                        {"type": "thinking", "thinking": "The heading parser drops wide characters.", "signature": "s"},
                        {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                         "input": {"command": "cargo test heading ```fenced```", "description": "run the tests"}}
                    ],
                    "usage": {"input_tokens": 1200, "output_tokens": 80}}
            }),
            json!({
                "type": "user", "uuid": "u2", "parentUuid": "a1", "sessionId": SESSION,
                "cwd": PROJECT, "timestamp": "2026-06-05T10:00:05.000Z",
                "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                    "content": format!("test heading_cjk ... FAILED <img src=x onerror=alert(1)>\nkey {secret}"),
                    "is_error": true}]}
            }),
            claude_answer(SESSION, "a2", PROJECT, "The test fails on wide characters; fixed the width table."),
            claude_prompt(SESSION, "u3", PROJECT, "Now run the whole suite"),
            claude_answer(SESSION, "a3", PROJECT, "All 212 tests pass."),
        ],
    );
    home.write_claude(
        PROJECT,
        OTHER,
        &[
            claude_prompt(
                OTHER,
                "v1",
                PROJECT,
                "Add a changelog entry for the parser fix",
            ),
            claude_answer(OTHER, "w1", PROJECT, "Added it under Unreleased."),
        ],
    );
}

fn imported() -> Home {
    let home = Home::empty();
    write_sessions(&home);
    let out = home.memex(&["import"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    home
}

fn export(home: &Home, args: &[&str]) -> String {
    let mut all = vec!["export"];
    all.extend_from_slice(args);
    let out = home.memex(&all);
    assert!(
        out.status.success(),
        "memex {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn one_session_in_each_format() {
    let home = imported();

    // Markdown: talks as headings, tool calls and thinking collapsible, markup as text.
    let md = export(&home, &[SESSION]);
    assert!(md.contains("## 1. "), "{md}");
    assert!(md.contains("## 2. Now run the whole suite"), "{md}");
    assert!(
        md.contains("<details><summary>Bash <code>cargo test heading"),
        "{md}"
    );
    assert!(md.contains("— error</summary>"), "{md}");
    assert!(md.contains("<details><summary>thinking</summary>"), "{md}");
    assert!(md.contains("中文标题"), "{md}");
    assert!(md.starts_with("# &lt;script&gt;alert"), "{md}");
    // Markup from the transcript appears only inside fenced blocks, where it is text.
    let mut fence: Option<String> = None;
    for line in md.lines() {
        let ticks: String = line.chars().take_while(|c| *c == '`').collect();
        if ticks.len() >= 3 {
            match &fence {
                Some(f) if ticks == *f => fence = None,
                None => fence = Some(ticks),
                _ => {}
            }
            continue;
        }
        if line.contains("<script") || line.contains("<img") {
            assert!(fence.is_some(), "markup outside a fence: {line}");
        }
    }
    // The fence around the input outgrows the backticks inside it.
    assert!(md.contains("````json\n"), "{md}");
    assert!(
        !md.contains("sk-ant-api03-AAAA"),
        "redacted on the way in: {md}"
    );

    // HTML: one file, styles inline, no script, everything a transcript says escaped.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.html");
    let out = home.memex(&[
        "export",
        SESSION,
        "--format",
        "html",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&file).unwrap();
    assert!(html.starts_with("<!doctype html>"), "{html}");
    assert!(
        html.contains("<style>") && !html.contains("<script"),
        "no script"
    );
    for tag in ["<img", "<link", "<iframe", "<object", "http://", "https://"] {
        assert!(!html.contains(tag), "nothing loaded ({tag}): {html}");
    }
    assert!(
        html.contains("&#60;img src=x onerror"),
        "the markup is shown as text"
    );
    assert!(
        html.contains("&#60;script&#62;") || html.contains("&lt;script&gt;"),
        "{html}"
    );
    assert!(html.contains("id=\"prompt-2\""), "deep links to talks");
    assert!(html.contains("<details class=\"tool\">"), "{html}");
    assert!(html.contains("中文标题"));
    assert!(!html.contains("sk-ant-api03-AAAA"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "an export is private to its owner");
    }

    // JSON: the unified messages.
    let v: Value = serde_json::from_str(&export(&home, &[SESSION, "--format", "json"])).unwrap();
    assert_eq!(v["session"]["session_id"], SESSION);
    let msgs = v["messages"].as_array().unwrap();
    assert!(
        msgs.iter()
            .any(|m| m["kind"] == "tool_call" && m["tool_name"] == "Bash")
    );
    assert_eq!(v["session"]["usage"]["input_tokens"], 1200 + 10 + 10);

    // What cannot be exported says why.
    let none = home.memex(&["export", "no-such-session"]);
    assert_eq!(none.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no session"));
    let bad = home.memex(&["export", SESSION, "--format", "pdf"]);
    assert!(!bad.status.success());
    let both = home.memex(&["export", SESSION, "--project", "parser"]);
    assert!(String::from_utf8_lossy(&both.stderr).contains("not both"));
}

#[test]
fn a_project_exports_to_a_folder_with_an_index() {
    let home = imported();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("exported");
    for format in ["html", "md", "json"] {
        let out = home.memex(&[
            "export",
            "--project",
            PROJECT,
            "--format",
            format,
            "--out",
            out_dir.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let index = std::fs::read_to_string(out_dir.join(format!("index.{format}"))).unwrap();
        let files: Vec<String> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(&format!(".{format}")) && !n.starts_with("index."))
            .collect();
        assert_eq!(files.len(), 2, "{files:?}");
        for f in &files {
            assert!(index.contains(f.as_str()), "the index links {f}: {index}");
            assert!(f.contains(SESSION) || f.contains(OTHER), "{f}");
        }
    }
    let nothing = home.memex(&[
        "export",
        "--project",
        "/nowhere",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(nothing.status.code(), Some(3));
    let no_dir = home.memex(&["export", "--project", PROJECT]);
    assert!(String::from_utf8_lossy(&no_dir.stderr).contains("--out"));
    // A limit that cuts the export says so.
    let cut = home.memex(&[
        "export",
        "--project",
        PROJECT,
        "--limit",
        "1",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(cut.status.success());
    assert!(String::from_utf8_lossy(&cut.stderr).contains("stopped at --limit 1"));
}

/// An export overwrites a file as the owner's alone, and refuses a symlink put in its place
/// (which could point the history anywhere).
#[cfg(unix)]
#[test]
fn an_export_file_is_private_and_never_follows_a_symlink() {
    use std::os::unix::fs::PermissionsExt;
    let home = imported();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("session.md");
    std::fs::write(&out, "old").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = home.memex(&["export", SESSION, "--out", out.to_str().unwrap()]);
    assert!(r.status.success(), "{r:?}");
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(std::fs::read_to_string(&out).unwrap().contains("parser"));
    let target = dir.path().join("elsewhere.txt");
    std::fs::write(&target, "untouched").unwrap();
    let link = dir.path().join("link.md");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let r = home.memex(&["export", SESSION, "--out", link.to_str().unwrap()]);
    assert!(!r.status.success());
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("symlink"),
        "{r:?}"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
}

#[test]
fn the_api_serves_exports_as_downloads_to_the_local_user_only() {
    let home = imported();
    let s = home.serve(&[("MEMEX_VECTOR_PROVIDER", "off")]);
    s.wait_watching();
    let res = s
        .client()
        .get(s.url(&format!("/api/sessions/{SESSION}/export?format=html")))
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let h = res.headers().clone();
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    let disposition = h["content-disposition"].to_str().unwrap();
    assert!(disposition.starts_with("attachment; filename=\"") && disposition.contains(SESSION));
    assert!(
        h["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'")
    );
    assert_eq!(h["cache-control"], "no-store");
    let body = res.text().unwrap();
    assert!(body.contains("id=\"prompt-1\"") && !body.contains("<script"));
    let md = s
        .client()
        .get(s.url(&format!("/api/sessions/{SESSION}/export?format=md")))
        .send()
        .unwrap();
    assert_eq!(md.headers()["content-type"], "text/markdown; charset=utf-8");
    // Bad parameters are named; other sites and other names for this host are refused.
    let (code, v) = s.get(&format!("/api/sessions/{SESSION}/export?format=pdf"));
    assert_eq!(code, 400);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("pdf"),
        "{v}"
    );
    let (code, _) = s.get("/api/sessions/nope/export");
    assert_eq!(code, 404);
    let cross = s
        .client()
        .get(s.url(&format!("/api/sessions/{SESSION}/export?format=json")))
        .header("Origin", "https://evil.example")
        .send()
        .unwrap();
    assert_eq!(cross.status().as_u16(), 403);
    let rebound = s
        .client()
        .get(s.url(&format!("/api/sessions/{SESSION}/export?format=json")))
        .header("Host", "evil.example")
        .send()
        .unwrap();
    assert_eq!(rebound.status().as_u16(), 421);
}

/// Markdown, as GitHub and any CommonMark renderer that allows HTML would render it (comrak: a
/// port of GitHub's own renderer, raw HTML on, GitHub's extensions on, its tag filter off).
fn rendered(md: &str) -> String {
    let mut o = comrak::Options::default();
    o.render.r#unsafe = true;
    o.extension.table = true;
    o.extension.strikethrough = true;
    o.extension.autolink = true;
    o.extension.tasklist = true;
    comrak::markdown_to_html(md, &o)
}

/// The elements of `html` that carry the attribute `data-evil` (every piece of markup planted
/// in a transcript below carries it), and links to scripts.
fn live_markup(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    let lower = html.to_ascii_lowercase();
    for (i, _) in lower.match_indices('<') {
        let tag: String = lower[i..].chars().take_while(|c| *c != '>').collect();
        let starts_element = lower[i + 1..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic());
        if starts_element && (tag.contains("data-evil") || tag.contains("javascript:")) {
            found.push(tag);
        }
    }
    found
}

/// Transcript text that CommonMark would take for HTML in ways the Markdown export once let
/// through (an escaped backtick before a tag, a fence indented four spaces or with a backtick
/// in its info string, a fence in a list item that the list's end closes, a sub-agent's id, a
/// project path with a line break, the index's project column), and a link to a script: no
/// element of any exported file comes from it.
#[test]
fn no_transcript_text_becomes_markup_in_markdown() {
    let home = Home::empty();
    let id = "9c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e6f";
    let cwd = "/work/evil\n<script data-evil=cwd>alert(5)</script>";
    let answer = [
        r"An escaped backtick: \`<img data-evil=1 src=x onerror=alert(1)>` and on.",
        "    ```\n<img data-evil=2 src=x>\n```",
        "```js`x\n<img data-evil=3 src=x>\n```",
        "- a list\n  ```\n<div data-evil=4>in a list's fence</div>",
        "\t```\n<b data-evil=5>tab</b>",
        "<script data-evil=6>alert(6)</script>",
        "[click me](javascript:alert(7)) and ![img](javascript:alert(8)) and <javascript:alert(9)>",
        "<!-- data-evil comment --> <details data-evil=10 open>x</details>",
        "Plain **bold**, `code <i>` and a [link](https://example.com) stay Markdown.",
    ]
    .join("\n\n");
    home.write_claude(
        "-work-evil",
        id,
        &[
            claude_prompt(id, "u1", cwd, "<u data-evil=prompt>look</u> at this"),
            claude_answer(id, "a1", cwd, &answer),
            json!({
                "type": "assistant", "uuid": "s1", "parentUuid": "a1", "sessionId": id,
                "cwd": cwd, "isSidechain": true,
                "agentId": "`<img data-evil=agent src=x onerror=alert(11)>`",
                "timestamp": "2026-06-05T10:00:06.000Z",
                "message": {"id": "msg_s1", "role": "assistant", "model": "claude-opus-4-7",
                    "content": [{"type": "text", "text": "sub-agent <b data-evil=sub>work</b>"}],
                    "usage": {"input_tokens": 1, "output_tokens": 1}}
            }),
            claude_answer(id, "a2", cwd, "```\nan answer cut short <b data-evil=cut>"),
        ],
    );
    assert!(home.memex(&["import"]).status.success());
    let md = export(&home, &[id, "--format", "md"]);
    let html = rendered(&md);
    assert_eq!(live_markup(&html), Vec::<String>::new(), "{md}");
    // What the agent wrote as Markdown is still Markdown.
    assert!(html.contains("<strong>bold</strong>"), "{html}");
    assert!(
        html.contains(r#"<a href="https://example.com">link</a>"#),
        "{html}"
    );
    // And the text of the markup is still there, as text.
    assert!(html.contains("data-evil=6"), "{html}");
    // A project's export and its index.
    let dir = tempfile::tempdir().unwrap();
    let out = home.memex(&[
        "export",
        "--project",
        "evil",
        "--format",
        "md",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let md = std::fs::read_to_string(&p).unwrap();
        let html = rendered(&md);
        assert_eq!(
            live_markup(&html),
            Vec::<String>::new(),
            "{}: {md}",
            p.display()
        );
    }
    let index = std::fs::read_to_string(dir.path().join("index.md")).unwrap();
    assert_eq!(
        index.lines().filter(|l| l.starts_with("| ")).count(),
        2,
        "one header row, one session row, each on one line: {index}"
    );
}
