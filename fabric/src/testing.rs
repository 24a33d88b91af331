//! A simple `ChipMemory` for tests and benchmarks: one growable byte vector per
//! (space, bank), so only written ranges cost host memory.

use crate::ChipMemory;
use crate::{MemSpace, NocAddr};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Banks are few and keys tiny: a multiply-xor hash instead of SipHash keeps the lookup
/// out of the way of the copy.
#[derive(Default)]
struct BankHasher(u64);

impl Hasher for BankHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_isize(&mut self, v: isize) {
        self.write_u64(v as u64);
    }
}

type Banks = HashMap<(MemSpace, u32), Vec<u8>, BuildHasherDefault<BankHasher>>;

/// Refuses writes that end above `limit` bytes in a bank (default 1 GiB), like a bank's size.
pub struct MapMemory {
    banks: Mutex<Banks>,
    limit: u64,
}

impl Default for MapMemory {
    fn default() -> Self {
        Self::with_limit(1 << 30)
    }
}

impl MapMemory {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_limit(limit: u64) -> Self {
        Self {
            banks: Mutex::new(Banks::default()),
            limit,
        }
    }

    /// `len` bytes at `at`; bytes never written read as 0.
    pub fn read(&self, at: NocAddr, len: usize) -> Vec<u8> {
        let banks = self.banks.lock();
        let mut out = vec![0u8; len];
        if let Some(b) = banks.get(&(at.space, at.bank)) {
            let start = (at.addr as usize).min(b.len());
            let end = (at.addr as usize + len).min(b.len());
            out[..end - start].copy_from_slice(&b[start..end]);
        }
        out
    }
}

impl ChipMemory for MapMemory {
    fn write(&self, dest: NocAddr, data: &[u8]) -> Result<(), crate::MemoryError> {
        let end = dest.addr.saturating_add(data.len() as u64);
        if end > self.limit {
            return Err(format!(
                "{} B at {dest} end at {end:#x}, past the bank size {:#x}",
                data.len(),
                self.limit
            )
            .into());
        }
        let (start, end) = (dest.addr as usize, end as usize);
        let mut banks = self.banks.lock();
        let b = match banks.get_mut(&(dest.space, dest.bank)) {
            Some(b) => b,
            None => banks.entry((dest.space, dest.bank)).or_default(),
        };
        if b.len() < end {
            b.resize(end, 0);
        }
        b[start..end].copy_from_slice(data);
        Ok(())
    }
}
