//! Row access to float TILE tensors one tile page at a time, for kernels that touch a few rows
//! of a large tensor (an embedding table, a KV cache, a cos/sin cache): a decode step then costs
//! the pages it touches, not the size of the table. Values go through the same formats as the
//! whole-tensor path (bf16 rounds to nearest even, bfloat8_b re-packs the tile it changes).

use crate::allocator::MemSpace;
use crate::error::{ChipError, Result};
use crate::format::{
    self, tiled_position, BFP4_TILE_BYTES, BFP8_TILE_BYTES, FACE_WIDTH, TILE_ELEMS, TILE_HEIGHT,
    TILE_WIDTH,
};
use crate::program::KernelContext;
use crate::tensor::{DataType, HostData, Layout, TensorPages, TensorSpec};

use super::io::read_logical;

/// A float TILE tensor seen as `slices` matrices of `rows x width` (leading dims flattened).
pub(crate) struct TileRows {
    pages: TensorPages,
    space: MemSpace,
    dtype: DataType,
    pub rows: usize,
    pub width: usize,
    tile_rows: usize,
    tile_cols: usize,
}

/// Scratch for one tile: its page bytes, its values in TILE (face) order and row-major.
pub(crate) struct TileScratch {
    bytes: Vec<u8>,
    faces: Vec<f32>,
    rows: Vec<f32>,
}

impl TileScratch {
    pub(crate) fn new() -> TileScratch {
        TileScratch {
            bytes: vec![0; 4 * TILE_ELEMS],
            faces: vec![0.0; TILE_ELEMS],
            rows: vec![0.0; TILE_ELEMS],
        }
    }
}

impl TileRows {
    pub(crate) fn new(ctx: &KernelContext, spec: &TensorSpec, address: u32) -> Result<TileRows> {
        if spec.layout != Layout::Tile || !spec.dtype.is_float() {
            return Err(ChipError::Data(format!(
                "row access needs a float TILE tensor, got {spec}"
            )));
        }
        let pages = spec.page_map(ctx.arch, address as u64)?;
        let (rows, width) = spec.height_width();
        Ok(TileRows {
            space: pages.map.space,
            pages,
            dtype: spec.dtype,
            rows,
            width,
            tile_rows: rows.div_ceil(TILE_HEIGHT),
            tile_cols: width.div_ceil(TILE_WIDTH),
        })
    }

    fn location(&self, slice: usize, tile_row: usize, tile_col: usize) -> (u32, u64) {
        let page = (slice * self.tile_rows + tile_row) * self.tile_cols + tile_col;
        self.pages.location(page as u64)
    }

    /// Decodes one tile into `s.rows` (row-major 32 x 32).
    fn read_tile(
        &self,
        ctx: &KernelContext,
        (slice, tile_row, tile_col): (usize, usize, usize),
        s: &mut TileScratch,
    ) -> Result<()> {
        let (bank, addr) = self.location(slice, tile_row, tile_col);
        let page = self.dtype.tile_bytes() as usize;
        ctx.memory
            .read(self.space, bank, addr, &mut s.bytes[..page])?;
        let bytes = &s.bytes[..page];
        match self.dtype {
            DataType::BFloat16 => {
                for (f, b) in s.faces.iter_mut().zip(bytes.chunks_exact(2)) {
                    *f = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
                }
            }
            DataType::Float32 => {
                for (f, b) in s.faces.iter_mut().zip(bytes.chunks_exact(4)) {
                    *f = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            DataType::BFloat8B => format::unpack_bfp8_tile(bytes, &mut s.faces)?,
            DataType::BFloat4B => format::unpack_bfp4_tile(bytes, &mut s.faces)?,
            DataType::UInt32 => return Err(not_float()),
        }
        for r in 0..TILE_HEIGHT {
            for c in 0..TILE_WIDTH {
                s.rows[r * TILE_WIDTH + c] = s.faces[tiled_position(TILE_WIDTH, r, c)];
            }
        }
        Ok(())
    }

    /// Encodes `s.rows` (row-major 32 x 32) into one tile page.
    fn write_tile(
        &self,
        ctx: &KernelContext,
        (slice, tile_row, tile_col): (usize, usize, usize),
        s: &mut TileScratch,
    ) -> Result<()> {
        for r in 0..TILE_HEIGHT {
            for c in 0..TILE_WIDTH {
                s.faces[tiled_position(TILE_WIDTH, r, c)] = s.rows[r * TILE_WIDTH + c];
            }
        }
        let page = self.dtype.tile_bytes() as usize;
        let bytes = &mut s.bytes[..page];
        match self.dtype {
            DataType::BFloat16 => {
                for (b, f) in bytes.chunks_exact_mut(2).zip(&s.faces) {
                    b.copy_from_slice(&half::bf16::from_f32(*f).to_bits().to_le_bytes());
                }
            }
            DataType::Float32 => {
                for (b, f) in bytes.chunks_exact_mut(4).zip(&s.faces) {
                    b.copy_from_slice(&f.to_le_bytes());
                }
            }
            DataType::BFloat8B => format::pack_bfp8_tile(&s.faces, &mut bytes[..BFP8_TILE_BYTES])?,
            DataType::BFloat4B => format::pack_bfp4_tile(&s.faces, &mut bytes[..BFP4_TILE_BYTES])?,
            DataType::UInt32 => return Err(not_float()),
        }
        let (bank, addr) = self.location(slice, tile_row, tile_col);
        ctx.memory.write(self.space, bank, addr, bytes)
    }

    /// Reads rows `start..start + count` of matrix `slice` into `out` (`count * width` values,
    /// row-major). The caller keeps the rows within the matrix. Each page is read in place and
    /// only the face rows asked for are decoded: a rotary embedding's one row of a cos table
    /// costs 32 values per tile, not the tile's 1024 and an untilize.
    pub(crate) fn read_rows(
        &self,
        ctx: &KernelContext,
        slice: usize,
        start: usize,
        count: usize,
        out: &mut [f32],
        s: &mut TileScratch,
    ) -> Result<()> {
        debug_assert!(start + count <= self.rows && out.len() == count * self.width);
        let end = start + count;
        let page = self.dtype.tile_bytes() as usize;
        let mut tile_row = start / TILE_HEIGHT;
        while tile_row * TILE_HEIGHT < end {
            let first = (tile_row * TILE_HEIGHT).max(start);
            let last = ((tile_row + 1) * TILE_HEIGHT).min(end);
            for tc in 0..self.tile_cols {
                let (bank, addr) = self.location(slice, tile_row, tc);
                ctx.memory
                    .read_with(self.space, bank, addr, &mut s.bytes[..page], |bytes| {
                        for r in first..last {
                            // A tile row is two 16-value face rows, contiguous in face order.
                            for half in 0..2 {
                                let col = tc * TILE_WIDTH + half * FACE_WIDTH;
                                if col >= self.width {
                                    break;
                                }
                                let n = FACE_WIDTH.min(self.width - col);
                                let at =
                                    tiled_position(TILE_WIDTH, r % TILE_HEIGHT, half * FACE_WIDTH);
                                let dst = &mut out[(r - start) * self.width + col..][..n];
                                decode_face_run(self.dtype, bytes, at, dst)?;
                            }
                        }
                        Ok::<_, ChipError>(())
                    })??;
            }
            tile_row += 1;
        }
        Ok(())
    }

    /// Overwrites row `row` of matrix `slice` with `values` (`width` of them); the other rows
    /// of its tiles keep their values.
    pub(crate) fn write_row(
        &self,
        ctx: &KernelContext,
        slice: usize,
        row: usize,
        values: &[f32],
        s: &mut TileScratch,
    ) -> Result<()> {
        debug_assert!(row < self.rows && values.len() == self.width);
        let (tile_row, r) = (row / TILE_HEIGHT, row % TILE_HEIGHT);
        let size = match self.dtype {
            DataType::BFloat16 => 2,
            DataType::Float32 => 4,
            _ => 0,
        };
        if size > 0 {
            // A bf16 or f32 value is encoded alone, so only the row's two 16-value face runs
            // of each tile are written, with no read, decode and re-encode of the other 31 rows
            // (a KV-cache update was ~5% of a t3k decode step that way).
            for tc in 0..self.tile_cols {
                let (bank, addr) = self.location(slice, tile_row, tc);
                for half in 0..2 {
                    let col = tc * TILE_WIDTH + half * FACE_WIDTH;
                    if col >= self.width {
                        break;
                    }
                    let n = FACE_WIDTH.min(self.width - col);
                    let bytes = &mut s.bytes[..n * size];
                    for (b, &v) in bytes.chunks_exact_mut(size).zip(&values[col..][..n]) {
                        if size == 2 {
                            b.copy_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes());
                        } else {
                            b.copy_from_slice(&v.to_le_bytes());
                        }
                    }
                    let at = tiled_position(TILE_WIDTH, r, half * FACE_WIDTH) * size;
                    ctx.memory
                        .write(self.space, bank, addr + at as u64, bytes)?;
                }
            }
            return Ok(());
        }
        for tc in 0..self.tile_cols {
            self.read_tile(ctx, (slice, tile_row, tc), s)?;
            let (c0, n) = (
                tc * TILE_WIDTH,
                TILE_WIDTH.min(self.width - tc * TILE_WIDTH),
            );
            s.rows[r * TILE_WIDTH..][..n].copy_from_slice(&values[c0..][..n]);
            self.write_tile(ctx, (slice, tile_row, tc), s)?;
        }
        Ok(())
    }
}

/// Reads one ROW_MAJOR float row (page `row`) into `out`.
pub(crate) fn read_row_major_row(
    ctx: &KernelContext,
    pages: &TensorPages,
    dtype: DataType,
    row: usize,
    out: &mut [f32],
    scratch: &mut Vec<u8>,
) -> Result<()> {
    let (bank, addr) = pages.location(row as u64);
    scratch.resize(pages.map.page_size as usize, 0);
    ctx.memory.read(pages.map.space, bank, addr, scratch)?;
    match dtype {
        DataType::BFloat16 => {
            for (f, b) in out.iter_mut().zip(scratch.chunks_exact(2)) {
                *f = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
            }
        }
        DataType::Float32 => {
            for (f, b) in out.iter_mut().zip(scratch.chunks_exact(4)) {
                *f = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        _ => {
            return Err(ChipError::Data(format!(
                "a ROW_MAJOR float row must be BFLOAT16 or FLOAT32, not {dtype}"
            )))
        }
    }
    Ok(())
}

/// Reads a UINT32 tensor (token ids, positions) in any layout, in logical order.
pub(crate) fn read_u32(ctx: &KernelContext, spec: &TensorSpec, address: u32) -> Result<Vec<u32>> {
    match read_logical(ctx, spec, address)? {
        HostData::U32(v) => Ok(v),
        HostData::F32(_) => Err(ChipError::Data(format!(
            "expected a UINT32 tensor, got {spec}"
        ))),
    }
}

/// Decodes `dst.len()` (at most 16) values of a tile page starting at face-order index `at`
/// (the start of a face row), as [`TileRows::read_tile`] would give them.
fn decode_face_run(dtype: DataType, page: &[u8], at: usize, dst: &mut [f32]) -> Result<()> {
    match dtype {
        DataType::BFloat16 => super::io::decode_run::<2>(&page[2 * at..][..2 * dst.len()], dst),
        DataType::Float32 => super::io::decode_run::<4>(&page[4 * at..][..4 * dst.len()], dst),
        DataType::BFloat8B => {
            let mut block = [0f32; FACE_WIDTH];
            format::unpack_bfp8_block(&page[..BFP8_TILE_BYTES], at / FACE_WIDTH, &mut block);
            dst.copy_from_slice(&block[..dst.len()]);
        }
        DataType::BFloat4B => {
            let mut block = [0f32; FACE_WIDTH];
            format::unpack_bfp4_block(&page[..BFP4_TILE_BYTES], at / FACE_WIDTH, &mut block);
            dst.copy_from_slice(&block[..dst.len()]);
        }
        DataType::UInt32 => return Err(not_float()),
    }
    Ok(())
}

fn not_float() -> ChipError {
    ChipError::Data("row access got a UINT32 tensor; it reads float TILE tensors".into())
}
