//! Prints what the adapters make of transcript files: `cargo run --example dump -- <agent> <root> [file...]`.
use ai_cli_session_collector::*;
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reg = AdapterRegistry::new();
    let a = reg.get(&args[1]).expect("agent");
    let root = PathBuf::from(&args[2]);
    let files: Vec<PathBuf> = if args.len() > 3 {
        args[3..].iter().map(PathBuf::from).collect()
    } else {
        a.discover(&root)
    };
    let verbose = std::env::var("V").is_ok();
    for f in files {
        let out = parse_file(a, &root, &f).unwrap();
        let prompts = out
            .messages
            .iter()
            .filter(|m| m.kind == MessageKind::UserPrompt)
            .count();
        let maxp = out
            .messages
            .iter()
            .map(|m| m.prompt_number)
            .max()
            .unwrap_or(0);
        let calls = out
            .messages
            .iter()
            .filter(|m| m.kind == MessageKind::ToolCall)
            .count();
        let results = out
            .messages
            .iter()
            .filter(|m| m.kind == MessageKind::ToolResult)
            .count();
        let raws = out.messages.iter().filter(|m| m.raw.is_some()).count();
        let u = aggregate_usage(&out.messages);
        println!(
            "{} msgs={} raws={} prompts={} maxp={} calls={} results={} issues={:?} sessions={:?} usage={:?} edits={} pending={}",
            f.strip_prefix(&root).unwrap_or(&f).display(),
            out.messages.len(),
            raws,
            prompts,
            maxp,
            calls,
            results,
            out.issues
                .iter()
                .map(|i| (
                    i.line,
                    i.kept,
                    i.reason.chars().take(50).collect::<String>()
                ))
                .collect::<Vec<_>>(),
            out.sessions.last().map(|s| (
                &s.session_id,
                &s.project_path,
                &s.title,
                &s.model,
                &s.parent_session_id
            )),
            u,
            out.edits.len(),
            out.pending_tail
        );
        if verbose {
            for m in &out.messages {
                println!(
                    "   {:>4} {:<22} {:<18} p{} {:?} {}",
                    m.line,
                    m.message_id.chars().take(22).collect::<String>(),
                    m.kind.as_str(),
                    m.prompt_number,
                    (m.flags.sidechain, m.flags.inherited, m.flags.duplicate),
                    m.text
                        .chars()
                        .take(70)
                        .collect::<String>()
                        .replace('\n', " ")
                );
            }
        }
    }
}
