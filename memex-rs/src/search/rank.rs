//! Full-text ranking: FTS5 finds the newest matches of each layer, BM25 ranks them here, and
//! Reciprocal Rank Fusion merges rankings (full text and vectors, several layers).

use rusqlite::{Connection, params_from_iter, types::Value as Sql};

use super::champions;
use super::query::{self, Term};
use super::rows::layer_rows;
use super::{CANDIDATES, DF_CAP, Hit, RRF_K, SearchError, SearchParams};
use crate::layer::Layer;
use crate::store::fts_hits;
use crate::store::read::Filter;

/// One layer's full-text ranking, best first.
pub(super) fn fts_layer(
    conn: &Connection,
    p: &SearchParams,
    terms: &[Term],
    l: Layer,
    limit: usize,
) -> Result<Vec<Hit>, SearchError> {
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    search_layer(conn, p, terms, l, limit)
}

/// Reciprocal Rank Fusion: score = Σ 1 / (k + rank) over the rankings a result is in; a
/// full-text hit with only some of the query's `words` counts for that share of its rank (a
/// row with two of six words is weaker evidence than one with all, or than a close meaning).
pub(super) fn fuse(lists: Vec<Vec<Hit>>, limit: usize, words: usize) -> Vec<Hit> {
    if lists.len() == 1 {
        let mut only = lists.into_iter().next().unwrap_or_default();
        only.truncate(limit);
        return only;
    }
    let mut fused: Vec<Hit> = Vec::new();
    let mut index: std::collections::HashMap<(&'static str, i64), usize> = Default::default();
    for list in lists {
        for (rank, h) in list.into_iter().enumerate() {
            let share = if h.terms.is_empty() || words == 0 {
                1.0
            } else {
                (h.terms.len() as f64 / words as f64).min(1.0)
            };
            let score = share / (RRF_K + rank as f64 + 1.0);
            match index.get(&(h.level, h.row)) {
                Some(&i) => {
                    let f = &mut fused[i];
                    f.score += score;
                    if f.matched != h.matched {
                        f.matched = "both";
                    }
                    // The full-text snippet shows the words that matched.
                    if h.matched == "fts" {
                        f.snippet = h.snippet;
                        f.terms = h.terms;
                    }
                }
                None => {
                    index.insert((h.level, h.row), fused.len());
                    fused.push(Hit { score, ..h });
                }
            }
        }
    }
    fused.sort_by(|a, b| b.score.total_cmp(&a.score));
    fused.truncate(limit);
    fused
}

/// One layer's newest matches, ranked here with BM25 (at a million messages the layers hold
/// hundreds of thousands of rows, and FTS5's `bm25()` would scan every match).
fn search_layer(
    conn: &Connection,
    p: &SearchParams,
    terms: &[Term],
    l: Layer,
    limit: usize,
) -> Result<Vec<Hit>, SearchError> {
    // One read transaction for the whole search: one snapshot, and one lock instead of one per
    // statement.
    let tx = conn.unchecked_transaction()?;
    let fts = l.fts_table();
    let mut args = vec![Sql::Text(query::match_expr(terms))];
    let (cond, join) = match l.columns() {
        Some(c) => (
            p.filter.sql(Some(c.ts), &mut args),
            format!(
                "JOIN {table} x ON x.id = {fts}.rowid JOIN sessions s ON s.id = x.session_pk",
                table = l.table()
            ),
        ),
        // The messages are joined only when a filter needs them.
        None => (
            p.filter.sql(Some("m.ts"), &mut args),
            if p.filter.is_empty() {
                String::new()
            } else {
                format!(
                    "JOIN messages m ON m.id = {fts}.rowid JOIN sessions s ON s.id = m.session_pk"
                )
            },
        ),
    };
    let mut known = doc_freqs(&tx, fts, terms)?;
    let (full, partial, more) = to_rank(&tx, fts, &join, &cond, args, p, terms, limit, &mut known)?;
    // Rows whose counts the index gave need no text to be ranked; the others are read now.
    let (mut counted, mut whole) = (Vec::new(), Vec::new());
    for (row, n) in full {
        match n {
            Some(n) => counted.push((row, n)),
            None => whole.push(row),
        }
    }
    // The candidates already passed the filter; the champions did not.
    let mut read = layer_rows(&tx, &whole, &Filter::default(), l)?;
    let all_terms = read.len();
    read.extend(layer_rows(&tx, &partial, &Filter::default(), l)?);
    read.extend(layer_rows(&tx, &more, &p.filter, l)?);
    let ranked = Ranked {
        counted,
        read,
        all_terms,
    };
    bm25_rank(&tx, fts, l, terms, &known.dfs, ranked, limit)
}

/// A query's full matches, newest first, each with what the index counted in it.
type Full = Vec<(i64, Option<Counted>)>;

/// What the index told of a row of a query's full matches ([`fts_hits`]): its length in
/// tokens and how often each term occurs in it.
struct Counted {
    tokens: u32,
    tf: Vec<u32>,
}

/// What [`fts_hits`] counted in a row of `terms`' full matches ([`query::match_expr`]: each
/// term one phrase per spelling, in order), per term.
fn per_term(blob: &[u8], terms: &[Term]) -> Option<Counted> {
    let (tokens, phrases) = fts_hits::decode(blob)?;
    // A phrase count that is not the terms' says the expression was not theirs: read the text.
    if phrases.len() != terms.iter().map(|t| 1 + t.forms.len()).sum::<usize>() {
        return None;
    }
    let mut next = phrases.iter();
    let tf: Vec<u32> = terms
        .iter()
        .map(|t| next.by_ref().take(1 + t.forms.len()).sum())
        .collect();
    // A full match has every term, in a row of some length: counts that say otherwise (an
    // index that keeps no positions or sizes) are not used.
    (tokens > 0 && tf.iter().all(|&n| n > 0)).then_some(Counted { tokens, tf })
}

/// The candidates of one ranking: rows the index counted (the query's full matches, newest
/// first) and rows read with their text (full matches the index could not count, the first
/// `all_terms` of them, then partial matches and champions).
struct Ranked {
    counted: Vec<(i64, Counted)>,
    read: Vec<(Hit, String)>,
    all_terms: usize,
}

/// The rows a search ranks: those with every term, those with some, and champions that are
/// neither. A one-word query without filters whose lists [reach](Reach) far, asking for no more
/// than a list holds, ranks its matches above the mark, the rows of its rare spellings and the
/// champions of its common ones (the best of the older rows by FTS5's BM25, which orders rows
/// much as the ranking here does); any other query its newest matches, and the champions
/// beside them when those filled the window.
#[allow(clippy::too_many_arguments)]
fn to_rank(
    tx: &Connection,
    fts: &str,
    join: &str,
    cond: &str,
    args: Vec<Sql>,
    p: &SearchParams,
    terms: &[Term],
    limit: usize,
    known: &mut Known,
) -> Result<(Full, Vec<i64>, Vec<i64>), SearchError> {
    let best = std::mem::take(&mut known.best);
    if let Some(reach) = &known.reach
        && p.filter.is_empty()
        && limit <= champions::KEPT
    {
        let mut above = args.clone();
        above.push(Sql::Integer(reach.upto));
        let n = above.len();
        let cond_above = format!("{cond} AND {fts}.rowid > ?{n}");
        let mut full = newest_counted(tx, fts, join, &cond_above, above, CANDIDATES, terms)?;
        if let Some(rare) = &reach.rare {
            let mut args = args;
            args[0] = Sql::Text(rare.clone());
            // Read, not counted: this expression holds only some of the word's spellings.
            for id in newest_matches(tx, fts, join, cond, args, champions::KEPT, None)? {
                if !full.iter().any(|f| f.0 == id) {
                    full.push((id, None));
                }
            }
        }
        let more = champions(best, full.iter().map(|f| f.0));
        return Ok((full, Vec::new(), more));
    }
    let (full, partial) = candidates(tx, fts, join, cond, args, terms, &known.dfs, limit)?;
    // With several words, a full window outranks any row with one of them.
    let more = if terms.len() == 1 && full.len() >= CANDIDATES {
        champions(
            best,
            full.iter().map(|f| f.0).chain(partial.iter().copied()),
        )
    } else {
        Vec::new()
    };
    Ok((full, partial, more))
}

/// What the index tells of a query's terms before any row is read.
struct Known {
    /// Each term's document frequency.
    dfs: Vec<f64>,
    /// The champions of the terms' common spellings, with their scores.
    best: Vec<(i64, f32)>,
    /// How far the lists of a one-word query reach.
    reach: Option<Reach>,
}

/// A one-word query whose common spellings all have lists: the best rows up to `upto` (the
/// oldest of their marks and the index's) that hold a common spelling are their champions;
/// its other spellings (`rare`, their expression) are in [`champions::KEPT`] rows at most.
struct Reach {
    upto: i64,
    rare: Option<String>,
}

/// Each term's document frequency in `fts`, and the best rows of its common spellings over all
/// their matches ([`super::champions`]). A spelling with a champion list brings its
/// stored count; the others are counted up to [`DF_CAP`] (exact for rare ones, saturated for
/// common ones whose list is not made yet).
fn doc_freqs(tx: &Connection, fts: &str, terms: &[Term]) -> Result<Known, SearchError> {
    let mut count = tx.prepare_cached(&format!(
        "SELECT COUNT(*) FROM (SELECT rowid FROM {fts} WHERE {fts} MATCH ?1 LIMIT {DF_CAP})"
    ))?;
    let mut known = Known {
        dfs: Vec::with_capacity(terms.len()),
        best: Vec::new(),
        reach: None,
    };
    for t in terms {
        let (mut docs, mut upto) = (0, None::<i64>);
        let mut rest = Vec::new();
        for token in tokens(t) {
            match champions::lookup(tx, fts, &token)? {
                Some(list) => {
                    docs += list.docs;
                    upto = Some(upto.map_or(list.upto, |u| u.min(list.upto)));
                    known.best.extend(list.best);
                }
                None => rest.push(format!("\"{}\"", token.replace('"', "\"\""))),
            }
        }
        let rest = rest.join(" OR ");
        let counted = match (docs, rest.is_empty()) {
            (0, _) => count.query_row([t.expr()], |r| r.get::<_, i64>(0))?,
            (_, true) => 0,
            (_, false) => count.query_row([&rest], |r| r.get::<_, i64>(0))?,
        };
        known.dfs.push((docs + counted) as f64);
        if let (1, Some(upto)) = (terms.len(), upto)
            && counted <= champions::KEPT as i64
            && let Some(mark) = champions::mark(tx, fts)?
        {
            known.reach = Some(Reach {
                upto: upto.min(mark),
                rare: (counted > 0).then_some(rest),
            });
        }
    }
    Ok(known)
}

/// The index tokens a term is any of: a bare word's spellings, as the index holds them (lower
/// case); none for a phrase of several words or a prefix, which have no list of their own.
fn tokens(t: &Term) -> Vec<String> {
    if t.literal.contains(' ') || t.fts.ends_with('*') {
        return Vec::new();
    }
    std::iter::once(t.literal.to_lowercase())
        .chain(t.forms.iter().cloned())
        .collect()
}

/// The champions of a word's spellings, best first, without the rows already there. Each
/// spelling's list whole: FTS5 scores a spelling by its own rarity, so a rare spelling's rows
/// would crowd out the word's own best ones if the lists were cut together.
fn champions(mut best: Vec<(i64, f32)>, there: impl Iterator<Item = i64>) -> Vec<i64> {
    best.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut seen: std::collections::HashSet<i64> = there.collect();
    best.into_iter()
        .map(|(row, _)| row)
        .filter(|row| seen.insert(*row))
        .collect()
}

/// The rows to rank: the newest [`CANDIDATES`] with every term; and when they are fewer than
/// `limit` (a question rarely has all its words in one message), rows with some of them: an
/// answer of "nothing" to a question whose words are in the archive is a false absence. Those
/// are looked for by dropping the commonest terms first (the rows with every term found but
/// the commonest, then but the two commonest, when a rare term anchors them), the newest of
/// each, until there are enough to rank; then with any of them.
#[allow(clippy::too_many_arguments)]
fn candidates(
    tx: &Connection,
    fts: &str,
    join: &str,
    cond: &str,
    args: Vec<Sql>,
    terms: &[Term],
    dfs: &[f64],
    limit: usize,
) -> Result<(Full, Vec<i64>), SearchError> {
    let mut some = args.clone();
    let full = newest_counted(tx, fts, join, cond, args, CANDIDATES, terms)?;
    if full.len() >= limit.min(CANDIDATES) || terms.len() < 2 {
        return Ok((full, Vec::new()));
    }
    let want = (limit * 3).clamp(30, CANDIDATES);
    // Terms found somewhere, rarest first.
    let mut rare: Vec<&Term> = Vec::new();
    let mut order: Vec<usize> = (0..terms.len()).filter(|&i| dfs[i] > 0.0).collect();
    order.sort_by(|&a, &b| dfs[a].total_cmp(&dfs[b]));
    rare.extend(order.iter().map(|&i| &terms[i]));
    let mut seen: std::collections::HashSet<i64> = full.iter().map(|f| f.0).collect();
    let mut partial = Vec::new();
    let most = rare.len().min(terms.len() - 1);
    // Two steps at most, and only with a rare term to anchor them: an AND of common terms only
    // walks their long doclists for little (any of them, below, finds those rows).
    let anchored = order.first().is_some_and(|&i| dfs[i] < DF_CAP as f64);
    let steps = if anchored { 2 } else { 0 };
    for k in (1..=most).rev().take(steps) {
        let kept: Vec<Term> = rare[..k].iter().map(|t| (*t).clone()).collect();
        some[0] = Sql::Text(query::match_expr(&kept));
        for id in newest_matches(tx, fts, join, cond, some.clone(), want, Some(PARTIAL_SCAN))? {
            if seen.insert(id) {
                partial.push(id);
            }
        }
        if full.len() + partial.len() >= want {
            return Ok((full, partial));
        }
    }
    // Still short (a small archive, or rows that have only common terms): any of them (the
    // one, when only one is anywhere).
    if !rare.is_empty() {
        let found: Vec<Term> = rare.iter().map(|t| (*t).clone()).collect();
        some[0] = Sql::Text(query::match_any(&found));
        for id in newest_matches(tx, fts, join, cond, some, want, Some(PARTIAL_SCAN))? {
            if seen.insert(id) {
                partial.push(id);
            }
        }
    }
    Ok((full, partial))
}

/// [`newest_matches`] without a scan limit, each with what the index counted of `terms` in it
/// ([`fts_hits`]; `None` where that could not be mapped to the terms).
fn newest_counted(
    tx: &Connection,
    fts: &str,
    join: &str,
    cond: &str,
    args: Vec<Sql>,
    limit: usize,
    terms: &[Term],
) -> Result<Full, SearchError> {
    let counts = format!("{}({fts})", fts_hits::NAME);
    let mut st = tx.prepare_cached(&newest_sql(fts, join, cond, limit, &counts))?;
    let rows = st
        .query_map(params_from_iter(args), |r| {
            let blob: Option<Vec<u8>> = r.get(1)?;
            Ok((r.get(0)?, blob.and_then(|b| per_term(&b, terms))))
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Partial matches are many (any of several words) and, under a narrow filter, few of them
/// pass it: they are looked for among the newest this many only, so that a filtered question
/// never walks a common word's whole doclist.
const PARTIAL_SCAN: usize = 20_000;

/// Row ids of the newest `limit` matches of `args[0]` in `fts` that pass `cond`; with `scan`,
/// looked for among the newest `scan` matches only when there is a filter.
fn newest_matches(
    tx: &Connection,
    fts: &str,
    join: &str,
    cond: &str,
    args: Vec<Sql>,
    limit: usize,
    scan: Option<usize>,
) -> Result<Vec<i64>, SearchError> {
    let sql = match scan.filter(|_| cond != "1") {
        None => newest_sql(fts, join, cond, limit, "NULL"),
        Some(scan) => format!(
            "SELECT {fts}.rowid FROM
               (SELECT rowid FROM {fts} WHERE {fts} MATCH ?1 ORDER BY rowid DESC LIMIT {scan})
               AS {fts} {join}
             WHERE {cond} ORDER BY {fts}.rowid DESC LIMIT {limit}"
        ),
    };
    let mut st = tx.prepare_cached(&sql)?;
    let ids = st
        .query_map(params_from_iter(args), |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(ids)
}

/// The newest `limit` matches of `?1` in `fts` that pass `cond`: their row id and `column`.
fn newest_sql(fts: &str, join: &str, cond: &str, limit: usize, column: &str) -> String {
    format!(
        "SELECT {fts}.rowid, {column} FROM {fts} {join}
         WHERE {fts} MATCH ?1 AND {cond}
         ORDER BY {fts}.rowid DESC LIMIT {limit}"
    )
}

/// The fewest of a query's `n` terms a row must have to be a result: half of them, rounded
/// down, at least one (one of two or three, two of four or five). Rounded down because an
/// unquoted CJK word counts as its bigrams: 认证成功 is three of them for two words.
pub(super) fn least_terms(n: usize) -> usize {
    (n / 2).max(1)
}

/// Ranks candidates with BM25 (k1 = 1.2, b = 0.75): document frequencies from `fts`, counted up
/// to [`DF_CAP`]; the number of rows (the highest row id) and their average length in tokens
/// (the index's totals); term frequencies and lengths as the index counted them
/// ([`Counted`]), or, for rows it did not count, from their own text and the index's record of
/// their length. Rows read with every term (the first `all_terms` read) have each, and the
/// others at least [`least_terms`] of them. Rows with more of the terms come first, then by BM25; among equals
/// the newer (candidates arrive newest first, and the sort is stable). Only the best `limit`
/// are read back (for their snippet) when they were not read already. Each hit names the
/// terms it has.
fn bm25_rank(
    tx: &Connection,
    fts: &str,
    l: Layer,
    terms: &[Term],
    dfs: &[f64],
    ranked: Ranked,
    limit: usize,
) -> Result<Vec<Hit>, SearchError> {
    if ranked.counted.is_empty() && ranked.read.is_empty() {
        return Ok(Vec::new());
    }
    // The number of rows: the highest row id, as the index's own count only grows (a
    // contentless index does not count deletes, and a row indexed again counts twice). The
    // average length from its totals, which count re-indexed rows with their tokens alike.
    let total: f64 = tx
        .query_row(&format!("SELECT MAX(rowid) FROM {fts}"), [], |r| {
            r.get::<_, Option<i64>>(0)
        })?
        .unwrap_or(1) as f64;
    let avg = fts_hits::totals(tx, fts)?.map_or(1.0, |t| t.1.max(1.0));
    let idfs: Vec<f64> = dfs
        .iter()
        .map(|&df| {
            // A word's spellings are counted apart (a row with two of them twice): never more
            // rows than there are.
            let df = df.min(total);
            ((total - df + 0.5) / (df + 0.5) + 1.0).ln()
        })
        .collect();
    let score = |tf: &[u32], tokens: u32| -> (f64, Vec<String>) {
        let norm = 1.2 * (0.25 + 0.75 * f64::from(tokens.max(1)) / avg);
        let mut score = 0.0;
        let mut has = Vec::new();
        for ((&tf, idf), term) in tf.iter().zip(&idfs).zip(terms) {
            if tf > 0 {
                let tf = f64::from(tf);
                score += idf * tf * 2.2 / (tf + norm);
                has.push(term.literal.clone());
            }
        }
        (score, has)
    };
    let mut scored: Vec<Scored> = Vec::with_capacity(ranked.counted.len() + ranked.read.len());
    for (row, n) in ranked.counted {
        let (score, has) = score(&n.tf, n.tokens);
        scored.push(Scored {
            score,
            has,
            row: Row::Counted(row),
        });
    }
    if !ranked.read.is_empty() {
        let res: Vec<Option<regex::Regex>> = terms.iter().map(Term::regex).collect();
        for (i, (hit, text)) in ranked.read.into_iter().enumerate() {
            let tf: Vec<u32> = terms
                .iter()
                .zip(&res)
                .map(|(term, re)| {
                    let count = re.as_ref().map_or(0, |re| term.count(re, &text)) as u32;
                    // A row with every term has each, even where the expression cannot see
                    // it (folded accents, a CJK phrase across a line break).
                    if i < ranked.all_terms {
                        count.max(1)
                    } else {
                        count
                    }
                })
                .collect();
            let tokens = fts_hits::row_tokens(tx, fts, hit.row)?.unwrap_or(avg as u32);
            let (score, has) = score(&tf, tokens);
            scored.push(Scored {
                score,
                has,
                row: Row::Read(Box::new(hit), text),
            });
        }
    }
    // A row with too few of the words is not an answer to the question, it only shares a word
    // with it: a question about something the archive never held gets nothing.
    let least = least_terms(terms.len());
    scored.retain(|s| s.has.len() >= least);
    scored.sort_by(|a, b| {
        b.has
            .len()
            .cmp(&a.has.len())
            .then(b.score.total_cmp(&a.score))
    });
    let marker = query::marker(terms);
    let mut hits = Vec::with_capacity(limit);
    for s in scored {
        if hits.len() == limit {
            break;
        }
        let (mut hit, text) = match s.row {
            Row::Read(hit, text) => (*hit, text),
            // A row that is gone since (it cannot be, in this snapshot) is no hit.
            Row::Counted(row) => match layer_rows(tx, &[row], &Filter::default(), l)?.pop() {
                Some(read) => read,
                None => continue,
            },
        };
        hit.score = s.score;
        hit.terms = s.has;
        hit.snippet = query::snippet_marked(&text, marker.as_ref(), 200);
        hits.push(hit);
    }
    Ok(hits)
}

/// A ranked candidate: its BM25 score, the terms it has, and the row.
struct Scored {
    score: f64,
    has: Vec<String>,
    row: Row,
}

/// A candidate row known by its id only (counted by the index) or read with its text.
enum Row {
    Counted(i64),
    Read(Box<Hit>, String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(row: i64, matched: &'static str, terms: &[&str]) -> Hit {
        Hit {
            session_id: format!("s{row}"),
            message_id: None,
            agent: "claude".into(),
            project: None,
            host: None,
            role: "user".into(),
            kind: "user_prompt".into(),
            prompt_number: 1,
            timestamp: None,
            snippet: String::new(),
            score: 0.0,
            level: "raw",
            matched,
            terms: terms.iter().map(|t| (*t).to_owned()).collect(),
            row,
        }
    }

    #[test]
    fn a_partial_word_match_counts_for_its_share_of_the_words() {
        // Full text: a row with two of four words first, then one with all four. Vectors: an
        // unrelated row first, then the full match.
        let words = vec![
            hit(1, "fts", &["a", "b"]),
            hit(2, "fts", &["a", "b", "c", "d"]),
        ];
        let meaning = vec![hit(3, "vector", &[]), hit(2, "vector", &[])];
        let fused = fuse(vec![words, meaning], 10, 4);
        let rows: Vec<i64> = fused.iter().map(|h| h.row).collect();
        // The full match found by both leads; the close meaning outranks half the words.
        assert_eq!(rows, vec![2, 3, 1]);
        assert_eq!(fused[0].matched, "both");
        let r = |rank: f64| 1.0 / (RRF_K + rank);
        assert!((fused[2].score - 0.5 * r(1.0)).abs() < 1e-12);
        // Without the query's word count, ranks alone decide (as before).
        let words = vec![
            hit(1, "fts", &["a", "b"]),
            hit(2, "fts", &["a", "b", "c", "d"]),
        ];
        let fused = fuse(vec![words, vec![hit(3, "vector", &[])]], 10, 0);
        assert_eq!(fused[0].row, 1);
    }

    /// An archive whose messages are `texts`, row `i + 1` each.
    fn archive(dir: &std::path::Path, texts: &[&str]) -> Connection {
        let conn = crate::store::open(dir).unwrap();
        conn.execute(
            "INSERT INTO sessions (id, agent, session_id) VALUES (1, 'claude', 's1')",
            [],
        )
        .unwrap();
        for (i, text) in texts.iter().enumerate() {
            let id = i as i64 + 1;
            conn.execute(
                "INSERT INTO messages (id, session_pk, message_id, line, seq, role, kind,
                   prompt_number, ts, text)
                 VALUES (?1, 1, ?1, ?1, 0, 'assistant', 'text', 1, ?1, ?2)",
                rusqlite::params![id, text],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO messages_fts (rowid, body) VALUES (?1, ?2)",
                rusqlite::params![id, text],
            )
            .unwrap();
        }
        conn
    }

    #[test]
    fn the_index_counts_each_term_with_its_spellings_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let conn = archive(
            dir.path(),
            &["Emails failed; the email retry failed again", "nothing"],
        );
        let terms = query::parse_query("email failed");
        assert!(!terms[0].forms.is_empty(), "a bare word has its forms");
        let args = vec![Sql::Text(query::match_expr(&terms))];
        let rows = newest_counted(&conn, "messages_fts", "", "1", args, 10, &terms).unwrap();
        assert_eq!(rows.len(), 1);
        let (row, counted) = &rows[0];
        let counted = counted.as_ref().expect("mapped to the terms");
        assert_eq!(*row, 1);
        assert_eq!(counted.tokens, 7);
        assert_eq!(counted.tf, vec![2, 2], "email and Emails; failed twice");
        // A blob whose phrases are not the terms' is refused, so that the text is read.
        let (_, phrases) = fts_hits::decode(&fts_hits_blob(7, &[1, 1])).unwrap();
        assert_eq!(phrases.len(), 2);
        assert!(per_term(&fts_hits_blob(7, &[1, 1]), &terms).is_none());
        assert!(per_term(&[1, 2, 3], &terms).is_none());
        // Nor are counts that miss a term of a full match, or a row of no length.
        let phrases = terms.iter().map(|t| 1 + t.forms.len()).sum::<usize>();
        let mut each = vec![1u32; phrases];
        assert!(per_term(&fts_hits_blob(7, &each), &terms).is_some());
        assert!(per_term(&fts_hits_blob(0, &each), &terms).is_none());
        each[..=terms[0].forms.len()].fill(0);
        assert!(per_term(&fts_hits_blob(7, &each), &terms).is_none());
    }

    fn fts_hits_blob(tokens: u32, phrases: &[u32]) -> Vec<u8> {
        std::iter::once(tokens)
            .chain(phrases.iter().copied())
            .flat_map(u32::to_le_bytes)
            .collect()
    }

    #[test]
    fn rows_counted_by_the_index_score_as_rows_read_with_their_text() {
        let dir = tempfile::tempdir().unwrap();
        let texts = [
            "webhook signature",
            "the webhook signature check failed: webhook secrets rotated",
            "Webhook: signature mismatch again, and the signature header was empty",
            "a long message about many things, among them a webhook and its signature, \
             that goes on and on about the deploy and the cluster and the registry",
            "no match here",
        ];
        let conn = archive(dir.path(), &texts);
        let terms = query::parse_query("webhook signature");
        let dfs = vec![4.0, 4.0];
        let args = vec![Sql::Text(query::match_expr(&terms))];
        let full = newest_counted(&conn, "messages_fts", "", "1", args, 10, &terms).unwrap();
        assert_eq!(full.len(), 4);
        let ids: Vec<i64> = full.iter().map(|f| f.0).collect();
        let counted: Vec<(i64, Counted)> = full.into_iter().map(|(r, c)| (r, c.unwrap())).collect();
        let by_index = Ranked {
            counted,
            read: Vec::new(),
            all_terms: 0,
        };
        let read = layer_rows(&conn, &ids, &Filter::default(), Layer::Raw).unwrap();
        let by_text = Ranked {
            counted: Vec::new(),
            all_terms: read.len(),
            read,
        };
        let rank = |r| bm25_rank(&conn, "messages_fts", Layer::Raw, &terms, &dfs, r, 10).unwrap();
        let (a, b) = (rank(by_index), rank(by_text));
        let rows = |hits: &[Hit]| hits.iter().map(|h| h.row).collect::<Vec<_>>();
        assert_eq!(rows(&a), rows(&b));
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x.score - y.score).abs() < 1e-9,
                "{} {} {}",
                x.row,
                x.score,
                y.score
            );
            assert_eq!((&x.terms, &x.snippet), (&y.terms, &y.snippet));
        }
        // The short row with both words first; the long one where they are diluted last.
        assert_eq!(rows(&a).first(), Some(&1));
        assert_eq!(rows(&a).last(), Some(&4));
        assert!(a[0].snippet.contains("**webhook**"), "{}", a[0].snippet);
    }

    #[test]
    fn half_the_words_rounded_down_make_an_answer() {
        let least: Vec<usize> = (1..=6).map(least_terms).collect();
        assert_eq!(least, vec![1, 1, 1, 2, 2, 3]);
    }
}
