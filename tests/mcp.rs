//! End-to-end: the real `memex mcp` on stdio, driven by the official Rust SDK's client, on an
//! archive of the fixtures (no service running).

use crate::common;

use common::*;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};

async fn call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
    args: Value,
) -> Result<Value, String> {
    let res = client
        .call_tool(
            CallToolRequestParams::new(tool.to_owned())
                .with_arguments(args.as_object().cloned().unwrap_or_default()),
        )
        .await
        .map_err(|e| e.to_string())?;
    let text = res.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .expect("a text result");
    if res.is_error == Some(true) {
        return Err(text);
    }
    Ok(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{tool}: not JSON ({e}): {text}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_answer_from_the_archive_and_reject_bad_arguments() {
    let h = Home::with_fixtures();
    h.json(&["import", "--json"]);
    let out = h.memex(&["compact", "trigger"]);
    assert!(out.status.success());
    let home = h.path().to_owned();
    let transport = TokioChildProcess::new(
        tokio::process::Command::new(env!("CARGO_BIN_EXE_memex")).configure(|cmd| {
            cmd.arg("mcp")
                .env_clear()
                .env("HOME", &home)
                .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        }),
    )
    .unwrap();
    let client = ().serve(transport).await.unwrap();
    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "memex");

    let mut tools: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    tools.sort();
    assert_eq!(
        tools,
        [
            "get_recent_sessions",
            "get_session",
            "list_projects",
            "search_history",
            "usage_report"
        ]
    );

    // What the agents cost: the CLI's report, and arguments refused by name.
    let v = call(
        &client,
        "usage_report",
        json!({"report": "daily", "agent": "claude", "timezone": "UTC"}),
    )
    .await
    .unwrap();
    let cli = h.json(&[
        "usage",
        "daily",
        "--json",
        "--agent",
        "claude",
        "--timezone",
        "UTC",
    ]);
    assert_eq!(v["daily"], cli["daily"]);
    assert!(v["totals"]["totalCost"].as_f64().unwrap() > 1.0, "{v}");
    for (args, name) in [
        (json!({"report": "hourly"}), "report"),
        (json!({"since": "last tuesday"}), "since"),
        (json!({"timezone": "Mars/Base"}), "timezone"),
        (json!({"agent": "nobody"}), "agent"),
        (json!({"report": "session", "limit": 0}), "limit"),
        (
            json!({"since": "2026-06-02", "until": "2026-06-01"}),
            "until",
        ),
        (
            json!({"report": "daily", "sql": "1; DROP TABLE messages"}),
            "sql",
        ),
    ] {
        let e = call(&client, "usage_report", args.clone())
            .await
            .unwrap_err();
        assert!(e.contains(name), "{args}: {e}");
    }

    // The same search as the CLI.
    let v = call(
        &client,
        "search_history",
        json!({"query": "timezone", "limit": 3}),
    )
    .await
    .unwrap();
    let cli = h.json(&["search", "timezone", "--limit", "3", "--json"]);
    assert_eq!(v, cli);
    let v = call(
        &client,
        "search_history",
        json!({"query": "date", "level": "talks", "agent": "claude"}),
    )
    .await
    .unwrap();
    assert!(
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["level"] == "talks" && r["agent"] == "claude")
    );

    // Sessions: paged raw messages, one talk, the summary.
    let session = "7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c";
    let page = call(
        &client,
        "get_session",
        json!({"session_id": "7d2f4c1e", "limit": 5}),
    )
    .await
    .unwrap();
    assert_eq!(page["session"]["session_id"], session);
    assert_eq!(page["messages"].as_array().unwrap().len(), 5);
    assert_eq!(page["next_offset"], 5);
    let total = page["total"].as_u64().unwrap();
    let last = call(
        &client,
        "get_session",
        json!({"session_id": session, "offset": total - 2, "limit": 5}),
    )
    .await
    .unwrap();
    assert_eq!(last["messages"].as_array().unwrap().len(), 2);
    assert_eq!(last["next_offset"], Value::Null);
    let talk = call(
        &client,
        "get_session",
        json!({"session_id": session, "prompt_number": 2, "limit": 200}),
    )
    .await
    .unwrap();
    assert!(
        talk["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["prompt_number"] == 2)
    );
    let summary = call(
        &client,
        "get_session",
        json!({"session_id": session, "format": "summary"}),
    )
    .await
    .unwrap();
    assert!(
        summary["session_summary"]["summary"].is_string(),
        "{summary}"
    );
    assert!(!summary["talks"].as_array().unwrap().is_empty());

    let recent = call(&client, "get_recent_sessions", json!({"limit": 2}))
        .await
        .unwrap();
    assert_eq!(recent["sessions"].as_array().unwrap().len(), 2);
    let projects = call(&client, "list_projects", json!({})).await.unwrap();
    assert!(
        projects["projects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["project"] == "/home/dev/demo-app")
    );

    // Bad arguments are protocol errors that name what was wrong; the server carries on.
    for (tool, args, says) in [
        ("search_history", json!({"query": ""}), "query"),
        ("search_history", json!({"query": "x", "limit": 0}), "limit"),
        (
            "search_history",
            json!({"query": "x", "level": "paragraphs"}),
            "level",
        ),
        (
            "search_history",
            json!({"query": "x", "agent": "windsurf"}),
            "agent",
        ),
        (
            "search_history",
            json!({"query": "x", "since": "soon"}),
            "since",
        ),
        (
            "search_history",
            json!({"query": "x", "mode": "semantic"}),
            "mode",
        ),
        (
            "search_history",
            json!({"query": "x", "limit": -1}),
            "limit",
        ),
        ("search_history", json!({"limit": 3}), "query"),
        (
            "get_session",
            json!({"session_id": "nope-nope"}),
            "no session",
        ),
        (
            "get_session",
            json!({"session_id": session, "format": "pdf"}),
            "format",
        ),
        (
            "get_session",
            json!({"session_id": session, "limit": 1000}),
            "limit",
        ),
    ] {
        let err = call(&client, tool, args.clone()).await.unwrap_err();
        assert!(err.contains(says), "{tool} {args}: {err}");
    }
    let v = call(
        &client,
        "search_history",
        json!({"query": "\"unbalanced AND ("}),
    )
    .await
    .unwrap();
    assert!(v["results"].is_array());
    client.cancel().await.unwrap();
}

/// The official Python SDK's client, as another agent would connect: initialize, list tools,
/// call each tool, a bad call.
#[test]
fn the_python_sdk_client_uses_every_tool() {
    let h = Home::with_fixtures();
    h.json(&["import", "--json"]);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients/mcp_client.py");
    let out = std::process::Command::new(python_with_mcp())
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_memex"))
        .arg(h.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python mcp client: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["tools"].as_array().unwrap().len(), 5);
    assert!(report["usage_months"].as_u64().unwrap() >= 3, "{report}");
    assert!(report["usage_cost"].as_f64().unwrap() > 1.0, "{report}");
    assert!(
        report["bad_call"].as_str().unwrap().contains("level"),
        "{report}"
    );
}
