//! The allocator's event stream and the usage counters built from it.
//!
//! Allocation data has one source: these events. Counters (allocated, live buffers, peak), graph
//! capture and the monitor observe them (`observe::ChipObserver::allocator_event`); none of
//! them recounts from other state.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Allocation, BufferType, Placement};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocatorEventKind {
    Allocate,
    Deallocate,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocatorEvent {
    pub kind: AllocatorEventKind,
    pub chip: u32,
    pub buffer_id: u64,
    pub buffer_type: BufferType,
    pub address: u64,
    /// Buffer size (pages x page size).
    pub size: u64,
    pub per_bank_size: u64,
    pub page_size: u64,
    pub num_banks: u32,
    pub sharded: bool,
}

impl AllocatorEvent {
    pub fn from_allocation(kind: AllocatorEventKind, a: &Allocation) -> AllocatorEvent {
        let banks = match &a.placement {
            Placement::Interleaved => a.num_banks,
            Placement::Sharded { banks, .. } => banks.len() as u32,
        };
        AllocatorEvent {
            kind,
            chip: a.chip,
            buffer_id: a.id,
            buffer_type: a.buffer_type,
            address: a.address,
            size: a.size(),
            per_bank_size: a.per_bank_size,
            page_size: a.page_size,
            num_banks: banks,
            sharded: matches!(a.placement, Placement::Sharded { .. }),
        }
    }

    /// Bytes the buffer occupies on the chip (per-bank share times banks used).
    pub fn footprint(&self) -> u64 {
        self.per_bank_size * self.num_banks as u64
    }
}

/// Live per-type counters fed by the event stream (per-bank bytes, as the statistics are).
#[derive(Default, Debug)]
pub struct UsageCounters {
    per_type: [TypeCounters; 5],
}

#[derive(Default, Debug)]
struct TypeCounters {
    allocated_per_bank: AtomicU64,
    live_buffers: AtomicU64,
    peak_per_bank: AtomicU64,
    allocations: AtomicU64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageSnapshot {
    /// Sum of live buffers' per-bank shares: equals the allocator's `total_allocated_bytes`.
    pub allocated_per_bank: u64,
    pub live_buffers: u64,
    pub peak_per_bank: u64,
    pub allocations: u64,
}

impl UsageCounters {
    pub fn snapshot(&self, t: BufferType) -> UsageSnapshot {
        let c = &self.per_type[t as usize];
        UsageSnapshot {
            allocated_per_bank: c.allocated_per_bank.load(Ordering::Relaxed),
            live_buffers: c.live_buffers.load(Ordering::Relaxed),
            peak_per_bank: c.peak_per_bank.load(Ordering::Relaxed),
            allocations: c.allocations.load(Ordering::Relaxed),
        }
    }
}

impl crate::observe::ChipObserver for UsageCounters {
    fn allocator_event(&self, e: &AllocatorEvent) {
        // Events arrive under the allocator's lock, so plain load/store pairs cannot race.
        let c = &self.per_type[e.buffer_type as usize];
        match e.kind {
            AllocatorEventKind::Allocate => {
                let now = c.allocated_per_bank.load(Ordering::Relaxed) + e.per_bank_size;
                c.allocated_per_bank.store(now, Ordering::Relaxed);
                c.live_buffers.fetch_add(1, Ordering::Relaxed);
                c.allocations.fetch_add(1, Ordering::Relaxed);
                if now > c.peak_per_bank.load(Ordering::Relaxed) {
                    c.peak_per_bank.store(now, Ordering::Relaxed);
                }
            }
            AllocatorEventKind::Deallocate => {
                c.allocated_per_bank
                    .fetch_sub(e.per_bank_size, Ordering::Relaxed);
                c.live_buffers.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}
