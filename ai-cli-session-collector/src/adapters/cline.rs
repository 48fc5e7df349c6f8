//! Cline, the VS Code extension `saoudrizwan.claude-dev` (legacy task folders), FORMATS-MORE §7.
//!
//! **Where.** `<host>/User/globalStorage/saoudrizwan.claude-dev/tasks/<taskId>/` under the same
//! hosts and platform folders as Roo Code (`Code`, `Code - Insiders`, `VSCodium`, `Cursor`,
//! `Windsurf` in `$XDG_CONFIG_HOME`/`~/.config`, `~/Library/Application Support`, `%APPDATA%`;
//! `~/.vscode-remote/data/User` in Codespaces). A root is such a `tasks` folder. The task id
//! is the folder name, the task's start time in epoch ms.
//!
//! **What is read.** `api_conversation_history.json`, rewritten whole on every change: the same
//! Anthropic message array as Roo's legacy format, read by the task reader in `roo.rs`
//! (`parse_task`), so prompts, ids and tool pairing follow its rules. Cline adds
//! `modelInfo{modelId, providerId, mode}` (the model) and `metrics.tokens{prompt, completion,
//! cached}` (usage) to assistant messages and has no per-message `ts` in the builds seen, so
//! element ids are positions (`n<k>`; builds that write `ts` get Roo's time-based ids): Cline
//! only appends to the file or cuts its tail (a checkpoint restore), it never inserts earlier
//! content. Title, project
//! (`cwdOnTaskInitialization`) and update time come from `../state/taskHistory.json`, the model
//! also from the task's `task_metadata.json`, event times from `ui_messages.json`; without
//! them the project is read from the `# Current Working Directory (…)` line of
//! `<environment_details>`.
//!
//! **Prompts.** `<task>…</task>` (the first user text block) and later `<feedback>` /
//! `<user_message>` / `<answer>` text, also when it arrives inside a tool result.
//! `<environment_details>`, `# task_progress …`, `# TODO LIST UPDATE REQUIRED …` and other
//! unwrapped user text are injected (Meta).
//!
//! **Tools.** Results come back as user text blocks `[<tool> for '<arg>'] Result:` without a
//! `tool_use_id`: they pair by order with the `tool_use` blocks of the assistant message before
//! them (by tool name first). `tool_result` blocks with a `tool_use_id` pair by id.
//!
//! Not read: the modern CLI/SDK sessions (`~/.cline/data/sessions/<id>/<id>.messages.json`),
//! whose format FORMATS-MORE does not describe.

use std::path::Path;

use serde_json::Value;

use crate::adapter::{parse_ts, string_of};
use crate::adapters::roo::{TaskExtension, TaskMeta, read_json};

pub struct ClineAdapter;

impl TaskExtension for ClineAdapter {
    const AGENT: &'static str = "cline";
    const EXTENSION: &'static str = "saoudrizwan.claude-dev";

    fn meta(dir: &Path) -> TaskMeta {
        let task_id = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let mut meta = TaskMeta {
            // The id is the start time (epoch ms) in every build seen.
            started_at: task_id
                .parse::<i64>()
                .ok()
                .filter(|t| *t > 1_000_000_000_000),
            ..Default::default()
        };
        let history = dir
            .parent()
            .and_then(Path::parent)
            .map(|ext| ext.join("state").join("taskHistory.json"));
        if let Some(Value::Array(items)) = history.as_deref().and_then(read_json)
            && let Some(item) = items
                .iter()
                .find(|i| i.get("id").and_then(Value::as_str) == Some(task_id))
        {
            meta.title = string_of(item, "task");
            meta.cwd = string_of(item, "cwdOnTaskInitialization");
            meta.updated_at = item.get("ts").and_then(parse_ts);
            meta.model = string_of(item, "modelId");
            meta.parent = string_of(item, "parentTaskId");
        }
        if let Some(md) = read_json(&dir.join("task_metadata.json"))
            && let Some(last) = md
                .get("model_usage")
                .and_then(Value::as_array)
                .and_then(|u| u.iter().rev().find_map(|e| string_of(e, "model_id")))
        {
            meta.model = Some(last);
        }
        meta
    }
}
