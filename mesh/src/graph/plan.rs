//! Sizes known before running: a program run once under a NO_DISPATCH capture on a mesh like
//! the user's gives, per chip, the exact `trace_region_size` its traces need (the figure the
//! too-small error names), the peak of each buffer type, and whether it all fits.

use serde::Serialize;
use ttmesh_chip::allocator::AllocatorConfig;

use super::{
    begin_graph_capture, end_graph_capture, peak_memory_per_chip, Graph, PeakMemory, RunMode,
};
use crate::error::Result;
use crate::{MeshConfig, MeshDevice};

/// The TRACE region the planning mesh opens with: room for any trace the plan measures (the
/// plan's own DRAM check adds back only what the traces need).
pub const PLANNING_TRACE_REGION: u64 = 256 << 20;

/// One chip's figures. Peaks are bytes per bank (as allocator statistics count them) and
/// bytes over all banks.
#[derive(Clone, Debug, Serialize)]
pub struct ChipPlan {
    pub chip: u32,
    /// The trace_region_size that holds every trace the program captured on this chip.
    pub trace_region_size: u64,
    pub peak_per_bank: PeakMemory,
    pub peak_bytes: PeakMemory,
    /// What a bank of each type holds with `trace_region_size` reserved (TRACE: the region
    /// per bank).
    pub capacity_per_bank: PeakMemory,
    /// The same over all banks of the chip.
    pub capacity_bytes: PeakMemory,
    pub fits: bool,
    /// Why it does not fit, each naming the type and the sizes.
    pub problems: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub chips: Vec<ChipPlan>,
    pub graph: Graph,
    /// The program's own failure (an allocation that does not fit even alone, ...).
    pub error: Option<String>,
}

impl Plan {
    pub fn fits(&self) -> bool {
        self.error.is_none() && self.chips.iter().all(|c| c.fits)
    }
}

/// Runs `program` on a mesh opened as `config` under a NO_DISPATCH capture, and sizes it.
/// The program must not read results (nothing runs); it may capture traces.
pub fn plan(config: &MeshConfig, program: impl FnOnce(&MeshDevice) -> Result<()>) -> Result<Plan> {
    let mut planning = config.clone();
    planning.trace_region_size = PLANNING_TRACE_REGION;
    let mesh = MeshDevice::open(planning)?;
    begin_graph_capture(RunMode::NoDispatch);
    let run = program(&mesh);
    let graph = end_graph_capture()?;
    let peaks = peak_memory_per_chip(&graph);
    let arch = mesh.arch().clone();
    let mut chips = Vec::new();
    for chip in mesh.chips() {
        let trace = chip.trace_stats().trace_buffers_size;
        let mut alloc = AllocatorConfig::new(arch.clone());
        alloc.trace_region_size = trace;
        alloc.l1_small_size = config.l1_small_size;
        let p = peaks.get(&chip.id()).copied().unwrap_or_default();
        let dram_cap =
            arch.dram_bank_size - arch.dram_reserved_base - alloc.trace_region_per_bank();
        let l1_small_cap = alloc.l1_small_per_bank();
        let l1_cap = arch.l1_size_per_core - arch.l1_reserved_base - l1_small_cap;
        let mut problems = Vec::new();
        for (name, peak, cap) in [
            ("DRAM", p.dram, dram_cap),
            ("L1", p.l1, l1_cap),
            ("L1_SMALL", p.l1_small, l1_small_cap),
        ] {
            if peak > cap {
                problems.push(format!(
                    "{name} peaks at {peak} B per bank but a bank has {cap} B{}",
                    if name == "DRAM" {
                        format!(" next to a TRACE region of {trace} B")
                    } else {
                        String::new()
                    }
                ));
            }
        }
        let dram_banks = arch.num_dram_banks as u64;
        let l1_banks = arch.num_l1_banks() as u64;
        chips.push(ChipPlan {
            chip: chip.id(),
            trace_region_size: trace,
            peak_per_bank: p,
            peak_bytes: PeakMemory {
                dram: p.dram * dram_banks,
                l1: p.l1 * l1_banks,
                l1_small: p.l1_small * l1_banks,
                trace: p.trace * dram_banks,
            },
            capacity_per_bank: PeakMemory {
                dram: dram_cap,
                l1: l1_cap,
                l1_small: l1_small_cap,
                trace: alloc.trace_region_per_bank(),
            },
            capacity_bytes: PeakMemory {
                dram: dram_cap * dram_banks,
                l1: l1_cap * l1_banks,
                l1_small: l1_small_cap * l1_banks,
                trace: alloc.trace_region_per_bank() * dram_banks,
            },
            fits: problems.is_empty(),
            problems,
        });
    }
    mesh.close()?;
    Ok(Plan {
        chips,
        graph,
        error: run.err().map(|e| e.to_string()),
    })
}
