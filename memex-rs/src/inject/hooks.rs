//! `memex hooks install | uninstall`: Memex's entries in Claude Code's `settings.json`.
//!
//! The schema is Claude Code's own: `{"hooks": {"<Event>": [{"matcher": "", "hooks":
//! [{"type": "command", "command": "...", "timeout": <seconds>}]}]}}`. Memex recognises its
//! entries by their command (`memex inject ...`, `memex-inject ...`, `memex hook stop`, with
//! any path to the binary), so installing again updates them in place, and uninstalling removes
//! only them. Every other key, hook and matcher group is kept as it was, in its order. A
//! settings file that is not valid JSON is never touched; a changed file is first copied to a
//! timestamped backup and then replaced atomically.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::layer::UnknownName;

/// One kind of Memex hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SessionStart → `memex inject --mode full`.
    Full,
    /// UserPromptSubmit → `memex inject --mode smart`.
    Smart,
    /// Stop → `memex hook stop`.
    Stop,
}

pub const KINDS: &[&str] = &["full", "smart", "stop"];

impl Kind {
    pub fn parse(s: &str) -> Result<Kind, UnknownName> {
        match s.trim() {
            "full" => Ok(Kind::Full),
            "smart" => Ok(Kind::Smart),
            "stop" => Ok(Kind::Stop),
            other => Err(UnknownName::new(other, KINDS.iter().copied())),
        }
    }

    pub fn event(self) -> &'static str {
        match self {
            Kind::Full => "SessionStart",
            Kind::Smart => "UserPromptSubmit",
            Kind::Stop => "Stop",
        }
    }

    /// The arguments after the program.
    pub fn args(self) -> &'static str {
        match self {
            Kind::Full => "inject --mode full",
            Kind::Smart => "inject --mode smart",
            Kind::Stop => "hook stop",
        }
    }
}

/// Seconds Claude Code gives the command (it ends itself within `[inject] timeout_ms`).
pub const TIMEOUT_SECS: u64 = 5;

#[derive(Debug, thiserror::Error)]
pub enum HooksError {
    #[error(
        "{path} is not valid JSON ({message}); nothing was changed: fix the file or move it away"
    )]
    Invalid { path: PathBuf, message: String },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a run did to the file.
#[derive(Debug, PartialEq)]
pub enum Change {
    /// Already as asked: the file was not written.
    Unchanged,
    /// Written; the previous content is in `backup` (none when the file did not exist).
    Written { backup: Option<PathBuf> },
}

/// Splits a shell command into words, honouring single and double quotes (enough to recognise
/// a program and its arguments; nothing is executed).
fn words(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    let mut chars = cmd.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => cur.extend(chars.next()),
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, '\\') => cur.extend(chars.next()),
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The kind of Memex hook a command runs, if it is one.
pub fn kind_of(command: &str) -> Option<Kind> {
    let w = words(command);
    let program = Path::new(w.first()?).file_name()?.to_str()?;
    let mut rest = w[1..].iter().map(String::as_str).peekable();
    let mode_of = |args: &[&str]| -> Option<Kind> {
        let joined = args.join(" ");
        if joined.contains("--mode=smart") || joined.contains("--mode smart") {
            Some(Kind::Smart)
        } else if joined.contains("--mode=full") || joined.contains("--mode full") {
            Some(Kind::Full)
        } else {
            None
        }
    };
    match program {
        "memex-inject" => mode_of(&rest.collect::<Vec<_>>()),
        "memex" => {
            // Global options may come first.
            while let Some(&a) = rest.peek() {
                if a == "--config" || a == "--data-dir" {
                    rest.next();
                    rest.next();
                } else if a.starts_with("--config=") || a.starts_with("--data-dir=") {
                    rest.next();
                } else {
                    break;
                }
            }
            match rest.next()? {
                "inject" => mode_of(&rest.collect::<Vec<_>>()),
                "hook" => (rest.next()? == "stop").then_some(Kind::Stop),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Quotes a word for `sh` when it needs it.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:@,".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn read(path: &Path) -> Result<Option<Map<String, Value>>, HooksError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(HooksError::Read {
                path: path.into(),
                source,
            });
        }
    };
    if text.trim().is_empty() {
        return Ok(Some(Map::new()));
    }
    let invalid = |message: String| HooksError::Invalid {
        path: path.into(),
        message,
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(Some(m)),
        Ok(_) => Err(invalid("the top level is not an object".into())),
        Err(e) => Err(invalid(e.to_string())),
    }
}

/// The `hooks` object, checked: each event must hold a list.
fn hooks_of<'a>(
    root: &'a mut Map<String, Value>,
    path: &Path,
) -> Result<&'a mut Map<String, Value>, HooksError> {
    let hooks = root.entry("hooks").or_insert_with(|| json!({}));
    let Some(h) = hooks.as_object_mut() else {
        return Err(HooksError::Invalid {
            path: path.into(),
            message: "`hooks` is not an object".into(),
        });
    };
    if let Some((event, _)) = h.iter().find(|(_, v)| !v.is_array()) {
        return Err(HooksError::Invalid {
            path: path.into(),
            message: format!("`hooks.{event}` is not a list"),
        });
    }
    Ok(h)
}

/// Removes the Memex entries of `kinds` from every event, then drops the matcher groups and
/// events this emptied. Returns whether anything was removed.
fn remove(hooks: &mut Map<String, Value>, kinds: &[Kind]) -> bool {
    let mut removed = false;
    for groups in hooks.values_mut() {
        let Some(groups) = groups.as_array_mut() else {
            continue;
        };
        groups.retain_mut(|g| {
            let Some(list) = g.get_mut("hooks").and_then(Value::as_array_mut) else {
                return true;
            };
            let before = list.len();
            list.retain(|h| {
                !h["command"]
                    .as_str()
                    .and_then(kind_of)
                    .is_some_and(|k| kinds.contains(&k))
            });
            let emptied = before > 0 && list.is_empty();
            removed |= list.len() != before;
            !emptied
        });
    }
    hooks.retain(|_, v| !v.as_array().is_some_and(|a| a.is_empty()));
    removed
}

/// Updates the Memex entry of `kind` in place when there is exactly one, in its event;
/// otherwise removes them all and appends a new matcher group. `command`: the full command.
fn put(hooks: &mut Map<String, Value>, kind: Kind, command: &str) {
    let entry = json!({"type": "command", "command": command, "timeout": TIMEOUT_SECS});
    let mut found = Vec::new();
    for (event, groups) in hooks.iter() {
        for (gi, g) in groups.as_array().into_iter().flatten().enumerate() {
            for (hi, h) in g["hooks"].as_array().into_iter().flatten().enumerate() {
                if h["command"].as_str().and_then(kind_of) == Some(kind) {
                    found.push((event.clone(), gi, hi));
                }
            }
        }
    }
    if let [(event, gi, hi)] = found.as_slice()
        && event == kind.event()
    {
        hooks[event.as_str()][*gi]["hooks"][*hi] = entry;
        return;
    }
    remove(hooks, &[kind]);
    let groups = hooks
        .entry(kind.event())
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .expect("checked to be a list");
    groups.push(json!({"matcher": "", "hooks": [entry]}));
}

/// The file a settings path stands for: dotfile managers make `settings.json` a symbolic link
/// into their repository, and writing must go through the link, not replace it with a file.
fn through_links(path: &Path) -> PathBuf {
    let mut p = path.to_owned();
    // As many hops as the kernel follows before it gives up (ELOOP).
    for _ in 0..40 {
        match std::fs::read_link(&p) {
            Ok(target) => {
                p = match p.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            Err(_) => break,
        }
    }
    p
}

fn write(path: &Path, root: &Map<String, Value>, existed: bool) -> Result<Change, HooksError> {
    // The backup stays beside the path the user knows (not inside a dotfiles repository the
    // link points into, where it could be committed).
    let backup_dir = path.parent().unwrap_or(Path::new(".")).to_owned();
    let path = &through_links(path);
    let err = |source| HooksError::Write {
        path: path.into(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(err)?;
    let backup = if existed {
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("settings.json");
        let mut b = backup_dir.join(format!("{name}.memex-backup-{stamp}"));
        let mut n = 1;
        while b.exists() {
            b = backup_dir.join(format!("{name}.memex-backup-{stamp}-{n}"));
            n += 1;
        }
        std::fs::copy(path, &b).map_err(err)?;
        Some(b)
    } else {
        None
    };
    let mut text = serde_json::to_string_pretty(root).expect("JSON values serialize");
    text.push('\n');
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
    std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    if let Ok(meta) = std::fs::metadata(path) {
        std::fs::set_permissions(tmp.path(), meta.permissions()).map_err(err)?;
    }
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(Change::Written { backup })
}

/// Installs (or updates) the entries of `kinds`; `command(kind)` is the command for each.
pub fn install(
    path: &Path,
    kinds: &[Kind],
    command: impl Fn(Kind) -> String,
) -> Result<Change, HooksError> {
    let found = read(path)?;
    let existed = found.is_some();
    let mut root = found.unwrap_or_default();
    let before = Value::Object(root.clone());
    let hooks = hooks_of(&mut root, path)?;
    for &k in kinds {
        put(hooks, k, &command(k));
    }
    if Value::Object(root.clone()) == before {
        return Ok(Change::Unchanged);
    }
    write(path, &root, existed)
}

/// Removes the Memex entries of `kinds`; nothing else.
pub fn uninstall(path: &Path, kinds: &[Kind]) -> Result<Change, HooksError> {
    let Some(mut root) = read(path)? else {
        return Ok(Change::Unchanged);
    };
    let Some(hooks) = root.get_mut("hooks") else {
        return Ok(Change::Unchanged);
    };
    let Some(h) = hooks.as_object_mut() else {
        return Err(HooksError::Invalid {
            path: path.into(),
            message: "`hooks` is not an object".into(),
        });
    };
    if !remove(h, kinds) {
        return Ok(Change::Unchanged);
    }
    write(path, &root, true)
}

/// The Memex entries a settings file has: (event, command).
pub fn installed(path: &Path) -> Result<Vec<(String, String)>, HooksError> {
    let Some(root) = read(path)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (event, groups) in root
        .get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        for g in groups.as_array().into_iter().flatten() {
            for h in g["hooks"].as_array().into_iter().flatten() {
                if let Some(c) = h["command"].as_str().filter(|c| kind_of(c).is_some()) {
                    out.push((event.clone(), c.to_owned()));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_memex_commands() {
        assert_eq!(kind_of("memex inject --mode smart"), Some(Kind::Smart));
        assert_eq!(
            kind_of("'/opt/my tools/memex' --config /x.toml inject --mode full"),
            Some(Kind::Full)
        );
        assert_eq!(kind_of("memex-inject --mode=full"), Some(Kind::Full));
        assert_eq!(kind_of("/usr/bin/memex hook stop"), Some(Kind::Stop));
        assert_eq!(kind_of("memex search inject"), None);
        assert_eq!(kind_of("echo memex inject --mode smart"), None);
        assert_eq!(kind_of("notmemex inject --mode smart"), None);
        assert_eq!(kind_of(""), None);
    }

    #[test]
    fn a_linked_settings_file_is_written_through_its_link() {
        let dir = tempfile::tempdir().unwrap();
        let dotfiles = dir.path().join("dotfiles/claude");
        std::fs::create_dir_all(&dotfiles).unwrap();
        let real = dotfiles.join("settings.json");
        std::fs::write(&real, "{\"model\": \"opus\"}\n").unwrap();
        let claude = dir.path().join(".claude");
        std::fs::create_dir_all(&claude).unwrap();
        let link = claude.join("settings.json");
        std::os::unix::fs::symlink("../dotfiles/claude/settings.json", &link).unwrap();
        install(&link, &[Kind::Smart], |_| {
            "memex inject --mode smart".into()
        })
        .unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "the link must stay a link"
        );
        let text = std::fs::read_to_string(&real).unwrap();
        assert!(
            text.contains("memex inject --mode smart") && text.contains("opus"),
            "{text}"
        );
        assert_eq!(std::fs::read_to_string(&link).unwrap(), text);
    }

    #[test]
    fn quoting_round_trips() {
        for p in ["/usr/bin/memex", "/home/a b/memex", "/x/it's/memex"] {
            let cmd = format!("{} inject --mode smart", shell_quote(p));
            assert_eq!(words(&cmd)[0], p);
            assert_eq!(kind_of(&cmd), Some(Kind::Smart));
        }
    }
}
