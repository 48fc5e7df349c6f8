//! Search hits read back from SQLite, by row id: a hit always shows the row as it is now, and
//! a row that no longer passes the filter (or no longer exists) is no hit.

use rusqlite::{Connection, params_from_iter, types::Value as Sql};

use super::Hit;
use crate::layer::Layer;
use crate::store::read::{Filter, iso};

fn layer_hit(r: &rusqlite::Row<'_>, l: Layer) -> rusqlite::Result<(Hit, String)> {
    Ok((
        Hit {
            session_id: r.get(0)?,
            message_id: None,
            agent: r.get(1)?,
            project: r.get(2)?,
            host: r.get(7)?,
            role: "summary".into(),
            kind: l.hit_kind().into(),
            prompt_number: r.get(3)?,
            timestamp: iso(r.get(4)?),
            snippet: String::new(),
            score: 0.0,
            level: l.name(),
            matched: "fts",
            terms: Vec::new(),
            row: r.get(6)?,
        },
        r.get(5)?,
    ))
}

/// The layer columns [`layer_hit`] reads, in order.
fn layer_columns(c: &crate::layer::Columns) -> String {
    format!(
        "s.session_id, s.agent, COALESCE(s.project_path, s.git_root), {}, {}, {}, x.id, {}",
        c.prompt,
        c.ts,
        c.text,
        memex_store::host_name_sql!()
    )
}

/// Rows of layer `l` by id, in the order given, that pass the filter, with their text.
pub(super) fn layer_rows(
    conn: &Connection,
    ids: &[i64],
    filter: &Filter,
    l: Layer,
) -> rusqlite::Result<Vec<(Hit, String)>> {
    let Some(c) = l.columns() else {
        return raw_rows(conn, ids, filter);
    };
    let mut args = vec![Sql::Null];
    let cond = filter.sql(Some(c.ts), &mut args);
    let mut st = conn.prepare_cached(&format!(
        "SELECT {cols} FROM {table} x JOIN sessions s ON s.id = x.session_pk
         WHERE x.id = ?1 AND {cond}",
        cols = layer_columns(c),
        table = l.table(),
    ))?;
    let mut out = Vec::with_capacity(ids.len());
    for &id in ids {
        args[0] = Sql::Integer(id);
        if let Some(hit) = st
            .query_map(params_from_iter(args.iter()), |r| layer_hit(r, l))?
            .next()
        {
            out.push(hit?);
        }
    }
    Ok(out)
}

/// Messages by id, in the order given, that pass the filter, with their text.
pub(super) fn raw_rows(
    conn: &Connection,
    ids: &[i64],
    filter: &Filter,
) -> rusqlite::Result<Vec<(Hit, String)>> {
    let mut args = vec![Sql::Null];
    let cond = filter.sql(Some("m.ts"), &mut args);
    let mut st = conn.prepare_cached(&format!(
        "SELECT s.session_id, m.message_id, s.agent, COALESCE(s.project_path, m.cwd), m.role, m.kind,
                m.prompt_number, m.ts, COALESCE(m.text, memex_unzstd(m.text_z)), {host}
         FROM messages m JOIN sessions s ON s.id = m.session_pk
         WHERE m.id = ?1 AND {cond}",
        host = memex_store::host_name_sql!()
    ))?;
    let mut out = Vec::with_capacity(ids.len());
    for &id in ids {
        args[0] = Sql::Integer(id);
        let mut rows = st.query_map(params_from_iter(args.iter()), |r| {
            let text: Option<String> = r.get(8)?;
            Ok((
                Hit {
                    session_id: r.get(0)?,
                    message_id: Some(r.get(1)?),
                    agent: r.get(2)?,
                    project: r.get(3)?,
                    host: r.get(9)?,
                    role: r.get(4)?,
                    kind: r.get(5)?,
                    prompt_number: r.get(6)?,
                    timestamp: iso(r.get(7)?),
                    snippet: String::new(),
                    score: 0.0,
                    level: Layer::Raw.name(),
                    matched: "fts",
                    terms: Vec::new(),
                    row: id,
                },
                text.unwrap_or_default(),
            ))
        })?;
        if let Some(hit) = rows.next() {
            out.push(hit?);
        }
    }
    Ok(out)
}
