//! A local model's linear layers as the int8 kernels use them (quantized and laid out), kept in
//! a file beside the checkpoint (`<checkpoint>.int8`), so that a process that embeds one query
//! (`memex search` without the service) maps them instead of quantizing 90 MB of floats.
//!
//! The file is a cache. It names the checkpoint it was made from (file name, size, modification
//! time), the layout's version ([`int8::PACKING`]) and holds a CRC-32 of its content: when any
//! of them does not match, it is not read, the layers are built from the checkpoint, and a new
//! file replaces it (written under a temporary name and renamed, so a reader never sees it half
//! written). Where the folder cannot be written, the layers are built on every load, as without
//! the file.
//!
//! Layout, little-endian: a header of [`HEADER`] bytes (magic, format, packing, layer count,
//! stamp length, table length, CRC-32 of everything after the header); the
//! stamp; the table (per layer: name length as u16, the name, outputs and inputs as u32); then
//! per layer, each run starting at a multiple of [`ALIGN`] bytes: its weight bytes, and per
//! padded output its scales (f32), weight sums (i32) and biases (f32).

use std::cell::RefCell;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cache_file::{self, Cursor, Unusable};
use super::encoder::Dense;
use super::int8::{self, Bytes, Packed};

const MAGIC: &[u8; 8] = b"MEMEXI8\0";
const FORMAT: u32 = 1;
const HEADER: usize = 32;
const ALIGN: usize = 64;
/// More outputs than any layer of a model Memex loads has (the bound keeps sizes in range).
const MAX_OUTPUTS: usize = 1 << 20;

/// The file of packed layers for the checkpoint at `checkpoint`.
pub(crate) fn path_for(checkpoint: &Path) -> PathBuf {
    cache_file::beside(checkpoint, ".int8")
}

/// The byte range of a run of `len` bytes placed at the next multiple of [`ALIGN`] from `at`.
fn place(at: &mut usize, len: usize) -> Range<usize> {
    let start = at.next_multiple_of(ALIGN);
    *at = start + len;
    start..*at
}

/// Where a layer of `n` outputs and `k` inputs lies when it is placed at `at`: its weight
/// bytes, scales, sums and biases. `n` ≤ [`MAX_OUTPUTS`] and `k` ≤ [`int8::MAX_INPUTS`] keep
/// a layer under 2^37 bytes, so the sums cannot overflow below `at` ≈ 2^63.
fn runs(n: usize, k: usize, at: &mut usize) -> [Range<usize>; 4] {
    let (bytes, padded) = Packed::sizes(n, k);
    [bytes, padded * 4, padded * 4, padded * 4].map(|len| place(at, len))
}

/// One layer of a read file.
struct Entry {
    name: String,
    n: usize,
    k: usize,
    runs: [Range<usize>; 4],
}

/// A file of packed layers, read and checked.
struct Stored {
    map: Arc<memmap2::Mmap>,
    entries: Vec<Entry>,
}

fn i32s(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

impl Stored {
    /// The file at `path`, when it is whole and was made from the checkpoint `stamp` names
    /// with this layout; else why not.
    fn read(path: &Path, stamp: &[u8]) -> Result<Stored, Unusable> {
        let map = cache_file::map(path)?;
        let mut c = Cursor(&map);
        if c.take(MAGIC.len())? != MAGIC {
            return Err(Unusable::OtherKind("file of packed layers"));
        }
        let (format, packing, count) = (c.u32()?, c.u32()?, c.u32()? as usize);
        let (stamp_len, table_len, crc) = (c.u32()? as usize, c.u32()? as usize, c.u32()?);
        debug_assert_eq!(map.len() - c.0.len(), HEADER);
        if (format, packing) != (FORMAT, int8::PACKING) {
            return Err(Unusable::OtherLayout(format!("{format}/{packing:#x}")));
        }
        if c.take(stamp_len)? != stamp {
            return Err(Unusable::OtherSource("checkpoint"));
        }
        // The structure first (cheap, and it bounds every range by the file's length), then
        // the checksum over all of it.
        let mut table = Cursor(c.take(table_len)?);
        let start = (HEADER + stamp_len + table_len).next_multiple_of(ALIGN);
        let mut at = start;
        let mut entries = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            let len = usize::from(table.u16()?);
            let name = std::str::from_utf8(table.take(len)?)
                .map_err(|_| Unusable::Inconsistent("a layer name is not UTF-8".into()))?
                .to_owned();
            let (n, k) = (table.u32()? as usize, table.u32()? as usize);
            if !(1..=MAX_OUTPUTS).contains(&n) || !(1..=int8::MAX_INPUTS).contains(&k) {
                return Err(Unusable::Inconsistent(format!(
                    "{name} has {n} outputs and {k} inputs"
                )));
            }
            entries.push(Entry {
                runs: runs(n, k, &mut at),
                name,
                n,
                k,
            });
            if at > map.len() {
                return Err(Unusable::Inconsistent(format!(
                    "{} bytes are too few for its layers",
                    map.len()
                )));
            }
        }
        if !table.0.is_empty() {
            return Err(Unusable::Inconsistent(
                "its table is longer than its layers".into(),
            ));
        }
        if at != map.len() {
            return Err(Unusable::Inconsistent(format!(
                "it holds {} bytes, its layers need {at}",
                map.len()
            )));
        }
        if crc32fast::hash(&map[HEADER..]) != crc {
            return Err(Unusable::Checksum);
        }
        Ok(Stored {
            map: Arc::new(map),
            entries,
        })
    }

    /// Layer `i` when it is `name` with that shape.
    fn layer(&self, i: usize, name: &str, n: usize, k: usize) -> Option<Dense> {
        let e = self.entries.get(i)?;
        if (e.name.as_str(), e.n, e.k) != (name, n, k) {
            return None;
        }
        let [data, scale, sums, bias] = e.runs.clone();
        let packed = Packed::from_parts(
            (n, k),
            Bytes::Mapped {
                map: self.map.clone(),
                range: data,
            },
            super::f32s(&self.map[scale]),
            i32s(&self.map[sums]),
            super::f32s(&self.map[bias]),
        )?;
        Some(Dense::from_packed(packed))
    }
}

/// The layers built in this process, laid out as the file holds them.
#[derive(Default)]
struct Built {
    table: Vec<u8>,
    count: u32,
    payload: Vec<u8>,
    /// A layer that the format cannot hold (a name over 64 KiB): nothing is written.
    unfit: bool,
}

impl Built {
    fn add(&mut self, name: &str, p: &Packed) {
        let parts = p.parts();
        let (Ok(len), Ok(n), Ok(k)) = (
            u16::try_from(name.len()),
            u32::try_from(parts.n),
            u32::try_from(parts.k),
        ) else {
            self.unfit = true;
            return;
        };
        self.table.extend_from_slice(&len.to_le_bytes());
        self.table.extend_from_slice(name.as_bytes());
        self.table.extend_from_slice(&n.to_le_bytes());
        self.table.extend_from_slice(&k.to_le_bytes());
        self.count += 1;
        let mut at = self.payload.len();
        let [data, scale, sums, bias] = runs(parts.n, parts.k, &mut at);
        let mut run = |r: Range<usize>, bytes: &mut dyn Iterator<Item = u8>| {
            self.payload.resize(r.start, 0);
            self.payload.extend(bytes);
            debug_assert_eq!(self.payload.len(), r.end);
        };
        run(data, &mut parts.data.iter().map(|&b| b as u8));
        run(scale, &mut parts.scale.iter().flat_map(|v| v.to_le_bytes()));
        run(sums, &mut parts.sums.iter().flat_map(|v| v.to_le_bytes()));
        run(bias, &mut parts.bias.iter().flat_map(|v| v.to_le_bytes()));
    }

    /// Writes the file at `path` (under a temporary name, then renamed over it; private to
    /// its owner).
    fn write(&self, path: &Path, stamp: &[u8]) -> std::io::Result<()> {
        let too_long = || std::io::Error::other("the stamp or the table is too long");
        let stamp_len = u32::try_from(stamp.len()).map_err(|_| too_long())?;
        let table_len = u32::try_from(self.table.len()).map_err(|_| too_long())?;
        let mut body = Vec::with_capacity(stamp.len() + self.table.len() + ALIGN);
        body.extend_from_slice(stamp);
        body.extend_from_slice(&self.table);
        body.resize((HEADER + body.len()).next_multiple_of(ALIGN) - HEADER, 0);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&body);
        crc.update(&self.payload);
        let mut head = Vec::with_capacity(HEADER);
        head.extend_from_slice(MAGIC);
        for v in [
            FORMAT,
            int8::PACKING,
            self.count,
            stamp_len,
            table_len,
            crc.finalize(),
        ] {
            head.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(head.len(), HEADER);
        cache_file::write(path, &[&head, &body, &self.payload])
    }
}

/// Where a model's linear layers come from while it loads: the file of packed layers when it
/// holds them, else the checkpoint (and then the file is written for the next load). Layers
/// are asked for by name, in the same order on every load.
pub(crate) struct Layers {
    path: PathBuf,
    /// `None`: no file is read or written (f32 layers, or the checkpoint cannot be stat'ed).
    stamp: Option<Vec<u8>>,
    int8: bool,
    state: RefCell<State>,
}

#[derive(Default)]
struct State {
    stored: Option<Stored>,
    /// Layers handed out from the file.
    read: usize,
    built: Built,
    /// A layer the file does not hold as asked: the file is removed when the load ends.
    stale: bool,
}

impl Layers {
    /// The layers of the model whose checkpoint is `checkpoint`, with its [`stamp`](cache_file::stamp); `int8`:
    /// whether its linear layers are to be held in 8-bit integers (only those are kept in a
    /// file).
    pub(crate) fn open(checkpoint: &Path, stamp: Option<Vec<u8>>, int8: bool) -> Layers {
        let path = path_for(checkpoint);
        let stamp = stamp.filter(|_| int8 && int8::available());
        let stored = stamp.as_deref().and_then(|s| {
            Stored::read(&path, s)
                .inspect_err(|why| {
                    if path.exists() {
                        tracing::debug!("not reading {}: {why}", path.display());
                    }
                })
                .ok()
        });
        Layers {
            path,
            stamp,
            int8,
            state: RefCell::new(State {
                stored,
                ..State::default()
            }),
        }
    }

    /// The layer `name` of `n` outputs and `k` inputs: from the file, else from its weights
    /// (`n` rows of `k`) and bias, which `weights` reads from the checkpoint.
    pub(crate) fn dense<E>(
        &self,
        name: &str,
        (n, k): (usize, usize),
        weights: impl FnOnce() -> Result<(Vec<f32>, Vec<f32>), E>,
    ) -> Result<Dense, E> {
        self.layer(name, (n, k), || {
            let (w, b) = weights()?;
            Ok(Dense::new(w, b, n, k, self.int8))
        })
    }

    /// Several layers of `k` inputs that read the same input, as one of `n` outputs (see
    /// [`Dense::stacked`]).
    pub(crate) fn stacked<E>(
        &self,
        name: &str,
        (n, k): (usize, usize),
        parts: impl FnOnce() -> Result<Vec<(Vec<f32>, Vec<f32>)>, E>,
    ) -> Result<Dense, E> {
        self.layer(name, (n, k), || Ok(Dense::stacked(parts()?, k, self.int8)))
    }

    fn layer<E>(
        &self,
        name: &str,
        (n, k): (usize, usize),
        build: impl FnOnce() -> Result<Dense, E>,
    ) -> Result<Dense, E> {
        let mut st = self.state.borrow_mut();
        if let Some(stored) = &st.stored {
            if let Some(d) = stored.layer(st.read, name, n, k) {
                st.read += 1;
                return Ok(d);
            }
            st.stale = true;
            st.stored = None;
        }
        drop(st);
        let d = build()?;
        if let (Some(p), Some(_)) = (d.packed(), &self.stamp) {
            self.state.borrow_mut().built.add(name, p);
        }
        Ok(d)
    }

    /// Ends the load: writes the file when every layer was built here, removes it when it did
    /// not match (best effort: a folder that cannot be written keeps the layers in memory only).
    pub(crate) fn finish(self) {
        let Some(stamp) = self.stamp else { return };
        let st = self.state.into_inner();
        let all_built = st.read == 0 && st.built.count > 0 && !st.built.unfit;
        let result = if st.stale && !all_built {
            std::fs::remove_file(&self.path)
        } else if all_built {
            st.built.write(&self.path, &stamp)
        } else {
            Ok(())
        };
        if let Err(e) = result {
            tracing::debug!("cannot keep packed layers in {}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer's name, outputs, inputs, weights and bias.
    type Layer = (String, usize, usize, Vec<f32>, Vec<f32>);

    /// A small model's layers, values from a seed.
    fn layers() -> Vec<Layer> {
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        [(40, 24), (96, 40), (40, 96)]
            .iter()
            .enumerate()
            .map(|(i, &(n, k))| {
                let w = (0..n * k).map(|_| next()).collect();
                let b = (0..n).map(|_| next()).collect();
                (format!("layer.{i}"), n, k, w, b)
            })
            .collect()
    }

    fn open(checkpoint: &Path, int8: bool) -> Layers {
        let f = std::fs::File::open(checkpoint).unwrap();
        Layers::open(checkpoint, cache_file::stamp(checkpoint, &f), int8)
    }

    /// The layer of `n` outputs and `k` inputs applied to three fixed rows.
    fn outputs(d: &Dense, n: usize, k: usize) -> Vec<f32> {
        let x: Vec<f32> = (0..k * 3).map(|i| (i % 13) as f32 / 7.0 - 0.9).collect();
        let mut out = vec![0f32; n * 3];
        d.apply_rows(&x, &mut out);
        out
    }

    /// Loads the layers through `Layers` (counting the ones read from the checkpoint) and
    /// applies each to a fixed input.
    fn load(checkpoint: &Path) -> (usize, Vec<Vec<f32>>) {
        let from = open(checkpoint, true);
        let mut from_checkpoint = 0;
        let mut outs = Vec::new();
        for (name, n, k, w, b) in layers() {
            let d = from
                .dense(&name, (n, k), || {
                    from_checkpoint += 1;
                    Ok::<_, ()>((w, b))
                })
                .unwrap();
            outs.push(outputs(&d, n, k));
        }
        from.finish();
        (from_checkpoint, outs)
    }

    /// A folder with a checkpoint file in it, on CPUs whose layers can be packed.
    fn a_checkpoint() -> Option<(tempfile::TempDir, PathBuf)> {
        if !int8::available() {
            eprintln!("skipped: this CPU has no AVX-512 VNNI, the layers stay in f32");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = dir.path().join("model.bin");
        std::fs::write(&checkpoint, b"the checkpoint").unwrap();
        Some((dir, checkpoint))
    }

    #[test]
    fn a_model_loaded_again_reads_its_packed_layers_and_computes_the_same() {
        let Some((dir, checkpoint)) = a_checkpoint() else {
            return;
        };
        let file = path_for(&checkpoint);
        assert_eq!(file, dir.path().join("model.bin.int8"));

        // First load: every layer from the checkpoint, and the file is written, private.
        let (built, first) = load(&checkpoint);
        assert_eq!(built, 3);
        let meta = std::fs::metadata(&file).unwrap();
        #[cfg(unix)]
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o600
        );
        // Second load: none from the checkpoint, the same outputs to the bit.
        let (built, second) = load(&checkpoint);
        assert_eq!(built, 0);
        assert_eq!(first, second);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");

        // A byte changed anywhere: not read, built again, and the file is made whole again.
        let mut bytes = std::fs::read(&file).unwrap();
        let at = bytes.len() - 100;
        bytes[at] ^= 0x40;
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(load(&checkpoint), (3, first.clone()));
        assert_eq!(load(&checkpoint), (0, first.clone()));

        // Cut short: the same.
        let bytes = std::fs::read(&file).unwrap();
        std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
        assert_eq!(load(&checkpoint), (3, first.clone()));
        // Not a file of packed layers at all.
        std::fs::write(&file, b"something else").unwrap();
        assert_eq!(load(&checkpoint), (3, first.clone()));
        assert_eq!(load(&checkpoint), (0, first.clone()));

        // Its structure wrong under a right checksum: never read past its end, never used.
        let good = std::fs::read(&file).unwrap();
        let stamp_len = u32::from_le_bytes(good[20..24].try_into().unwrap()) as usize;
        let table = HEADER + stamp_len;
        let mut more_layers = good.clone();
        more_layers[16] += 1;
        let mut wider = good.clone();
        // The first layer's outputs (after its name's length and its 7-byte name).
        wider[table + 2 + 7] += 32;
        let mut huge = good.clone();
        huge[table + 2 + 7..table + 2 + 11].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut short = good.clone();
        short.truncate(good.len() - 64);
        let mut longer = good.clone();
        longer.extend_from_slice(&[0; 64]);
        for (what, bytes) in [
            ("one layer more", more_layers),
            ("a wider first layer", wider),
            ("a layer of 4 G outputs", huge),
            ("64 bytes short", short),
            ("64 bytes more", longer),
        ] {
            std::fs::write(&file, cache_file::with_checksum(bytes)).unwrap();
            assert_eq!(load(&checkpoint), (3, first.clone()), "{what}");
            assert_eq!(std::fs::read(&file).unwrap(), good, "{what}");
        }

        // A new checkpoint (another size): its layers are built, not read from the old file.
        std::fs::write(&checkpoint, b"another checkpoint").unwrap();
        assert_eq!(load(&checkpoint).0, 3);
        assert_eq!(load(&checkpoint).0, 0);
        // The same size, another modification time: the same.
        let f = std::fs::File::options()
            .write(true)
            .open(&checkpoint)
            .unwrap();
        f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
            .unwrap();
        drop(f);
        assert_eq!(load(&checkpoint).0, 3);
        assert_eq!(load(&checkpoint).0, 0);
    }

    #[test]
    fn a_file_that_lists_other_layers_is_dropped_not_half_used() {
        let Some((_dir, checkpoint)) = a_checkpoint() else {
            return;
        };
        let (_, want) = load(&checkpoint);
        // The same stamp, but the second layer asked for under another name: the first comes
        // from the file, the rest from the checkpoint, and the file is removed.
        let from = open(&checkpoint, true);
        let mut got = Vec::new();
        for (i, (name, n, k, w, b)) in layers().into_iter().enumerate() {
            let name = if i == 1 { "renamed".to_owned() } else { name };
            let d = from.dense(&name, (n, k), || Ok::<_, ()>((w, b))).unwrap();
            got.push(outputs(&d, n, k));
        }
        from.finish();
        assert_eq!(got, want);
        assert!(!path_for(&checkpoint).exists());
        // The next load writes it again, whole.
        assert_eq!(load(&checkpoint).0, 3);
        assert_eq!(load(&checkpoint), (0, want));
    }

    #[test]
    fn layers_in_f32_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = dir.path().join("model.bin");
        std::fs::write(&checkpoint, b"the checkpoint").unwrap();
        let from = open(&checkpoint, false);
        let (name, n, k, w, b) = layers().remove(0);
        let d = from.dense(&name, (n, k), || Ok::<_, ()>((w, b))).unwrap();
        assert!(d.packed().is_none());
        from.finish();
        assert!(!path_for(&checkpoint).exists());
    }
}
