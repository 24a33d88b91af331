//! Backing memory of one chip: DRAM banks and L1 banks (one per compute core), plus the host's
//! SYSTEM_MEMORY range.
//!
//! Storage is sparse: a bank is a map of fixed-size chunks created on first write and dropped
//! when a freed buffer covers them, so a 32-chip Galaxy (384 GiB of DRAM) costs host memory only
//! for live data. Unwritten memory reads as zero.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use crate::allocator::MemSpace;
use crate::error::{ChipError, Result};

/// Chunk granularity of the sparse store. Large enough that a page copy rarely spans two chunks,
/// small enough that small buffers do not pin much host memory.
pub const CHUNK_SIZE: u64 = 16 * 1024;

#[derive(Default)]
struct Bank {
    chunks: HashMap<u64, Box<[u8]>>,
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
    /// `watched_epoch`, so a dispatcher may keep a trace's bytes between replays.
    watch_from: AtomicU64,
    watched_epoch: AtomicU64,
    /// Chunks `discard` dropped, kept for the next writes (at most `POOL_CHUNKS`): a buffer
    /// freed and allocated again, like a collective's scratch at every launch, then costs no
    /// allocation, page faults or zeroing of memory the write covers anyway.
    pool: Mutex<Vec<Box<[u8]>>>,
}

/// Chunks kept for reuse per chip (64 MiB: the scratch a 16 MiB all_reduce on 8 chips
/// touches; a pool never holds more than the chip had written before).
const POOL_CHUNKS: usize = 4096;

impl DeviceMemory {
    pub fn new(
        chip: u32,
        num_dram_banks: u32,
        dram_bank_size: u64,
        num_l1_banks: u32,
        l1_bank_size: u64,
        host_size: u64,
    ) -> Self {
        let banks = |n: u32| (0..n).map(|_| RwLock::new(Bank::default())).collect();
        DeviceMemory {
            chip,
            dram: banks(num_dram_banks),
            l1: banks(num_l1_banks),
            host: banks(1),
            dram_bank_size,
            l1_bank_size,
            host_size,
            watch_from: AtomicU64::new(u64::MAX),
            watched_epoch: AtomicU64::new(0),
            pool: Mutex::new(Vec::new()),
        }
    }

    /// Counts every DRAM write or discard that reaches `from` or above (see `watched_epoch`).
    pub fn watch_dram_from(&self, from: u64) {
        self.watch_from.store(from, Ordering::Release);
        self.watched_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Changes whenever watched DRAM (the TRACE region) may have changed.
    pub fn watched_epoch(&self) -> u64 {
        self.watched_epoch.load(Ordering::Acquire)
    }

    fn touch(&self, space: MemSpace, end: u64) {
        if space == MemSpace::Dram && end > self.watch_from.load(Ordering::Relaxed) {
            self.watched_epoch.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn bank(&self, space: MemSpace, bank: u32, addr: u64, len: u64) -> Result<&RwLock<Bank>> {
        let (banks, size) = match space {
            MemSpace::Dram => (&self.dram, self.dram_bank_size),
            MemSpace::L1 => (&self.l1, self.l1_bank_size),
            MemSpace::Host => (&self.host, self.host_size),
        };
        let b = banks.get(bank as usize).ok_or_else(|| {
            ChipError::MemoryRange(format!(
                "chip {} has no {:?} bank {} (it has {})",
                self.chip,
                space,
                bank,
                banks.len()
            ))
        })?;
        if addr.checked_add(len).is_none_or(|end| end > size) {
            return Err(ChipError::MemoryRange(format!(
                "chip {} {:?} bank {}: [{:#x}, +{}) is beyond the bank's {} B",
                self.chip, space, bank, addr, len, size
            )));
        }
        Ok(b)
    }

    pub fn write(&self, space: MemSpace, bank: u32, addr: u64, data: &[u8]) -> Result<()> {
        let lock = self.bank(space, bank, addr, data.len() as u64)?;
        self.touch(space, addr + data.len() as u64);
        let mut b = lock.write();
        let mut off = 0usize;
        while off < data.len() {
            let a = addr + off as u64;
            let chunk = a / CHUNK_SIZE;
            let in_chunk = (a % CHUNK_SIZE) as usize;
            let n = (CHUNK_SIZE as usize - in_chunk).min(data.len() - off);
            let c = b
                .chunks
                .entry(chunk)
                .or_insert_with(|| self.new_chunk(n == CHUNK_SIZE as usize));
            c[in_chunk..in_chunk + n].copy_from_slice(&data[off..off + n]);
            off += n;
        }
        Ok(())
    }

    /// A chunk for a first write: from the pool if it has one (zeroed unless the write
    /// covers all of it), else freshly zeroed.
    fn new_chunk(&self, whole: bool) -> Box<[u8]> {
        match self.pool.lock().pop() {
            Some(mut c) => {
                if !whole {
                    c.fill(0);
                }
                c
            }
            None => vec![0u8; CHUNK_SIZE as usize].into_boxed_slice(),
        }
    }

    fn recycle(&self, c: Box<[u8]>) {
        let mut pool = self.pool.lock();
        if pool.len() < POOL_CHUNKS {
            pool.push(c);
        }
    }

    pub fn read(&self, space: MemSpace, bank: u32, addr: u64, out: &mut [u8]) -> Result<()> {
        let lock = self.bank(space, bank, addr, out.len() as u64)?;
        let b = lock.read();
        let mut off = 0usize;
        while off < out.len() {
            let a = addr + off as u64;
            let chunk = a / CHUNK_SIZE;
            let in_chunk = (a % CHUNK_SIZE) as usize;
            let n = (CHUNK_SIZE as usize - in_chunk).min(out.len() - off);
            match b.chunks.get(&chunk) {
                Some(c) => out[off..off + n].copy_from_slice(&c[in_chunk..in_chunk + n]),
                None => out[off..off + n].fill(0),
            }
            off += n;
        }
        Ok(())
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
        let len = scratch.len();
        let lock = self.bank(space, bank, addr, len as u64)?;
        let b = lock.read();
        let in_chunk = (addr % CHUNK_SIZE) as usize;
        if in_chunk + len <= CHUNK_SIZE as usize {
            if let Some(c) = b.chunks.get(&(addr / CHUNK_SIZE)) {
                return Ok(f(&c[in_chunk..in_chunk + len]));
            }
        }
        drop(b);
        self.read(space, bank, addr, scratch)?;
        Ok(f(scratch))
    }

    /// Drops the chunks entirely inside [addr, addr + len) of one bank: freed memory gives its
    /// host memory back. The range is clipped to the bank, and the bank's top ends its last
    /// chunk (L1's top, 0x16E000, is not chunk-aligned).
    pub fn discard(&self, space: MemSpace, bank: u32, addr: u64, len: u64) {
        let size = self.bank_size(space);
        let end = addr.saturating_add(len).min(size);
        if end <= addr {
            return;
        }
        let Ok(lock) = self.bank(space, bank, addr, end - addr) else {
            return;
        };
        self.touch(space, end);
        let first = addr.div_ceil(CHUNK_SIZE);
        let last = if end == size {
            size.div_ceil(CHUNK_SIZE)
        } else {
            end / CHUNK_SIZE
        };
        if first >= last {
            return;
        }
        let mut b = lock.write();
        if (last - first) as usize > b.chunks.len() {
            let dropped: Vec<u64> = b
                .chunks
                .keys()
                .copied()
                .filter(|k| *k >= first && *k < last)
                .collect();
            for k in dropped {
                if let Some(c) = b.chunks.remove(&k) {
                    self.recycle(c);
                }
            }
        } else {
            for k in first..last {
                if let Some(c) = b.chunks.remove(&k) {
                    self.recycle(c);
                }
            }
        }
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
        let count = |banks: &Vec<RwLock<Bank>>| {
            banks
                .iter()
                .map(|b| b.read().chunks.len() as u64)
                .sum::<u64>()
        };
        (count(&self.dram) + count(&self.l1) + count(&self.host)) * CHUNK_SIZE
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
mod tests {
    use super::*;

    #[test]
    fn sparse_read_write_discard() {
        let m = DeviceMemory::new(0, 12, 1 << 30, 64, 1_499_136, 1 << 20);
        let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        m.write(MemSpace::Dram, 3, 1_000_000, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        m.read(MemSpace::Dram, 3, 1_000_000, &mut back).unwrap();
        assert_eq!(back, data);
        assert!(m.resident_bytes() <= 4 * CHUNK_SIZE);
        m.discard(MemSpace::Dram, 3, 0, 1 << 30);
        assert_eq!(m.resident_bytes(), 0);
        // L1's top ends the last chunk: a range reaching the top drops it.
        let top = 1_499_136;
        m.write(MemSpace::L1, 5, top - 4000, &[1u8; 4000]).unwrap();
        m.discard(MemSpace::L1, 5, top - 8000, 7999);
        assert_eq!(m.resident_bytes(), CHUNK_SIZE, "a partly freed chunk stays");
        m.discard(MemSpace::L1, 5, 91 * CHUNK_SIZE, 1 << 30);
        assert_eq!(m.resident_bytes(), 0);
        assert!(m.read(MemSpace::L1, 64, 0, &mut back).is_err());
        assert!(m.write(MemSpace::L1, 0, 1_499_130, &[0u8; 16]).is_err());
    }
}
