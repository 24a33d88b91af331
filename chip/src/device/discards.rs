//! Giving freed memory back to the host: the frees whose Discard record has not run yet
//! (`PendingDiscards`), and the dispatcher's pass that drops a freed range's backing chunks
//! except where something may still use them. A free made while every queue is idle needs
//! neither: nothing queued can read the range, so the host drops its chunks at once
//! (`discard_now`).

use std::collections::BTreeMap;

use super::trace::TraceTable;
use super::ChipShared;
use crate::allocator::{Allocator, BufferType, MemSpace};
use crate::command::space_code;
use crate::memory::chunk_size;

/// Ranges freed on the host whose Discard has not run: key (space code, address, per-bank
/// size) -> how many such frees are queued.
#[derive(Default)]
pub(crate) struct PendingDiscards {
    ranges: BTreeMap<(u8, u64, u64), u32>,
    /// Largest size queued per space since the set was last empty: bounds overlap queries.
    max_size: [u64; 3],
}

impl PendingDiscards {
    /// `count` more queued frees of `key` (one per command queue).
    pub(super) fn add(&mut self, key: (u8, u64, u64), count: u32) {
        *self.ranges.entry(key).or_insert(0) += count;
        let m = &mut self.max_size[key.0 as usize % 3];
        *m = (*m).max(key.2);
    }

    /// One queued free of `key` ran; true if it was the last one (the range is no longer
    /// pending), or if the range was not pending at all (a discard with no free behind it).
    pub(super) fn remove(&mut self, key: (u8, u64, u64)) -> bool {
        let Some(n) = self.ranges.get_mut(&key) else {
            return true;
        };
        *n -= 1;
        if *n > 0 {
            return false;
        }
        self.ranges.remove(&key);
        if self.ranges.is_empty() {
            self.max_size = [0; 3];
        }
        true
    }

    /// Queued ranges of `space` that overlap [lo, hi).
    fn overlapping(&self, code: u8, lo: u64, hi: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let from = lo.saturating_sub(self.max_size[code as usize % 3]);
        self.ranges
            .range((code, from, 0)..(code, hi, 0))
            .map(|(&(_, a, s), _)| (a, a + s))
            .filter(move |&(a, e)| a < hi && e > lo)
    }
}

impl ChipShared {
    /// Drops the backing chunks of freed ranges (space, address, per-bank size) in every bank,
    /// except where a live buffer sits now (it may have been reallocated since the free was
    /// queued). A dispatcher batches a run of frees into one call: one round of locks.
    pub(crate) fn discard_free_ranges(&self, ranges: &[(MemSpace, u64, u64)]) {
        // A range freed once but queued on every command queue is still pending until its
        // last queue passes it: while pending it is kept whole, so only that last pass can
        // return anything, and the others need only the pending set's lock.
        let mut last: Vec<(MemSpace, u64, u64)> = Vec::new();
        {
            let mut pending = self.pending_discards.lock();
            for &(space, address, size) in ranges {
                if pending.remove((space_code(space), address, size)) {
                    last.push((space, address, size));
                }
            }
        }
        self.discard_held(&last);
    }

    /// Drops a freed range's backing chunks now, on the calling thread: for a free made while
    /// every queue is idle, when no queued work can still read the range (the dispatcher's
    /// pass is for frees that follow queued work).
    pub(crate) fn discard_now(&self, space: MemSpace, address: u64, size: u64) {
        self.discard_held(&[(space, address, size)]);
    }

    /// Drops the chunks of freed ranges that no queued work can read any more.
    fn discard_held(&self, ranges: &[(MemSpace, u64, u64)]) {
        // Ranges whose chunks hold nothing are done without the other locks, so the host's
        // allocations do not wait for them. Safe unlocked: no queue will read the range, so a
        // chunk written there from now on belongs to a later owner.
        let holds = |&&(space, address, size): &&(MemSpace, u64, u64)| {
            let (lo, hi) = chunk_span(space, address, size);
            self.memory.holds_in(space, lo, hi)
        };
        if !ranges.iter().any(|r| holds(&r)) {
            return;
        }
        // All three locks are held until a range's chunks are gone (traces, allocator,
        // pending: the order used everywhere), so nothing allocated, freed or captured
        // meanwhile can lose data.
        let traces = self.traces.lock();
        let alloc = self.allocator.lock();
        let pending = self.pending_discards.lock();
        for &(space, address, size) in ranges.iter().filter(holds) {
            self.discard_one(&traces, &alloc, &pending, space, address, size);
        }
    }

    fn discard_one(
        &self,
        traces: &TraceTable,
        alloc: &Allocator,
        pending: &PendingDiscards,
        space: MemSpace,
        address: u64,
        size: u64,
    ) {
        let types: &[BufferType] = match space {
            MemSpace::Dram => &[BufferType::Dram, BufferType::Trace],
            MemSpace::L1 => &[BufferType::L1, BufferType::L1Small],
            MemSpace::Host => &[BufferType::SystemMemory],
        };
        let code = space_code(space);
        // Widened to whole chunks, so buffers smaller than a chunk (most L1 shares) give their
        // memory back too. Kept: live buffers, ranges freed whose own Discard is still queued
        // (work before it may read them), and live traces' intermediates (a replay on another
        // queue may be using them).
        let (lo, hi) = chunk_span(space, address, size);
        let mut keep: Vec<(u64, u64)> = types
            .iter()
            .flat_map(|t| {
                alloc
                    .manager(*t)
                    .overlapping(lo, hi - lo)
                    .map(|(a, b)| (a, a + b.size))
            })
            .chain(pending.overlapping(code, lo, hi))
            .chain(traces.private_ranges(space))
            .filter(|&(s, e)| s < hi && e > lo)
            .collect();
        keep.sort_unstable();
        let mut cursor = lo;
        let banks = self.memory.num_banks(space);
        let bank_size = self.memory.bank_size(space);
        let chunk = chunk_size(space);
        let discard = |from: u64, to: u64| {
            // Only a gap holding a whole chunk (the bank's top ends the last one) frees anything.
            let to = to.min(bank_size);
            let whole_end = if to == bank_size {
                to.div_ceil(chunk)
            } else {
                to / chunk
            };
            if from.div_ceil(chunk) < whole_end {
                for b in 0..banks {
                    self.memory.discard(space, b, from, to - from);
                }
            }
        };
        for (s, e) in keep {
            discard(cursor, s.min(hi));
            cursor = cursor.max(e);
        }
        discard(cursor, hi);
    }
}

/// [address, address + size) of `space` widened to whole chunks.
fn chunk_span(space: MemSpace, address: u64, size: u64) -> (u64, u64) {
    let chunk = chunk_size(space);
    let lo = address / chunk * chunk;
    let hi = address
        .saturating_add(size)
        .div_ceil(chunk)
        .saturating_mul(chunk);
    (lo, hi)
}
