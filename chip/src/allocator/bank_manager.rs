//! One address range shared by a set of banks: a free list with first fit, bottom-up or top-down,
//! and merging of freed neighbours.
//!
//! A bank manager does not know about pages or banks; callers give it the per-bank size and it
//! returns one address that is valid in every bank it serves (tt-metal's rule: an interleaved or
//! sharded buffer sits at the same address in all its banks).

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

/// Where inside the address range new blocks go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocDirection {
    /// Lowest free block that fits; the block's bottom is used (DRAM, TRACE).
    BottomUp,
    /// Highest free block that fits; the block's top is used (L1, L1_SMALL).
    TopDown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatedBlock {
    pub size: u64,
    pub buffer_id: u64,
}

/// One row of a memory view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRow {
    pub index: usize,
    pub address: u64,
    pub size: u64,
    pub prev: Option<usize>,
    pub next: Option<usize>,
    pub allocated: bool,
    pub buffer_id: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct BankManager {
    base: u64,
    top: u64,
    alignment: u64,
    direction: AllocDirection,
    /// Free blocks (address, size) by the index's address bucket, each bucket sorted by
    /// address. Never two adjacent blocks (they are merged). A bucket holds a handful of
    /// blocks, so its flat list beats a tree: no node walks on the allocate/free path.
    free: Vec<Vec<(u64, u64)>>,
    /// Largest free block starting in each address bucket, for first fit without a walk.
    index: FreeIndex,
    allocated: BTreeMap<u64, AllocatedBlock>,
    allocated_bytes: u64,
}

/// The largest free block starting in each of up to 2,048 equal address buckets, kept as a
/// max segment tree: first fit finds the lowest (or highest) bucket holding a block that fits
/// in O(log buckets), then looks only at that bucket's blocks. Walking the whole free list
/// cost ~1 us with a thousand live buffers.
#[derive(Clone, Debug)]
struct FreeIndex {
    base: u64,
    /// bucket = (address - base) >> shift
    shift: u32,
    leaves: usize,
    /// 1-based heap: tree[leaves + b] is bucket b; inner nodes hold their children's max.
    tree: Vec<u64>,
}

impl FreeIndex {
    fn new(base: u64, top: u64, alignment: u64) -> FreeIndex {
        let span = top.saturating_sub(base).max(1);
        let leaves = (span / alignment.max(1)).clamp(1, 2048).next_power_of_two() as usize;
        let mut shift = 0;
        while (span - 1) >> shift >= leaves as u64 {
            shift += 1;
        }
        FreeIndex {
            base,
            shift,
            leaves,
            tree: vec![0; 2 * leaves],
        }
    }

    fn bucket(&self, addr: u64) -> usize {
        ((addr - self.base) >> self.shift) as usize
    }

    /// Addresses whose blocks start in bucket `b`.
    fn span(&self, b: usize) -> std::ops::Range<u64> {
        let lo = self.base + ((b as u64) << self.shift);
        lo..lo.saturating_add(1 << self.shift)
    }

    fn leaf(&self, b: usize) -> u64 {
        self.tree[self.leaves + b]
    }

    fn set(&mut self, b: usize, v: u64) {
        let mut i = self.leaves + b;
        self.tree[i] = v;
        while i > 1 {
            i /= 2;
            let m = self.tree[2 * i].max(self.tree[2 * i + 1]);
            if self.tree[i] == m {
                break;
            }
            self.tree[i] = m;
        }
    }

    fn max(&self) -> u64 {
        self.tree[1]
    }

    /// The lowest (`highest = false`) or highest bucket holding a block of at least `size`.
    fn find(&self, size: u64, highest: bool) -> Option<usize> {
        if self.tree[1] < size {
            return None;
        }
        let mut i = 1;
        while i < self.leaves {
            let (first, second) = if highest {
                (2 * i + 1, 2 * i)
            } else {
                (2 * i, 2 * i + 1)
            };
            i = if self.tree[first] >= size {
                first
            } else {
                second
            };
        }
        Some(i - self.leaves)
    }
}

impl BankManager {
    pub fn new(base: u64, top: u64, alignment: u64, direction: AllocDirection) -> BankManager {
        let index = FreeIndex::new(base, top, alignment);
        let mut m = BankManager {
            base,
            top,
            alignment,
            direction,
            free: vec![Vec::new(); index.leaves],
            index,
            allocated: BTreeMap::new(),
            allocated_bytes: 0,
        };
        if top > base {
            m.free_insert(base, top - base);
        }
        m
    }

    /// The bucket of free blocks `addr` belongs in, if `addr` is inside the range.
    fn bucket_of(&self, addr: u64) -> Option<usize> {
        (addr >= self.base && addr < self.top).then(|| self.index.bucket(addr))
    }

    fn free_insert(&mut self, addr: u64, size: u64) {
        let b = self.index.bucket(addr);
        let blocks = &mut self.free[b];
        let at = blocks.partition_point(|&(a, _)| a < addr);
        blocks.insert(at, (addr, size));
        if size > self.index.leaf(b) {
            self.index.set(b, size);
        }
    }

    fn free_remove(&mut self, addr: u64) -> Option<u64> {
        let b = self.bucket_of(addr)?;
        let blocks = &mut self.free[b];
        let at = blocks.binary_search_by_key(&addr, |&(a, _)| a).ok()?;
        let (_, size) = blocks.remove(at);
        if size == self.index.leaf(b) {
            let max = blocks.iter().map(|&(_, s)| s).max().unwrap_or(0);
            self.index.set(b, max);
        }
        Some(size)
    }

    /// Every free block in address order.
    fn free_blocks(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.free.iter().flatten().copied()
    }

    /// First fit through the index; the plain walk if the index and list ever disagree.
    fn first_fit(&self, size: u64) -> Option<(u64, u64)> {
        let highest = self.direction == AllocDirection::TopDown;
        let fits = |(a, s): (u64, u64)| (s >= size).then_some((a, s));
        let found = self.index.find(size, highest).and_then(|b| {
            let blocks = self.free[b].iter().copied();
            if highest {
                blocks.rev().find_map(fits)
            } else {
                blocks.into_iter().find_map(fits)
            }
        });
        debug_assert!(
            found.is_some() || self.index.max() < size,
            "free index out of step"
        );
        found.or_else(|| {
            if highest {
                self.free_blocks().rev().find_map(fits)
            } else {
                self.free_blocks().find_map(fits)
            }
        })
    }

    pub fn base(&self) -> u64 {
        self.base
    }
    pub fn top(&self) -> u64 {
        self.top
    }
    pub fn alignment(&self) -> u64 {
        self.alignment
    }
    /// Bytes each bank can hold in this range.
    pub fn capacity(&self) -> u64 {
        self.top.saturating_sub(self.base)
    }
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated_bytes
    }
    pub fn free_bytes(&self) -> u64 {
        self.capacity() - self.allocated_bytes
    }
    pub fn num_allocated(&self) -> usize {
        self.allocated.len()
    }

    /// Largest free block and every address where a block of that size starts.
    pub fn largest_free_block(&self) -> (u64, Vec<u64>) {
        let largest = self.index.max();
        let addrs = if largest == 0 {
            Vec::new()
        } else {
            self.free_blocks()
                .filter(|&(_, s)| s == largest)
                .map(|(a, _)| a)
                .collect()
        };
        (largest, addrs)
    }

    /// Reserves `size` bytes per bank (already rounded by the caller) and returns the address.
    pub fn allocate(&mut self, size: u64, buffer_id: u64) -> Option<u64> {
        if size == 0 {
            return None;
        }
        let size = round_up(size, self.alignment);
        let (block_addr, block_size) = self.first_fit(size)?;
        self.free_remove(block_addr);
        let addr = match self.direction {
            AllocDirection::BottomUp => {
                if block_size > size {
                    self.free_insert(block_addr + size, block_size - size);
                }
                block_addr
            }
            AllocDirection::TopDown => {
                // Keep the top aligned: the block's end is aligned because every size is.
                let addr = block_addr + block_size - size;
                if block_size > size {
                    self.free_insert(block_addr, block_size - size);
                }
                addr
            }
        };
        self.allocated
            .insert(addr, AllocatedBlock { size, buffer_id });
        self.allocated_bytes += size;
        Some(addr)
    }

    /// Frees the block that starts at `addr`; returns it, or None if nothing is allocated there.
    pub fn deallocate(&mut self, addr: u64) -> Option<AllocatedBlock> {
        self.deallocate_if(addr, |_| true)
    }

    /// Frees the block at `addr` if `owned` accepts it (one lookup for check and removal).
    pub fn deallocate_if(
        &mut self,
        addr: u64,
        owned: impl FnOnce(&AllocatedBlock) -> bool,
    ) -> Option<AllocatedBlock> {
        let block = match self.allocated.entry(addr) {
            Entry::Occupied(e) if owned(e.get()) => e.remove(),
            _ => return None,
        };
        self.allocated_bytes -= block.size;
        let mut start = addr;
        let mut size = block.size;
        // Blocks tile the range, so a free block just below ends where the allocated block
        // before this one (or the base) leaves off: found without searching the free lists.
        let below = self
            .allocated
            .range(..addr)
            .next_back()
            .map_or(self.base, |(&a, b)| a + b.size);
        if below < addr {
            if let Some(prev_size) = self.free_remove(below) {
                debug_assert_eq!(below + prev_size, addr, "free list out of step");
                start = below;
                size += prev_size;
            }
        }
        if let Some(next_size) = self.free_remove(addr + block.size) {
            size += next_size;
        }
        self.free_insert(start, size);
        Some(block)
    }

    pub fn block_at(&self, addr: u64) -> Option<AllocatedBlock> {
        self.allocated.get(&addr).copied()
    }

    /// Allocated blocks that intersect [addr, addr + size).
    pub fn overlapping(
        &self,
        addr: u64,
        size: u64,
    ) -> impl Iterator<Item = (u64, AllocatedBlock)> + '_ {
        let end = addr.saturating_add(size);
        // A block starting before `addr` may still reach into the range: start from its predecessor.
        let first = self
            .allocated
            .range(..=addr)
            .next_back()
            .map(|(&a, _)| a)
            .unwrap_or(addr);
        self.allocated
            .range(first..end)
            .filter(move |(&a, b)| a < end && a + b.size > addr)
            .map(|(&a, &b)| (a, b))
    }

    pub fn allocated_blocks(&self) -> impl Iterator<Item = (u64, AllocatedBlock)> + '_ {
        self.allocated.iter().map(|(&a, &b)| (a, b))
    }

    /// Every block, free or allocated, in address order, linked as a list.
    pub fn block_table(&self) -> Vec<BlockRow> {
        let mut rows: Vec<(u64, u64, Option<u64>)> = self
            .free_blocks()
            .map(|(a, s)| (a, s, None))
            .chain(
                self.allocated
                    .iter()
                    .map(|(&a, b)| (a, b.size, Some(b.buffer_id))),
            )
            .collect();
        rows.sort_by_key(|r| r.0);
        let n = rows.len();
        rows.into_iter()
            .enumerate()
            .map(|(i, (address, size, id))| BlockRow {
                index: i,
                address,
                size,
                prev: i.checked_sub(1),
                next: if i + 1 < n { Some(i + 1) } else { None },
                allocated: id.is_some(),
                buffer_id: id,
            })
            .collect()
    }

    /// Checks the manager's own invariants; used by property tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        let table = self.block_table();
        let mut cursor = self.base;
        let mut prev_free = false;
        for row in &table {
            if row.address != cursor {
                return Err(format!(
                    "gap or overlap at {:#x} (expected {:#x})",
                    row.address, cursor
                ));
            }
            if !row.allocated && prev_free {
                return Err(format!("unmerged free neighbours at {:#x}", row.address));
            }
            if row.allocated && row.address % self.alignment != 0 {
                return Err(format!("misaligned block at {:#x}", row.address));
            }
            prev_free = !row.allocated;
            cursor = row.address + row.size;
        }
        if cursor != self.top && !(table.is_empty() && self.top <= self.base) {
            return Err(format!(
                "blocks end at {:#x}, range ends at {:#x}",
                cursor, self.top
            ));
        }
        for (b, blocks) in self.free.iter().enumerate() {
            if let Some(&(a, _)) = blocks
                .iter()
                .find(|&&(a, _)| !self.index.span(b).contains(&a))
            {
                return Err(format!("free block {a:#x} filed under bucket {b}"));
            }
            if blocks.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(format!("free bucket {b} out of address order"));
            }
            let max = blocks.iter().map(|&(_, s)| s).max().unwrap_or(0);
            if self.index.leaf(b) != max {
                return Err(format!(
                    "free index bucket {b}: {} recorded, {max} present",
                    self.index.leaf(b)
                ));
            }
        }
        let sum: u64 = self.allocated.values().map(|b| b.size).sum();
        if sum != self.allocated_bytes {
            return Err(format!(
                "allocated bytes {} != sum of blocks {}",
                self.allocated_bytes, sum
            ));
        }
        Ok(())
    }
}

pub fn round_up(v: u64, to: u64) -> u64 {
    if to <= 1 {
        v
    } else {
        v.div_ceil(to) * to
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bottom_up_first_fit_and_merge() {
        let mut m = BankManager::new(1024, 1024 + 4096, 32, AllocDirection::BottomUp);
        let a = m.allocate(100, 1).unwrap();
        let b = m.allocate(64, 2).unwrap();
        let c = m.allocate(32, 3).unwrap();
        assert_eq!((a, b, c), (1024, 1024 + 128, 1024 + 192));
        m.deallocate(b).unwrap();
        // First fit: the hole left by b is reused for something that fits.
        assert_eq!(m.allocate(32, 4).unwrap(), b);
        m.deallocate(a).unwrap();
        m.deallocate(b).unwrap();
        m.deallocate(c).unwrap();
        assert_eq!(m.largest_free_block().0, 4096);
        m.check_invariants().unwrap();
    }

    #[test]
    fn top_down_takes_the_top_of_the_highest_block() {
        let mut m = BankManager::new(0, 1024, 16, AllocDirection::TopDown);
        assert_eq!(m.allocate(100, 1).unwrap(), 1024 - 112);
        assert_eq!(m.allocate(16, 2).unwrap(), 1024 - 128);
        assert!(m.deallocate(5).is_none());
        m.check_invariants().unwrap();
    }
}
