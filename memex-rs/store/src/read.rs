//! Read queries over the archive: sessions, their messages, and archive statistics. Every
//! function takes its own read connection; none of them writes.

use rusqlite::{Connection, OptionalExtension, params, params_from_iter, types::Value as Sql};
use serde::Serialize;

/// Epoch milliseconds as RFC 3339 UTC with milliseconds.
pub fn iso(ms: Option<i64>) -> Option<String> {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// Filters shared by the listing and search queries.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub agent: Option<String>,
    pub project: Option<String>,
    pub session: Option<String>,
    /// The machine that archived it (synced archives): a name as `memex hosts` shows it, a
    /// host id or its first six or more characters, or `local` (this machine).
    pub host: Option<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
}

fn like_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self.agent.is_none()
            && self.project.is_none()
            && self.session.is_none()
            && self.host.is_none()
            && self.since.is_none()
            && self.until.is_none()
    }

    /// SQL conditions over `s` (sessions) and, when `ts_col` is given, a timestamp column;
    /// parameters are appended to `args`.
    pub fn sql(&self, ts_col: Option<&str>, args: &mut Vec<Sql>) -> String {
        let mut c = Vec::new();
        if let Some(a) = &self.agent {
            args.push(Sql::Text(a.clone()));
            c.push(format!("s.agent = ?{}", args.len()));
        }
        if let Some(p) = &self.project {
            let p = p.trim_end_matches('/');
            if p.contains('/') {
                // A path: the session's cwd, its git root, or anything below it.
                args.push(Sql::Text(p.to_owned()));
                let n = args.len();
                args.push(Sql::Text(format!("{}/%", like_escape(p))));
                c.push(format!(
                    "(s.project_path = ?{n} OR s.git_root = ?{n} OR s.project_path LIKE ?{} ESCAPE '\\')",
                    args.len()
                ));
            } else {
                // A name: any project whose path contains it.
                args.push(Sql::Text(format!("%{}%", like_escape(p))));
                c.push(format!("s.project_path LIKE ?{} ESCAPE '\\'", args.len()));
            }
        }
        if let Some(sid) = &self.session {
            args.push(Sql::Text(sid.clone()));
            c.push(format!("s.session_id = ?{}", args.len()));
        }
        if let Some(h) = &self.host {
            args.push(Sql::Text(h.clone()));
            c.push(host_condition(args.len()));
        }
        if let Some(col) = ts_col {
            if let Some(t) = self.since {
                args.push(Sql::Integer(t));
                c.push(format!("{col} >= ?{}", args.len()));
            }
            if let Some(t) = self.until {
                args.push(Sql::Integer(t));
                c.push(format!("{col} < ?{}", args.len()));
            }
        }
        if c.is_empty() {
            "1".into()
        } else {
            c.join(" AND ")
        }
    }
}

/// Sessions archived on the machine parameter `n` names: this one (`local`, its name or id)
/// or another (its name, its id, or six or more first characters of it).
fn host_condition(n: usize) -> String {
    format!(
        "(CASE WHEN ?{n} = 'local' OR EXISTS (SELECT 1 FROM sync_self WHERE id = 1
                 AND (name = ?{n} OR host = ?{n}))
          THEN s.host IS NULL
          ELSE s.host IN (SELECT host FROM sync_peers WHERE name = ?{n} OR host = ?{n}
                 OR (length(?{n}) >= 6 AND substr(host, 1, length(?{n})) = ?{n})) END)"
    )
}

/// An ISO time to the minute, for people: `2026-06-05 10:00`.
pub fn minute(iso: Option<&str>) -> Option<String> {
    iso.map(|t| t.get(..16).unwrap_or(t).replacen('T', " ", 1))
}

#[derive(Debug, Clone, Serialize)]
pub struct SessionRow {
    pub session_id: String,
    pub agent: String,
    pub project: Option<String>,
    pub git_root: Option<String>,
    pub title: Option<String>,
    pub started_at: Option<String>,
    pub updated_at: Option<String>,
    pub messages: i64,
    pub prompts: i64,
    pub git_branch: Option<String>,
    pub model: Option<String>,
    pub parent_session_id: Option<String>,
    pub is_subagent: bool,
    pub source_path: Option<String>,
    /// The machine that archived it, by name (or id when it has none); `None`: this one.
    pub host: Option<String>,
    #[serde(skip)]
    pub pk: i64,
}

/// The machine that archived session `s`, by name (or id when it has none); NULL for this one.
#[macro_export]
macro_rules! host_name_sql {
    () => {
        "CASE WHEN s.host IS NULL THEN NULL
              ELSE COALESCE((SELECT p.name FROM sync_peers p WHERE p.host = s.host), s.host) END"
    };
}

const SESSION_COLS: &str = concat!(
    "s.id, s.session_id, s.agent, s.project_path, s.git_root, s.title, s.started_at,
    s.updated_at, s.message_count, s.prompt_count, s.git_branch, s.model, s.parent_session_id,
    s.is_subagent, s.source_path, ",
    host_name_sql!()
);

fn session_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        pk: r.get(0)?,
        session_id: r.get(1)?,
        agent: r.get(2)?,
        project: r.get(3)?,
        git_root: r.get(4)?,
        title: r.get(5)?,
        started_at: iso(r.get(6)?),
        updated_at: iso(r.get(7)?),
        messages: r.get(8)?,
        prompts: r.get(9)?,
        git_branch: r.get(10)?,
        model: r.get(11)?,
        parent_session_id: r.get(12)?,
        is_subagent: r.get(13)?,
        source_path: r.get(14)?,
        host: r.get(15)?,
    })
}

/// Sessions, most recently active first.
pub fn list_sessions(
    conn: &Connection,
    f: &Filter,
    limit: u32,
    offset: u32,
) -> rusqlite::Result<Vec<SessionRow>> {
    let mut args = Vec::new();
    let cond = f.sql(Some("s.updated_at"), &mut args);
    let sql = format!(
        "SELECT {SESSION_COLS} FROM sessions s WHERE {cond} AND s.message_count > 0
         ORDER BY s.updated_at IS NULL, s.updated_at DESC, s.id DESC LIMIT {limit} OFFSET {offset}"
    );
    let mut st = conn.prepare(&sql)?;
    st.query_map(params_from_iter(args), session_row)?.collect()
}

/// One session by its id, or by a prefix of it that only one session has.
pub fn find_session(conn: &Connection, id: &str) -> rusqlite::Result<Option<SessionRow>> {
    let exact = conn
        .query_row(
            &format!("SELECT {SESSION_COLS} FROM sessions s WHERE s.session_id = ?1 ORDER BY s.id LIMIT 1"),
            [id],
            session_row,
        )
        .optional()?;
    if exact.is_some() || id.len() < 4 {
        return Ok(exact);
    }
    let mut st = conn.prepare(&format!(
        "SELECT {SESSION_COLS} FROM sessions s WHERE s.session_id LIKE ?1 ESCAPE '\\' LIMIT 2"
    ))?;
    let rows: Vec<SessionRow> = st
        .query_map([format!("{}%", like_escape(id))], session_row)?
        .collect::<Result<_, _>>()?;
    Ok(if rows.len() == 1 {
        rows.into_iter().next()
    } else {
        None
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_creation_tokens: i64,
    pub reasoning_tokens: i64,
}

/// A session's token usage, each agent's repetitions and cumulative counters resolved.
pub fn session_usage(conn: &Connection, pk: i64) -> rusqlite::Result<Usage> {
    conn.query_row(
        "SELECT COALESCE(SUM(i),0), COALESCE(SUM(o),0), COALESCE(SUM(cr),0), COALESCE(SUM(cc),0), COALESCE(SUM(rs),0) FROM (
           SELECT MAX(input_tokens) i, MAX(output_tokens) o, MAX(cache_read_tokens) cr,
                  MAX(cache_creation_tokens) cc, MAX(reasoning_tokens) rs
           FROM messages WHERE session_pk = ?1 AND usage_key IS NOT NULL AND inherited = 0
           GROUP BY usage_key)",
        [pk],
        |r| {
            Ok(Usage {
                input_tokens: r.get(0)?,
                output_tokens: r.get(1)?,
                cache_read_tokens: r.get(2)?,
                cache_creation_tokens: r.get(3)?,
                reasoning_tokens: r.get(4)?,
            })
        },
    )
}

/// Token usage per talk (prompt number), counted as [`session_usage`] counts it.
pub fn talk_usage(
    conn: &Connection,
    pk: i64,
) -> rusqlite::Result<std::collections::BTreeMap<i64, Usage>> {
    let mut st = conn.prepare(
        "SELECT p, SUM(i), SUM(o), SUM(cr), SUM(cc), SUM(rs) FROM (
           SELECT MIN(prompt_number) p, MAX(input_tokens) i, MAX(output_tokens) o,
                  MAX(cache_read_tokens) cr, MAX(cache_creation_tokens) cc, MAX(reasoning_tokens) rs
           FROM messages WHERE session_pk = ?1 AND usage_key IS NOT NULL AND inherited = 0
           GROUP BY usage_key)
         GROUP BY p",
    )?;
    st.query_map([pk], |r| {
        Ok((
            r.get(0)?,
            Usage {
                input_tokens: r.get::<_, Option<i64>>(1)?.unwrap_or(0),
                output_tokens: r.get::<_, Option<i64>>(2)?.unwrap_or(0),
                cache_read_tokens: r.get::<_, Option<i64>>(3)?.unwrap_or(0),
                cache_creation_tokens: r.get::<_, Option<i64>>(4)?.unwrap_or(0),
                reasoning_tokens: r.get::<_, Option<i64>>(5)?.unwrap_or(0),
            },
        ))
    })?
    .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct MessageRow {
    pub message_id: String,
    pub role: String,
    pub kind: String,
    pub prompt_number: i64,
    pub timestamp: Option<String>,
    pub text: String,
    pub tool_name: Option<String>,
    pub tool_input: Option<serde_json::Value>,
    pub tool_output: Option<String>,
    pub tool_call_id: Option<String>,
    pub is_error: bool,
    pub model: Option<String>,
    pub parent_id: Option<String>,
    pub agent_id: Option<String>,
    pub sidechain: bool,
    pub inherited: bool,
    pub duplicate: bool,
    pub active: bool,
    pub line: i64,
}

/// A session's messages in conversation order: by talk, then by time and position.
const MESSAGE_COLS: &str =
    "message_id, role, kind, prompt_number, ts, COALESCE(text, memex_unzstd(text_z)),
     tool_name, tool_input, tool_call_id, is_error, model, parent_id, agent_id,
     sidechain, inherited, duplicate, active, line";

/// The order a session's messages are shown in.
const MESSAGE_ORDER: &str = "ORDER BY prompt_number, ts IS NULL, ts, source_file_id, seq";

fn message_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MessageRow> {
    let kind: String = r.get(2)?;
    let text: Option<String> = r.get(5)?;
    let text = text.unwrap_or_default();
    let input: Option<String> = r.get(7)?;
    Ok(MessageRow {
        message_id: r.get(0)?,
        role: r.get(1)?,
        prompt_number: r.get(3)?,
        timestamp: iso(r.get(4)?),
        tool_output: (kind == "tool_result").then(|| text.clone()),
        text,
        kind,
        tool_name: r.get(6)?,
        tool_input: input.and_then(|i| serde_json::from_str(&i).ok()),
        tool_call_id: r.get(8)?,
        is_error: r.get(9)?,
        model: r.get(10)?,
        parent_id: r.get(11)?,
        agent_id: r.get(12)?,
        sidechain: r.get(13)?,
        inherited: r.get(14)?,
        duplicate: r.get(15)?,
        active: r.get(16)?,
        line: r.get(17)?,
    })
}

/// Every message of a session, in order.
pub fn session_messages(conn: &Connection, pk: i64) -> rusqlite::Result<Vec<MessageRow>> {
    let mut st = conn.prepare(&format!(
        "SELECT {MESSAGE_COLS} FROM messages WHERE session_pk = ?1 {MESSAGE_ORDER}"
    ))?;
    st.query_map([pk], message_row)?.collect()
}

/// The messages of talks `from..=to` of a session, in order (talk 0, before the first prompt,
/// included when `from` is 0).
pub fn session_messages_of_talks(
    conn: &Connection,
    pk: i64,
    from: i64,
    to: i64,
) -> rusqlite::Result<Vec<MessageRow>> {
    let mut st = conn.prepare(&format!(
        "SELECT {MESSAGE_COLS} FROM messages
         WHERE session_pk = ?1 AND prompt_number BETWEEN ?2 AND ?3 {MESSAGE_ORDER}"
    ))?;
    st.query_map(params![pk, from, to], message_row)?.collect()
}

/// The numbers of a session's talks (its prompts, active or not), in order.
pub fn talk_numbers(conn: &Connection, pk: i64) -> rusqlite::Result<Vec<i64>> {
    let mut st = conn.prepare(
        "SELECT DISTINCT prompt_number FROM messages
         WHERE session_pk = ?1 AND kind = 'user_prompt' AND prompt_number > 0 ORDER BY 1",
    )?;
    st.query_map([pk], |r| r.get(0))?.collect()
}

/// One page of a session's messages (echoes left out), optionally of one talk, and how many
/// there are in all: only the page is read and decompressed.
pub fn session_messages_page(
    conn: &Connection,
    pk: i64,
    prompt: Option<i64>,
    offset: usize,
    limit: usize,
) -> rusqlite::Result<(Vec<MessageRow>, usize)> {
    let cond = "session_pk = ?1 AND duplicate = 0 AND (?2 IS NULL OR prompt_number = ?2)";
    let total: i64 = conn.query_row(
        &format!("SELECT COUNT(*) FROM messages WHERE {cond}"),
        params![pk, prompt],
        |r| r.get(0),
    )?;
    let mut st = conn.prepare(&format!(
        "SELECT {MESSAGE_COLS} FROM messages WHERE {cond} {MESSAGE_ORDER} LIMIT ?3 OFFSET ?4"
    ))?;
    let rows = st
        .query_map(
            params![pk, prompt, limit as i64, offset as i64],
            message_row,
        )?
        .collect::<rusqlite::Result<_>>()?;
    Ok((rows, total as usize))
}

/// The original records of a session (redacted), in the order their messages are shown: what
/// the agent wrote, byte for byte. Each block is decompressed once however many records it holds.
pub fn raw_records(conn: &Connection, pk: i64) -> rusqlite::Result<Vec<Vec<u8>>> {
    let mut st = conn.prepare(
        "SELECT m.raw_block, m.raw_offset, m.raw_len FROM messages m
         WHERE m.session_pk = ?1 AND m.raw_block IS NOT NULL
         ORDER BY m.source_file_id, m.raw_block, m.raw_offset",
    )?;
    let refs: Vec<(i64, usize, usize)> = st
        .query_map([pk], |r| {
            Ok((
                r.get(0)?,
                r.get::<_, i64>(1)? as usize,
                r.get::<_, i64>(2)? as usize,
            ))
        })?
        .collect::<Result<_, _>>()?;
    let mut block_st = conn.prepare_cached("SELECT data FROM raw_blocks WHERE id = ?1")?;
    let mut cached: Option<(i64, Vec<u8>)> = None;
    let mut out = Vec::with_capacity(refs.len());
    for (block, offset, len) in refs {
        if cached.as_ref().is_none_or(|(id, _)| *id != block) {
            let z: Vec<u8> = block_st.query_row([block], |r| r.get(0))?;
            cached = Some((block, super::unzstd_bytes(&z)));
        }
        let data = &cached.as_ref().expect("just filled").1;
        out.push(data.get(offset..offset + len).unwrap_or_default().to_vec());
    }
    Ok(out)
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentCount {
    pub agent: String,
    pub sessions: i64,
    pub messages: i64,
    pub prompts: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub sessions: i64,
    pub messages: i64,
    pub prompts: i64,
    pub agents: Vec<AgentCount>,
    pub source_files: i64,
    pub source_files_gone: i64,
    pub sessions_with_source_gone: i64,
    pub bad_lines: i64,
    pub redactions: i64,
    pub last_ingest_at: Option<String>,
}

pub fn status(conn: &Connection) -> rusqlite::Result<Status> {
    let mut st = conn.prepare(
        "SELECT agent, COUNT(*), COALESCE(SUM(message_count),0), COALESCE(SUM(prompt_count),0)
         FROM sessions WHERE message_count > 0 GROUP BY agent ORDER BY agent",
    )?;
    let agents: Vec<AgentCount> = st
        .query_map([], |r| {
            Ok(AgentCount {
                agent: r.get(0)?,
                sessions: r.get(1)?,
                messages: r.get(2)?,
                prompts: r.get(3)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    let one = |sql: &str| {
        conn.query_row(sql, [], |r| r.get::<_, Option<i64>>(0))
            .map(|v| v.unwrap_or(0))
    };
    Ok(Status {
        sessions: agents.iter().map(|a| a.sessions).sum(),
        messages: agents.iter().map(|a| a.messages).sum(),
        prompts: agents.iter().map(|a| a.prompts).sum(),
        agents,
        source_files: one("SELECT COUNT(*) FROM source_files")?,
        source_files_gone: one("SELECT COUNT(*) FROM source_files WHERE gone = 1")?,
        sessions_with_source_gone: one("SELECT COUNT(DISTINCT sf.session_pk) FROM source_files f
             JOIN session_files sf ON sf.source_file_id = f.id WHERE f.gone = 1")?,
        bad_lines: one("SELECT SUM(bad_lines) FROM source_files")?,
        redactions: one("SELECT SUM(redactions) FROM source_files")?,
        last_ingest_at: iso(conn.query_row(
            "SELECT MAX(updated_at) FROM source_files",
            [],
            |r| r.get(0),
        )?),
    })
}

/// A session one of whose transcript files the agent has deleted.
#[derive(Debug, Clone, Serialize)]
pub struct GoneSession {
    pub session_id: String,
    pub agent: String,
    pub title: Option<String>,
    pub updated_at: Option<String>,
    pub messages: i64,
    pub source_path: String,
}

/// Sessions with a transcript file gone from disk (their messages are all still here), most
/// recent first; `source_path` is one of the files gone.
pub fn sessions_with_source_gone(
    conn: &Connection,
    limit: u32,
) -> rusqlite::Result<Vec<GoneSession>> {
    let mut st = conn.prepare(
        "SELECT s.session_id, s.agent, s.title, s.updated_at, s.message_count, MIN(f.path)
         FROM source_files f
         JOIN session_files sf ON sf.source_file_id = f.id
         JOIN sessions s ON s.id = sf.session_pk
         WHERE f.gone = 1
         GROUP BY s.id
         ORDER BY s.updated_at DESC
         LIMIT ?1",
    )?;
    st.query_map([limit], |r| {
        Ok(GoneSession {
            session_id: r.get(0)?,
            agent: r.get(1)?,
            title: r.get(2)?,
            updated_at: iso(r.get(3)?),
            messages: r.get(4)?,
            source_path: r.get(5)?,
        })
    })?
    .collect()
}

/// What the session tracker sees, from the archive alone.
#[derive(Debug, Clone, Serialize)]
pub struct Activity {
    pub idle_minutes: u64,
    /// Sessions whose newest message is younger than `idle_minutes`.
    pub active: i64,
    /// Idle sessions whose idle event has not been sent yet (the service sends it).
    pub idle_event_pending: i64,
    /// Sessions whose idle event was sent for their newest message.
    pub idle_event_sent: i64,
}

pub fn activity(conn: &Connection, idle_minutes: u64, now_ms: i64) -> rusqlite::Result<Activity> {
    let cutoff = now_ms - idle_minutes as i64 * 60_000;
    conn.query_row(
        "SELECT
           COALESCE(SUM(updated_at > ?1), 0),
           COALESCE(SUM(updated_at <= ?1 AND (idle_event_at IS NULL OR idle_event_at < updated_at)), 0),
           COALESCE(SUM(idle_event_at >= updated_at), 0)
         FROM sessions WHERE message_count > 0 AND updated_at IS NOT NULL",
        [cutoff],
        |r| {
            Ok(Activity {
                idle_minutes,
                active: r.get(0)?,
                idle_event_pending: r.get(1)?,
                idle_event_sent: r.get(2)?,
            })
        },
    )
}

/// What the archive holds of one agent (`memex agents`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentArchive {
    pub files: i64,
    pub files_gone: i64,
    pub sessions: i64,
    pub messages: i64,
    pub prompts: i64,
    pub last_activity: Option<String>,
    /// Records that could not be read (skipped), over all its files.
    pub bad_records: i64,
    /// Problems with records that were still stored (an unknown record type, bad UTF-8).
    pub records_with_issues: i64,
    /// Sessions and messages taken from the user's other machines (sync); not in the counts
    /// above, which are this machine's.
    pub synced_sessions: i64,
    pub synced_messages: i64,
}

/// One reported problem in an agent's files, newest files first.
#[derive(Debug, Clone, Serialize)]
pub struct FileProblem {
    pub file: String,
    pub line: i64,
    pub reason: String,
    pub kept: bool,
}

/// Per agent: files, sessions, messages, last activity and the problems found in its files.
pub fn agents(
    conn: &Connection,
) -> rusqlite::Result<std::collections::BTreeMap<String, AgentArchive>> {
    let mut out: std::collections::BTreeMap<String, AgentArchive> = Default::default();
    let mut st = conn.prepare(
        "SELECT agent, host IS NOT NULL, COUNT(*), COALESCE(SUM(message_count), 0),
                COALESCE(SUM(prompt_count), 0), MAX(updated_at)
         FROM sessions WHERE message_count > 0 GROUP BY agent, host IS NOT NULL",
    )?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, bool>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, Option<i64>>(5)?,
        ))
    })?;
    for row in rows {
        let (agent, synced, sessions, messages, prompts, last) = row?;
        let a = out.entry(agent).or_default();
        if synced {
            a.synced_sessions = sessions;
            a.synced_messages = messages;
        } else {
            a.sessions = sessions;
            a.messages = messages;
            a.prompts = prompts;
            a.last_activity = iso(last);
        }
    }
    let mut st = conn.prepare(
        "SELECT f.agent, COUNT(*), COALESCE(SUM(f.gone), 0),
                (SELECT COUNT(*) FROM parse_issues i JOIN source_files g ON g.id = i.source_file_id
                  WHERE g.agent = f.agent AND i.kept = 0),
                (SELECT COUNT(*) FROM parse_issues i JOIN source_files g ON g.id = i.source_file_id
                  WHERE g.agent = f.agent AND i.kept = 1)
         FROM source_files f WHERE f.path NOT LIKE 'sync:%' GROUP BY f.agent",
    )?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, i64>(4)?,
        ))
    })?;
    for row in rows {
        let (agent, files, gone, bad, issues) = row?;
        let a = out.entry(agent).or_default();
        a.files = files;
        a.files_gone = gone;
        a.bad_records = bad;
        a.records_with_issues = issues;
    }
    Ok(out)
}

/// The latest `limit` problems recorded in one agent's files.
pub fn agent_problems(
    conn: &Connection,
    agent: &str,
    limit: u32,
) -> rusqlite::Result<Vec<FileProblem>> {
    let mut st = conn.prepare(
        "SELECT f.path, i.line, i.reason, i.kept FROM parse_issues i
         JOIN source_files f ON f.id = i.source_file_id
         WHERE f.agent = ?1 ORDER BY f.updated_at DESC, i.line LIMIT ?2",
    )?;
    st.query_map(params![agent, limit], |r| {
        Ok(FileProblem {
            file: r.get(0)?,
            line: r.get(1)?,
            reason: r.get(2)?,
            kept: r.get(3)?,
        })
    })?
    .collect()
}

/// One project: sessions, agents, last activity and its newest session summary.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectRow {
    pub path: String,
    pub sessions: i64,
    pub agents: Vec<String>,
    pub last_activity: Option<String>,
    pub latest_summary: Option<String>,
    pub latest_summary_session: Option<String>,
}

/// Every project (a session's git root, else its folder), most recently active first.
pub fn projects(conn: &Connection, limit: u32) -> rusqlite::Result<Vec<ProjectRow>> {
    let mut st = conn.prepare(&format!(
        "WITH p AS (
           SELECT s.id, s.session_id, s.agent, s.updated_at,
                  COALESCE(s.git_root, s.project_path) AS path
           FROM sessions s WHERE s.message_count > 0 AND COALESCE(s.git_root, s.project_path) IS NOT NULL)
         SELECT path, COUNT(*), group_concat(DISTINCT agent), MAX(updated_at),
           (SELECT x.summary FROM session_summaries x JOIN p q ON q.id = x.session_pk
            WHERE q.path = p.path ORDER BY q.updated_at DESC, q.id DESC LIMIT 1),
           (SELECT q.session_id FROM session_summaries x JOIN p q ON q.id = x.session_pk
            WHERE q.path = p.path ORDER BY q.updated_at DESC, q.id DESC LIMIT 1)
         FROM p GROUP BY path ORDER BY MAX(updated_at) DESC LIMIT {limit}"
    ))?;
    st.query_map([], |r| {
        let agents: Option<String> = r.get(2)?;
        let mut agents: Vec<String> = agents
            .unwrap_or_default()
            .split(',')
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        agents.sort();
        Ok(ProjectRow {
            path: r.get(0)?,
            sessions: r.get(1)?,
            agents,
            last_activity: iso(r.get(3)?),
            latest_summary: r.get(4)?,
            latest_summary_session: r.get(5)?,
        })
    })?
    .collect()
}

/// A count per UTC day and name (agent, model, provider).
#[derive(Debug, Clone, Serialize)]
pub struct DayCount {
    pub day: String,
    pub name: String,
    pub value: i64,
}

/// The time of the newest activity (epoch ms), if any.
pub fn newest_message_ms(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.query_row("SELECT MAX(updated_at) FROM sessions", [], |r| r.get(0))
}

/// Messages archived per UTC day and agent (by the message's own time), in `[since, until)`.
pub fn messages_per_day(
    conn: &Connection,
    since: i64,
    until: i64,
) -> rusqlite::Result<Vec<DayCount>> {
    day_counts(conn, MESSAGES_PER_DAY, since, until)
}

/// Read through the index on the message's time (`messages_ts`): only the days shown.
const MESSAGES_PER_DAY: &str = "SELECT date(m.ts / 1000, 'unixepoch') d, s.agent, COUNT(*)
     FROM messages m JOIN sessions s ON s.id = m.session_pk
     WHERE m.ts >= ?1 AND m.ts < ?2 AND m.duplicate = 0 GROUP BY d, s.agent ORDER BY d";

/// The rows of `sql` (day, name, value) over `[since, until)`.
fn day_counts(
    conn: &Connection,
    sql: &str,
    since: i64,
    until: i64,
) -> rusqlite::Result<Vec<DayCount>> {
    let mut st = conn.prepare(sql)?;
    st.query_map([since, until], |r| {
        Ok(DayCount {
            day: r.get(0)?,
            name: r.get(1)?,
            value: r.get(2)?,
        })
    })?
    .collect()
}

/// Tokens the agents used per UTC day and model (from the transcripts' own usage, each
/// report counted once), in `[since, until)`.
pub fn agent_tokens_per_day(
    conn: &Connection,
    since: i64,
    until: i64,
) -> rusqlite::Result<Vec<DayCount>> {
    day_counts(conn, AGENT_TOKENS_PER_DAY, since, until)
}

const AGENT_TOKENS_PER_DAY: &str =
    "SELECT date(t / 1000, 'unixepoch') d, COALESCE(model, 'unknown'), SUM(n) FROM (
       SELECT MIN(ts) t, MAX(model) model,
              MAX(COALESCE(input_tokens, 0)) + MAX(COALESCE(cache_read_tokens, 0))
              + MAX(COALESCE(cache_creation_tokens, 0)) + MAX(COALESCE(output_tokens, 0)) n
       FROM messages WHERE usage_key IS NOT NULL AND inherited = 0 AND ts >= ?1 AND ts < ?2
       GROUP BY session_pk, usage_key)
     GROUP BY d, 2 ORDER BY d";

/// Tokens the compact layer's providers used per UTC day (input and output), in
/// `[since, until)`.
pub fn compaction_tokens_per_day(
    conn: &Connection,
    since: i64,
    until: i64,
) -> rusqlite::Result<Vec<DayCount>> {
    day_counts(
        conn,
        "SELECT day, provider, tokens_input + tokens_output FROM llm_usage
         WHERE day BETWEEN date(?1 / 1000, 'unixepoch') AND date((?2 - 1) / 1000, 'unixepoch')
         ORDER BY day, provider",
        since,
        until,
    )
}

/// Memory injections per UTC day, as two series: the prompts that got memory and those that
/// got nothing, in `[since, until)`.
pub fn injections_per_day(
    conn: &Connection,
    since: i64,
    until: i64,
) -> rusqlite::Result<Vec<DayCount>> {
    day_counts(
        conn,
        "SELECT d, name, n FROM (
           SELECT date(ts / 1000, 'unixepoch') d, 'with memory' name, SUM(items > 0) n
           FROM injections WHERE ts >= ?1 AND ts < ?2 GROUP BY d
           UNION ALL
           SELECT date(ts / 1000, 'unixepoch'), 'nothing to add', SUM(items = 0)
           FROM injections WHERE ts >= ?1 AND ts < ?2 GROUP BY 1)
         ORDER BY d, name DESC",
        since,
        until,
    )
}

/// Every project folder the archive knows (sessions' folders and their git work trees) that
/// exists on this machine and is the user's own: where agents that keep files in projects are
/// looked for. A folder someone else owns or anyone may write to (`/tmp`, `/`, another user's
/// checkout) is left out: what another user put there is not this user's history. Most recently
/// active first.
pub fn known_projects(conn: &Connection) -> rusqlite::Result<Vec<std::path::PathBuf>> {
    let mut st = conn.prepare(
        "SELECT p FROM (
           SELECT project_path AS p, updated_at AS t FROM sessions WHERE project_path IS NOT NULL
           UNION ALL
           SELECT git_root, updated_at FROM sessions WHERE git_root IS NOT NULL)
         GROUP BY p ORDER BY MAX(t) DESC, p",
    )?;
    let paths = st
        .query_map([], |r| r.get::<_, String>(0))?
        .filter_map(Result::ok)
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute() && p.parent().is_some() && own_folder(p))
        .collect();
    Ok(paths)
}

/// A folder owned by this user that only its owner (and group) may write to.
#[cfg(unix)]
fn own_folder(p: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    std::fs::metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == me && m.mode() & 0o002 == 0)
}

#[cfg(not(unix))]
fn own_folder(p: &std::path::Path) -> bool {
    p.is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    #[test]
    fn the_dashboards_days_count_only_their_window_and_read_only_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::open(&dir.path().join("data")).unwrap();
        let t0 = 1_780_000_000_000 - 1_780_000_000_000 % DAY; // a UTC midnight
        for (agent, pk) in [("claude", 1), ("codex", 2)] {
            conn.execute(
                "INSERT INTO sessions (id, agent, session_id) VALUES (?1, ?2, ?2)",
                params![pk, agent],
            )
            .unwrap();
        }
        // 40 days: claude one message a day, codex two; a duplicate that never counts; one
        // usage report a day written on two messages (counted once).
        for day in 0..40i64 {
            for (pk, n) in [(1, 1), (2, 2)] {
                for i in 0..n {
                    conn.execute(
                        "INSERT INTO messages (session_pk, message_id, line, seq, role, kind,
                           prompt_number, ts, usage_key, input_tokens, output_tokens, model)
                         VALUES (?1, ?2, 0, 0, 'assistant', 'text', 1, ?3, ?4, 100, 10, 'm1')",
                        params![
                            pk,
                            format!("{day}-{i}"),
                            t0 + day * DAY + 1000 * i,
                            format!("u{day}")
                        ],
                    )
                    .unwrap();
                }
            }
            conn.execute(
                "INSERT INTO messages (session_pk, message_id, line, seq, role, kind,
                   prompt_number, ts, duplicate) VALUES (1, ?1, 0, 0, 'user', 'text', 1, ?2, 1)",
                params![format!("dup-{day}"), t0 + day * DAY],
            )
            .unwrap();
            let date = chrono::DateTime::from_timestamp_millis(t0 + day * DAY)
                .unwrap()
                .format("%Y-%m-%d")
                .to_string();
            conn.execute(
                "INSERT INTO llm_usage (day, provider, calls, tokens_input, tokens_output)
                 VALUES (?1, 'ollama', 1, 50, 5)",
                [&date],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO injections (ts, mode, items, tokens, latency_ms, refs)
                 VALUES (?1, 'smart', ?2, 0, 1.0, '[]')",
                params![t0 + day * DAY + 5, day % 2],
            )
            .unwrap();
        }
        // Days 10..40: the last 30.
        let (since, until) = (t0 + 10 * DAY, t0 + 40 * DAY);
        let m = messages_per_day(&conn, since, until).unwrap();
        assert_eq!(m.len(), 60);
        assert_eq!(
            m.iter()
                .filter(|d| d.name == "codex")
                .map(|d| d.value)
                .sum::<i64>(),
            60
        );
        assert_eq!(
            m.iter()
                .filter(|d| d.name == "claude")
                .map(|d| d.value)
                .sum::<i64>(),
            30
        );
        let t = agent_tokens_per_day(&conn, since, until).unwrap();
        assert_eq!(t.len(), 30);
        // Per day: claude's report (110) and codex's two messages of one report (110).
        assert!(t.iter().all(|d| d.value == 220 && d.name == "m1"), "{t:?}");
        let c = compaction_tokens_per_day(&conn, since, until).unwrap();
        assert_eq!(c.len(), 30);
        assert_eq!(c.first().unwrap().day, m.first().unwrap().day);
        assert_eq!(c.last().unwrap().day, m.last().unwrap().day);
        let i = injections_per_day(&conn, since, until).unwrap();
        assert_eq!(i.len(), 60);
        assert_eq!(i.iter().map(|d| d.value).sum::<i64>(), 30);
        assert_eq!(
            i.iter()
                .filter(|d| d.name == "with memory")
                .map(|d| d.value)
                .sum::<i64>(),
            15
        );
        // Both reads of messages go through the index on their time, not the whole table.
        for sql in [MESSAGES_PER_DAY, AGENT_TOKENS_PER_DAY] {
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map(params![since, until], |r| r.get(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert!(
                plan.iter().any(|p| p.contains("USING INDEX messages_ts")),
                "{plan:?}"
            );
            assert!(
                !plan.iter().any(|p| p == "SCAN m" || p == "SCAN messages"),
                "{plan:?}"
            );
        }
    }

    #[test]
    fn known_projects_are_only_the_users_own_folders() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join("app");
        std::fs::create_dir(&mine).unwrap();
        let open = dir.path().join("shared");
        std::fs::create_dir(&open).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let conn = crate::open(&dir.path().join("data")).unwrap();
        for (i, p) in [
            mine.to_str().unwrap(),
            open.to_str().unwrap(),
            "/",
            "relative/path",
            "/does/not/exist",
        ]
        .iter()
        .enumerate()
        {
            conn.execute(
                "INSERT INTO sessions (agent, session_id, project_path) VALUES ('claude', ?1, ?2)",
                params![format!("s{i}"), p],
            )
            .unwrap();
        }
        assert_eq!(known_projects(&conn).unwrap(), vec![mine]);
    }
}
