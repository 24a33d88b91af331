//! Kernel-side access to tensors in device memory, knowing only the spec and the address.
//!
//! Float TILE tensors take a fast path: each tile page is decoded from device memory straight
//! into its place in the logical row-major result (and encoded straight from it), one band of
//! 32 rows per rayon task, with no staging copy of the whole tensor. It gives the same values
//! as the generic path (`encode_pages` / `decode_pages`), which everything else takes.

use std::cell::RefCell;

use rayon::prelude::*;

use crate::allocator::MemSpace;
use crate::error::{ChipError, Result};
use crate::format::{
    self, BFP8_TILE_BYTES, FACE_ELEMS, FACE_WIDTH, TILE_ELEMS, TILE_HEIGHT, TILE_WIDTH,
};
use crate::program::KernelContext;
use crate::tensor::{
    decode_pages, encode_pages, DataType, HostData, Layout, TensorPages, TensorSpec,
};

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

/// The 16-value face rows of tile column `tc` that hold logical columns: (face column, first
/// logical column, count).
fn face_cols(tc: usize, w: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..2).filter_map(move |fc| {
        let col = tc * 32 + fc * FACE_WIDTH;
        (col < w).then(|| (fc, col, FACE_WIDTH.min(w - col)))
    })
}

/// Element offset in a tile of face row `r` (0..32), face column `fc`.
fn face_offset(r: usize, fc: usize) -> usize {
    ((r / 16) * 2 + fc) * FACE_ELEMS + (r % 16) * FACE_WIDTH
}

/// Below this many elements a tensor is decoded on the calling thread: a hand-off to the
/// rayon pool costs tens of microseconds, more than small tensors take.
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
        || (vec![0u8; t.page], vec![0f32; TILE_ELEMS]),
        |(scratch, tile), (b, tr, band)| {
            let rows = band.len() / t.w;
            for tc in 0..t.wt {
                let (bank, addr) = t.pages.location(((b * t.ht + tr) * t.wt + tc) as u64);
                ctx.memory
                    .read_with(t.space, bank, addr, scratch, |bytes| {
                        decode_tile_fast(t.dtype, bytes, tile, band, rows, tc, t.w)
                    })??;
            }
            Ok(())
        },
    )?;
    Ok(true)
}

/// Decodes one tile page into its place in a band of `rows` logical rows `w` wide.
#[inline(always)]
fn decode_tile(
    dtype: DataType,
    bytes: &[u8],
    tile: &mut [f32],
    band: &mut [f32],
    rows: usize,
    tc: usize,
    w: usize,
) -> Result<()> {
    let size = match dtype {
        DataType::BFloat16 => 2,
        DataType::Float32 => 4,
        DataType::BFloat8B => {
            // Each 16-value block is one face row: unpacked straight into its place.
            let page = &bytes[..BFP8_TILE_BYTES];
            let block: &mut [f32; FACE_WIDTH] =
                (&mut tile[..FACE_WIDTH]).try_into().expect("a face row");
            for r in 0..rows {
                for (fc, col, n) in face_cols(tc, w) {
                    let j = face_offset(r, fc) / FACE_WIDTH;
                    match <&mut [f32; FACE_WIDTH]>::try_from(&mut band[r * w + col..][..n]) {
                        Ok(dst) => format::unpack_bfp8_block(page, j, dst),
                        Err(_) => {
                            format::unpack_bfp8_block(page, j, block);
                            band[r * w + col..][..n].copy_from_slice(&block[..n]);
                        }
                    }
                }
            }
            return Ok(());
        }
        DataType::UInt32 => return Err(not_float()),
    };
    // The value size is a const parameter, not a function passed in: a function item passed
    // as `impl Fn` was called through a shim per 16-value run that was never inlined, so never
    // compiled for AVX2 either (perf: `Fn::call`, SSE2 code).
    if size == 2 {
        decode_runs::<2>(bytes, band, rows, tc, w);
    } else {
        decode_runs::<4>(bytes, band, rows, tc, w);
    }
    Ok(())
}

#[inline(always)]
fn decode_runs<const SIZE: usize>(
    bytes: &[u8],
    band: &mut [f32],
    rows: usize,
    tc: usize,
    w: usize,
) {
    let (size, run) = (SIZE, decode_run::<SIZE>);
    if rows == TILE_HEIGHT && (tc + 1) * 32 <= w {
        // A whole tile: two 16-value runs per row, no edge checks.
        for r in 0..TILE_HEIGHT {
            let (left, right) = band[r * w + tc * 32..][..32].split_at_mut(16);
            run(&bytes[face_offset(r, 0) * size..][..16 * size], left);
            run(&bytes[face_offset(r, 1) * size..][..16 * size], right);
        }
        return;
    }
    for r in 0..rows {
        for (fc, col, n) in face_cols(tc, w) {
            run(
                &bytes[face_offset(r, fc) * size..][..n * size],
                &mut band[r * w + col..][..n],
            );
        }
    }
}

// Face rows are runs of 16 values: fixed-size arrays let the compiler vectorise a run; a
// partial run (the tensor's right edge) takes the plain loop.

/// One run of values of `SIZE` bytes each (2: bf16, 4: f32).
#[inline(always)]
pub(super) fn decode_run<const SIZE: usize>(src: &[u8], dst: &mut [f32]) {
    if SIZE == 2 {
        decode_bf16_run(src, dst)
    } else {
        decode_f32_run(src, dst)
    }
}

#[inline(always)]
fn decode_f32_run(src: &[u8], dst: &mut [f32]) {
    if let (Ok(s), Ok(d)) = (
        <&[u8; 64]>::try_from(src),
        <&mut [f32; 16]>::try_from(&mut *dst),
    ) {
        for i in 0..16 {
            d[i] = f32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
        }
        return;
    }
    for (d, x) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
    }
}

#[inline(always)]
fn decode_bf16_run(src: &[u8], dst: &mut [f32]) {
    if let (Ok(s), Ok(d)) = (
        <&[u8; 32]>::try_from(src),
        <&mut [f32; 16]>::try_from(&mut *dst),
    ) {
        for i in 0..16 {
            d[i] = f32::from_bits((u16::from_le_bytes([s[2 * i], s[2 * i + 1]]) as u32) << 16);
        }
        return;
    }
    for (d, x) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = f32::from_bits((u16::from_le_bytes([x[0], x[1]]) as u32) << 16);
    }
}

/// One run of values of `SIZE` bytes each (2: bf16, 4: f32).
#[inline(always)]
fn encode_run<const SIZE: usize>(src: &[f32], dst: &mut [u8]) {
    if SIZE == 2 {
        encode_bf16_run(src, dst)
    } else {
        encode_f32_run(src, dst)
    }
}

#[inline(always)]
fn encode_f32_run(src: &[f32], dst: &mut [u8]) {
    if let (Ok(s), Ok(d)) = (
        <&[f32; 16]>::try_from(src),
        <&mut [u8; 64]>::try_from(&mut *dst),
    ) {
        for i in 0..16 {
            d[4 * i..4 * i + 4].copy_from_slice(&s[i].to_le_bytes());
        }
        return;
    }
    for (d, x) in dst.chunks_exact_mut(4).zip(src) {
        d.copy_from_slice(&x.to_le_bytes());
    }
}

#[inline(always)]
fn encode_bf16_run(src: &[f32], dst: &mut [u8]) {
    if let (Ok(s), Ok(d)) = (
        <&[f32; 16]>::try_from(src),
        <&mut [u8; 32]>::try_from(&mut *dst),
    ) {
        for i in 0..16 {
            d[2 * i..2 * i + 2].copy_from_slice(&bf16_bits(s[i]).to_le_bytes());
        }
        return;
    }
    for (d, x) in dst.chunks_exact_mut(2).zip(src) {
        d.copy_from_slice(&bf16_bits(*x).to_le_bytes());
    }
}

/// f32 to bfloat16 bits, rounding to nearest even; NaN stays a (quiet) NaN. Bit for bit what
/// `half::bf16::from_f32` gives (tested below), written without branches.
#[inline]
fn bf16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let rounded = (x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16) as u16;
    let nan = ((x >> 16) | 0x40) as u16;
    if x & 0x7FFF_FFFF > 0x7F80_0000 {
        nan
    } else {
        rounded
    }
}

fn not_float() -> ChipError {
    ChipError::Data("the float tile path got a UINT32 tensor".into())
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
        || (vec![0u8; t.page], vec![0f32; TILE_ELEMS]),
        |(bytes, tile), (b, tr, band)| {
            let rows = band.len() / t.w;
            for tc in 0..t.wt {
                encode_tile_fast(t.dtype, band, rows, tc, t.w, tile, bytes)?;
                let (bank, addr) = t.pages.location(((b * t.ht + tr) * t.wt + tc) as u64);
                ctx.memory.write(t.space, bank, addr, bytes)?;
            }
            Ok(())
        },
    )?;
    Ok(true)
}

/// Encodes the tile at column `tc` of a band into page bytes; padding is zero.
#[inline(always)]
fn encode_tile(
    dtype: DataType,
    band: &[f32],
    rows: usize,
    tc: usize,
    w: usize,
    tile: &mut [f32],
    bytes: &mut [u8],
) -> Result<()> {
    let full = rows == TILE_HEIGHT && (tc + 1) * 32 <= w;
    let size = match dtype {
        DataType::BFloat16 => 2,
        DataType::Float32 => 4,
        DataType::BFloat8B => {
            if !full {
                tile.fill(0.0);
            }
            for r in 0..rows {
                for (fc, col, n) in face_cols(tc, w) {
                    tile[face_offset(r, fc)..][..n].copy_from_slice(&band[r * w + col..][..n]);
                }
            }
            return Ok(format::pack_bfp8_tile(tile, &mut bytes[..BFP8_TILE_BYTES])?);
        }
        DataType::UInt32 => return Err(not_float()),
    };
    if !full {
        bytes.fill(0); // padding: zero bits are 0.0 in both formats
    }
    if size == 2 {
        encode_runs::<2>(band, bytes, rows, tc, w);
    } else {
        encode_runs::<4>(band, bytes, rows, tc, w);
    }
    Ok(())
}

#[inline(always)]
fn encode_runs<const SIZE: usize>(
    band: &[f32],
    bytes: &mut [u8],
    rows: usize,
    tc: usize,
    w: usize,
) {
    let (size, run) = (SIZE, encode_run::<SIZE>);
    if rows == TILE_HEIGHT && (tc + 1) * 32 <= w {
        for r in 0..TILE_HEIGHT {
            let (left, right) = band[r * w + tc * 32..][..32].split_at(16);
            run(left, &mut bytes[face_offset(r, 0) * size..][..16 * size]);
            run(right, &mut bytes[face_offset(r, 1) * size..][..16 * size]);
        }
        return;
    }
    for r in 0..rows {
        for (fc, col, n) in face_cols(tc, w) {
            run(
                &band[r * w + col..][..n],
                &mut bytes[face_offset(r, fc) * size..][..n * size],
            );
        }
    }
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
    pub(crate) fn prefetch(&self, (tr, tc): (usize, usize)) {
        let t = &self.t;
        let (bank, addr) = t.pages.location((tr * t.wt + tc) as u64);
        self.ctx.memory.prefetch(t.space, bank, addr, t.page);
    }

    /// Decodes tile (`tr`, `tc`) of the first matrix into `out`, row-major 32x32. Values
    /// beyond the logical edge are whatever the page holds: callers use only logical ones.
    pub(crate) fn read(
        &self,
        (tr, tc): (usize, usize),
        (bytes, unpack): &mut (Vec<u8>, Vec<f32>),
        out: &mut [f32; TILE_ELEMS],
    ) -> Result<()> {
        let t = &self.t;
        let (bank, addr) = t.pages.location((tr * t.wt + tc) as u64);
        self.ctx
            .memory
            .read_with(t.space, bank, addr, bytes, |page| {
                decode_tile_fast(t.dtype, page, unpack, out, TILE_HEIGHT, 0, TILE_WIDTH)
            })?
    }
}

// Streaming kernels decode every byte of a weight per step, and every matmul decodes its
// operands and encodes its result: as SSE2 code the conversions (bf16 rounding above all) ran
// scalar and cost more than a 512 matmul's sgemm could spare.
format::simd_where_available! {
    /// [`decode_tile`], vectorised where the host allows.
    fn decode_tile_fast(
        dtype: DataType, bytes: &[u8], tile: &mut [f32], band: &mut [f32], rows: usize,
        tc: usize, w: usize
    ) -> Result<()> = decode_tile
}

format::simd_where_available! {
    /// [`encode_tile`], vectorised where the host allows.
    fn encode_tile_fast(
        dtype: DataType, band: &[f32], rows: usize, tc: usize, w: usize, tile: &mut [f32],
        bytes: &mut [u8]
    ) -> Result<()> = encode_tile
}

#[cfg(test)]
mod tests {
    use super::bf16_bits;

    #[test]
    fn bf16_bits_matches_half_everywhere() {
        let special = [
            0u32,
            0x8000_0000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            0x7F80_0001,
            0xFFFF_FFFF,
            0x7F7F_FFFF,
            0x0000_8000,
            0x0001_8000,
            0x3F80_8000,
            0x3F81_8000,
        ];
        let sampled = (0..4_000_000u64).map(|i| (i * 1_073_741_789 % (1 << 32)) as u32);
        for bits in special.into_iter().chain(sampled) {
            let x = f32::from_bits(bits);
            assert_eq!(bf16_bits(x), half::bf16::from_f32(x).to_bits(), "{bits:#x}");
        }
    }
}
