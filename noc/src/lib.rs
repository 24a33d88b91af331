//! What an address on a chip is: the memory spaces a chip has ([`MemSpace`]) and a place in
//! one of them ([`NocAddr`]: space, bank, byte address inside the bank).
//!
//! It is the vocabulary the chip (its allocator, command records and memory) and the fabric
//! (its packet headers and the memory it writes) share, so it sits below both and knows
//! neither: the chip must not depend on the fabric nor the fabric on the chip, and a mesh
//! hands fabric addresses to a chip's memory without translating them.

use std::fmt;

/// Physical memory of a chip, or of its host (SYSTEM_MEMORY, which the chip reaches over
/// PCIe).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemSpace {
    Dram,
    L1,
    Host,
}

impl MemSpace {
    /// The name users see in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            MemSpace::Dram => "DRAM",
            MemSpace::L1 => "L1",
            MemSpace::Host => "host memory",
        }
    }
}

impl fmt::Display for MemSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A place in a chip's memory: memory space, bank and byte address inside the bank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NocAddr {
    pub space: MemSpace,
    pub bank: u32,
    pub addr: u64,
}

impl NocAddr {
    pub fn new(space: MemSpace, bank: u32, addr: u64) -> Self {
        Self { space, bank, addr }
    }
    pub fn dram(bank: u32, addr: u64) -> Self {
        Self::new(MemSpace::Dram, bank, addr)
    }
    pub fn l1(bank: u32, addr: u64) -> Self {
        Self::new(MemSpace::L1, bank, addr)
    }
    /// The address `by` bytes further on in the same bank.
    pub fn offset(self, by: u64) -> Self {
        Self {
            addr: self.addr + by,
            ..self
        }
    }
}

impl fmt::Display for NocAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bank {} address {:#x}",
            self.space, self.bank, self.addr
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_names_its_space_bank_and_address() {
        assert_eq!(
            NocAddr::dram(3, 0x40).offset(0x10).to_string(),
            "DRAM bank 3 address 0x50"
        );
        assert_eq!(
            NocAddr::l1(0, 0x1000).to_string(),
            "L1 bank 0 address 0x1000"
        );
    }
}
