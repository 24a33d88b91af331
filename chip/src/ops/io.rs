//! Kernel-side access to tensors in device memory, knowing only the spec and the address.
//!
//! Float TILE tensors take a fast path: each tile page is decoded from device memory straight
//! into its place in the logical row-major result (and encoded straight from it), one band of
//! 32 rows per rayon task, with no staging copy of the whole tensor. It gives the same values
//! as the generic path (`encode_pages` / `decode_pages`), which everything else takes.

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

/// Reads a float tensor as f32 values.
pub(crate) fn read_f32(ctx: &KernelContext, spec: &TensorSpec, address: u32) -> Result<Vec<f32>> {
    Ok(match read_logical(ctx, spec, address)? {
        HostData::F32(v) => v,
        HostData::U32(v) => v.into_iter().map(|x| x as f32).collect(),
    })
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

fn read_tiles_f32(
    ctx: &KernelContext,
    spec: &TensorSpec,
    address: u32,
) -> Result<Option<Vec<f32>>> {
    let Some(t) = tiles(ctx, spec, address)? else {
        return Ok(None);
    };
    let mut out = vec![0f32; spec.batch() * t.h * t.w];
    if out.is_empty() {
        return Ok(Some(out));
    }
    // One task per band of 32 logical rows (one tile row) of one batch slice.
    let slice = t.h * t.w;
    out.par_chunks_mut(slice)
        .enumerate()
        .flat_map(|(b, s)| {
            s.par_chunks_mut(TILE_HEIGHT * t.w)
                .enumerate()
                .map(move |(tr, band)| (b, tr, band))
        })
        .try_for_each_init(
            || (vec![0u8; t.page], vec![0f32; TILE_ELEMS]),
            |(scratch, tile), (b, tr, band)| -> Result<()> {
                let rows = band.len() / t.w;
                for tc in 0..t.wt {
                    let (bank, addr) = t.pages.location(((b * t.ht + tr) * t.wt + tc) as u64);
                    ctx.memory
                        .read_with(t.space, bank, addr, scratch, |bytes| {
                            decode_tile(t.dtype, bytes, tile, band, rows, tc, t.w)
                        })??;
                }
                Ok(())
            },
        )?;
    Ok(Some(out))
}

/// Decodes one tile page into its place in a band of `rows` logical rows `w` wide.
fn decode_tile(
    dtype: DataType,
    bytes: &[u8],
    tile: &mut [f32],
    band: &mut [f32],
    rows: usize,
    tc: usize,
    w: usize,
) -> Result<()> {
    match dtype {
        DataType::BFloat16 => {
            for r in 0..rows {
                for (fc, col, n) in face_cols(tc, w) {
                    let src = &bytes[face_offset(r, fc) * 2..][..n * 2];
                    let dst = &mut band[r * w + col..][..n];
                    for (d, x) in dst.iter_mut().zip(src.chunks_exact(2)) {
                        *d = f32::from_bits((u16::from_le_bytes([x[0], x[1]]) as u32) << 16);
                    }
                }
            }
        }
        DataType::Float32 => {
            for r in 0..rows {
                for (fc, col, n) in face_cols(tc, w) {
                    let src = &bytes[face_offset(r, fc) * 4..][..n * 4];
                    let dst = &mut band[r * w + col..][..n];
                    for (d, x) in dst.iter_mut().zip(src.chunks_exact(4)) {
                        *d = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
                    }
                }
            }
        }
        DataType::BFloat8B => {
            format::unpack_bfp8_tile(&bytes[..BFP8_TILE_BYTES], tile)?;
            for r in 0..rows {
                for (fc, col, n) in face_cols(tc, w) {
                    band[r * w + col..][..n].copy_from_slice(&tile[face_offset(r, fc)..][..n]);
                }
            }
        }
        DataType::UInt32 => return Err(not_float()),
    }
    Ok(())
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
    let expected = spec.batch() * t.h * t.w;
    if data.len() != expected {
        return Err(ChipError::Data(format!(
            "{} values for {spec}, expected {expected}",
            data.len()
        )));
    }
    if expected == 0 {
        return Ok(true);
    }
    let slice = t.h * t.w;
    data.par_chunks(slice)
        .enumerate()
        .flat_map(|(b, s)| {
            s.par_chunks(TILE_HEIGHT * t.w)
                .enumerate()
                .map(move |(tr, band)| (b, tr, band))
        })
        .try_for_each_init(
            || (vec![0u8; t.page], vec![0f32; TILE_ELEMS]),
            |(bytes, tile), (b, tr, band)| -> Result<()> {
                let rows = band.len() / t.w;
                for tc in 0..t.wt {
                    encode_tile(t.dtype, band, rows, tc, t.w, tile, bytes)?;
                    let (bank, addr) = t.pages.location(((b * t.ht + tr) * t.wt + tc) as u64);
                    ctx.memory.write(t.space, bank, addr, bytes)?;
                }
                Ok(())
            },
        )?;
    Ok(true)
}

/// Encodes the tile at column `tc` of a band into page bytes; padding is zero.
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
    if !full {
        tile.fill(0.0);
    }
    for r in 0..rows {
        for (fc, col, n) in face_cols(tc, w) {
            tile[face_offset(r, fc)..][..n].copy_from_slice(&band[r * w + col..][..n]);
        }
    }
    match dtype {
        DataType::BFloat16 => {
            for (b, x) in bytes.chunks_exact_mut(2).zip(tile.iter()) {
                b.copy_from_slice(&half::bf16::from_f32(*x).to_bits().to_le_bytes());
            }
        }
        DataType::Float32 => {
            for (b, x) in bytes.chunks_exact_mut(4).zip(tile.iter()) {
                b.copy_from_slice(&x.to_le_bytes());
            }
        }
        DataType::BFloat8B => format::pack_bfp8_tile(tile, &mut bytes[..BFP8_TILE_BYTES])?,
        DataType::UInt32 => return Err(not_float()),
    }
    Ok(())
}
