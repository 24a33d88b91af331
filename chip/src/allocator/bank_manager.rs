//! One address range shared by a set of banks: a free list with first fit, bottom-up or top-down,
//! and merging of freed neighbours.
//!
//! A bank manager does not know about pages or banks; callers give it the per-bank size and it
//! returns one address that is valid in every bank it serves (tt-metal's rule: an interleaved or
//! sharded buffer sits at the same address in all its banks).

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
    /// Free blocks: address -> size. Never two adjacent entries (they are merged).
    free: BTreeMap<u64, u64>,
    allocated: BTreeMap<u64, AllocatedBlock>,
    allocated_bytes: u64,
}

impl BankManager {
    pub fn new(base: u64, top: u64, alignment: u64, direction: AllocDirection) -> BankManager {
        let mut free = BTreeMap::new();
        if top > base {
            free.insert(base, top - base);
        }
        BankManager {
            base,
            top,
            alignment,
            direction,
            free,
            allocated: BTreeMap::new(),
            allocated_bytes: 0,
        }
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
        let largest = self.free.values().copied().max().unwrap_or(0);
        let addrs = if largest == 0 {
            Vec::new()
        } else {
            self.free
                .iter()
                .filter(|(_, &s)| s == largest)
                .map(|(&a, _)| a)
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
        let (block_addr, block_size) = match self.direction {
            AllocDirection::BottomUp => self
                .free
                .iter()
                .find(|(_, &s)| s >= size)
                .map(|(&a, &s)| (a, s))?,
            AllocDirection::TopDown => self
                .free
                .iter()
                .rev()
                .find(|(_, &s)| s >= size)
                .map(|(&a, &s)| (a, s))?,
        };
        self.free.remove(&block_addr);
        let addr = match self.direction {
            AllocDirection::BottomUp => {
                if block_size > size {
                    self.free.insert(block_addr + size, block_size - size);
                }
                block_addr
            }
            AllocDirection::TopDown => {
                // Keep the top aligned: the block's end is aligned because every size is.
                let addr = block_addr + block_size - size;
                if block_size > size {
                    self.free.insert(block_addr, block_size - size);
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
        let block = self.allocated.remove(&addr)?;
        self.allocated_bytes -= block.size;
        let mut start = addr;
        let mut size = block.size;
        if let Some((&prev_addr, &prev_size)) = self.free.range(..addr).next_back() {
            if prev_addr + prev_size == addr {
                self.free.remove(&prev_addr);
                start = prev_addr;
                size += prev_size;
            }
        }
        if let Some(&next_size) = self.free.get(&(addr + block.size)) {
            self.free.remove(&(addr + block.size));
            size += next_size;
        }
        self.free.insert(start, size);
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
            .free
            .iter()
            .map(|(&a, &s)| (a, s, None))
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
