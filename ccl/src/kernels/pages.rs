//! The fast path of the collectives: when the split along `dim` falls on page boundaries (any
//! dim but the last two of a TILE tensor, or those with tile-multiple chunks; any dim but the
//! last of a ROW_MAJOR tensor), a gather is a permutation of whole pages and a reduction is
//! element-wise on them, so pages move as raw bytes: no untilize/tilize, no per-element
//! conversion on the wire, buffers reused per dispatcher thread. Results are bit-identical to
//! the logical path (same values summed in the same order; padding is zeros and sums to zeros).

use std::cell::RefCell;
use std::sync::Mutex;

use ttmesh_chip::program::KernelContext;
use ttmesh_chip::tensor::{DataType, Layout, TensorSpec};
use ttmesh_chip::ChipError;

use super::chip_io::FusedIo;
use super::work::{piece_count, Work};
use super::Run;

/// A split of a tensor's pages along one page dim: `outer` runs of `extent * inner` pages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageSplit {
    pub(crate) outer: usize,
    pub(crate) extent: usize,
    pub(crate) inner: usize,
}

/// The page split of `spec` along `dim` when chunks of `chunk` elements along it are whole
/// pages; None when the logical path must handle it.
pub(crate) fn page_split(spec: &TensorSpec, dim: usize, chunk: usize) -> Option<PageSplit> {
    if cfg!(target_endian = "big")
        || !matches!(
            spec.dtype,
            DataType::BFloat16 | DataType::Float32 | DataType::UInt32
        )
    {
        return None;
    }
    let s = &spec.shape;
    let r = s.len();
    let page_shape: Vec<usize> = match spec.layout {
        Layout::Tile => {
            if r < 2 || (dim + 2 >= r && !chunk.is_multiple_of(32)) {
                return None;
            }
            let mut p = s[..r - 2].to_vec();
            p.push(s[r - 2].div_ceil(32));
            p.push(s[r - 1].div_ceil(32));
            p
        }
        Layout::RowMajor => {
            if r < 2 || dim + 1 >= r {
                return None;
            }
            s[..r - 1].to_vec()
        }
    };
    Some(PageSplit {
        outer: page_shape[..dim].iter().product(),
        extent: page_shape[dim],
        inner: page_shape[dim + 1..].iter().product(),
    })
}

/// Elements in one page (tiles hold 1024; a row-major page is one row).
pub(crate) fn page_elems(spec: &TensorSpec) -> usize {
    match spec.layout {
        Layout::Tile => 1024,
        Layout::RowMajor => *spec.shape.last().unwrap_or(&1),
    }
}

/// Bytes of partial sums per piece (see the step plans), in the input's format, at least: small
/// enough that a piece summed, sent and written stays in the host's cache.
const PIECE_BYTES: usize = 256 * 1024;

/// Bytes per piece of a fused reduction on a line of `n` chips whose largest chunk has
/// `largest` bytes (every chip of the line computes the same). Pieces pipeline the ring: a
/// chip adds piece 0 while piece 1 is on the wire. That keeps both cores of a small host busy
/// on a line of 2, but from 4 chips on the chips' own threads already outnumber the cores,
/// and each piece adds a semaphore wait that often sleeps: there, at most two pieces per
/// chunk, and one from 16 chips (line-2 gains nothing from a cap).
fn piece_bytes(n: usize, largest: usize) -> usize {
    let most_pieces = match n {
        0..=3 => return PIECE_BYTES,
        4..=15 => 2,
        _ => 1,
    };
    PIECE_BYTES.max(largest.div_ceil(most_pieces))
}

/// Inputs of the whole line, in bytes, from which a fused reduction's input reads hint the
/// host's cache ahead (`chip_io::PREFETCH_AHEAD`). Below, the inputs mostly come from the
/// cache and each hint's bank lock and chunk lookup cost more than they save; once a
/// `Reduce` read its operands in place inside the neighbour's write (`onward`), that held up
/// to 16 MiB of inputs in all.
const PREFETCH_MIN_LINE_INPUT: u64 = 32 << 20;

/// The largest chunk per chip (input bytes / chips) whose reads are hinted: once the bf16
/// sums were rounded by the CPU (`ttmesh_chip::format`'s AVX-512 BF16 path) and a sum added
/// at delivery read its input in place, long chunks lost by the hints and short ones still
/// gained.
const PREFETCH_MAX_CHUNK: u64 = 256 << 10;

fn prefetches_input(n: usize, input_bytes: u64) -> bool {
    let n = n.max(1) as u64;
    n * input_bytes >= PREFETCH_MIN_LINE_INPUT && input_bytes / n <= PREFETCH_MAX_CHUNK
}

/// Buffers reused across launches, so a collective allocates (and page-faults) only when it
/// is larger than those before it. One per thread first (a dispatcher's, taken and given
/// back without a lock: 32 chips start and end a collective at the same moment), then a
/// shared pool: a small collective's buffers travel with its part to the thread that runs
/// the line, and a host thread that launches a whole line needs one per chip.
static WORK: Mutex<Vec<Work>> = Mutex::new(Vec::new());

thread_local! {
    static LOCAL_WORK: RefCell<Option<Work>> = const { RefCell::new(None) };
}

/// More buffers than chips that run collectives at once are not kept.
const POOLED_WORK: usize = 64;

fn take_work() -> Work {
    if let Some(w) = LOCAL_WORK.with(|l| l.borrow_mut().take()) {
        return w;
    }
    let mut pool = WORK.lock().unwrap_or_else(|p| p.into_inner());
    pool.pop().unwrap_or_default()
}

/// Returns buffers (empty ones, whose part travelled on, are dropped).
pub(crate) fn put_work(w: Work) {
    if w.is_empty() {
        return;
    }
    let Some(w) = LOCAL_WORK.with(|l| {
        let mut l = l.borrow_mut();
        match *l {
            None => {
                *l = Some(w);
                None
            }
            Some(_) => Some(w),
        }
    }) else {
        return;
    };
    let mut pool = WORK.lock().unwrap_or_else(|p| p.into_inner());
    if pool.len() < POOLED_WORK {
        pool.push(w);
    }
}

/// Runs `f` with this thread's reusable buffers (taken out, so `f` may hand them to another
/// thread and back).
pub(crate) fn with_work<R>(f: impl FnOnce(&mut Work) -> R) -> R {
    let mut w = take_work();
    let r = f(&mut w);
    put_work(w);
    r
}

pub(crate) fn read_pages(
    ctx: &KernelContext,
    spec: &TensorSpec,
    addr: u32,
    out: &mut [u8],
) -> Result<(), ChipError> {
    let pages = spec.page_map(ctx.arch, addr as u64)?;
    let ps = pages.map.page_size as usize;
    for (p, dst) in out.chunks_exact_mut(ps).enumerate() {
        let (bank, a) = pages.location(p as u64);
        ctx.memory.read(pages.map.space, bank, a, dst)?;
    }
    Ok(())
}

/// Writes `data` (whole pages, in page order) starting at logical page `first`.
pub(crate) fn write_pages(
    ctx: &KernelContext,
    spec: &TensorSpec,
    addr: u32,
    first: usize,
    data: &[u8],
) -> Result<(), ChipError> {
    let pages = spec.page_map(ctx.arch, addr as u64)?;
    let ps = pages.map.page_size as usize;
    for (p, src) in data.chunks_exact(ps).enumerate() {
        let (bank, a) = pages.location((first + p) as u64);
        ctx.memory.write(pages.map.space, bank, a, src)?;
    }
    Ok(())
}

fn f32_bytes(v: &[f32]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// Decodes raw `dtype` bytes to f32 (bf16 -> f32 is exact: the bits move up 16 places).
pub(crate) fn decode_run(dtype: DataType, src: &[u8], dst: &mut [f32]) {
    match dtype {
        DataType::BFloat16 => {
            // The u16 view (when the buffer is aligned, as allocations are) lets the loop
            // vectorize.
            match bytemuck::try_cast_slice::<u8, u16>(src) {
                Ok(h) => ttmesh_chip::format::widen_bf16(h, dst),
                Err(_) => {
                    for (f, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                        *f = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
                    }
                }
            }
        }
        _ => bytemuck::cast_slice_mut::<f32, u8>(dst).copy_from_slice(src),
    }
}

/// Encodes f32 sums as `dtype` bytes (bf16 rounds to nearest even; others are cast).
pub(crate) fn encode(dtype: DataType, sum: &[f32], out: &mut [u8]) {
    match dtype {
        DataType::BFloat16 => match bytemuck::try_cast_slice_mut::<u8, u16>(out) {
            Ok(bits) if cfg!(target_endian = "little") => {
                ttmesh_chip::format::narrow_bf16(sum, bits)
            }
            _ => {
                for (o, f) in out.chunks_exact_mut(2).zip(sum) {
                    o.copy_from_slice(&half::bf16::from_f32(*f).to_bits().to_le_bytes());
                }
            }
        },
        _ => out.copy_from_slice(f32_bytes(sum)),
    }
}

/// Where a fused reduction's chunk `j` lies in the input (`FusedIo`: first byte, run, stride)
/// and where block `j` begins in the output, in page order.
pub(crate) struct Placement {
    pub(crate) chunk_start: Vec<usize>,
    pub(crate) chunk_run: usize,
    pub(crate) chunk_stride: usize,
    pub(crate) out_first: Vec<usize>,
}

/// Sets `w` up for a fused reduction whose chunk `j` holds `chunk_pages[j]` input pages (and
/// its block as many output pages): this chip's chunk and block held in the work, partial
/// sums in the input's format, pieces of whole pages so piece boundaries in a chunk and in a
/// block agree. Returns each chunk's piece count.
pub(crate) fn fuse(
    run: &Run,
    addresses: &[u32],
    w: &mut Work,
    chunk_pages: &[usize],
    at: Placement,
) -> Result<Vec<usize>, ChipError> {
    let k = run.k;
    let in_page = k.input.page_size() as usize;
    let out_page = k.output.page_size() as usize;
    let pe = page_elems(&k.input);
    let elems: Vec<usize> = chunk_pages.iter().map(|&p| p * pe).collect();
    let out_lens: Vec<usize> = chunk_pages.iter().map(|&p| p * out_page).collect();
    w.shape(&elems, &out_lens, Some(k.pos));
    w.out_dtype = Some(k.output.dtype);
    let largest = chunk_pages.iter().copied().max().unwrap_or(1) * in_page;
    let piece_pages = (piece_bytes(k.line.chips.len(), largest) / (in_page / pe) / pe).max(1);
    w.chunk_piece = piece_pages * pe;
    w.block_piece = piece_pages * out_page;
    let prefetch = prefetches_input(k.line.chips.len(), k.input.buffer_size());
    w.fused = Some(fused_io(run, addresses, at, prefetch)?);
    Ok(elems
        .iter()
        .map(|&l| piece_count(l, w.chunk_piece))
        .collect())
}

/// Where a collective's steps read its input and write its output pages (`FusedIo`).
pub(crate) fn fused_io(
    run: &Run,
    addresses: &[u32],
    at: Placement,
    prefetch_input: bool,
) -> Result<FusedIo, ChipError> {
    let k = run.k;
    let (in_page, out_page) = (k.input.page_size() as usize, k.output.page_size() as usize);
    Ok(FusedIo {
        in_dtype: k.input.dtype,
        in_elem: in_page / page_elems(&k.input),
        chunk_start: at.chunk_start,
        chunk_run: at.chunk_run,
        chunk_stride: at.chunk_stride,
        input_pages: (
            k.input.page_map(run.ctx.arch, addresses[0] as u64)?,
            in_page,
        ),
        output_pages: (
            k.output.page_map(run.ctx.arch, addresses[2] as u64)?,
            out_page,
            at.out_first,
        ),
        prefetch_input,
    })
}
