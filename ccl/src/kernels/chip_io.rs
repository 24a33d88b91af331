//! Where the collective steps read and write chip memory: a fused reduction's input and
//! output pages (`FusedIo`), read in place or copied, by the chip's own kernel or through the
//! fabric by a thread that runs the chip's steps for it (`Local`). Owns no buffers and sends
//! nothing: the steps (`execute`) decide what moves where.

use ttmesh_chip::allocator::MemSpace;
use ttmesh_chip::memory::DeviceMemory;
use ttmesh_chip::tensor::{DataType, TensorPages};
use ttmesh_chip::ChipError;
use ttmesh_fabric::{Fabric, FabricError, NocAddr};

use super::elements::Elements;

/// Where a fused reduction (all_reduce, page reduce_scatter) reads its input and writes its
/// output. Chunk `j`'s byte `b` is the input's byte `chunk_start[j] + (b / chunk_run) *
/// chunk_stride + b % chunk_run` in page order (an all_reduce's chunks are one run each; a
/// reduce_scatter's chunk is a run of pages in each slice above the scattered dim). The input
/// is read in place from the tensor's pages, and the output written piece by piece, by the
/// chip's own thread or by the line's runner through the fabric (`Fabric::read_local_with`,
/// `write_local`).
#[derive(Clone)]
pub(crate) struct FusedIo {
    pub in_dtype: DataType,
    pub in_elem: usize,
    pub chunk_start: Vec<usize>,
    pub chunk_run: usize,
    pub chunk_stride: usize,
    /// The input's pages and page size.
    pub input_pages: (TensorPages, usize),
    /// The output's pages and page size, and block `j`'s first byte.
    pub output_pages: (TensorPages, usize, Vec<usize>),
    /// Input reads hint the host's cache a few pages ahead (see `pages::prefetches_input`).
    pub prefetch_input: bool,
}

/// Input pages a read hints ahead of the one it copies: consecutive pages sit in different
/// DRAM banks, each its own host allocation, so the host's prefetchers lose the stream at
/// every page (2 KiB for a bf16 tile). 2, 4, 8 and 16 measured alike on all_reduce t3k 1 MiB.
const PREFETCH_AHEAD: usize = 4;

/// A contiguous range of chip memory: bank, address, bytes.
pub(crate) type BankRun = (u32, u64, usize);

/// A page's place in bank-then-address order as one integer: sorting a piece's pages by it
/// compares two words, not a tuple's three fields.
pub(crate) fn bank_major(bank: u32, addr: u64) -> u128 {
    (u128::from(bank) << 64) | u128::from(addr)
}

impl FusedIo {
    /// Partial sums travel in the input's format: in bf16 for a bf16 tensor (rounded at every
    /// hop, as tt-metal's are), else in f32.
    pub(crate) fn partials_bf16(&self) -> bool {
        self.in_dtype == DataType::BFloat16
    }

    /// Bytes `a..e` (whole pages) of output block `block` as runs of chip memory, pages that
    /// lie back to back in one bank joined (an interleaved tensor's pages of one bank do), so
    /// a piece of 64 tiles over 12 DRAM banks moves as 12 writes, not 64.
    pub(crate) fn output_runs(&self, block: usize, a: usize, e: usize, runs: &mut Vec<BankRun>) {
        let (pages, page_bytes, first) = &self.output_pages;
        let (start, end) = (first[block] + a, first[block] + e);
        debug_assert!(start.is_multiple_of(*page_bytes) && end.is_multiple_of(*page_bytes));
        runs.clear();
        runs.extend((start / page_bytes..end / page_bytes).map(|p| {
            let (bank, addr) = pages.location(p as u64);
            (bank, addr, *page_bytes)
        }));
        runs.sort_unstable_by_key(|&(bank, addr, _)| bank_major(bank, addr));
        let mut kept = 0;
        for i in 1..runs.len() {
            let (bank, addr, len) = runs[i];
            let last = &mut runs[kept];
            if last.0 == bank && last.1 + last.2 as u64 == addr {
                last.2 += len;
            } else {
                kept += 1;
                runs[kept] = runs[i];
            }
        }
        runs.truncate((kept + 1).min(runs.len()));
    }
}

/// Calls `f(bank, addr, bytes)` for each contiguous span of chunk `chunk`'s input bytes
/// `start..start + len` (spans end at page and run boundaries), hinting chip `me`'s memory
/// `PREFETCH_AHEAD` spans ahead when `io.prefetch_input`.
pub(crate) fn input_spans(
    io: &FusedIo,
    at: (Local, u32),
    start: (usize, usize),
    len: usize,
    f: impl FnMut(u32, u64, usize) -> Result<(), StepError>,
) -> Result<(), StepError> {
    spans_hinted(io, at, start, len, io.prefetch_input, f)
}

/// `input_spans`, hinting ahead only if `hint`.
fn spans_hinted(
    io: &FusedIo,
    (mem, me): (Local, u32),
    (chunk, start): (usize, usize),
    len: usize,
    hint: bool,
    mut f: impl FnMut(u32, u64, usize) -> Result<(), StepError>,
) -> Result<(), StepError> {
    let (pages, page_bytes) = &io.input_pages;
    let span = |b: usize| {
        let in_run = b % io.chunk_run;
        let at = io.chunk_start[chunk] + (b / io.chunk_run) * io.chunk_stride + in_run;
        let (p, in_page) = (at / page_bytes, at % page_bytes);
        let n = (page_bytes - in_page)
            .min(start + len - b)
            .min(io.chunk_run - in_run);
        let (bank, addr) = pages.location(p as u64);
        (bank, addr + in_page as u64, n)
    };
    let end = start + len;
    let space = pages.map.space;
    // A second cursor runs `PREFETCH_AHEAD` spans ahead, hinting them (spans are computed
    // twice rather than kept: an allocation per call woke malloc's arena lock).
    let mut ahead = start;
    let hint_next = |ahead: &mut usize| {
        if hint && *ahead < end {
            let (bank, addr, n) = span(*ahead);
            mem.prefetch(me, space, bank, addr, n);
            *ahead += n;
        }
    };
    for _ in 0..PREFETCH_AHEAD {
        hint_next(&mut ahead);
    }
    let mut b = start;
    while b < end {
        hint_next(&mut ahead);
        let (bank, addr, n) = span(b);
        f(bank, addr, n)?;
        b += n;
    }
    Ok(())
}

/// Decodes chip `me`'s input bytes of chunk `start.0` from byte `start.1` into `out` as f32,
/// in place from the input's pages.
pub(crate) fn read_input(
    io: &FusedIo,
    mem: Local,
    me: u32,
    start: (usize, usize),
    out: &mut [f32],
) -> Result<(), StepError> {
    let (elem, len) = (io.in_elem, out.len() * io.in_elem);
    let space = io.input_pages.0.map.space;
    let mut decode = Elements::new(elem, |at, bytes: &[u8]| {
        super::pages::decode_run(io.in_dtype, bytes, &mut out[at..at + bytes.len() / elem])
    });
    input_spans(io, (mem, me), start, len, |bank, addr, n| {
        mem.read_with(me, space, bank, addr, n, |_, b| decode.feed(b))
    })
}

/// Copies chip `me`'s input bytes of chunk `start.0` from byte `start.1` into `out` as they
/// are.
pub(crate) fn copy_input(
    io: &FusedIo,
    mem: Local,
    me: u32,
    start: (usize, usize),
    out: &mut [u8],
) -> Result<(), StepError> {
    copy_input_hinted(io, (mem, me), start, out, io.prefetch_input)
}

/// `copy_input`, hinting the cache ahead only if `hint` (a page at a time, the hints would
/// name pages the caller does not read next).
pub(crate) fn copy_input_hinted(
    io: &FusedIo,
    (mem, me): (Local, u32),
    start: (usize, usize),
    out: &mut [u8],
    hint: bool,
) -> Result<(), StepError> {
    let space = io.input_pages.0.map.space;
    let mut off = 0;
    spans_hinted(io, (mem, me), start, out.len(), hint, |bank, addr, n| {
        mem.read(me, space, bank, addr, &mut out[off..off + n])?;
        off += n;
        Ok(())
    })
}

/// The input pages of an output run, copied from chip `me` (`into`'s sender reads the
/// owner's input): `starts` gives each page's (chunk, byte), and page `k` lands at
/// `k * page_len` in `out`. Spans that lie back to back in one bank are read as one, so a
/// run of pages costs one bank lock, not one per page (per page, the shared lock's atomics
/// and their store drain were a third of a reduce_scatter's reads).
pub(crate) fn copy_input_pages(
    io: &FusedIo,
    (mem, me): (Local, u32),
    starts: impl Iterator<Item = (usize, usize)>,
    page_len: usize,
    out: &mut [u8],
) -> Result<(), StepError> {
    let space = io.input_pages.0.map.space;
    input_page_runs(io, (mem, me), starts, page_len, |(bank, addr, off, n)| {
        mem.read(me, space, bank, addr, &mut out[off..off + n])
    })
}

/// A run of input bytes in one bank: (bank, address, offset in the pages' buffer, bytes).
pub(crate) type InputRun = (u32, u64, usize, usize);

/// Hands `f` the input spans of the pages `starts` names (see `copy_input_pages`), spans
/// that lie back to back in one bank merged into one run.
pub(crate) fn input_page_runs(
    io: &FusedIo,
    (mem, me): (Local, u32),
    starts: impl Iterator<Item = (usize, usize)>,
    page_len: usize,
    mut f: impl FnMut(InputRun) -> Result<(), StepError>,
) -> Result<(), StepError> {
    let mut pending: Option<InputRun> = None;
    let mut off = 0;
    for start in starts {
        spans_hinted(io, (mem, me), start, page_len, false, |bank, addr, n| {
            match &mut pending {
                Some(p) if p.0 == bank && p.1 + p.3 as u64 == addr => p.3 += n,
                _ => {
                    if let Some(run) = pending.replace((bank, addr, off, n)) {
                        f(run)?;
                    }
                }
            }
            off += n;
            Ok(())
        })?;
    }
    match pending {
        Some(run) => f(run),
        None => Ok(()),
    }
}

/// Where block `block`'s output byte `a` lies, and how many bytes (at most `most`) follow
/// it on the same page: (bank, address, bytes).
fn output_span(io: &FusedIo, block: usize, a: usize, most: usize) -> BankRun {
    let (pages, page_bytes, first) = &io.output_pages;
    let at = first[block] + a;
    let (p, in_page) = (at / page_bytes, at % page_bytes);
    let (bank, addr) = pages.location(p as u64);
    (
        bank,
        addr + in_page as u64,
        (page_bytes - in_page).min(most),
    )
}

/// Calls `f(bank, addr, bytes, offset)` for each span of block `block`'s output bytes
/// `a..a + len` that lies on one page, in order (`offset` counts from `a`).
pub(crate) fn output_spans(
    io: &FusedIo,
    (block, a): (usize, usize),
    len: usize,
    mut f: impl FnMut(u32, u64, usize, usize) -> Result<(), StepError>,
) -> Result<(), StepError> {
    let mut off = 0;
    while off < len {
        let (bank, addr, n) = output_span(io, block, a + off, len - off);
        f(bank, addr, n, off)?;
        off += n;
    }
    Ok(())
}

/// Writes `data` as block `block`'s bytes from `a` into chip `me`'s output pages.
pub(crate) fn write_output(
    io: &FusedIo,
    mem: Local,
    me: u32,
    (block, a): (usize, usize),
    data: &[u8],
) -> Result<(), StepError> {
    let space = io.output_pages.0.map.space;
    output_spans(io, (block, a), data.len(), |bank, addr, n, off| {
        mem.write(me, space, bank, addr, &data[off..off + n])
    })
}

/// Where a chip's own memory is read and written: by its kernel directly, or through the
/// fabric by a thread running the chip's steps for it.
#[derive(Clone, Copy)]
pub(crate) enum Local<'a> {
    Memory(&'a DeviceMemory),
    Fabric(&'a Fabric),
}

/// One access to chip memory, either way a `Local` reaches it: `$memory` with the chip's
/// memory, or `$fabric` with the fabric and the bytes' NoC address; each error becomes a
/// `StepError`. A macro, not a function taking two closures: both arms use the caller's
/// `FnMut` callback, which two closures could not borrow at once.
macro_rules! either_way {
    ($local:expr, ($me:expr, $space:expr, $bank:expr, $addr:expr),
     |$m:ident| $memory:expr, |$f:ident, $at:ident| $fabric:expr) => {
        match $local {
            Local::Memory($m) => $memory.map_err(StepError::Chip),
            Local::Fabric($f) => {
                let $at = noc($me, $space, $bank, $addr)?;
                $fabric.map_err(StepError::Fabric)
            }
        }
    };
}

impl Local<'_> {
    /// Hands chip `me`'s `len` bytes at `addr` to `f` in place, in order (no copy).
    pub(crate) fn read_with(
        self,
        me: u32,
        space: MemSpace,
        bank: u32,
        addr: u64,
        len: usize,
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<(), StepError> {
        either_way!(
            self,
            (me, space, bank, addr),
            |m| m.read_in_place(space, bank, addr, len, f),
            |fabric, at| fabric.read_local_with(me, at, len, &mut f)
        )
    }

    /// `read_with` that never waits for a lock: Ok(false) when a bank is busy (some bytes
    /// may have been handed to `f`). For a fill under a neighbour's memory lock (`onward`).
    pub(crate) fn try_read_with(
        self,
        me: u32,
        (space, bank, addr): (MemSpace, u32, u64),
        len: usize,
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<bool, StepError> {
        either_way!(
            self,
            (me, space, bank, addr),
            |m| m.try_read_in_place(space, bank, addr, len, f),
            |fabric, at| fabric.try_read_local_with(me, at, len, &mut f)
        )
    }

    /// Hints that chip `me`'s `len` bytes at `addr` will be read soon (nothing is checked).
    pub(crate) fn prefetch(self, me: u32, space: MemSpace, bank: u32, addr: u64, len: usize) {
        match self {
            Local::Memory(m) => m.prefetch(space, bank, addr, len),
            Local::Fabric(f) => {
                if let Ok(at) = noc(me, space, bank, addr) {
                    f.prefetch_local(me, at, len);
                }
            }
        }
    }

    /// Copies chip `me`'s bytes at `addr` into `out`.
    pub(crate) fn read(
        self,
        me: u32,
        space: MemSpace,
        bank: u32,
        addr: u64,
        out: &mut [u8],
    ) -> Result<(), StepError> {
        either_way!(
            self,
            (me, space, bank, addr),
            |m| m.read(space, bank, addr, out),
            |fabric, at| fabric.read_local(me, at, out)
        )
    }

    /// Writes `data` into chip `me`'s memory at `addr`.
    pub(crate) fn write(
        self,
        me: u32,
        space: MemSpace,
        bank: u32,
        addr: u64,
        data: &[u8],
    ) -> Result<(), StepError> {
        either_way!(
            self,
            (me, space, bank, addr),
            |m| m.write(space, bank, addr, data),
            |fabric, at| fabric.write_local(me, at, data)
        )
    }

    /// Hands chip `me`'s `len` bytes at `addr` to `f(offset, bytes)` to fill in place (it
    /// must overwrite them all, and not touch this chip's memory meanwhile).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_with(
        self,
        me: u32,
        space: MemSpace,
        bank: u32,
        addr: u64,
        len: usize,
        mut f: impl FnMut(usize, &mut [u8]),
    ) -> Result<(), StepError> {
        either_way!(
            self,
            (me, space, bank, addr),
            |m| m.write_with(space, bank, addr, len, f),
            |fabric, at| fabric.write_local_with(me, at, len, &mut f)
        )
    }
}

/// The fabric's address of chip memory (collective buffers are in DRAM or L1).
pub(crate) fn noc(me: u32, space: MemSpace, bank: u32, addr: u64) -> Result<NocAddr, StepError> {
    match space {
        MemSpace::Dram | MemSpace::L1 => Ok(NocAddr::new(space, bank, addr)),
        MemSpace::Host => Err(StepError::Fabric(FabricError::KernelFailed {
            chip: me,
            reason: "a collective's buffers must be in DRAM or L1, not host memory".into(),
        })),
    }
}

/// A step that failed: on the fabric (the cause names the link) or in the chip's memory.
#[derive(Debug)]
pub(crate) enum StepError {
    Fabric(FabricError),
    Chip(ChipError),
}
