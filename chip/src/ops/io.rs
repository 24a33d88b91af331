//! Kernel-side access to tensors in device memory, knowing only the spec and the address.
//!
//! Float TILE tensors take a fast path: each tile page is decoded from device memory into its
//! place in the logical row-major result (and encoded from it), one band of 32 rows per rayon
//! task, with no staging copy of the whole tensor. Full bands of whole tiles go a row at a
//! time through a 32 KiB group of pages (`Tiles::by_rows`); edge bands a tile at a time. Both
//! give the same values as the generic path (`encode_pages` / `decode_pages`), which
//! everything else takes. The conversions themselves are in `convert`.

mod convert;

use std::cell::RefCell;

use rayon::prelude::*;

use crate::allocator::MemSpace;
use crate::error::{ChipError, Result};
use crate::format::{TILE_ELEMS, TILE_HEIGHT, TILE_WIDTH};
use crate::memory::HeldReads;
use crate::program::KernelContext;
use crate::tensor::{
    decode_pages, encode_pages, DataType, HostData, Layout, TensorPages, TensorSpec,
};
use convert::{decode_rows_fast, decode_tile_fast, encode_rows_fast, encode_tile_fast};
pub(super) use convert::{decode_run, Bf16Rows, Bfp4Rows, Bfp8Rows, F32Rows, TileRowDecode};

/// Reads every page of a tensor at `address` and decodes its logical values.
pub fn read_logical(ctx: &KernelContext, spec: &TensorSpec, address: u32) -> Result<HostData> {
    if let Some(v) = read_tiles_f32(ctx, spec, address)? {
        return Ok(HostData::F32(v));
    }
    let pages = spec.page_map(ctx.arch, address as u64)?;
    let page = pages.map.page_size as usize;
    let mut bytes = vec![0u8; pages.map.num_pages as usize * page];
    for (p, dst) in bytes.chunks_exact_mut(page).enumerate() {
        let (bank, addr) = pages.location(p as u64);
        ctx.memory.read(pages.map.space, bank, addr, dst)?;
    }
    decode_pages(spec, &bytes)
}

/// Encodes logical values into a tensor's pages at `address`.
pub fn write_logical(
    ctx: &KernelContext,
    spec: &TensorSpec,
    address: u32,
    data: &HostData,
) -> Result<()> {
    if let HostData::F32(v) = data {
        if write_tiles_f32(ctx, spec, address, v)? {
            return Ok(());
        }
    }
    let pages = spec.page_map(ctx.arch, address as u64)?;
    let page = pages.map.page_size as usize;
    let bytes = encode_pages(spec, data)?;
    for (p, src) in bytes.chunks_exact(page).enumerate() {
        let (bank, addr) = pages.location(p as u64);
        ctx.memory.write(pages.map.space, bank, addr, src)?;
    }
    Ok(())
}

thread_local! {
    /// Large f32 buffers a kernel gave back, reused by the next kernel on this (dispatcher)
    /// thread: fresh multi-MB allocations go back to the OS when freed, and faulting their
    /// pages in again costs as much as decoding them.
    static POOL: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// Buffers smaller than this are not worth pooling; the pool keeps at most `POOL_BYTES`.
const POOL_MIN_ELEMS: usize = 1 << 15;
const POOL_BYTES: usize = 64 << 20;

/// A buffer of `len` f32 values with unspecified (but initialized) contents, pooled if large:
/// for callers that overwrite every element.
pub(crate) fn take_f32(len: usize) -> Vec<f32> {
    if len >= POOL_MIN_ELEMS {
        let reused = POOL.with(|p| {
            let mut p = p.borrow_mut();
            let i = p.iter().position(|v| v.capacity() >= len)?;
            Some(p.swap_remove(i))
        });
        if let Some(mut v) = reused {
            v.resize(len, 0.0);
            return v;
        }
    }
    vec![0f32; len]
}

/// Gives a buffer back to this thread's pool.
pub(crate) fn recycle_f32(v: Vec<f32>) {
    if v.capacity() < POOL_MIN_ELEMS {
        return;
    }
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        p.push(v);
        // Keep the largest buffers within the budget.
        p.sort_unstable_by_key(|v| std::cmp::Reverse(v.capacity()));
        let mut total = 0;
        p.retain(|v| {
            total += v.capacity() * 4;
            total <= POOL_BYTES
        });
    });
}

/// Reads a float tensor as f32 values.
pub(crate) fn read_f32(ctx: &KernelContext, spec: &TensorSpec, address: u32) -> Result<Vec<f32>> {
    Ok(match read_logical(ctx, spec, address)? {
        HostData::F32(v) => v,
        HostData::U32(v) => v.into_iter().map(|x| x as f32).collect(),
    })
}

/// Reads two float tensors; large ones side by side on the rayon pool (one hand-off for both).
pub(crate) fn read_two_f32(
    ctx: &KernelContext,
    a: (&TensorSpec, u32),
    b: (&TensorSpec, u32),
) -> Result<(Vec<f32>, Vec<f32>)> {
    let fast = tiles(ctx, a.0, a.1)?.is_some() && tiles(ctx, b.0, b.1)?.is_some();
    // Below a million values both decode here, one after the other: with AVX2 a 512x512 pair
    // takes ~65 us that way, and handing one to a pool thread measured no faster (64-87 us:
    // the thread's wake-up). At 1024x1024 the pair wins (matmul 0.86-0.88x sgemm vs 0.82x).
    if !fast || a.0.volume() + b.0.volume() < PAR_MIN_ELEMS {
        return Ok((read_f32(ctx, a.0, a.1)?, read_f32(ctx, b.0, b.1)?));
    }
    // The buffers come from this (dispatcher) thread's pool: the pool is per thread, and
    // the two decodes run on rayon's threads.
    let (mut x, mut y) = (take_f32(a.0.volume()), take_f32(b.0.volume()));
    // b goes to a rayon thread while this thread decodes a: no wait for a pool thread to
    // wake before any work starts (a wake-up costs tens of microseconds here).
    let mut ry = Ok(false);
    let rx = rayon::in_place_scope(|s| {
        s.spawn(|_| ry = read_tiles_into(ctx, b.0, b.1, &mut y));
        read_tiles_into(ctx, a.0, a.1, &mut x)
    });
    rx?;
    ry?;
    Ok((x, y))
}

/// Copies every page of `input` at `src` to `out` at `dst` unchanged (same dtype, layout and
/// shape, any memory configs): what a reshard or a memory-config change does to the bytes.
pub(crate) fn copy_pages(
    ctx: &KernelContext,
    input: &TensorSpec,
    src: u32,
    out: &TensorSpec,
    dst: u32,
) -> Result<()> {
    let (from, to) = (
        input.page_map(ctx.arch, src as u64)?,
        out.page_map(ctx.arch, dst as u64)?,
    );
    let page = from.map.page_size as usize;
    if page != to.map.page_size as usize || from.map.num_pages != to.map.num_pages {
        return Err(ChipError::Kernel {
            kernel: "copy_pages".into(),
            chip: ctx.chip,
            reason: format!("page layouts differ: {input} vs {out}"),
        });
    }
    // Staged through a buffer: source and destination may be the same bank.
    let mut scratch = vec![0u8; page];
    for p in 0..from.map.num_pages {
        let (sb, sa) = from.location(p);
        let (db, da) = to.location(p);
        ctx.memory.read(from.map.space, sb, sa, &mut scratch)?;
        ctx.memory.write(to.map.space, db, da, &scratch)?;
    }
    Ok(())
}

/// Geometry of a float TILE tensor for the fast paths: None when they do not apply.
struct Tiles {
    pages: TensorPages,
    space: MemSpace,
    dtype: DataType,
    h: usize,
    w: usize,
    ht: usize,
    wt: usize,
    page: usize,
}

/// Pages converted together by rows: 32 KiB of them stay in the L1 cache between the copy
/// and the conversion.
const GROUP_BYTES: usize = 32 << 10;

impl Tiles {
    /// True if a band of `rows` rows is converted row by row through a group of pages: full
    /// bands of whole bf16 or f32 tiles. A tile at a time writes the f32 side 32 rows apart
    /// (2 KiB at width 512); a row at a time writes it in order, reading the pages from a
    /// small copy in L1. Decoding a 512x512 bf16 matmul's two operands: 171-190 -> 142-155 us
    /// (six runs each, alternated); the encode of its output came out even (89-104 us).
    fn by_rows(&self, rows: usize) -> bool {
        rows == TILE_HEIGHT
            && self.w.is_multiple_of(TILE_WIDTH)
            && matches!(self.dtype, DataType::BFloat16 | DataType::Float32)
            && self.page == self.dtype.tile_bytes() as usize
    }

    /// Tiles per group (at least one).
    fn group_tiles(&self) -> usize {
        (GROUP_BYTES / self.page.max(1)).clamp(1, self.wt.max(1))
    }

    /// Scratch bytes a band needs: a group of pages if any band goes by rows, else a page
    /// (a decode step's one-row activations read 2 KiB pages, not a zeroed 32 KiB).
    fn scratch_bytes(&self) -> usize {
        if self.h >= TILE_HEIGHT && self.by_rows(TILE_HEIGHT) {
            self.group_tiles() * self.page
        } else {
            self.page
        }
    }
}

fn tiles(ctx: &KernelContext, spec: &TensorSpec, address: u32) -> Result<Option<Tiles>> {
    if spec.layout != Layout::Tile || !spec.dtype.is_float() {
        return Ok(None);
    }
    let pages = spec.page_map(ctx.arch, address as u64)?;
    let (h, w) = spec.height_width();
    let space = pages.map.space;
    let page = pages.map.page_size as usize;
    Ok(Some(Tiles {
        pages,
        space,
        dtype: spec.dtype,
        h,
        w,
        ht: h.div_ceil(TILE_HEIGHT),
        wt: w.div_ceil(TILE_WIDTH),
        page,
    }))
}

/// Below this many elements a tensor is decoded on the calling thread: a hand-off to the
/// rayon pool costs tens of microseconds, more than small tensors take. 2^18 (a 512x512
/// matmul's operands decoded, and its output encoded, on two threads) was re-measured with
/// AVX-512 and gained nothing: matmul 512 bf16 against sgemm, 12 alternated runs, median
/// ratio 0.77 at 2^20 and 0.765 at 2^18 (both 0.69-0.86 on a busy host).
const PAR_MIN_ELEMS: usize = 1 << 20;

/// Splits row-major data of `batch` slices of `h x w` into bands of up to 32 rows:
/// (batch, tile row, band).
fn bands<T>(data: &mut [T], h: usize, w: usize) -> Vec<(usize, usize, &mut [T])> {
    data.chunks_mut(h * w)
        .enumerate()
        .flat_map(|(b, s)| {
            s.chunks_mut(TILE_HEIGHT * w)
                .enumerate()
                .map(move |(tr, band)| (b, tr, band))
        })
        .collect()
}

/// Runs `f` over bands, in parallel (with per-task scratch from `init`) when they are large.
fn for_bands<B: Send, S>(
    bands: Vec<B>,
    elems: usize,
    band_elems: usize,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, B) -> Result<()> + Sync + Send,
) -> Result<()> {
    if elems < PAR_MIN_ELEMS {
        let mut scratch = init();
        return bands.into_iter().try_for_each(|b| f(&mut scratch, b));
    }
    let per_task = (PAR_MIN_ELEMS / 2).div_ceil(band_elems.max(1));
    bands
        .into_par_iter()
        .with_min_len(per_task)
        .try_for_each_init(init, |s, b| f(s, b))
}

fn read_tiles_f32(
    ctx: &KernelContext,
    spec: &TensorSpec,
    address: u32,
) -> Result<Option<Vec<f32>>> {
    if tiles(ctx, spec, address)?.is_none() {
        return Ok(None);
    }
    let mut out = take_f32(spec.volume()); // every element is written below
    read_tiles_into(ctx, spec, address, &mut out)?;
    Ok(Some(out))
}

/// Decodes a float TILE tensor into `out` (its logical volume long); false if the fast path
/// does not apply to `spec`.
fn read_tiles_into(
    ctx: &KernelContext,
    spec: &TensorSpec,
    address: u32,
    out: &mut [f32],
) -> Result<bool> {
    let Some(t) = tiles(ctx, spec, address)? else {
        return Ok(false);
    };
    let elems = spec.batch() * t.h * t.w;
    if out.len() != elems {
        return Err(ChipError::Data(format!(
            "{} values for {spec}, expected {elems}",
            out.len()
        )));
    }
    if elems == 0 {
        return Ok(true);
    }
    for_bands(
        bands(out, t.h, t.w),
        elems,
        TILE_HEIGHT * t.w,
        || (vec![0u8; t.scratch_bytes()], vec![0f32; TILE_ELEMS]),
        |(scratch, tile), (b, tr, band)| {
            let rows = band.len() / t.w;
            let first = (b * t.ht + tr) * t.wt;
            // A band's pages under each bank's read lock taken once (nothing here waits).
            let mut reads = ctx.memory.held_reads(t.space);
            if t.by_rows(rows) {
                for tc0 in (0..t.wt).step_by(t.group_tiles()) {
                    let group = &mut scratch[..t.group_tiles().min(t.wt - tc0) * t.page];
                    for (i, page) in group.chunks_exact_mut(t.page).enumerate() {
                        let (bank, addr) = t.pages.location((first + tc0 + i) as u64);
                        reads.read(bank, addr, page)?;
                    }
                    decode_rows_fast(t.dtype, group, t.page, band, t.w, tc0)?;
                }
                return Ok(());
            }
            for tc in 0..t.wt {
                let (bank, addr) = t.pages.location((first + tc) as u64);
                reads.read_with(bank, addr, &mut scratch[..t.page], |bytes| {
                    decode_tile_fast(t.dtype, bytes, tile, band, rows, tc, t.w)
                })??;
            }
            Ok(())
        },
    )?;
    Ok(true)
}

fn write_tiles_f32(
    ctx: &KernelContext,
    spec: &TensorSpec,
    address: u32,
    data: &[f32],
) -> Result<bool> {
    let Some(t) = tiles(ctx, spec, address)? else {
        return Ok(false);
    };
    let elems = spec.batch() * t.h * t.w;
    if data.len() != elems {
        return Err(ChipError::Data(format!(
            "{} values for {spec}, expected {elems}",
            data.len()
        )));
    }
    if elems == 0 {
        return Ok(true);
    }
    let bands: Vec<(usize, usize, &[f32])> = data
        .chunks(t.h * t.w)
        .enumerate()
        .flat_map(|(b, s)| {
            s.chunks(TILE_HEIGHT * t.w)
                .enumerate()
                .map(move |(tr, band)| (b, tr, band))
        })
        .collect();
    for_bands(
        bands,
        elems,
        TILE_HEIGHT * t.w,
        || (vec![0u8; t.scratch_bytes()], vec![0f32; TILE_ELEMS]),
        |(scratch, tile), (b, tr, band)| {
            let rows = band.len() / t.w;
            let first = (b * t.ht + tr) * t.wt;
            if t.by_rows(rows) {
                for tc0 in (0..t.wt).step_by(t.group_tiles()) {
                    let group = &mut scratch[..t.group_tiles().min(t.wt - tc0) * t.page];
                    encode_rows_fast(t.dtype, band, t.w, tc0, group, t.page)?;
                    for (i, page) in group.chunks_exact(t.page).enumerate() {
                        let (bank, addr) = t.pages.location((first + tc0 + i) as u64);
                        ctx.memory.write(t.space, bank, addr, page)?;
                    }
                }
                return Ok(());
            }
            let bytes = &mut scratch[..t.page];
            for tc in 0..t.wt {
                encode_tile_fast(t.dtype, band, rows, tc, t.w, tile, bytes)?;
                let (bank, addr) = t.pages.location((first + tc) as u64);
                ctx.memory.write(t.space, bank, addr, bytes)?;
            }
            Ok(())
        },
    )?;
    Ok(true)
}

/// Random access to the tiles of a float TILE tensor, each decoded to a row-major 32x32 block:
/// for kernels that stream a large operand tile by tile instead of decoding it whole.
pub(crate) struct TileReader<'a> {
    ctx: &'a KernelContext<'a>,
    t: Tiles,
}

impl<'a> TileReader<'a> {
    /// None when `spec` is not a float TILE tensor.
    pub(crate) fn new(
        ctx: &'a KernelContext<'a>,
        spec: &TensorSpec,
        address: u32,
    ) -> Result<Option<Self>> {
        Ok(tiles(ctx, spec, address)?.map(|t| Self { ctx, t }))
    }

    /// Tiles per matrix: (rows of tiles, columns of tiles).
    pub(crate) fn grid(&self) -> (usize, usize) {
        (self.t.ht, self.t.wt)
    }

    /// Scratch a reader needs per thread: (page bytes, bfp8 unpacking).
    pub(crate) fn scratch(&self) -> (Vec<u8>, Vec<f32>) {
        (vec![0u8; self.t.page], vec![0f32; TILE_ELEMS])
    }

    /// Starts loading tile (`tr`, `tc`)'s page into the host's cache (a hint; see
    /// `DeviceMemory::prefetch`).
    pub(crate) fn prefetch(&self, reads: &mut HeldReads<'_>, (tr, tc): (usize, usize)) {
        let t = &self.t;
        let (bank, addr) = t.pages.location((tr * t.wt + tc) as u64);
        reads.prefetch(bank, addr, t.page);
    }

    /// Read locks for a run of [`Self::read`]s and [`Self::prefetch`]es (see `HeldReads`:
    /// drop it before anything that waits).
    pub(crate) fn held_reads(&self) -> HeldReads<'a> {
        self.ctx.memory.held_reads(self.t.space)
    }

    /// The tensor's data type (how its tile pages are encoded).
    pub(crate) fn dtype(&self) -> DataType {
        self.t.dtype
    }

    /// Calls `f` with tile (`tr`, `tc`)'s page bytes of the first matrix, in place when they
    /// lie in one chunk, else copied into `bytes` (the first of [`Self::scratch`]).
    pub(crate) fn with_page<R>(
        &self,
        reads: &mut HeldReads<'_>,
        (tr, tc): (usize, usize),
        bytes: &mut [u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let t = &self.t;
        let (bank, addr) = t.pages.location((tr * t.wt + tc) as u64);
        reads.read_with(bank, addr, &mut bytes[..t.page], f)
    }

    /// Decodes tile (`tr`, `tc`) of the first matrix into `out`, row-major 32x32. Values
    /// beyond the logical edge are whatever the page holds: callers use only logical ones.
    pub(crate) fn read(
        &self,
        reads: &mut HeldReads<'_>,
        (tr, tc): (usize, usize),
        (bytes, unpack): &mut (Vec<u8>, Vec<f32>),
        out: &mut [f32; TILE_ELEMS],
    ) -> Result<()> {
        let t = &self.t;
        let (bank, addr) = t.pages.location((tr * t.wt + tc) as u64);
        reads.read_with(bank, addr, bytes, |page| {
            decode_tile_fast(t.dtype, page, unpack, out, TILE_HEIGHT, 0, TILE_WIDTH)
        })?
    }
}
