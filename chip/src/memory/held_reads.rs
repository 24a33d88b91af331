//! Read locks kept across many page reads: a kernel streaming a weight a tile at a time takes
//! each bank's read lock once per run of reads instead of twice per page (prefetch and read).
//! The in-place read and prefetch of one bank under its lock live here too (`impl Bank`);
//! `DeviceMemory`'s one-off reads use the same ones.
//!
//! perf on a SmolLM2-135M decode step on t3k: the read lock's `lock cmpxchg` and its release
//! were about 12% of the streaming matmul's samples (`read_with` 7.7% of all, 3.3% after).
//! The step's time moved less than that (medians even on t3k, 251 -> 240 ms on galaxy, on a
//! noisy host): the matmul mostly waits on memory (its stalls land on the prefetch), and
//! fewer locks do not shorten that.
//!
//! Never waits while holding: a bank's lock is only tried (`try_read_recursive`, which does
//! not queue behind a parked writer). When the try fails, every held lock is released first
//! and that one read takes the ordinary path (`DeviceMemory::read_with`, which may wait),
//! holding nothing else. So a writer is delayed by at most the holder's run, and no cycle of
//! waits can include a holder.

use parking_lot::RwLockReadGuard;

use super::{chunk_spans, Bank, DeviceMemory};
use crate::allocator::MemSpace;
use crate::error::Result;

/// Read locks on the banks of one space of one chip, each taken at its first use and kept
/// until [`HeldReads::release`] or drop. The holder must not wait for anything (a lock, an
/// event, another thread, a rayon join) while it holds any: release first.
pub struct HeldReads<'a> {
    memory: &'a DeviceMemory,
    space: MemSpace,
    /// By bank index; None where not held.
    guards: Vec<Option<RwLockReadGuard<'a, Bank>>>,
}

impl<'a> HeldReads<'a> {
    pub(super) fn new(memory: &'a DeviceMemory, space: MemSpace) -> Self {
        let banks = memory.num_banks(space) as usize;
        Self {
            memory,
            space,
            guards: (0..banks).map(|_| None).collect(),
        }
    }

    /// Releases every lock held (a writer waiting on one goes ahead); later reads take them
    /// again.
    pub fn release(&mut self) {
        self.guards.iter_mut().for_each(|g| *g = None);
    }

    /// The bank, its read lock held, after checking the range; None (and nothing held any
    /// more) when the lock is busy.
    fn held(&mut self, bank: u32, addr: u64, len: usize) -> Result<Option<&Bank>> {
        let lock = self.memory.bank(self.space, bank, addr, len as u64)?;
        let i = bank as usize;
        if self.guards[i].is_none() {
            match lock.try_read_recursive() {
                Some(g) => self.guards[i] = Some(g),
                None => {
                    self.release();
                    return Ok(None);
                }
            }
        }
        Ok(self.guards[i].as_deref())
    }

    /// [`DeviceMemory::read_with`] under the held lock: `f` gets the bytes in place when they
    /// lie in one written chunk, else a copy in `scratch` (zeros where never written).
    pub fn read_with<R>(
        &mut self,
        bank: u32,
        addr: u64,
        scratch: &mut [u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        match self.held(bank, addr, scratch.len())? {
            Some(b) => Ok(b.read_with(addr, scratch, f)),
            None => self.memory.read_with(self.space, bank, addr, scratch, f),
        }
    }

    /// [`DeviceMemory::read`] under the held lock: copies the bytes at `addr` into `out`.
    pub fn read(&mut self, bank: u32, addr: u64, out: &mut [u8]) -> Result<()> {
        match self.held(bank, addr, out.len())? {
            Some(b) => b.read_into(addr, out),
            None => self.memory.read(self.space, bank, addr, out)?,
        }
        Ok(())
    }

    /// [`DeviceMemory::prefetch`] under the held lock (a hint: a busy bank or a bad range is
    /// skipped).
    pub fn prefetch(&mut self, bank: u32, addr: u64, len: usize) {
        if let Ok(Some(b)) = self.held(bank, addr, len) {
            b.prefetch(addr, len);
        }
    }
}

impl DeviceMemory {
    /// Read locks on `space`'s banks for a run of reads ([`HeldReads`]).
    pub fn held_reads(&self, space: MemSpace) -> HeldReads<'_> {
        HeldReads::new(self, space)
    }
}

/// A bank's in-place reads and prefetch hints, for `DeviceMemory`'s one-off reads and for
/// [`HeldReads`] alike (the caller holds the bank's read lock).
impl Bank {
    /// The `len` bytes at `addr` in place, when they lie in one written chunk.
    pub(super) fn in_place(&self, addr: u64, len: usize) -> Option<&[u8]> {
        // Chunk sizes are powers of two: a mask and a shift, not a division per page.
        debug_assert!(self.chunk.is_power_of_two());
        let in_chunk = (addr & (self.chunk - 1)) as usize;
        if in_chunk + len > self.chunk as usize {
            return None;
        }
        self.chunks
            .get(&(addr >> self.chunk.trailing_zeros()))
            .and_then(|c| c.bytes(in_chunk, len))
    }

    /// `f` with the `scratch.len()` bytes at `addr`: in place when they lie in one written
    /// chunk, else copied into `scratch` (zeros where never written).
    pub(super) fn read_with<R>(
        &self,
        addr: u64,
        scratch: &mut [u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> R {
        if let Some(bytes) = self.in_place(addr, scratch.len()) {
            return f(bytes);
        }
        self.read_into(addr, scratch);
        f(scratch)
    }

    /// Prefetch hints for the written bytes among the `len` at `addr`.
    pub(super) fn prefetch(&self, addr: u64, len: usize) {
        for (_, chunk, in_chunk, n) in chunk_spans(addr, len, self.chunk) {
            if let Some(bytes) = self.chunks.get(&chunk).and_then(|c| c.bytes(in_chunk, n)) {
                prefetch_lines(bytes);
            }
        }
    }
}

/// Prefetch hints for every cache line of `bytes` (a no-op off x86-64).
pub(crate) fn prefetch_lines(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint with no effect on memory; the pointer is in bounds.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}
