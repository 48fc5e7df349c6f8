//! OpenCode's databases: the 2.x tables (`session_v2`, `session_message`) and the 1.x tables
//! (`session`, `message`, `part`), read incrementally above the cursor's marks.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::parts::{MsgCtx, message_record, part_messages};
use super::{AGENT, Sess, error_text, join_lines, model_name, usage_of};
use crate::adapter::{Emit, ParseError, blank, parse_ts, str_of, string_of};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, ToolCall, ToolResult,
};
use crate::sqlite::{Db, StampMarks, json_column, row_json};
use crate::text;

/// Sessions seen in one parse: their info, the first prompt and last model seen for each.
#[derive(Default)]
struct Seen {
    order: Vec<String>,
    sessions: HashMap<String, Sess>,
    first_prompt: HashMap<String, String>,
    model: HashMap<String, String>,
}

impl Seen {
    fn add(&mut self, s: Sess) {
        if !self.sessions.contains_key(&s.id) {
            self.order.push(s.id.clone());
        }
        self.sessions.insert(s.id.clone(), s);
    }

    fn infos(&self) -> Vec<SessionInfo> {
        self.order
            .iter()
            .filter_map(|id| {
                let s = self.sessions.get(id)?;
                Some(s.info(
                    self.first_prompt.get(id).map(String::as_str),
                    self.model.get(id).cloned(),
                ))
            })
            .collect()
    }
}

/// Where the reading of a database stands: per table, the rows taken ([`StampMarks`]: by row
/// id, and by `time_updated` for rows the agent updates in place).
#[derive(Default, Serialize, Deserialize)]
struct DbState {
    #[serde(default)]
    sessions: StampMarks,
    #[serde(default)]
    messages: StampMarks,
    #[serde(default)]
    parts: StampMarks,
}

/// One row: its columns as JSON, that JSON's bytes (the row's raw record), and its place among
/// all rows read from the database (where an issue with it is reported).
struct Row {
    json: Value,
    raw: Vec<u8>,
    n: u64,
}

/// Reads a database from the marks in `cursor`, about `max_bytes` of rows.
pub(super) fn parse_database(
    path: &Path,
    cursor: &Cursor,
    max_bytes: usize,
) -> Result<ParseOutput, ParseError> {
    let db = Db::open(path)?;
    let mut st: DbState = serde_json::from_value(cursor.state.clone()).unwrap_or_default();
    let mut read = DbRead {
        db: &db,
        budget: max_bytes.max(1),
        rows: 0,
        bytes: 0,
        line: cursor.offset,
        emit: Emit::default(),
        seen: Seen::default(),
    };
    let at_end = if db.has_table("session_v2") && db.has_table("session_message") {
        read.v2(&mut st)?
    } else if db.has_table("message") && db.has_table("part") {
        read.v1(&mut st)?
    } else {
        read.emit.issue(
            0,
            "no OpenCode conversation tables (`session_v2` and `session_message`, or `message` \
             and `part`)",
            false,
        );
        true
    };
    let DbRead {
        rows,
        bytes,
        emit,
        seen,
        ..
    } = read;
    db.finish()?;
    let mut out = emit.out;
    out.sessions = seen.infos();
    out.cursor = Cursor {
        offset: cursor.offset + rows,
        line: 0,
        head: None,
        state: serde_json::to_value(&st).unwrap_or_default(),
        unterminated: false,
    };
    out.bytes = bytes;
    out.at_end = at_end;
    Ok(out)
}

/// One bounded read of a database.
struct DbRead<'a> {
    db: &'a Db,
    /// Row bytes this call may still read.
    budget: usize,
    rows: u64,
    bytes: u64,
    /// Rows read by earlier calls.
    line: u64,
    emit: Emit,
    seen: Seen,
}

impl DbRead<'_> {
    /// Rows of `table` new or changed since `marks`, until the budget is spent. `true` when
    /// none is left.
    fn rows(
        &mut self,
        table: &str,
        marks: &mut StampMarks,
    ) -> Result<(bool, Vec<Row>), ParseError> {
        if self.budget == 0 {
            return Ok((false, Vec::new()));
        }
        let db = self.db;
        let taking = marks
            .read(db.conn(), table, "id", "time_updated", self.budget)
            .map_err(|e| db.error(e))?;
        self.budget = self.budget.saturating_sub(taking.bytes as usize);
        self.bytes += taking.bytes;
        let rows = taking
            .rows
            .into_iter()
            .map(|t| {
                let n = self.line + self.rows;
                self.rows += 1;
                Row {
                    json: t.row,
                    raw: t.raw,
                    n,
                }
            })
            .collect();
        Ok((taking.at_end, rows))
    }

    /// The session row of `id` in `table`, when this read has not seen it yet.
    fn load_session(&mut self, table: &str, id: &str) -> Result<(), ParseError> {
        if self.seen.sessions.contains_key(id) {
            return Ok(());
        }
        let db = self.db;
        let sess = if db.has_table(table) {
            let sql = format!("SELECT * FROM {table} WHERE id = ?1");
            let mut stmt = db.conn().prepare(&sql).map_err(|e| db.error(e))?;
            let mut rows = stmt.query([id]).map_err(|e| db.error(e))?;
            rows.next()
                .map_err(|e| db.error(e))?
                .map(|r| Sess::from_row(&row_json(r)))
        } else {
            None
        };
        self.seen.add(sess.unwrap_or_else(|| Sess {
            id: id.to_owned(),
            ..Default::default()
        }));
        Ok(())
    }

    /// The session rows read: each a meta message with its raw row, and the session's info.
    fn session_rows(&mut self, rows: Vec<Row>) {
        for row in rows {
            let s = Sess::from_row(&row.json);
            if s.id.is_empty() {
                self.emit.issue(row.n, "session row without an id", false);
                continue;
            }
            let mut m = s.record();
            m.seq = 0;
            m.raw = Some(row.raw);
            self.emit.push(m);
            self.seen.add(s);
        }
    }

    /// Pushes the messages of one row: sequenced from `base` (kept within what the store's
    /// signed 64-bit column holds), the first carrying the raw row.
    fn push_row(&mut self, msgs: Vec<(u64, ParsedMessage)>, base: u64, raw: Vec<u8>) {
        let mut raw = Some(raw);
        for (sub, mut m) in msgs {
            m.seq = (base.min(u64::MAX >> 11) << 10) | sub.min(1023);
            m.raw = raw.take();
            self.emit.push(m);
        }
    }

    // ---- 2.x ----

    fn v2(&mut self, st: &mut DbState) -> Result<bool, ParseError> {
        let (sessions_done, srows) = self.rows("session_v2", &mut st.sessions)?;
        self.session_rows(srows);
        if !sessions_done {
            return Ok(false);
        }
        let (done, rows) = self.rows("session_message", &mut st.messages)?;
        // The prompts of every session touched: the `seq` of each of its `user` rows.
        let mut user_seqs: HashMap<String, Vec<i64>> = HashMap::new();
        for row in &rows {
            let sid = str_of(&row.json, "session_id").unwrap_or_default();
            if user_seqs.contains_key(sid) {
                continue;
            }
            self.load_session("session_v2", sid)?;
            let db = self.db;
            let mut stmt = db
                .conn()
                .prepare(
                    "SELECT seq FROM session_message WHERE session_id = ?1 AND type = 'user' \
                     ORDER BY seq",
                )
                .map_err(|e| db.error(e))?;
            let seqs = stmt
                .query_map([sid], |r| r.get::<_, i64>(0))
                .and_then(|r| r.collect::<Result<Vec<_>, _>>())
                .map_err(|e| db.error(e))?;
            user_seqs.insert(sid.to_owned(), seqs);
        }
        for row in rows {
            let sid = str_of(&row.json, "session_id")
                .unwrap_or_default()
                .to_owned();
            let sess = self.seen.sessions.get(&sid).cloned().unwrap_or_default();
            let seqs = user_seqs.get(&sid).map(Vec::as_slice).unwrap_or(&[]);
            self.v2_row(&sess, seqs, row);
        }
        Ok(done)
    }

    fn v2_row(&mut self, sess: &Sess, user_seqs: &[i64], row: Row) {
        let line = row.n;
        let r = &row.json;
        let id = string_of(r, "id").unwrap_or_else(|| format!("row-{line}"));
        let ty = str_of(r, "type").unwrap_or("");
        let seq = r.get("seq").and_then(Value::as_i64).unwrap_or(0);
        let data = r.get("data").map(json_column).unwrap_or(Value::Null);
        if !data.is_object() {
            self.emit.issue(
                line,
                format!("message row {id}: `data` is not a JSON object"),
                true,
            );
        }
        let sub = sess.subagent();
        let number = if sub {
            0
        } else {
            user_seqs.partition_point(|&s| s <= seq) as u32
        };
        let model = data.get("model").and_then(model_name);
        if let Some(m) = &model {
            self.seen.model.insert(sess.id.clone(), m.clone());
        }
        let mk = |mid: String, role: Role, kind: MessageKind| {
            let mut m = blank(AGENT, &sess.id, mid, role, kind);
            m.prompt_number = number;
            m.timestamp = r.get("time_created").and_then(parse_ts);
            m.cwd.clone_from(&sess.directory);
            m.model.clone_from(&model);
            m.flags.sidechain = sub;
            if sub {
                m.agent_id = Some(sess.id.clone());
            }
            m
        };
        let block_id = |i: usize| {
            if i == 0 {
                id.clone()
            } else {
                format!("{id}#{i}")
            }
        };
        let mut msgs: Vec<(u64, ParsedMessage)> = Vec::new();
        match ty {
            "user" => {
                let mut t = str_of(&data, "text").unwrap_or_default().to_owned();
                for f in data
                    .get("files")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = str_of(f, "name")
                        .or_else(|| str_of(f, "mime"))
                        .unwrap_or("");
                    join_lines(&mut t, &format!("[attachment: {name}]"));
                }
                let kind = if sub {
                    MessageKind::Meta
                } else {
                    MessageKind::UserPrompt
                };
                if !sub && number == 1 {
                    self.seen
                        .first_prompt
                        .entry(sess.id.clone())
                        .or_insert_with(|| t.clone());
                }
                let mut m = mk(id.clone(), Role::User, kind);
                m.text = t;
                msgs.push((0, m));
            }
            "assistant" => {
                let content = data
                    .get("content")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                for (i, p) in content.iter().enumerate() {
                    let sub_index = 2 * i as u64;
                    let bid = block_id(i);
                    match str_of(p, "type").unwrap_or("") {
                        "text" => {
                            let mut m = mk(bid, Role::Assistant, MessageKind::AssistantText);
                            m.text = str_of(p, "text").unwrap_or_default().to_owned();
                            msgs.push((sub_index, m));
                        }
                        "reasoning" => {
                            let mut m = mk(bid, Role::Assistant, MessageKind::Thinking);
                            m.text = str_of(p, "text").unwrap_or_default().to_owned();
                            msgs.push((sub_index, m));
                        }
                        "tool" => {
                            let (call, result) = v2_tool(p, &bid, &mk);
                            msgs.push((sub_index, call));
                            if let Some(res) = result {
                                msgs.push((sub_index + 1, res));
                            }
                        }
                        _ => {
                            let mut m = mk(bid, Role::Assistant, MessageKind::Meta);
                            m.text = text::blocks_text(p);
                            msgs.push((sub_index, m));
                        }
                    }
                }
                let error = data.get("error").map(error_text).unwrap_or_default();
                if msgs.is_empty() {
                    let mut m = mk(id.clone(), Role::Assistant, MessageKind::Meta);
                    m.text = error;
                    msgs.push((0, m));
                } else if !error.is_empty() {
                    let mut m = mk(format!("{id}#error"), Role::Assistant, MessageKind::Meta);
                    m.text = error;
                    msgs.push((1023, m));
                }
                if let Some((_, first)) = msgs.first_mut() {
                    first.usage = data.get("tokens").and_then(usage_of);
                    first.usage_key = first.usage.map(|_| id.clone());
                    first.cost_usd = first.usage.and(crate::adapter::cost_of(&data, "cost"));
                }
            }
            "shell" => {
                let mut m = mk(id.clone(), Role::User, MessageKind::Meta);
                m.text = format!("$ {}", str_of(&data, "command").unwrap_or_default());
                let output = data.get("output").unwrap_or(&Value::Null);
                let output = str_of(output, "output").or_else(|| output.as_str());
                join_lines(&mut m.text, output.unwrap_or_default());
                msgs.push((0, m));
            }
            "compaction" => {
                // A summary once the compaction completed; its error (or nothing) before.
                let summary = str_of(&data, "summary").unwrap_or_default();
                let m = if str_of(&data, "status") == Some("completed") || !summary.is_empty() {
                    let mut m = mk(id.clone(), Role::Assistant, MessageKind::CompactionSummary);
                    m.text = summary.to_owned();
                    m
                } else {
                    let mut m = mk(id.clone(), Role::System, MessageKind::Meta);
                    m.text = data.get("error").map(error_text).unwrap_or_default();
                    m
                };
                msgs.push((0, m));
            }
            _ => {
                // `synthetic`, `system`, `skill` (injected text), `idle`, `agent-switched`,
                // `model-switched`, `location-switched` and kinds not known yet.
                let mut m = mk(id.clone(), Role::System, MessageKind::Meta);
                m.text = str_of(&data, "text")
                    .or_else(|| str_of(&data, "outcome"))
                    .unwrap_or_default()
                    .to_owned();
                msgs.push((0, m));
            }
        }
        self.push_row(msgs, seq.max(0) as u64, row.raw);
    }

    // ---- 1.x ----

    fn v1(&mut self, st: &mut DbState) -> Result<bool, ParseError> {
        if self.db.has_table("session") {
            let (done, srows) = self.rows("session", &mut st.sessions)?;
            self.session_rows(srows);
            if !done {
                return Ok(false);
            }
        }
        let (messages_done, mrows) = self.rows("message", &mut st.messages)?;
        let (done, prows) = if messages_done {
            self.rows("part", &mut st.parts)?
        } else {
            (false, Vec::new())
        };
        // The message every row belongs to.
        let mut infos: HashMap<String, MsgRow> = HashMap::new();
        for row in &mrows {
            let m = MsgRow::from_row(&row.json);
            infos.insert(m.id.clone(), m);
        }
        for row in &prows {
            let mid = str_of(&row.json, "message_id").unwrap_or_default();
            if !infos.contains_key(mid) {
                let m = self.load_message(mid)?;
                infos.insert(mid.to_owned(), m);
            }
        }
        // The sessions touched, with their prompts.
        let mut prompts: HashMap<String, Vec<PromptAt>> = HashMap::new();
        for m in infos.values() {
            if prompts.contains_key(&m.session_id) {
                continue;
            }
            self.load_session("session", &m.session_id)?;
            let list = self.v1_prompts(&m.session_id)?;
            prompts.insert(m.session_id.clone(), list);
        }
        for row in mrows {
            let id = str_of(&row.json, "id").unwrap_or_default().to_owned();
            let line = row.n;
            let info = &infos[&id];
            if !info.data.is_object() {
                self.emit.issue(
                    line,
                    format!("message row {id}: `data` is not a JSON object"),
                    true,
                );
            }
            let ctx = self.v1_context(info, &prompts);
            let m = message_record(&ctx, &info.data);
            self.push_row(vec![(0, m)], info.created.max(0) as u64, row.raw);
        }
        for row in prows {
            let r = &row.json;
            let mid = str_of(r, "message_id").unwrap_or_default();
            let line = row.n;
            let pid = string_of(r, "id").unwrap_or_else(|| format!("row-{line}"));
            let data = r.get("data").map(json_column).unwrap_or(Value::Null);
            if !data.is_object() {
                self.emit.issue(
                    line,
                    format!("part row {pid}: `data` is not a JSON object"),
                    true,
                );
            }
            let info = &infos[mid];
            let ctx = self.v1_context(info, &prompts);
            let msgs = part_messages(&ctx, &pid, &data);
            if let Some(p) = msgs
                .iter()
                .find(|m| m.kind == MessageKind::UserPrompt && m.prompt_number == 1)
            {
                self.seen
                    .first_prompt
                    .entry(p.session_id.clone())
                    .or_insert_with(|| p.text.clone());
            }
            let created = r.get("time_created").and_then(Value::as_i64).unwrap_or(0);
            self.push_row(
                msgs.into_iter()
                    .enumerate()
                    .map(|(k, m)| (k as u64, m))
                    .collect(),
                created.max(0) as u64,
                row.raw,
            );
        }
        Ok(done)
    }

    /// A message row by id (a part's, read in an earlier call).
    fn load_message(&self, id: &str) -> Result<MsgRow, ParseError> {
        let db = self.db;
        let mut stmt = db
            .conn()
            .prepare("SELECT * FROM message WHERE id = ?1")
            .map_err(|e| db.error(e))?;
        let mut rows = stmt.query([id]).map_err(|e| db.error(e))?;
        Ok(match rows.next().map_err(|e| db.error(e))? {
            Some(r) => MsgRow::from_row(&row_json(r)),
            None => MsgRow {
                id: id.to_owned(),
                ..Default::default()
            },
        })
    }

    /// The prompts of a 1.x session in order: each `user` message with a text part that is
    /// neither synthetic nor empty, and the first such part (`json_valid` first: a row that is
    /// not JSON must not fail the query).
    fn v1_prompts(&self, sid: &str) -> Result<Vec<PromptAt>, ParseError> {
        if self.seen.sessions.get(sid).is_some_and(|s| s.subagent()) {
            return Ok(Vec::new());
        }
        let db = self.db;
        let sql = "
            SELECT m.time_created, m.id, (
                SELECT p.id FROM part p
                WHERE p.message_id = m.id
                  AND json_extract(CASE WHEN json_valid(p.data) THEN p.data END, '$.type') = 'text'
                  AND coalesce(json_extract(CASE WHEN json_valid(p.data) THEN p.data END,
                                            '$.synthetic'), 0) = 0
                  AND trim(coalesce(json_extract(CASE WHEN json_valid(p.data) THEN p.data END,
                                                 '$.text'), '')) <> ''
                ORDER BY p.id LIMIT 1)
            FROM message m
            WHERE m.session_id = ?1
              AND json_extract(CASE WHEN json_valid(m.data) THEN m.data END, '$.role') = 'user'
            ORDER BY m.time_created, m.id";
        let mut stmt = db.conn().prepare(sql).map_err(|e| db.error(e))?;
        let rows = stmt
            .query_map([sid], |r| {
                Ok(PromptAt {
                    at: (r.get::<_, Option<i64>>(0)?.unwrap_or(0), r.get(1)?),
                    part: r.get(2)?,
                })
            })
            .and_then(|r| r.collect::<Result<Vec<_>, _>>())
            .map_err(|e| db.error(e))?;
        Ok(rows.into_iter().filter(|p| p.part.is_some()).collect())
    }

    fn v1_context<'a>(
        &mut self,
        info: &'a MsgRow,
        prompts: &'a HashMap<String, Vec<PromptAt>>,
    ) -> MsgCtx<'a> {
        let sess = self
            .seen
            .sessions
            .get(&info.session_id)
            .cloned()
            .unwrap_or_default();
        let list = prompts
            .get(&info.session_id)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let at = (info.created, info.id.clone());
        let number = list.partition_point(|p| p.at <= at) as u32;
        let prompt_part = list
            .iter()
            .find(|p| p.at.1 == info.id)
            .and_then(|p| p.part.as_deref());
        let ctx = MsgCtx::new(
            &info.session_id,
            &info.id,
            &info.data,
            &sess,
            number,
            prompt_part,
        );
        if let Some(m) = &ctx.model
            && ctx.role == Role::Assistant
        {
            self.seen.model.insert(sess.id.clone(), m.clone());
        }
        ctx
    }
}

/// Builds the tool call (and its result, once there is one) of a 2.x tool part.
fn v2_tool(
    p: &Value,
    bid: &str,
    mk: &dyn Fn(String, Role, MessageKind) -> ParsedMessage,
) -> (ParsedMessage, Option<ParsedMessage>) {
    let name = str_of(p, "name").unwrap_or("unknown").to_owned();
    let state = p.get("state").unwrap_or(&Value::Null);
    let input = state.get("input").cloned().unwrap_or(Value::Null);
    let call_id = string_of(p, "id");
    let mut call = mk(bid.to_owned(), Role::Assistant, MessageKind::ToolCall);
    call.text = text::tool_call_text(&name, &input);
    call.tool_call = Some(ToolCall {
        name,
        input,
        call_id: call_id.clone(),
    });
    let status = str_of(state, "status").unwrap_or("");
    let mut output = text::blocks_text(state.get("content").unwrap_or(&Value::Null));
    join_lines(
        &mut output,
        &state.get("error").map(error_text).unwrap_or_default(),
    );
    let done = matches!(status, "completed" | "error") || !output.is_empty();
    let result = done.then(|| {
        let mut m = mk(format!("{bid}/result"), Role::Tool, MessageKind::ToolResult);
        m.text = output;
        m.tool_result = Some(ToolResult {
            call_id,
            is_error: status == "error",
        });
        m
    });
    (call, result)
}

/// A prompt of a 1.x session: `(time_created, message id)` and its prompt part.
struct PromptAt {
    at: (i64, String),
    part: Option<String>,
}

/// A 1.x message row.
#[derive(Default)]
struct MsgRow {
    id: String,
    session_id: String,
    created: i64,
    data: Value,
}

impl MsgRow {
    fn from_row(row: &Value) -> MsgRow {
        MsgRow {
            id: string_of(row, "id").unwrap_or_default(),
            session_id: string_of(row, "session_id").unwrap_or_default(),
            created: row.get("time_created").and_then(Value::as_i64).unwrap_or(0),
            data: row.get("data").map(json_column).unwrap_or(Value::Null),
        }
    }
}
