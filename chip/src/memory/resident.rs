//! How many chunks each space and bank holds, so freeing memory that was never written takes
//! no lock.

use super::*;

/// Chunks held per space (DRAM, L1, host) and per bank, kept beside the banks' locks:
/// freeing a range of a space or bank that holds nothing (buffers never written) takes no
/// lock.
pub(super) struct Resident {
    space: [AtomicU64; 3],
    banks: [Vec<AtomicU64>; 3],
    /// Chunks held per space in each granule of `GRANULE` bytes of address (all banks
    /// together): a freed range whose granules hold nothing is skipped without any lock.
    granules: [Vec<AtomicU32>; 3],
}

/// Address granule of the resident map (16 DRAM chunks, 64 of L1's).
const GRANULE_SHIFT: u32 = 20;

fn granule_of(addr: u64) -> usize {
    (addr >> GRANULE_SHIFT) as usize
}

fn space_index(space: MemSpace) -> usize {
    match space {
        MemSpace::Dram => 0,
        MemSpace::L1 => 1,
        MemSpace::Host => 2,
    }
}

impl Resident {
    pub(super) fn new(dram: (u32, u64), l1: (u32, u64), host_size: u64) -> Self {
        let counts = |n: u32| (0..n).map(|_| AtomicU64::new(0)).collect();
        let granules = |size: u64| {
            (0..size.div_ceil(1 << GRANULE_SHIFT).max(1))
                .map(|_| AtomicU32::new(0))
                .collect()
        };
        Resident {
            space: Default::default(),
            banks: [counts(dram.0), counts(l1.0), counts(1)],
            granules: [granules(dram.1), granules(l1.1), granules(host_size)],
        }
    }

    /// `by` chunks more (or fewer) held at chunk index `chunk` of `bank`.
    pub(super) fn add(&self, space: MemSpace, bank: u32, chunk: u64, by: i64) {
        let i = space_index(space);
        if let Some(g) = self.granules[i].get(granule_of(chunk * chunk_size(space))) {
            if by >= 0 {
                g.fetch_add(by as u32, Ordering::Relaxed);
            } else {
                g.fetch_sub(by.unsigned_abs() as u32, Ordering::Relaxed);
            }
        }
        let apply = |c: &AtomicU64| {
            if by >= 0 {
                c.fetch_add(by as u64, Ordering::Relaxed);
            } else {
                c.fetch_sub(by.unsigned_abs(), Ordering::Relaxed);
            }
        };
        apply(&self.space[i]);
        if let Some(c) = self.banks[i].get(bank as usize) {
            apply(c);
        }
    }

    pub(super) fn in_space(&self, space: MemSpace) -> u64 {
        self.space[space_index(space)].load(Ordering::Relaxed)
    }

    /// Does any bank hold a chunk in [lo, hi)? (Granule-coarse: may say yes for a neighbour.)
    pub(super) fn in_range(&self, space: MemSpace, lo: u64, hi: u64) -> bool {
        let g = &self.granules[space_index(space)];
        if hi <= lo || g.is_empty() {
            return false;
        }
        let last = granule_of(hi - 1).min(g.len() - 1);
        g.get(granule_of(lo)..=last)
            .is_some_and(|gs| gs.iter().any(|c| c.load(Ordering::Relaxed) > 0))
    }

    pub(super) fn in_bank(&self, space: MemSpace, bank: u32) -> u64 {
        self.banks[space_index(space)]
            .get(bank as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}
