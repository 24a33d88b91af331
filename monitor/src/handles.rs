//! Per-slot write handles. Two kinds for a chip:
//! - [`ChipPublisher`]: Clone + Send + Sync, any thread; each update takes the slot with one
//!   compare-and-swap so concurrent writers exclude each other.
//! - [`ChipWriter`]: the one writer of its chip (methods take `&mut self`, it is not Clone), so
//!   an update is plain stores, no atomic read-modify-write: for the allocator's hot path,
//!   kept inside the state the allocator already locks.
//!
//! A chip is written through one kind or the other, never both (the [`crate::Publisher`]
//! refuses to hand out the second kind). A [`ChipWriter`] may become a [`SerialChipWriter`]
//! (same plain stores, `&self`, Sync) for writers serialised by a lock of the caller's, such
//! as an allocator listener: the type cannot prove the serialisation, but every word is atomic,
//! so a caller that breaks it publishes wrong numbers, never touches memory unsafely.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crate::data::MemoryKind;
use crate::data::{ChipCounters, ChipSnapshot, LinkCounters, LinkSnapshot, MemoryCounters};
use crate::layout::*;
use crate::publisher::Shared;
use crate::seqlock::{read_slot, write_lock, write_lock_exclusive, WriteGuard};

/// A slot's words plus the mapping that keeps them alive.
#[derive(Clone)]
pub(crate) struct Slot {
    _shared: Arc<Shared>,
    base: NonNull<AtomicU64>,
}

// SAFETY: the pointer targets the mapping `_shared` keeps alive; all access is atomic.
unsafe impl Send for Slot {}
unsafe impl Sync for Slot {}

impl Slot {
    pub(crate) fn new(shared: &Arc<Shared>, offset: usize) -> Slot {
        let word = shared
            .map
            .word(offset)
            .expect("layout bug: slot outside segment");
        Slot {
            _shared: Arc::clone(shared),
            base: NonNull::from(word),
        }
    }

    #[inline]
    fn w(&self, i: usize) -> &AtomicU64 {
        // SAFETY: callers pass word indices inside the slot (layout constants).
        unsafe { &*self.base.as_ptr().add(i) }
    }

    #[inline]
    fn get(&self, i: usize) -> u64 {
        self.w(i).load(Ordering::Relaxed)
    }

    #[inline]
    fn set(&self, i: usize, v: u64) {
        self.w(i).store(v, Ordering::Relaxed)
    }
}

#[inline]
fn mem(kind: MemoryKind, field: usize) -> usize {
    C_MEM + MEM_WORDS * kind.index() + field
}

/// The chip operations, once; `EXCL` picks the locking (see the module doc).
#[derive(Clone)]
struct ChipCore<const EXCL: bool> {
    slot: Slot,
}

impl<const EXCL: bool> ChipCore<EXCL> {
    #[inline(always)]
    fn lock(&self) -> WriteGuard<'_> {
        if EXCL {
            write_lock_exclusive(self.slot.w(C_SEQ))
        } else {
            write_lock(self.slot.w(C_SEQ))
        }
    }

    fn set_identity(&self, id: u32, coord: (u32, u32)) {
        let _g = self.lock();
        self.slot.set(C_ID, id as u64);
        self.slot.set(C_ROW, coord.0 as u64);
        self.slot.set(C_COL, coord.1 as u64);
    }

    #[inline(always)]
    fn set_memory(&self, kind: MemoryKind, m: &MemoryCounters) {
        let _g = self.lock();
        self.slot.set(mem(kind, M_ALLOCATED), m.allocated);
        self.slot.set(mem(kind, M_CAPACITY), m.capacity);
        self.slot.set(mem(kind, M_LIVE), m.live_buffers);
        self.slot.set(mem(kind, M_PEAK), m.peak);
        self.slot.set(mem(kind, M_LARGEST_FREE), m.largest_free);
    }

    #[inline(always)]
    fn on_allocate(&self, kind: MemoryKind, bytes: u64) {
        let _g = self.lock();
        let a = self.slot.get(mem(kind, M_ALLOCATED)).saturating_add(bytes);
        self.slot.set(mem(kind, M_ALLOCATED), a);
        let live = self.slot.get(mem(kind, M_LIVE));
        self.slot.set(mem(kind, M_LIVE), live.saturating_add(1));
        if a > self.slot.get(mem(kind, M_PEAK)) {
            self.slot.set(mem(kind, M_PEAK), a);
        }
    }

    #[inline(always)]
    fn on_deallocate(&self, kind: MemoryKind, bytes: u64) {
        let _g = self.lock();
        let a = self.slot.get(mem(kind, M_ALLOCATED)).saturating_sub(bytes);
        self.slot.set(mem(kind, M_ALLOCATED), a);
        let live = self.slot.get(mem(kind, M_LIVE));
        self.slot.set(mem(kind, M_LIVE), live.saturating_sub(1));
    }

    fn set_capacity(&self, kind: MemoryKind, bytes: u64) {
        let _g = self.lock();
        self.slot.set(mem(kind, M_CAPACITY), bytes);
    }

    #[inline(always)]
    fn set_largest_free(&self, kind: MemoryKind, bytes: u64) {
        let _g = self.lock();
        self.slot.set(mem(kind, M_LARGEST_FREE), bytes);
    }

    fn set_traces(&self, traces: u64, trace_bytes: u64) {
        let _g = self.lock();
        self.slot.set(C_TRACES, traces);
        self.slot.set(C_TRACE_BYTES, trace_bytes);
    }

    fn add_replays(&self, n: u64) {
        let _g = self.lock();
        let r = self.slot.get(C_REPLAYS).saturating_add(n);
        self.slot.set(C_REPLAYS, r);
    }

    fn update(&self, f: impl FnOnce(&mut ChipCounters)) {
        let _g = self.lock();
        let mut c = ChipCounters::default();
        for kind in MemoryKind::ALL {
            *c.memory_mut(kind) = MemoryCounters {
                allocated: self.slot.get(mem(kind, M_ALLOCATED)),
                capacity: self.slot.get(mem(kind, M_CAPACITY)),
                live_buffers: self.slot.get(mem(kind, M_LIVE)),
                peak: self.slot.get(mem(kind, M_PEAK)),
                largest_free: self.slot.get(mem(kind, M_LARGEST_FREE)),
            };
        }
        c.traces = self.slot.get(C_TRACES);
        c.trace_bytes = self.slot.get(C_TRACE_BYTES);
        c.replays = self.slot.get(C_REPLAYS);
        c.weights_bytes = self.slot.get(C_WEIGHTS);
        c.kv_cache_bytes = self.slot.get(C_KV_CACHE);
        c.host_bytes = self.slot.get(C_HOST_BYTES);
        // If `f` panics the guard still ends the update, and nothing was stored yet.
        f(&mut c);
        for kind in MemoryKind::ALL {
            let m = c.memory(kind);
            self.slot.set(mem(kind, M_ALLOCATED), m.allocated);
            self.slot.set(mem(kind, M_CAPACITY), m.capacity);
            self.slot.set(mem(kind, M_LIVE), m.live_buffers);
            self.slot.set(mem(kind, M_PEAK), m.peak);
            self.slot.set(mem(kind, M_LARGEST_FREE), m.largest_free);
        }
        self.slot.set(C_TRACES, c.traces);
        self.slot.set(C_TRACE_BYTES, c.trace_bytes);
        self.slot.set(C_REPLAYS, c.replays);
        self.slot.set(C_WEIGHTS, c.weights_bytes);
        self.slot.set(C_KV_CACHE, c.kv_cache_bytes);
        self.slot.set(C_HOST_BYTES, c.host_bytes);
    }

    fn snapshot(&self) -> Option<ChipSnapshot> {
        read_slot::<CHIP_USED_WORDS>(|i| self.slot.w(i))
            .ok()
            .map(|w| chip_from_words(&w))
    }
}

/// Shared chip handle: Clone + Send + Sync; every method is one short sequence-locked write
/// taken with a compare-and-swap (about 10 ns).
#[derive(Clone)]
pub struct ChipPublisher {
    core: ChipCore<false>,
}

/// Exclusive chip handle: the only writer of its chip, so updates are plain stores (a few ns).
/// Keep it where the chip's allocator state is already locked.
pub struct ChipWriter {
    core: ChipCore<true>,
    claim: Arc<[AtomicU8]>,
    index: usize,
}

impl Drop for ChipWriter {
    fn drop(&mut self) {
        self.claim[self.index].store(CLAIM_NONE, Ordering::Release);
    }
}

/// Who writes a chip slot (kept in the Publisher, not in the segment).
pub(crate) const CLAIM_NONE: u8 = 0;
pub(crate) const CLAIM_SHARED: u8 = 1;
pub(crate) const CLAIM_EXCLUSIVE: u8 = 2;

impl ChipPublisher {
    pub(crate) fn new(slot: Slot) -> ChipPublisher {
        ChipPublisher {
            core: ChipCore { slot },
        }
    }

    /// The sequence word, for tests that simulate a writer dying mid-update.
    #[cfg(test)]
    pub(crate) fn seq_word(&self) -> &AtomicU64 {
        self.core.slot.w(C_SEQ)
    }
}

impl ChipWriter {
    pub(crate) fn new(slot: Slot, claim: Arc<[AtomicU8]>, index: usize) -> ChipWriter {
        ChipWriter {
            core: ChipCore { slot },
            claim,
            index,
        }
    }
}

/// The same methods on both handles: `&self` on the shared one, `&mut self` on the exclusive.
macro_rules! chip_methods {
    ($s:ident, $($recv:tt)*) => {
        /// Chip id and (row, col) as the mesh numbers them.
        pub fn set_identity($($recv)*, id: u32, coord: (u32, u32)) {
            $s.core.set_identity(id, coord)
        }
        /// Replace one allocator's statistics (five stores).
        #[inline]
        pub fn set_memory($($recv)*, kind: MemoryKind, m: &MemoryCounters) {
            $s.core.set_memory(kind, m)
        }
        /// One buffer of `bytes` allocated: allocated, live buffers and peak follow.
        #[inline]
        pub fn on_allocate($($recv)*, kind: MemoryKind, bytes: u64) {
            $s.core.on_allocate(kind, bytes)
        }
        /// One buffer of `bytes` freed.
        #[inline]
        pub fn on_deallocate($($recv)*, kind: MemoryKind, bytes: u64) {
            $s.core.on_deallocate(kind, bytes)
        }
        pub fn set_capacity($($recv)*, kind: MemoryKind, bytes: u64) {
            $s.core.set_capacity(kind, bytes)
        }
        #[inline]
        pub fn set_largest_free($($recv)*, kind: MemoryKind, bytes: u64) {
            $s.core.set_largest_free(kind, bytes)
        }
        /// Live traces and their command bytes (after end_trace_capture / release_trace).
        pub fn set_traces($($recv)*, traces: u64, trace_bytes: u64) {
            $s.core.set_traces(traces, trace_bytes)
        }
        pub fn add_replays($($recv)*, n: u64) {
            $s.core.add_replays(n)
        }
        /// Read-modify-write of all counters at once (readers see all or nothing of it).
        /// `f` runs while the slot is held: keep it short.
        pub fn update($($recv)*, f: impl FnOnce(&mut ChipCounters)) {
            $s.core.update(f)
        }
        /// What a reader would see now (None only if the slot stays mid-update too long).
        pub fn snapshot(&$s) -> Option<ChipSnapshot> {
            $s.core.snapshot()
        }
    };
}

impl ChipPublisher {
    chip_methods!(self, &self);
}

impl ChipWriter {
    chip_methods!(self, &mut self);

    /// The same writer behind `&self`, for calls the caller already serialises (see
    /// [`SerialChipWriter`]).
    pub fn into_serial(self) -> SerialChipWriter {
        SerialChipWriter {
            core: self.core.clone(),
            _claim: self,
        }
    }
}

/// The exclusive writer of a chip slot (plain stores, like [`ChipWriter`]) with `&self`
/// methods, for a writer whose calls are serialised by a lock the caller holds anyway, e.g.
/// an allocator listener (called under the allocator's lock) plus a slow path that takes that
/// same lock. Two calls at once are a caller bug: no memory is at risk (every word is atomic),
/// but readers may see a torn or lost update, or report the slot as busy.
pub struct SerialChipWriter {
    core: ChipCore<true>,
    /// Holds the chip's exclusive claim until dropped.
    _claim: ChipWriter,
}

impl SerialChipWriter {
    chip_methods!(self, &self);
}

/// Link slot handle: Clone + Send + Sync.
#[derive(Clone)]
pub struct LinkPublisher {
    slot: Slot,
}

impl LinkPublisher {
    pub(crate) fn new(slot: Slot) -> LinkPublisher {
        LinkPublisher { slot }
    }

    pub fn set_endpoints(&self, a_chip: u32, a_port: u32, b_chip: u32, b_port: u32) {
        let _g = write_lock(self.slot.w(L_SEQ));
        self.slot.set(L_A_CHIP, a_chip as u64);
        self.slot.set(L_A_PORT, a_port as u64);
        self.slot.set(L_B_CHIP, b_chip as u64);
        self.slot.set(L_B_PORT, b_port as u64);
    }

    /// `packets` packets carrying `bytes` bytes crossed the link.
    #[inline]
    pub fn add_traffic(&self, packets: u64, bytes: u64) {
        let _g = write_lock(self.slot.w(L_SEQ));
        let p = self.slot.get(L_PACKETS).saturating_add(packets);
        self.slot.set(L_PACKETS, p);
        let b = self.slot.get(L_BYTES).saturating_add(bytes);
        self.slot.set(L_BYTES, b);
    }

    pub fn add_stalls(&self, n: u64) {
        let _g = write_lock(self.slot.w(L_SEQ));
        let s = self.slot.get(L_STALLS).saturating_add(n);
        self.slot.set(L_STALLS, s);
    }

    pub fn add_errors(&self, n: u64) {
        let _g = write_lock(self.slot.w(L_SEQ));
        let e = self.slot.get(L_ERRORS).saturating_add(n);
        self.slot.set(L_ERRORS, e);
    }

    pub fn update(&self, f: impl FnOnce(&mut LinkCounters)) {
        let _g = write_lock(self.slot.w(L_SEQ));
        let mut c = LinkCounters {
            packets: self.slot.get(L_PACKETS),
            bytes: self.slot.get(L_BYTES),
            stalls: self.slot.get(L_STALLS),
            errors: self.slot.get(L_ERRORS),
        };
        f(&mut c);
        self.slot.set(L_PACKETS, c.packets);
        self.slot.set(L_BYTES, c.bytes);
        self.slot.set(L_STALLS, c.stalls);
        self.slot.set(L_ERRORS, c.errors);
    }

    pub fn snapshot(&self) -> Option<LinkSnapshot> {
        read_slot::<LINK_USED_WORDS>(|i| self.slot.w(i))
            .ok()
            .map(|w| link_from_words(&w))
    }
}

pub(crate) fn chip_from_words(w: &[u64; CHIP_USED_WORDS]) -> ChipSnapshot {
    let m = |kind: MemoryKind| MemoryCounters {
        allocated: w[mem(kind, M_ALLOCATED)],
        capacity: w[mem(kind, M_CAPACITY)],
        live_buffers: w[mem(kind, M_LIVE)],
        peak: w[mem(kind, M_PEAK)],
        largest_free: w[mem(kind, M_LARGEST_FREE)],
    };
    ChipSnapshot {
        id: w[C_ID] as u32,
        rank: w[C_RANK] as u32,
        coord: (w[C_ROW] as u32, w[C_COL] as u32),
        dram: m(MemoryKind::Dram),
        l1: m(MemoryKind::L1),
        l1_small: m(MemoryKind::L1Small),
        trace: m(MemoryKind::Trace),
        traces: w[C_TRACES],
        trace_bytes: w[C_TRACE_BYTES],
        replays: w[C_REPLAYS],
        weights_bytes: w[C_WEIGHTS],
        kv_cache_bytes: w[C_KV_CACHE],
        host_bytes: w[C_HOST_BYTES],
    }
}

pub(crate) fn link_from_words(w: &[u64; LINK_USED_WORDS]) -> LinkSnapshot {
    LinkSnapshot {
        a_chip: w[L_A_CHIP] as u32,
        a_port: w[L_A_PORT] as u32,
        b_chip: w[L_B_CHIP] as u32,
        b_port: w[L_B_PORT] as u32,
        packets: w[L_PACKETS],
        bytes: w[L_BYTES],
        stalls: w[L_STALLS],
        errors: w[L_ERRORS],
    }
}
