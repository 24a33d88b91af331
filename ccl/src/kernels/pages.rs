//! The fast path of the collectives: when the split along `dim` falls on page boundaries (any
//! dim but the last two of a TILE tensor, or those with tile-multiple chunks; any dim but the
//! last of a ROW_MAJOR tensor), a gather is a permutation of whole pages and a reduction is
//! element-wise on them, so pages move as raw bytes: no untilize/tilize, no per-element
//! conversion on the wire, buffers reused per dispatcher thread. Results are bit-identical to
//! the logical path (same values summed in the same order; padding is zeros and sums to zeros).

use std::cell::RefCell;
use std::sync::Mutex;

use ttmesh_chip::program::{KernelContext, Launched};
use ttmesh_chip::tensor::{DataType, Layout, TensorSpec};
use ttmesh_chip::ChipError;

use super::chip_io::FusedIo;
use super::lists;
use super::steps::{piece_count, sized, Step, Work};
use super::Run;
use crate::Topology;

/// A split of a tensor's pages along one page dim: `outer` runs of `extent * inner` pages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageSplit {
    outer: usize,
    extent: usize,
    inner: usize,
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

/// Bytes of partial sums per piece (see `lists`), in the input's format, at least: small
/// enough that a piece summed, sent and written stays in the host's cache.
const PIECE_BYTES: usize = 256 * 1024;

/// Bytes per piece of a fused reduction on a line of `n` chips whose largest chunk has
/// `largest` bytes (every chip of the line computes the same). Pieces pipeline the ring: a
/// chip adds piece 0 while piece 1 is on the wire. That keeps both cores of a small host busy
/// on a line of 2, but from 4 chips on the chips' own threads already outnumber the cores,
/// and each piece adds a semaphore wait that often sleeps: there, at most two pieces per
/// chunk, and one from 16 chips. A/B on a 2-core host, all_reduce on own threads (medians,
/// ms; 256 KiB pieces / capped): line-4 8 MiB 9.2 / 7.9, 16 MiB 18.4 / 16.4; t3k 8 MiB 16.2 /
/// 15.3, 16 MiB 32.8 / 29.1 (one piece: 29.1 too); galaxy 16 MiB 142 / 126 (one piece).
/// line-2 gains nothing from the cap (4 MiB 1.22 / 1.31 with four pieces).
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
/// cache and each hint's bank lock and chunk lookup cost more than they save. A/B on a 2-core
/// host, all_reduce (medians of 5, us; without / with hints): line-2 1 MiB (2 MiB in all) 314
/// / 340, t3k 256 KiB (2 MiB) 359 / 375; line-4 1 MiB (4 MiB) 696 / 677; t3k 1 MiB (8 MiB)
/// 1873 / 1587 and 2216 / 1955, galaxy 256 KiB 3187 / 2915, line-2 4 MiB 1390 / 1235;
/// t3k 16 MiB 30.1 / 27.2 ms, line-2 16 MiB 8.3 / 7.6 ms. Once a `Reduce` read its operands
/// in place inside the neighbour's write (`onward`), lines of 8 and 16 MiB lost by the hints
/// (medians of 7): t3k 1 MiB 1358 / 1451 us, 2 MiB 2420 / 2595 us; line-2 4 MiB 776 / 845
/// us; line-4 2 MiB 1537 / 1769 us; galaxy 256 KiB 2963 / 3214 us, 512 KiB 5967 / 6095 us;
/// reduce_scatter t3k 1 MiB 931 / 1044 us. From 32 MiB they are even or pay: galaxy 1 MiB
/// 12.6 / 11.4 ms (of 5), t3k 4 MiB 6.69 / 6.37 ms and 6.36 / 6.70 ms, line-2 16 MiB 3.95 /
/// 3.86 ms, t3k 16 MiB 42.2 / 42.0 ms.
const PREFETCH_MIN_LINE_INPUT: u64 = 32 << 20;

/// The largest chunk per chip (input bytes / chips) whose reads are hinted: once the bf16
/// sums were rounded by the CPU (`ttmesh_chip::format`'s AVX-512 BF16 path) and a sum added
/// at delivery read its input in place, long chunks lost by the hints and short ones still
/// gained. Alternated (medians of 5-9; without / with hints): t3k 4 MiB (512 KiB chunks)
/// 4.47 / 4.69 ms, t3k 16 MiB 31.9 / 33.6 ms, reduce_scatter t3k 16 MiB 28.4 / 30.4 ms,
/// line-4 16 MiB 18.7 / 21.6 ms, galaxy 16 MiB (512 KiB) 151 / 159 ms, line-2 16 MiB
/// 2.62 / 2.60 ms; but galaxy 1 MiB (32 KiB chunks) 10.4 / 9.8 ms and galaxy 4 MiB (128
/// KiB) 34.9 / 33.4 ms.
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
fn with_work<R>(f: impl FnOnce(&mut Work) -> R) -> R {
    let mut w = take_work();
    let r = f(&mut w);
    put_work(w);
    r
}

fn read_pages(
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
fn write_pages(
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

/// True if an all_gather along `dim` of `input` (per chip) moves between the chips' outputs
/// (`all_gather_direct`): its pages split along `dim` and nothing lies above it, so each line
/// position's block is one run of output pages.
pub(crate) fn gathers_direct(input: &TensorSpec, dim: usize) -> bool {
    page_split(input, dim, input.shape[dim]).is_some_and(|s| s.outer == 1)
}

/// all_gather whose blocks are runs of output pages (`gathers_direct`): this chip's input is
/// copied into its block of the output, and each block then moves from one chip's output
/// straight into the next one's (`PassOutput`, one write per DRAM bank run), as the
/// all_reduce's gather does: no block buffers, and no pass over the whole output at the
/// end. The steps write the whole output, so a launch may defer.
pub(crate) fn all_gather_direct(run: &Run, addresses: &[u32]) -> Result<Launched, ChipError> {
    let k = run.k;
    let n = k.line.chips.len();
    let len = k.input.buffer_size() as usize;
    let (in_page, out_page) = (k.input.page_size() as usize, k.output.page_size() as usize);
    debug_assert_eq!(in_page, out_page, "a gather moves pages as they are");
    with_work(|w| {
        w.shape(&[], &vec![len; n], Some(k.pos));
        let own = &mut w.blocks[k.pos][..len];
        read_pages(run.ctx, &k.input, addresses[0], own)?;
        write_pages(
            run.ctx,
            &k.output,
            addresses[2],
            k.order[k.pos] * len / out_page,
            own,
        )?;
        let at = Placement {
            chunk_start: Vec::new(),
            chunk_run: usize::MAX,
            chunk_stride: 0,
            out_first: k.order.iter().map(|&b| b * len).collect(),
        };
        w.fused = Some(fused_io(run, addresses, at, false)?);
        // One piece per block, as below.
        let steps = lists::gather_steps(k.topology, n, k.pos, 0, &vec![1; n], true);
        run.run_steps(w, steps, k.topology != Topology::Ring, true)
    })
}

/// Bytes of a received block an all_gather copies from its slot into the output at a time.
const ASSEMBLY_BYTES: usize = 32 << 10;

/// all_gather on pages: every chip's input pages travel as they are, and received blocks are
/// forwarded from the slots they land in; the output is assembled page run by page run from
/// this chip's block and the slots.
pub(crate) fn all_gather(run: &Run, split: PageSplit, addresses: &[u32]) -> Result<(), ChipError> {
    let k = run.k;
    let n = k.line.chips.len();
    let pos = k.pos;
    let len = k.input.buffer_size() as usize;
    with_work(|w| {
        w.shape(&[], &vec![len; n], Some(pos));
        read_pages(run.ctx, &k.input, addresses[0], &mut w.blocks[pos][..len])?;
        // One piece per block: without a fused reduction, pieces only add waits.
        let pieces = vec![piece_count(len, w.block_piece); n];
        let steps = lists::gather_steps(k.topology, n, pos, 0, &pieces, false);
        run.run_steps(w, steps, k.topology != Topology::Ring, false)?;
        // Output page run (o, b) is input run o of the line position whose order is b.
        let mut from_position = vec![0; n];
        for (p, &blk) in k.order.iter().enumerate() {
            from_position[blk] = p;
        }
        // Received blocks stay in their slots (`Step::TakeBlock`; block j in slot j, as the
        // gather's slots start at 0): each run is read from there a few pages at a time,
        // through a buffer that stays in the host's cache.
        let ps = k.input.page_size() as usize;
        let run_pages = split.extent * split.inner;
        let pages_at_once = (ASSEMBLY_BYTES / ps).clamp(1, run_pages.max(1));
        let mut buf = std::mem::take(&mut w.staged);
        for o in 0..split.outer {
            for (blk, &j) in from_position.iter().enumerate() {
                for p in (0..run_pages).step_by(pages_at_once) {
                    let count = pages_at_once.min(run_pages - p);
                    let (at, len) = ((o * run_pages + p) * ps, count * ps);
                    let src = match j == pos {
                        true => &w.block(j)[at..at + len],
                        false => {
                            run.read_slot_into(j, at, sized(&mut buf, len))?;
                            &buf[..len]
                        }
                    };
                    let first = (o * n + blk) * run_pages + p;
                    write_pages(run.ctx, &k.output, addresses[2], first, src)?;
                }
            }
        }
        w.staged = buf;
        Ok(())
    })
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
struct Placement {
    chunk_start: Vec<usize>,
    chunk_run: usize,
    chunk_stride: usize,
    out_first: Vec<usize>,
}

/// Sets `w` up for a fused reduction whose chunk `j` holds `chunk_pages[j]` input pages (and
/// its block as many output pages): this chip's chunk and block held in the work, partial
/// sums in the input's format, pieces of whole pages so piece boundaries in a chunk and in a
/// block agree. Returns each chunk's piece count.
fn fuse(
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
fn fused_io(
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

/// Runs a fused reduction's step list, `build`'s steps with this chip's chunk encoded as its
/// pieces are summed; the list is built at the kernel's first launch and kept. The steps
/// write the whole output, so the launch may defer.
fn run_fused(
    run: &Run,
    w: &mut Work,
    build: impl Fn(usize) -> Vec<Step>,
) -> Result<Launched, ChipError> {
    let k = run.k;
    let steps = k.fused_steps.get_or_init(|| {
        let bf16_out = k.input.dtype == DataType::BFloat16 && k.output.dtype == DataType::BFloat16;
        let list = |pos| lists::encode_when_summed(build(pos), pos, bf16_out);
        let steps = match k.adds_at_delivery {
            true => {
                let n = k.line.chips.len();
                let beside = |pos, side| lists::neighbour_pos(k.topology, n, pos, side);
                lists::reduce_at_delivery(k.pos, list, beside)
            }
            false => list(k.pos),
        };
        lists::join_middle_sums(steps, k.pos)
    });
    run.run_steps(w, steps.clone(), k.topology != Topology::Ring, true)
}

/// reduce_scatter on pages: the fused reduction of `all_reduce` on chunks that are a run of
/// pages in each slice above the scattered dim, read in place from the input; this chip's
/// chunk is encoded piece by piece into the output's pages (same page order as the chunk).
/// The steps write the whole output, so a launch may defer.
pub(crate) fn reduce_scatter(
    run: &Run,
    split: PageSplit,
    addresses: &[u32],
) -> Result<Launched, ChipError> {
    let k = run.k;
    let n = k.line.chips.len();
    let page_bytes = k.input.page_size() as usize;
    // The algorithm's chunk j (owned by line position j) is the data's chunk order[j]: in
    // each of the `outer` slices, its `cs * inner` pages.
    let cs = split.extent / n;
    let run_bytes = cs * split.inner * page_bytes;
    let at = Placement {
        chunk_start: k.order.iter().map(|&d| d * run_bytes).collect(),
        chunk_run: run_bytes,
        chunk_stride: split.extent * split.inner * page_bytes,
        out_first: vec![0; n],
    };
    let chunk_pages = vec![k.input.num_pages() as usize / n; n];
    with_work(|w| {
        let pieces = fuse(run, addresses, w, &chunk_pages, at)?;
        run_fused(run, w, |pos| {
            lists::fused_reduce_steps(k.topology, n, pos, 0, &pieces)
        })
    })
}

/// Page range `[first, end)` of line position `j`'s chunk when `pages` pages split over `n`
/// positions as evenly as they can (chunks differ by at most one page; some may be empty).
pub(crate) fn chunk_pages(pages: usize, n: usize, j: usize) -> (usize, usize) {
    (j * pages / n, (j + 1) * pages / n)
}

/// True if all_reduce can run as one kernel on the pages of `spec`: a summable format whose
/// pages hold whole elements (every layout: a sum is element-wise, and tile padding is zeros).
pub(crate) fn fused_all_reduce_fits(spec: &TensorSpec) -> bool {
    let elem = match spec.dtype {
        DataType::BFloat16 => 2,
        DataType::Float32 => 4,
        _ => return false,
    };
    cfg!(target_endian = "little") && spec.page_size() as usize == page_elems(spec) * elem
}

/// all_reduce as one kernel on pages. The pages split as evenly as the line allows (nothing
/// outside the kernel sees the chunks, so they need not divide), a reduce_scatter runs on them
/// with partial sums in the input's format, and an all_gather moves the sums, encoded in the
/// output's format, straight between the chips' outputs, behind one handshake for both
/// phases. Every output byte is written by the steps, so when the line runs together a launch
/// may return as soon as its part is handed over (`Launched::Deferred`).
pub(crate) fn all_reduce(run: &Run, addresses: &[u32]) -> Result<Launched, ChipError> {
    let k = run.k;
    let n = k.line.chips.len();
    let pages = k.input.num_pages() as usize;
    let (in_page, out_page) = (k.input.page_size() as usize, k.output.page_size() as usize);
    let ranges: Vec<(usize, usize)> = (0..n).map(|j| chunk_pages(pages, n, j)).collect();
    let at = Placement {
        chunk_start: ranges.iter().map(|&(a, _)| a * in_page).collect(),
        chunk_run: usize::MAX,
        chunk_stride: 0,
        out_first: ranges.iter().map(|&(a, _)| a * out_page).collect(),
    };
    let counts: Vec<usize> = ranges.iter().map(|(a, e)| e - a).collect();
    with_work(|w| {
        let pieces = fuse(run, addresses, w, &counts, at)?;
        run_fused(run, w, |pos| {
            let mut steps = lists::fused_reduce_steps(k.topology, n, pos, 0, &pieces);
            steps.extend(lists::gather_steps(
                k.topology,
                n,
                pos,
                2 * n,
                &pieces,
                true,
            ));
            steps
        })
    })
}
