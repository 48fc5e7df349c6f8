//! `memex export`: sessions as Markdown, HTML or JSON files.

use std::io::Write;
use std::path::Path;

use ai_cli_session_collector::AdapterRegistry;
use anyhow::{Context, Result};

use super::{Ctx, ExportArgs, UserError, check_agent, filter, reader, user_error};
use crate::export::{self, Format};
use crate::store::read;

pub(super) fn export(ctx: &Ctx, a: ExportArgs) -> Result<()> {
    let format = Format::parse(&a.format)
        .map_err(|e| user_error(format!("--format {e}"), "--format md, html or json"))?;
    let conn = reader(ctx)?;
    let many = a.project.is_some() || a.since.is_some() || a.agent.is_some();
    match (&a.session, many) {
        (Some(id), false) => {
            let Some(s) = read::find_session(&conn, id)? else {
                return Err(UserError {
                    message: format!("no session `{id}`"),
                    hint: Some("`memex sessions list` shows session ids".into()),
                    code: 3,
                }
                .into());
            };
            let text = export::render(&conn, &s, format)?;
            match a.out.as_deref() {
                None => std::io::stdout().lock().write_all(text.as_bytes())?,
                Some(p) if p == Path::new("-") => {
                    std::io::stdout().lock().write_all(text.as_bytes())?
                }
                Some(p) => {
                    let p = if p.is_dir() {
                        p.join(export::file_name(&s, format))
                    } else {
                        p.to_owned()
                    };
                    write_private(&p, &text)?;
                    eprintln!("wrote {}", p.display());
                }
            }
            Ok(())
        }
        (Some(_), true) => Err(user_error(
            "give either a session id or --project/--since/--agent, not both",
            "memex export SESSION, or memex export --project P --out DIR",
        )),
        (None, false) => Err(user_error(
            "which sessions? give a session id, or --project, --since or --agent",
            "for example: memex export 5f0c1a2b --format html --out session.html",
        )),
        (None, true) => {
            check_agent(&AdapterRegistry::new(), &a.agent)?;
            let Some(dir) = a.out.as_deref().filter(|p| *p != Path::new("-")) else {
                return Err(user_error(
                    "many sessions go to a folder: give --out DIR",
                    "for example: memex export --project myapp --out ./exported",
                ));
            };
            let f = filter(
                a.agent.clone(),
                a.project.clone(),
                None,
                None,
                a.since.clone(),
                None,
            )?;
            let limit = a.limit.min(100_000);
            let mut sessions = read::list_sessions(&conn, &f, limit + 1, 0)?;
            if sessions.len() as u32 > limit {
                sessions.truncate(limit as usize);
                eprintln!(
                    "note: stopped at --limit {limit} (the most recently active sessions); raise it for more"
                );
            }
            if sessions.is_empty() {
                return Err(UserError {
                    message: "no session matches".into(),
                    hint: Some("`memex sessions list --project P` shows what there is".into()),
                    code: 3,
                }
                .into());
            }
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let mut written = Vec::new();
            let mut names = std::collections::HashSet::new();
            for s in sessions {
                // Two ids that read the same once made safe (or cut) get a number, not one file.
                let mut name = export::file_name(&s, format);
                let mut n = 2;
                // Compared without case: two names that differ only in case are one file on
                // macOS and Windows.
                while !names.insert(name.to_lowercase()) {
                    let base = export::file_name(&s, format);
                    let stem = base.trim_end_matches(&format!(".{}", format.extension()));
                    name = format!("{stem}-{n}.{}", format.extension());
                    n += 1;
                }
                let text = export::render(&conn, &s, format)?;
                write_private(&dir.join(&name), &text)?;
                written.push((s, name));
            }
            let index = dir.join(format!("index.{}", format.extension()));
            write_private(&index, &export::index(&written, format))?;
            eprintln!(
                "wrote {} sessions and {} in {}",
                written.len(),
                index.file_name().unwrap_or_default().to_string_lossy(),
                dir.display()
            );
            Ok(())
        }
    }
}

/// Writes `text` to `path`, readable by its owner only (an export holds the user's history): a
/// file that was there keeps no wider mode, and a symlink in its place is refused, not
/// followed.
fn write_private(path: &Path, text: &str) -> Result<()> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    let mut f = o.open(path).with_context(|| {
        format!(
            "cannot write {} (a symlink is not followed)",
            path.display()
        )
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot make {} private", path.display()))?;
    }
    f.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
