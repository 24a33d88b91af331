//! Architecture descriptors: the numbers of one Wormhole B0 or Blackhole chip (FACTS.md).
//!
//! Everything that differs between architectures lives here as data, so the allocator, the
//! kernels' cost model and the fabric read one table instead of matching on names.

use crate::error::ChipError;

/// Which silicon a chip is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    WormholeB0,
    Blackhole,
}

/// Math fidelity of the matrix engine: how many passes over the mantissa bits a multiply takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MathFidelity {
    LoFi,
    #[default]
    HiFi2,
    HiFi3,
    HiFi4,
}

impl MathFidelity {
    /// Ideal cycles for one 32x32x32 tile matmul on one core (FACTS.md).
    pub fn cycles_per_tile_matmul(self) -> u64 {
        match self {
            MathFidelity::LoFi => 16,
            MathFidelity::HiFi2 => 32,
            MathFidelity::HiFi3 => 48,
            MathFidelity::HiFi4 => 64,
        }
    }
}

/// Every fixed number of one chip that ttmesh models.
#[derive(Clone, Debug, PartialEq)]
pub struct ArchSpec {
    pub arch: Arch,
    /// Name as tt-metal prints it ("wormhole_b0", "blackhole").
    pub name: &'static str,
    /// Functional Tensix grid (columns x rows).
    pub tensix_grid: (u32, u32),
    /// Grid used by compute ops (matmul, eltwise); its cores are the L1 banks.
    pub compute_grid: (u32, u32),
    pub clock_hz: f64,
    /// Total L1 per core in bytes; the top of the L1 address space.
    pub l1_size_per_core: u64,
    /// First allocatable L1 address (everything below is firmware / reserved).
    pub l1_reserved_base: u64,
    pub num_dram_banks: u32,
    /// Size of one DRAM bank's address space; the top of the DRAM address space.
    pub dram_bank_size: u64,
    /// First allocatable DRAM address in every bank.
    pub dram_reserved_base: u64,
    pub dram_bandwidth_bytes_per_s: f64,
    pub l1_alignment: u64,
    pub dram_alignment: u64,
    pub pcie_alignment: u64,
    pub num_eth_ports: u32,
    pub eth_bytes_per_s_per_direction: f64,
    /// Largest fabric packet payload on this architecture.
    pub max_fabric_payload_bytes: u32,
}

/// Granularity of the TRACE region in every DRAM bank.
pub const TRACE_REGION_BANK_GRANULARITY: u64 = 8192;
/// Granularity of `l1_small_size`.
pub const L1_SMALL_GRANULARITY: u64 = 1024;
/// Per-bank shares of interleaved and sharded buffers are rounded up to this (both DRAM and L1).
pub const BANK_SHARE_ALIGNMENT: u64 = 32;

impl ArchSpec {
    pub fn wormhole_b0() -> ArchSpec {
        ArchSpec {
            arch: Arch::WormholeB0,
            name: "wormhole_b0",
            tensix_grid: (8, 10),
            compute_grid: (8, 8),
            clock_hz: 1.0e9,
            l1_size_per_core: 1_499_136,
            l1_reserved_base: 105_824,
            num_dram_banks: 12,
            dram_bank_size: 1 << 30,
            dram_reserved_base: 0x100040,
            dram_bandwidth_bytes_per_s: 288e9,
            l1_alignment: 16,
            dram_alignment: 32,
            pcie_alignment: 32,
            num_eth_ports: 16,
            eth_bytes_per_s_per_direction: 12.5e9,
            max_fabric_payload_bytes: 7616,
        }
    }

    /// Blackhole p150. Where FACTS.md gives no figure (reserved bases) ttmesh uses Wormhole's
    /// reserved sizes, aligned to Blackhole's 64-byte DRAM alignment.
    pub fn blackhole() -> ArchSpec {
        ArchSpec {
            arch: Arch::Blackhole,
            name: "blackhole",
            tensix_grid: (14, 10),
            compute_grid: (13, 10),
            clock_hz: 1.35e9,
            l1_size_per_core: 1_572_864,
            l1_reserved_base: 105_856,
            num_dram_banks: 8,
            dram_bank_size: 4_278_190_080,
            dram_reserved_base: 0x100040,
            dram_bandwidth_bytes_per_s: 512e9,
            l1_alignment: 16,
            dram_alignment: 64,
            pcie_alignment: 64,
            num_eth_ports: 14,
            eth_bytes_per_s_per_direction: 50e9,
            max_fabric_payload_bytes: 7616,
        }
    }

    /// Looks an architecture up by the names users write ("wormhole_b0", "wormhole", "wh",
    /// "blackhole", "bh"), case-insensitively.
    pub fn from_name(name: &str) -> Result<ArchSpec, ChipError> {
        match name.to_ascii_lowercase().as_str() {
            "wormhole_b0" | "wormhole" | "wh" | "wormhole-b0" => Ok(Self::wormhole_b0()),
            "blackhole" | "bh" => Ok(Self::blackhole()),
            _ => Err(ChipError::UnknownArch(name.to_string())),
        }
    }

    /// Number of L1 banks: one per core of the compute grid.
    pub fn num_l1_banks(&self) -> u32 {
        self.compute_grid.0 * self.compute_grid.1
    }

    /// TT-NN's `get_max_worker_l1_unreserved_size()`: L1 per core above the firmware's reserved
    /// area, as tt-metal's HAL reports it (1,463,968 B on Wormhole B0; 1,532,416 B reported on a
    /// Blackhole card). The allocator's L1 base sits higher: the kernel configuration buffer
    /// comes first.
    pub fn max_worker_l1_unreserved_size(&self) -> u64 {
        let unreserved_base = match self.arch {
            Arch::WormholeB0 => 35_168,
            Arch::Blackhole => 40_448,
        };
        self.l1_size_per_core - unreserved_base
    }

    pub fn num_compute_cores(&self) -> u32 {
        self.num_l1_banks()
    }

    /// Peak matmul rate of the whole compute grid in FLOP/s at a fidelity:
    /// a 32x32x32 tile is 2*32^3 FLOPs in `cycles_per_tile_matmul` cycles per core.
    pub fn matmul_flops_per_s(&self, fidelity: MathFidelity) -> f64 {
        let per_core =
            2.0 * 32f64.powi(3) / fidelity.cycles_per_tile_matmul() as f64 * self.clock_hz;
        per_core * self.num_compute_cores() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wormhole_numbers_match_facts() {
        let wh = ArchSpec::from_name("wormhole_b0").unwrap();
        assert_eq!(
            wh.dram_reserved_base + (wh.dram_bank_size - wh.dram_reserved_base),
            1 << 30
        );
        assert_eq!(wh.dram_bank_size - wh.dram_reserved_base, 1_072_693_184);
        assert_eq!(wh.l1_size_per_core - wh.l1_reserved_base, 1_393_312);
        assert_eq!(wh.l1_size_per_core, 0x16E000);
        assert_eq!(wh.num_l1_banks(), 64);
        // 64 cores * 2048 FLOP/cycle at HiFi2 = 131 TFLOPS peak (LoFi doubles it).
        assert!((wh.matmul_flops_per_s(MathFidelity::LoFi) / 1e12 - 262.1).abs() < 0.1);
    }

    #[test]
    fn unknown_arch_is_an_error() {
        let err = ArchSpec::from_name("grayskull").unwrap_err();
        assert!(err.to_string().contains("grayskull"));
    }
}
