//! `memex team` (create, join, tokens, access, purge) and `memex share` (levels, status, push):
//! this machine's part in a team archive (`memex-team`). The team's URL and this member's
//! token are kept in the data folder, readable by their owner only (`team.url`, `team.token`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;

use memex_team::archive::Team;
use memex_team::share;
use memex_team::token::Token;
use memex_team::{Level, TeamError};

use super::{Ctx, reader, user_error, write_private};
use crate::config::without_password;

#[derive(Subcommand, Debug)]
pub enum TeamCommand {
    /// Prepare a team archive in a PostgreSQL database that has the pgvector extension, with you
    /// as its first admin (your token is kept in the data folder). URL: postgres://user@host/db.
    Create {
        url: String,
        /// Your name in the team (default: your user name).
        #[arg(long)]
        name: Option<String>,
    },
    /// Share with the team archive at URL as the member a token names (a file with the token,
    /// or `-` to read it from stdin).
    Join {
        url: String,
        #[arg(long, value_name = "FILE")]
        token: String,
    },
    /// Members' tokens (admins): add one (printed once), list them, revoke a member's.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Let a member read a project's shared memory, or (--remove) no longer (admins).
    Access {
        name: String,
        project: String,
        #[arg(long)]
        remove: bool,
    },
    /// Remove a member and everything they shared: sessions, messages, summaries, vectors,
    /// tokens (admins).
    Purge {
        name: String,
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// A new token for member NAME (made when new), printed once.
    Add {
        name: String,
        /// The member may manage tokens and access.
        #[arg(long)]
        admin: bool,
        /// A project the member may read (repeat for more).
        #[arg(long = "project", value_name = "PROJECT")]
        projects: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Every member, the projects they read and their tokens (first 8 digits only).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke every token of member NAME, at once.
    Revoke { name: String },
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ShareArgs {
    #[command(subcommand)]
    pub command: Option<ShareCommand>,
    /// The project's folder (its sessions and those of folders below it); `.` is this one.
    pub project: Option<PathBuf>,
    /// One session (its id or a unique prefix) instead of a project; overrides its project's level.
    #[arg(long, conflicts_with = "project")]
    pub session: Option<String>,
    /// hidden (nothing leaves this machine), summaries (titles, talk and session summaries; no
    /// message text) or full (messages as archived, redacted).
    #[arg(long, value_parser = memex_team::LEVELS.to_vec())]
    pub level: Option<String>,
    /// The project's name in the team (default: the folder's name).
    #[arg(long = "as", value_name = "NAME")]
    pub name: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum ShareCommand {
    /// What is shared at which level, what waits to go, and what the team holds of yours.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Send what is due now (the service does it on its own cycle).
    Push {
        #[arg(long)]
        json: bool,
    },
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// A team error as the user reads it, with what to do.
pub(super) fn explained(e: TeamError) -> anyhow::Error {
    let hint = match &e {
        TeamError::BadToken => "ask an admin of the team for a token: memex team token add NAME",
        TeamError::NoTeam(_) => "an admin prepares it once: memex team create URL",
        TeamError::Exists(_) => {
            "to share with it: memex team join URL --token FILE (an admin's `memex team token add NAME` prints one)"
        }
        TeamError::NoMember(_) => "memex team token list shows the members",
        TeamError::Invalid(_) => "memex share --help and memex team --help say what each takes",
        TeamError::NotAdmin(_) => "an admin of the team can do this",
        TeamError::NoPgvector { .. } => "README \"Share with your team\" says how to start one",
        TeamError::BadUrl(_) => "for example postgres://me@db.example/memex_team",
        TeamError::MixedVectors { .. } => {
            "use the team's model ([vector] model) and `memex reindex --vectors`, or ask the team"
        }
        _ => return e.into(),
    };
    user_error(e.to_string(), hint)
}

/// The team this machine joined: its URL and this member's token, from the data folder.
pub(super) fn joined(ctx: &Ctx) -> Result<(Team, Token)> {
    match crate::team::joined(&ctx.resolved.settings.data_dir()) {
        Ok(Some(j)) => Ok(j),
        Ok(None) => Err(user_error(
            "this machine is not in a team",
            "memex team join URL --token FILE (or memex team create URL, once per team)",
        )),
        Err(e) => Err(user_error(
            e.to_string(),
            "memex team join URL --token FILE writes it again",
        )),
    }
}

fn record(ctx: &Ctx, url: &str, token: &Token, team: &str, member: &str) -> Result<()> {
    let dir = ctx.resolved.settings.data_dir();
    write_private(&dir, crate::team::URL_FILE, &format!("{url}\n"))?;
    write_private(
        &dir,
        crate::team::TOKEN_FILE,
        &format!("{}\n", token.expose()),
    )?;
    let conn = reader(ctx)?;
    share::record_join(&conn, team, member)?;
    Ok(())
}

pub(super) fn team(ctx: &Ctx, c: TeamCommand) -> Result<()> {
    let rt = runtime()?;
    match c {
        TeamCommand::Create { url, name } => {
            let team = Team::new(&url).map_err(explained)?;
            let name = name
                .or_else(|| ctx.env.vars.get("USER").cloned())
                .unwrap_or_else(|| "admin".to_owned());
            let (info, token) = rt.block_on(team.create(&name)).map_err(explained)?;
            record(ctx, &url, &token, &info.team, &name)?;
            println!(
                "made the team archive in {} (team {}); you are its admin `{name}`, your token is \
                 kept in the data folder\nnext: memex team token add NAME (one per member), then \
                 memex share PROJECT --level summaries",
                without_password(&url),
                &info.team[..8]
            );
            Ok(())
        }
        TeamCommand::Join { url, token } => {
            let token = read_token(&token)?;
            let team = Team::new(&url).map_err(explained)?;
            let member = rt.block_on(team.authenticate(&token)).map_err(explained)?;
            let info = rt.block_on(team.checked()).map_err(explained)?;
            record(ctx, &url, &token, &info.team, &member.name)?;
            println!(
                "joined the team at {} as `{}`; nothing is shared until you say so: memex share \
                 PROJECT --level summaries|full",
                without_password(&url),
                member.name
            );
            Ok(())
        }
        TeamCommand::Token { command } => {
            let (team, token) = joined(ctx)?;
            let me = rt.block_on(team.authenticate(&token)).map_err(explained)?;
            match command {
                TokenCommand::Add {
                    name,
                    admin,
                    projects,
                    json,
                } => {
                    let t = rt
                        .block_on(team.add_token(&me, &name, admin, &projects))
                        .map_err(explained)?;
                    if json {
                        println!(
                            "{}",
                            json!({"name": name, "token": t.expose(), "hint": t.hint(), "admin": admin, "projects": projects})
                        );
                    } else {
                        println!(
                            "{}\n(the token of `{name}`, shown this once: give it to them for \
                             `memex team join URL --token -`)",
                            t.expose()
                        );
                    }
                }
                TokenCommand::List { json } => {
                    let members = rt.block_on(team.tokens(&me)).map_err(explained)?;
                    if json {
                        println!("{}", serde_json::to_string(&members)?);
                    } else {
                        for m in members {
                            println!(
                                "{}{}  projects: {}",
                                m.name,
                                if m.admin { " (admin)" } else { "" },
                                if m.projects.is_empty() {
                                    "none".to_owned()
                                } else {
                                    m.projects.join(", ")
                                }
                            );
                            for t in m.tokens {
                                println!(
                                    "    {}…  made {}  last used {}{}",
                                    t.hint,
                                    t.created_at,
                                    t.last_used_at.as_deref().unwrap_or("never"),
                                    t.revoked_at
                                        .map(|r| format!("  REVOKED {r}"))
                                        .unwrap_or_default()
                                );
                            }
                        }
                    }
                }
                TokenCommand::Revoke { name } => {
                    let n = rt.block_on(team.revoke(&me, &name)).map_err(explained)?;
                    println!(
                        "revoked {n} token{} of `{name}`",
                        if n == 1 { "" } else { "s" }
                    );
                }
            }
            Ok(())
        }
        TeamCommand::Access {
            name,
            project,
            remove,
        } => {
            let (team, token) = joined(ctx)?;
            let me = rt.block_on(team.authenticate(&token)).map_err(explained)?;
            rt.block_on(team.allow(&me, &name, &project, !remove))
                .map_err(explained)?;
            println!(
                "`{name}` {} project `{project}`",
                if remove { "no longer reads" } else { "reads" }
            );
            Ok(())
        }
        TeamCommand::Purge { name, yes } => {
            let (team, token) = joined(ctx)?;
            let me = rt.block_on(team.authenticate(&token)).map_err(explained)?;
            if !yes {
                return Err(user_error(
                    format!("this removes `{name}` and everything they shared, for good"),
                    format!("memex team purge {name} --yes"),
                ));
            }
            let r = rt.block_on(team.purge(&me, &name)).map_err(explained)?;
            println!(
                "removed `{name}`: {} sessions, {} rows, their vectors and tokens",
                r.sessions, r.items
            );
            Ok(())
        }
    }
}

/// A token from a file, or from stdin for `-`.
fn read_token(source: &str) -> Result<Token> {
    let mut text = zeroize::Zeroizing::new(String::new());
    if source == "-" {
        std::io::stdin()
            .take(4096)
            .read_to_string(&mut text)
            .context("cannot read the token from stdin")?;
    } else {
        let f = std::fs::File::open(source)
            .with_context(|| format!("cannot read the token file {source}"))?;
        f.take(4096)
            .read_to_string(&mut text)
            .with_context(|| format!("cannot read the token file {source}"))?;
    }
    Token::parse(&text).map_err(|e| {
        user_error(
            format!("the token cannot be used: {e}"),
            "paste the whole line `memex team token add` printed",
        )
    })
}

pub(super) fn share_cmd(ctx: &Ctx, a: ShareArgs) -> Result<()> {
    let config = ctx.resolved.settings.share.rules();
    match a.command {
        Some(ShareCommand::Status { json }) => return status(ctx, &config, json),
        Some(ShareCommand::Push { json }) => return push(ctx, &config, json),
        None => {}
    }
    let Some(level) = a.level.as_deref() else {
        return Err(user_error(
            "say at which level: --level hidden|summaries|full",
            "memex share ~/src/app --level summaries",
        ));
    };
    let level: Level = level
        .parse()
        .map_err(|e| user_error(format!("--level {e}"), ""))?;
    let conn = reader(ctx)?;
    let what = if let Some(id) = &a.session {
        let s = crate::store::read::find_session(&conn, id)?
            .ok_or_else(|| user_error(format!("no session `{id}`"), "memex sessions list"))?;
        share::set_session(&conn, s.pk, level).map_err(explained)?;
        format!("session {}", s.session_id)
    } else {
        let Some(project) = &a.project else {
            return Err(user_error(
                "name a project folder (or --session ID)",
                "memex share . --level summaries",
            ));
        };
        let path = absolute(project)?;
        share::set_project(&conn, &path, level, a.name.as_deref()).map_err(explained)?;
        format!(
            "{path} (in the team: {})",
            a.name.clone().unwrap_or_else(|| share::folder_name(&path))
        )
    };
    let w = share::waiting(&conn, &config).map_err(explained)?;
    println!(
        "{what}: {level}; {} sessions ({} rows) wait to go{}; `memex share push` sends them now",
        w.sessions,
        w.rows,
        if w.to_remove > 0 {
            format!(", {} to take back from the team", w.to_remove)
        } else {
            String::new()
        }
    );
    Ok(())
}

/// A folder as the user typed it, absolute (not resolved through links: sessions record the
/// folder they ran in).
fn absolute(p: &Path) -> Result<String> {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    };
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    Ok(out.display().to_string())
}

fn status(ctx: &Ctx, config: &[share::ConfigRule], json: bool) -> Result<()> {
    let conn = reader(ctx)?;
    let rules = share::rules(&conn, config).map_err(explained)?;
    let counts = share::counts(&conn, config).map_err(explained)?;
    let waiting = share::waiting(&conn, config).map_err(explained)?;
    let joined_as = share::joined(&conn)?;
    // What the team holds, when it can be asked.
    let held = match joined(ctx) {
        Ok((team, token)) => {
            let rt = runtime()?;
            rt.block_on(async {
                let me = team.authenticate(&token).await?;
                team.held(&me).await
            })
            .map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    if json {
        let held_json = match &held {
            Ok(h) => json!(
                h.iter()
                    .map(|(p, s, i)| json!({"project": p, "sessions": s, "rows": i}))
                    .collect::<Vec<_>>()
            ),
            Err(e) => json!({"error": e}),
        };
        println!(
            "{}",
            json!({
                "member": joined_as.as_ref().map(|j| &j.1),
                "rules": rules,
                "sessions": {"hidden": counts[0], "summaries": counts[1], "full": counts[2]},
                "waiting": waiting,
                "team_holds": held_json,
            })
        );
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match &joined_as {
        Some((_, member)) => writeln!(out, "member: {member}")?,
        None => writeln!(out, "not in a team: memex team join URL --token FILE")?,
    }
    if rules.is_empty() {
        writeln!(
            out,
            "nothing is shared: every session is hidden (memex share PROJECT --level summaries)"
        )?;
    }
    for r in &rules {
        writeln!(
            out,
            "{:<10} {}{}  ({})",
            r.level,
            r.project.as_deref().or(r.session.as_deref()).unwrap_or("?"),
            r.name
                .as_deref()
                .map(|n| format!(" as `{n}`"))
                .unwrap_or_default(),
            r.from
        )?;
    }
    writeln!(
        out,
        "sessions: {} hidden, {} summaries, {} full",
        counts[0], counts[1], counts[2]
    )?;
    writeln!(
        out,
        "waiting: {} sessions, {} rows{}",
        waiting.sessions,
        waiting.rows,
        if waiting.to_remove > 0 {
            format!(", {} to take back", waiting.to_remove)
        } else {
            String::new()
        }
    )?;
    match held {
        Ok(h) if h.is_empty() => writeln!(out, "the team holds nothing of yours")?,
        Ok(h) => {
            for (p, s, i) in h {
                writeln!(out, "the team holds of yours: {p}: {s} sessions, {i} rows")?;
            }
        }
        Err(e) => writeln!(out, "the team archive cannot be asked: {e}")?,
    }
    Ok(())
}

fn push(ctx: &Ctx, config: &[share::ConfigRule], json: bool) -> Result<()> {
    let (team, token) = joined(ctx)?;
    let conn = reader(ctx)?;
    let rt = runtime()?;
    let pushed = rt
        .block_on(crate::team::push_once(
            &ctx.resolved.settings.data_dir(),
            &conn,
            &team,
            &token,
            config,
        ))
        .map_err(explained)?;
    if json {
        println!("{}", serde_json::to_string(&pushed)?);
    } else {
        println!(
            "sent {} rows of {} sessions ({} with vectors); took back {} sessions and {} rows",
            pushed.items,
            pushed.sessions,
            pushed.with_vectors,
            pushed.removed_sessions,
            pushed.removed_items
        );
    }
    Ok(())
}
