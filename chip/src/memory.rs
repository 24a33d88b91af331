//! Backing memory of one chip: DRAM banks and L1 banks (one per compute core), plus the host's
//! SYSTEM_MEMORY range.
//!
//! Storage is sparse: a bank is a map of fixed-size chunks created on first write and dropped
//! when a freed buffer covers them, so a 32-chip Galaxy (384 GiB of DRAM) costs host memory only
//! for live data. Unwritten memory reads as zero.

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::allocator::MemSpace;
use crate::error::{ChipError, LiveTraceWrite, Result};

mod held_bank;
mod held_reads;
mod resident;
mod shared;
mod trace_guard;
pub use held_bank::HeldBank;
pub(crate) use held_reads::prefetch_lines;
pub use held_reads::HeldReads;
use resident::Resident;
pub use shared::cap_malloc_arenas;
use shared::SharedBytes;

/// Chunk granularity of the sparse store in `space`: large enough that a page copy rarely
/// spans two chunks, small enough that small buffers do not pin much host memory. A DRAM
/// tensor's pages in one bank lie back to back, so longer DRAM chunks mean fewer lookups,
/// locks and stream starts per bank run (64 KiB against 16 KiB, alternated, medians of 9:
/// all_reduce t3k 16 MiB 37.2 -> 32.9 ms, line-2 1 MiB 190 -> 168 us; 32 KiB and 256 KiB
/// were slower than 64 KiB; more in docs/performance.md). An L1 tensor is spread thin over
/// 64+ cores' banks, where 64 KiB chunks would pin 8x its bytes (the 32-chip footprint
/// test), so L1 and host memory keep 16 KiB.
pub const fn chunk_size(space: MemSpace) -> u64 {
    match space {
        MemSpace::Dram => 64 * 1024,
        MemSpace::L1 | MemSpace::Host => 16 * 1024,
    }
}

/// The largest `chunk_size`.
const MAX_CHUNK_SIZE: usize = chunk_size(MemSpace::Dram) as usize;

struct Bank {
    /// By chunk index. FxHash: every fabric write and kernel read looks a chunk up, and
    /// SipHash's DoS resistance buys nothing for addresses (it was ~4% of a small collective).
    chunks: FxHashMap<u64, Chunk>,
    /// Bytes per chunk (`chunk_size` of the bank's space).
    chunk: u64,
}

/// The pieces of `len` bytes at `addr` that lie in one chunk of `size` bytes each, in order:
/// (offset from `addr`, chunk index, offset in the chunk, bytes).
fn chunk_spans(
    addr: u64,
    len: usize,
    size: u64,
) -> impl Iterator<Item = (usize, u64, usize, usize)> {
    debug_assert!(size.is_power_of_two(), "chunk sizes are powers of two");
    // A shift and a mask, not a division: every page a kernel reads or prefetches asks.
    let (shift, mask) = (size.trailing_zeros(), size - 1);
    let mut off = 0usize;
    std::iter::from_fn(move || {
        (off < len).then(|| {
            let a = addr + off as u64;
            let in_chunk = (a & mask) as usize;
            let n = (size as usize - in_chunk).min(len - off);
            let span = (off, a >> shift, in_chunk, n);
            off += n;
            span
        })
    })
}

/// Tries a bank's lock this many times, pausing between, before waiting for it: the other
/// holder is usually mid-copy or mid-fill on the other core, done in a few microseconds,
/// while a parked waiter costs two context switches. A collective's sums computed into a
/// neighbour's slot hold its bank's write lock for the sums' time, not a copy's; with
/// parking_lot's own short spin, all_reduce line-4 1 MiB (two threads, one per core) took
/// 1000 us against 836 us with 256 tries, and 694 us with 4096 (medians of 5).
const LOCK_SPINS: u32 = 4096;

/// A lock taken by `attempt`, tried `LOCK_SPINS` times, else by `wait`.
fn soon<G>(mut attempt: impl FnMut() -> Option<G>, wait: impl FnOnce() -> G) -> G {
    for _ in 0..LOCK_SPINS {
        if let Some(guard) = attempt() {
            return guard;
        }
        std::hint::spin_loop();
    }
    wait()
}

/// A bank's read lock, tried before it is waited for (`soon`).
fn read_soon(lock: &RwLock<Bank>) -> RwLockReadGuard<'_, Bank> {
    soon(|| lock.try_read(), || lock.read())
}

/// A bank's write lock, tried before it is waited for (`soon`).
fn write_soon(lock: &RwLock<Bank>) -> RwLockWriteGuard<'_, Bank> {
    soon(|| lock.try_write(), || lock.write())
}

impl Bank {
    /// Copies the bytes at `addr` out; unwritten memory reads as zero.
    fn read_into(&self, addr: u64, out: &mut [u8]) {
        for (off, chunk, in_chunk, n) in chunk_spans(addr, out.len(), self.chunk) {
            match self.chunks.get(&chunk) {
                Some(c) => c.read(in_chunk, &mut out[off..off + n]),
                None => out[off..off + n].fill(0),
            }
        }
    }

    /// Hands `f(off, bytes)` the `n` bytes at `in_chunk` of chunk `chunk` in place, then
    /// zeros for any part never written.
    fn hand(
        &self,
        (off, chunk, in_chunk, n): (usize, u64, usize, usize),
        f: &mut impl FnMut(usize, &[u8]),
    ) {
        match self.chunks.get(&chunk) {
            Some(c) => hand_valid(c.valid_bytes(), (off, in_chunk, n), f),
            None => f(off, &ZEROS[..n]),
        }
    }
}

/// What unwritten memory reads as, handed in place.
static ZEROS: [u8; MAX_CHUNK_SIZE] = [0; MAX_CHUNK_SIZE];

/// Hands `f(off, bytes)` the `n` bytes at `at` of `valid` (a chunk's valid bytes from some
/// point), then zeros for the part past them.
fn hand_valid(valid: &[u8], (off, at, n): (usize, usize, usize), f: &mut impl FnMut(usize, &[u8])) {
    let have = valid.len().saturating_sub(at).min(n);
    if have > 0 {
        f(off, &valid[at..at + have]);
    }
    if have < n {
        f(off + have, &ZEROS[..n - have]);
    }
}

/// An error unless `len` bytes at `addr` lie inside a bank of `size` bytes.
fn in_bank(
    (chip, space, bank): (u32, MemSpace, u32),
    addr: u64,
    len: u64,
    size: u64,
) -> Result<()> {
    if addr.checked_add(len).is_none_or(|end| end > size) {
        return Err(ChipError::MemoryRange(format!(
            "chip {chip} {space:?} bank {bank}: [{addr:#x}, +{len}) is beyond the bank's {size} B"
        )));
    }
    Ok(())
}

/// One chunk of backing memory. Bytes from `valid` up read as zero whatever the buffer holds:
/// a chunk reused from the pool is not zeroed up front, only the gaps a write skips over, so
/// memory written front to back (every large transfer) is never cleared first.
struct Chunk {
    data: ChunkData,
    valid: usize,
}

/// A chunk's bytes: this chip's own, or one host copy shared with every chunk of the same
/// contents (`shared.rs`), copied on the first write.
enum ChunkData {
    Own(Box<[u8]>),
    Shared(Arc<SharedBytes>),
}

impl Chunk {
    fn own(data: Box<[u8]>, valid: usize) -> Chunk {
        Chunk {
            data: ChunkData::Own(data),
            valid,
        }
    }

    /// Every byte of the buffer (those past `valid` read as zero).
    fn all(&self) -> &[u8] {
        match &self.data {
            ChunkData::Own(b) => b,
            ChunkData::Shared(s) => s.bytes(),
        }
    }

    /// The buffer to write into: a shared chunk becomes this chip's own first (copied, unless
    /// no other chunk holds it any more).
    fn all_mut(&mut self) -> &mut [u8] {
        if matches!(self.data, ChunkData::Shared(_)) {
            let ChunkData::Shared(s) =
                std::mem::replace(&mut self.data, ChunkData::Own(Box::new([])))
            else {
                unreachable!("matched just above")
            };
            self.data = ChunkData::Own(SharedBytes::unshare(s));
        }
        match &mut self.data {
            ChunkData::Own(b) => b,
            ChunkData::Shared(_) => unreachable!("made its own just above"),
        }
    }

    /// The valid bytes.
    fn valid_bytes(&self) -> &[u8] {
        &self.all()[..self.valid]
    }

    /// Copies `src` in at `at`, zeroing any gap between the valid bytes and `at` first.
    fn write(&mut self, at: usize, src: &[u8]) {
        self.fill(at, src.len()).copy_from_slice(src);
    }

    /// Lets `f` overwrite the `len` bytes at `at` (see `fill`).
    fn write_with(&mut self, at: usize, len: usize, f: impl FnOnce(&mut [u8])) {
        f(self.fill(at, len));
    }

    /// The `len` bytes at `at` for a writer that overwrites all of them, zeroing any gap
    /// between the valid bytes and `at` first.
    fn fill(&mut self, at: usize, len: usize) -> &mut [u8] {
        let valid = self.valid;
        self.valid = valid.max(at + len);
        let data = self.all_mut();
        if at > valid {
            data[valid..at].fill(0);
        }
        &mut data[at..at + len]
    }

    /// `fill`, with the chunk's other bytes to read beside them: (every byte before `at`,
    /// the `len` bytes to fill, the valid bytes after them).
    fn fill_beside(&mut self, at: usize, len: usize) -> (&[u8], &mut [u8], &[u8]) {
        self.fill(at, len);
        let after_valid = self.valid - (at + len);
        let (before, rest) = self.all_mut().split_at_mut(at);
        let (bytes, after) = rest.split_at_mut(len);
        (before, bytes, &after[..after_valid])
    }

    /// Copies the bytes at `at` out (zeros past `valid`).
    fn read(&self, at: usize, out: &mut [u8]) {
        let have = self.valid.saturating_sub(at).min(out.len());
        out[..have].copy_from_slice(&self.all()[at..at + have]);
        out[have..].fill(0);
    }

    /// The bytes at `at..at + len` in place, if they are all valid.
    fn bytes(&self, at: usize, len: usize) -> Option<&[u8]> {
        (at + len <= self.valid).then(|| &self.all()[at..at + len])
    }

    /// This chunk's part of the host memory it uses: all of its own buffer, or an equal share
    /// of a buffer held by several chunks.
    fn host_bytes(&self) -> u64 {
        match &self.data {
            ChunkData::Own(b) => b.len() as u64,
            ChunkData::Shared(s) => s.bytes().len() as u64 / Arc::strong_count(s) as u64,
        }
    }
}

pub struct DeviceMemory {
    chip: u32,
    dram: Vec<RwLock<Bank>>,
    l1: Vec<RwLock<Bank>>,
    host: Vec<RwLock<Bank>>,
    dram_bank_size: u64,
    l1_bank_size: u64,
    host_size: u64,
    /// DRAM addresses from here up (the TRACE region) count their writes and discards in
    /// `watched_epoch`, so a dispatcher may keep a trace's bytes between replays; and only
    /// writes reaching here can land in a live trace, so every other write costs one compare.
    watch_from: AtomicU64,
    watched_epoch: AtomicU64,
    /// Live traces' bytes in DRAM: (trace id, [start, end) in every bank), all in the TRACE
    /// region. Writes into them are refused (`check_write`).
    live_traces: RwLock<Vec<(u32, u64, u64)>>,
    /// Chunks `discard` dropped, kept for the next writes (at most `POOL_BYTES`): a buffer
    /// freed and allocated again, like a collective's scratch at every launch, then costs no
    /// allocation, page faults or zeroing of memory the write covers anyway.
    /// One pool per chunk size: DRAM's, and L1's and host memory's.
    pools: [Mutex<Vec<Box<[u8]>>>; 2],
    resident: Resident,
}

/// Bytes of chunks kept for reuse per chip and pool (64 MiB: the scratch a 16 MiB
/// all_reduce on 8 chips touches; a pool never holds more than the chip had written before).
const POOL_BYTES: u64 = 64 << 20;

impl DeviceMemory {
    pub fn new(
        chip: u32,
        num_dram_banks: u32,
        dram_bank_size: u64,
        num_l1_banks: u32,
        l1_bank_size: u64,
        host_size: u64,
    ) -> Self {
        let banks = |n: u32, space| {
            (0..n)
                .map(|_| {
                    RwLock::new(Bank {
                        chunks: FxHashMap::default(),
                        chunk: chunk_size(space),
                    })
                })
                .collect()
        };
        DeviceMemory {
            chip,
            dram: banks(num_dram_banks, MemSpace::Dram),
            l1: banks(num_l1_banks, MemSpace::L1),
            host: banks(1, MemSpace::Host),
            dram_bank_size,
            l1_bank_size,
            host_size,
            watch_from: AtomicU64::new(u64::MAX),
            watched_epoch: AtomicU64::new(0),
            live_traces: RwLock::new(Vec::new()),
            pools: Default::default(),
            resident: Resident::new(
                (num_dram_banks, dram_bank_size),
                (num_l1_banks, l1_bank_size),
                host_size,
            ),
        }
    }

    fn bank(&self, space: MemSpace, bank: u32, addr: u64, len: u64) -> Result<&RwLock<Bank>> {
        let banks = match space {
            MemSpace::Dram => &self.dram,
            MemSpace::L1 => &self.l1,
            MemSpace::Host => &self.host,
        };
        let size = self.bank_size(space);
        let b = banks.get(bank as usize).ok_or_else(|| {
            ChipError::MemoryRange(format!(
                "chip {} has no {:?} bank {} (it has {})",
                self.chip,
                space,
                bank,
                banks.len()
            ))
        })?;
        in_bank((self.chip, space, bank), addr, len, size)?;
        Ok(b)
    }

    pub fn write(&self, space: MemSpace, bank: u32, addr: u64, data: &[u8]) -> Result<()> {
        self.write_checked(space, bank, addr, data, true)
    }

    /// `write` that may land inside a live trace's bytes: for tools that damage a trace on
    /// purpose, standing for what the emulator cannot see (a DRAM fault); the replay's
    /// digest check is then what catches it.
    pub(crate) fn write_past_trace_guard(
        &self,
        space: MemSpace,
        bank: u32,
        addr: u64,
        data: &[u8],
    ) -> Result<()> {
        self.write_checked(space, bank, addr, data, false)
    }

    fn write_checked(
        &self,
        space: MemSpace,
        bank: u32,
        addr: u64,
        data: &[u8],
        guarded: bool,
    ) -> Result<()> {
        let lock = self.bank(space, bank, addr, data.len() as u64)?;
        self.admit(space, bank, addr, data.len() as u64, guarded)?;
        for (off, chunk, in_chunk, n) in chunk_spans(addr, data.len(), chunk_size(space)) {
            // Locked per chunk (see `read_in_place`).
            self.chunk_to_fill(&mut write_soon(lock), space, bank, chunk)
                .write(in_chunk, &data[off..off + n]);
        }
        Ok(())
    }

    /// Hands `f(offset, bytes)` the `len` bytes at `addr` of one bank to fill in place, a
    /// chunk at a time, in order: a kernel that computes its output (a reduction's sums)
    /// writes it straight into memory, with no buffer to copy from. `f` must overwrite every
    /// byte it is handed. The bank's write lock is held meanwhile (per chunk, as `write`
    /// takes it), so `f` must not touch this chip's memory.
    pub fn write_with(
        &self,
        space: MemSpace,
        bank: u32,
        addr: u64,
        len: usize,
        mut f: impl FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        self.write_trying(space, bank, addr, len, |off, bytes, _| {
            f(off, bytes);
            true
        })
    }

    /// `write_with` for a fill that reads other chips' memory (a reduction summing its own
    /// input and partials straight into a neighbour's slot). Each chunk is first handed to
    /// `f(offset, bytes, Some(held))` under the bank's write lock: there `f` may read the
    /// rest of this bank through `held`, may only *try* other banks' locks
    /// (`try_read_in_place`), never wait for one, and returns false when one is busy. The
    /// lock is then dropped, `f(offset, buffer, None)` fills a buffer with nothing held (it
    /// may wait, and must return true), and the buffer is written. A thread holding a bank's
    /// write lock thus never waits for another lock, so no order of chips filling each
    /// other's memory can deadlock. A chunk handed back with false may have been partly
    /// written, and another reader can see it so until the buffer lands: fill only memory
    /// that nobody reads before the write is signalled (a neighbour's slot).
    pub fn write_trying(
        &self,
        space: MemSpace,
        bank: u32,
        addr: u64,
        len: usize,
        mut f: impl FnMut(usize, &mut [u8], Option<&HeldBank>) -> bool,
    ) -> Result<()> {
        let lock = self.bank(space, bank, addr, len as u64)?;
        self.admit(space, bank, addr, len as u64, true)?;
        let size = self.bank_size(space);
        let mut staged = Vec::new();
        for (off, chunk, in_chunk, n) in chunk_spans(addr, len, chunk_size(space)) {
            let mut b = write_soon(lock);
            // The chunk leaves the map while it is filled, so the fill can read the rest of
            // the bank (`HeldBank`) beside it; a panicking fill puts it back first.
            let mut filling = b.chunks.remove(&chunk).unwrap_or_else(|| {
                self.resident.add(space, bank, chunk, 1);
                self.new_chunk(space)
            });
            let (before, bytes, after) = filling.fill_beside(in_chunk, n);
            let held = HeldBank {
                bank: &b,
                chip: self.chip,
                space,
                index: bank,
                size,
                filling: chunk,
                before,
                after,
                filled_end: in_chunk + n,
            };
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                f(off, bytes, Some(&held))
            }));
            b.chunks.insert(chunk, filling);
            match done {
                Ok(true) => continue,
                Ok(false) => {}
                Err(panic) => std::panic::resume_unwind(panic),
            }
            drop(b);
            staged.resize(n, 0);
            let filled = f(off, &mut staged[..n], None);
            debug_assert!(filled, "a fill with nothing locked must fill");
            self.chunk_to_fill(&mut write_soon(lock), space, bank, chunk)
                .write(in_chunk, &staged[..n]);
        }
        Ok(())
    }

    /// A chunk for a first write: from the pool if it has one (nothing valid yet), else
    /// freshly allocated (zeroed by the allocator, so all of it is valid).
    fn new_chunk(&self, space: MemSpace) -> Chunk {
        match self.pool(space).lock().pop() {
            Some(data) => Chunk::own(data, 0),
            None => Chunk::own(
                vec![0u8; chunk_size(space) as usize].into_boxed_slice(),
                chunk_size(space) as usize,
            ),
        }
    }

    fn pool(&self, space: MemSpace) -> &Mutex<Vec<Box<[u8]>>> {
        &self.pools[usize::from(space != MemSpace::Dram)]
    }

    fn recycle(&self, space: MemSpace, bank: u32, chunk: u64, c: Chunk) {
        self.resident.add(space, bank, chunk, -1);
        // A shared buffer is not this chip's to reuse: dropping the chunk drops its share.
        let ChunkData::Own(data) = c.data else {
            return;
        };
        let mut pool = self.pool(space).lock();
        if (pool.len() as u64) < POOL_BYTES / chunk_size(space) {
            pool.push(data);
        }
    }

    pub fn read(&self, space: MemSpace, bank: u32, addr: u64, out: &mut [u8]) -> Result<()> {
        let lock = self.bank(space, bank, addr, out.len() as u64)?;
        read_soon(lock).read_into(addr, out);
        Ok(())
    }

    /// Copies `len` bytes of `src`'s memory at `from` into this memory at `to`, in one pass:
    /// a neighbour's write whose bytes come straight from chip memory (a gather passing its
    /// output on), with no buffer between the two. Each destination chunk is written under
    /// its write lock while the source bank's read lock is only *tried*: a thread holding one
    /// bank lock never waits for a second, so no order of two chips' copies can deadlock.
    /// When the source is busy, that chunk goes through a buffer.
    pub fn copy_from(
        &self,
        (space, bank, to): (MemSpace, u32, u64),
        src: &DeviceMemory,
        (src_space, src_bank, from): (MemSpace, u32, u64),
        len: usize,
    ) -> Result<()> {
        let lock = self.bank(space, bank, to, len as u64)?;
        let src_lock = src.bank(src_space, src_bank, from, len as u64)?;
        if std::ptr::eq(lock, src_lock) {
            // One bank, maybe overlapping: read it all first, as a buffered copy would.
            let mut staged = vec![0u8; len];
            read_soon(src_lock).read_into(from, &mut staged);
            return self.write(space, bank, to, &staged);
        }
        self.admit(space, bank, to, len as u64, true)?;
        let mut staged = Vec::new();
        for (off, chunk, in_chunk, n) in chunk_spans(to, len, chunk_size(space)) {
            let from = from + off as u64;
            let mut b = write_soon(lock);
            match src_lock.try_read() {
                Some(s) => {
                    self.chunk_to_fill(&mut b, space, bank, chunk)
                        .write_with(in_chunk, n, |out| s.read_into(from, out))
                }
                None => {
                    drop(b);
                    staged.resize(n, 0);
                    read_soon(src_lock).read_into(from, &mut staged[..n]);
                    let mut b = write_soon(lock);
                    self.chunk_to_fill(&mut b, space, bank, chunk)
                        .write(in_chunk, &staged[..n]);
                }
            }
        }
        Ok(())
    }

    /// Chunk `chunk` of a bank about to be written, taken from the pool if it is new.
    fn chunk_to_fill<'b>(
        &self,
        b: &'b mut Bank,
        space: MemSpace,
        bank: u32,
        chunk: u64,
    ) -> &'b mut Chunk {
        b.chunks.entry(chunk).or_insert_with(|| {
            self.resident.add(space, bank, chunk, 1);
            self.new_chunk(space)
        })
    }

    /// Asks the host's cache to start loading the `len` bytes at `addr` of one bank (a hint:
    /// nothing is read or checked; unwritten or out-of-range memory, or a busy bank, is
    /// skipped). Streaming kernels call it a few pages ahead: their page order jumps between
    /// banks, each its own allocation, which the hardware prefetchers do not follow.
    pub fn prefetch(&self, space: MemSpace, bank: u32, addr: u64, len: usize) {
        let Ok(lock) = self.bank(space, bank, addr, len as u64) else {
            return;
        };
        // Tried, not waited for: a hint is worth nothing against a wait, and a fill under
        // another bank's write lock hints too (`write_trying`).
        if let Some(b) = lock.try_read() {
            b.prefetch(addr, len);
        }
    }

    /// Calls `f` with the `scratch.len()` bytes at `addr` of one bank: in place when they lie in
    /// one chunk (no copy, the kernels' page reads), else copied into `scratch`. Unwritten
    /// memory reads as zero either way.
    pub fn read_with<R>(
        &self,
        space: MemSpace,
        bank: u32,
        addr: u64,
        scratch: &mut [u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let lock = self.bank(space, bank, addr, scratch.len() as u64)?;
        Ok(read_soon(lock).read_with(addr, scratch, f))
    }

    /// Calls `f(offset, bytes)` for consecutive pieces of the `len` bytes at `addr` of one bank,
    /// in place (no copy; unwritten memory is given as zeros): the large reads that only
    /// consume bytes (a reduction adding a received slot) need no bounce buffer. Holds the
    /// bank's read lock while `f` has a chunk's bytes, so `f` must not write this chip's
    /// memory.
    pub fn read_in_place(
        &self,
        space: MemSpace,
        bank: u32,
        addr: u64,
        len: usize,
        f: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        self.read_chunks(space, bank, addr, len, true, f)
            .map(|_| ())
    }

    /// `read_in_place` that never waits for the bank's lock: Ok(false) as soon as a chunk's
    /// lock is busy (the chunks before it were handed to `f`). For a fill under another
    /// bank's write lock (`write_trying`).
    pub fn try_read_in_place(
        &self,
        space: MemSpace,
        bank: u32,
        addr: u64,
        len: usize,
        f: impl FnMut(usize, &[u8]),
    ) -> Result<bool> {
        self.read_chunks(space, bank, addr, len, false, f)
    }

    /// `read_in_place`, waiting for each chunk's lock only if `wait` (else false when busy).
    fn read_chunks(
        &self,
        space: MemSpace,
        bank: u32,
        addr: u64,
        len: usize,
        wait: bool,
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<bool> {
        let lock = self.bank(space, bank, addr, len as u64)?;
        for span in chunk_spans(addr, len, chunk_size(space)) {
            // Locked per chunk, not for the whole read: a neighbour's thread delivering into
            // this bank meanwhile waits for one chunk at most, not a whole piece (a parked
            // writer on a 2-core host costs two context switches).
            let b = match wait {
                true => read_soon(lock),
                false => match lock.try_read() {
                    Some(b) => b,
                    None => return Ok(false),
                },
            };
            b.hand(span, &mut f);
        }
        Ok(true)
    }

    /// Drops the chunks entirely inside [addr, addr + len) of one bank: freed memory gives its
    /// host memory back. The range is clipped to the bank, and the bank's top ends its last
    /// chunk (L1's top, 0x16E000, is not chunk-aligned).
    pub fn discard(&self, space: MemSpace, bank: u32, addr: u64, len: u64) {
        if self.resident.in_bank(space, bank) == 0 {
            return;
        }
        let size = self.bank_size(space);
        let end = addr.saturating_add(len).min(size);
        if end <= addr {
            return;
        }
        let Ok(lock) = self.bank(space, bank, addr, end - addr) else {
            return;
        };
        // Dropping chunks only gives host memory back (freed memory may read as anything), so
        // a live trace's bytes are simply kept; only its release's free reaches them.
        if self.reaches_trace_region(space, end) {
            if self.live_trace_in(addr, end).is_some() {
                return;
            }
            self.watched_epoch.fetch_add(1, Ordering::AcqRel);
        }
        let chunk = chunk_size(space);
        let first = addr.div_ceil(chunk);
        let last = if end == size {
            size.div_ceil(chunk)
        } else {
            end / chunk
        };
        if first >= last {
            return;
        }
        let mut b = write_soon(lock);
        if (last - first) as usize > b.chunks.len() {
            let dropped: Vec<u64> = b
                .chunks
                .keys()
                .copied()
                .filter(|k| *k >= first && *k < last)
                .collect();
            for k in dropped {
                if let Some(c) = b.chunks.remove(&k) {
                    self.recycle(space, bank, k, c);
                }
            }
        } else {
            for k in first..last {
                if let Some(c) = b.chunks.remove(&k) {
                    self.recycle(space, bank, k, c);
                }
            }
        }
    }

    /// False when no byte of `space` was ever written or everything written was discarded:
    /// nothing there to free.
    pub fn holds_any(&self, space: MemSpace) -> bool {
        self.resident.in_space(space) > 0
    }

    /// True if some bank of `space` may hold a chunk inside [lo, hi) (false means none does;
    /// true can be a neighbouring chunk within a MiB). No lock: a free checks it first.
    pub fn holds_in(&self, space: MemSpace, lo: u64, hi: u64) -> bool {
        self.holds_any(space) && self.resident.in_range(space, lo, hi)
    }

    /// Bytes of one bank's address space.
    pub fn bank_size(&self, space: MemSpace) -> u64 {
        match space {
            MemSpace::Dram => self.dram_bank_size,
            MemSpace::L1 => self.l1_bank_size,
            MemSpace::Host => self.host_size,
        }
    }

    /// Host bytes held by the sparse store (for the memory-footprint test and benchmarks).
    pub fn resident_bytes(&self) -> u64 {
        let bytes = |banks: &Vec<RwLock<Bank>>| {
            banks
                .iter()
                .map(|b| {
                    let b = b.read();
                    b.chunks.len() as u64 * b.chunk
                })
                .sum::<u64>()
        };
        bytes(&self.dram) + bytes(&self.l1) + bytes(&self.host)
    }

    pub fn num_banks(&self, space: MemSpace) -> u32 {
        match space {
            MemSpace::Dram => self.dram.len() as u32,
            MemSpace::L1 => self.l1.len() as u32,
            MemSpace::Host => 1,
        }
    }
}

#[cfg(test)]
mod tests;
