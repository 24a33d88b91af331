//! TT-NN's memory inspection calls: `get_memory_view`, `get_allocator_base_address`,
//! `dump_device_memory_state` and the device geometry queries (`compute_with_storage_grid_size`,
//! `dram_grid_size`, alignments, `get_max_worker_l1_unreserved_size`).
//!
//! They are written once, against the [`InspectMemory`] trait, so the same free functions answer
//! for a chip here and for a mesh in the `ttmesh` crate. Everything is read from the allocator's
//! own statistics and block table: the view, the report files and the monitor show one set of
//! numbers.

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::allocator::{Allocator, BufferType};
use crate::arch::ArchSpec;
use crate::device::Chip;
use crate::error::{ChipError, Result};

/// A core coordinate as TT-NN prints it (x = column, y = row).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoreCoord {
    pub x: u32,
    pub y: u32,
}

impl fmt::Display for CoreCoord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(x={},y={})", self.x, self.y)
    }
}

/// One row of a memory view's block table: TT-NN's `blockID, address, size, prevID, nextID,
/// allocated`. `address` is the offset from the region's base, as TT-NN's allocator keeps it
/// (add [`get_region_base_address`] for the device address).
///
/// Block ids number the blocks in address order; TT-NN's are slots of its block table, which
/// depend on the allocation history. The links (`prev_id`, `next_id`) describe the same list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryBlock {
    pub block_id: u64,
    pub address: u64,
    pub size: u64,
    pub prev_id: Option<u64>,
    pub next_id: Option<u64>,
    pub allocated: bool,
}

/// What TT-NN writes for "no neighbour": `std::to_string` of `size_t(-1)`.
const NO_BLOCK: u64 = u64::MAX;

impl MemoryBlock {
    /// The row as TT-NN's block table holds it: string keys and values, `"yes"`/`"no"` for
    /// `allocated`, and `size_t(-1)` printed for a missing neighbour.
    pub fn to_ttnn_entry(&self) -> Vec<(&'static str, String)> {
        vec![
            ("blockID", self.block_id.to_string()),
            ("address", self.address.to_string()),
            ("size", self.size.to_string()),
            ("prevID", self.prev_id.unwrap_or(NO_BLOCK).to_string()),
            ("nextID", self.next_id.unwrap_or(NO_BLOCK).to_string()),
            (
                "allocated",
                if self.allocated { "yes" } else { "no" }.to_string(),
            ),
        ]
    }
}

/// TT-NN's `MemoryView` of one buffer type: figures per bank (every bank of a type holds the
/// same ranges) and the block table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryView {
    pub num_banks: u64,
    pub total_bytes_per_bank: u64,
    pub total_bytes_allocated_per_bank: u64,
    pub total_bytes_free_per_bank: u64,
    pub largest_contiguous_bytes_free_per_bank: u64,
    pub block_table: Vec<MemoryBlock>,
}

impl MemoryView {
    /// The view of one type, from the allocator's statistics and block table.
    pub fn of(allocator: &Allocator, t: BufferType) -> MemoryView {
        let manager = allocator.manager(t);
        let stats = allocator.statistics(t);
        let base = manager.base();
        let mut block_table: Vec<MemoryBlock> = manager
            .block_table()
            .into_iter()
            .map(|r| MemoryBlock {
                block_id: r.index as u64,
                address: r.address - base,
                size: r.size,
                prev_id: r.prev.map(|i| i as u64),
                next_id: r.next.map(|i| i as u64),
                allocated: r.allocated,
            })
            .collect();
        if block_table.is_empty() {
            // TT-NN's allocator always holds one block; for a region of 0 B it is free and empty.
            block_table.push(MemoryBlock {
                block_id: 0,
                address: 0,
                size: 0,
                prev_id: None,
                next_id: None,
                allocated: false,
            });
        }
        MemoryView {
            num_banks: allocator.num_banks(t) as u64,
            total_bytes_per_bank: stats.total_allocatable_size_bytes,
            total_bytes_allocated_per_bank: stats.total_allocated_bytes,
            total_bytes_free_per_bank: stats.total_free_bytes,
            largest_contiguous_bytes_free_per_bank: stats.largest_free_block_bytes,
            block_table,
        }
    }
}

/// A device whose memory can be inspected: a chip, or (in `ttmesh`) a mesh of identical chips.
pub trait InspectMemory {
    type Error;

    /// The device's own error for a chip-level failure (a mesh adds which chip).
    fn device_error(&self, e: ChipError) -> Self::Error;

    /// The architecture of the device (of every chip, for a mesh).
    fn arch_spec(&self) -> &ArchSpec;

    /// The memory view of a buffer type; see [`get_memory_view`].
    fn memory_view(&self, buffer_type: BufferType) -> Result<MemoryView, Self::Error>;

    /// The allocator's real base of each region (bottom of its range in every bank).
    fn region_base(&self, buffer_type: BufferType) -> Result<u64, Self::Error>;

    /// Device id used in messages and report files.
    fn device_label(&self) -> String;
}

/// Types a device can be asked about: host memory is not the device's.
fn check_device_type(device: u32, t: BufferType) -> Result<()> {
    if t == BufferType::SystemMemory {
        return Err(ChipError::NotDeviceMemory {
            chip: device,
            buffer_type: t,
        });
    }
    Ok(())
}

impl InspectMemory for Chip {
    type Error = ChipError;

    fn device_error(&self, e: ChipError) -> ChipError {
        e
    }

    fn arch_spec(&self) -> &ArchSpec {
        self.arch()
    }

    fn memory_view(&self, t: BufferType) -> Result<MemoryView> {
        check_device_type(self.id(), t)?;
        Ok(self.with_allocator(|a| MemoryView::of(a, t)))
    }

    fn region_base(&self, t: BufferType) -> Result<u64> {
        check_device_type(self.id(), t)?;
        Ok(self.with_allocator(|a| a.manager(t).base()))
    }

    fn device_label(&self) -> String {
        format!("chip {}", self.id())
    }
}

impl<D: InspectMemory + ?Sized> InspectMemory for Arc<D> {
    type Error = D::Error;
    fn device_error(&self, e: ChipError) -> D::Error {
        (**self).device_error(e)
    }
    fn arch_spec(&self) -> &ArchSpec {
        (**self).arch_spec()
    }
    fn memory_view(&self, t: BufferType) -> Result<MemoryView, D::Error> {
        (**self).memory_view(t)
    }
    fn region_base(&self, t: BufferType) -> Result<u64, D::Error> {
        (**self).region_base(t)
    }
    fn device_label(&self) -> String {
        (**self).device_label()
    }
}

/// TT-NN's `get_memory_view(device, buffer_type)`: banks, bytes per bank (total, allocated,
/// free, largest contiguous free) and the block table of DRAM, L1, L1_SMALL or TRACE.
///
/// An L1_SMALL region of 0 B reports 0 banks; a TRACE region of 0 B still reports one bank per
/// DRAM bank. A region of 0 B shows one free block of 0 B at offset 0. SYSTEM_MEMORY is host
/// memory and is refused.
pub fn get_memory_view<D: InspectMemory + ?Sized>(
    device: &D,
    buffer_type: BufferType,
) -> Result<MemoryView, D::Error> {
    device.memory_view(buffer_type)
}

/// TT-NN's `get_allocator_base_address(device, buffer_type)`, with TT-NN's behaviour: DRAM gives
/// the DRAM base, and L1, L1_SMALL **and TRACE** all give the L1 base (TT-NN answers for L1
/// memory whatever the type). For the real base of a region use [`get_region_base_address`].
pub fn get_allocator_base_address<D: InspectMemory + ?Sized>(
    device: &D,
    buffer_type: BufferType,
) -> Result<u64, D::Error> {
    match buffer_type {
        BufferType::Dram => device.region_base(BufferType::Dram),
        BufferType::L1 | BufferType::L1Small | BufferType::Trace => {
            device.region_base(BufferType::L1)
        }
        BufferType::SystemMemory => device.region_base(buffer_type),
    }
}

/// ttmesh's own call: the address where a buffer type's region starts in every bank (L1_SMALL
/// at the top of L1, TRACE at the top of each DRAM bank), which
/// [`get_allocator_base_address`] does not give for those two.
pub fn get_region_base_address<D: InspectMemory + ?Sized>(
    device: &D,
    buffer_type: BufferType,
) -> Result<u64, D::Error> {
    device.region_base(buffer_type)
}

/// TT-NN's `get_max_worker_l1_unreserved_size()`: L1 bytes per core above the firmware's
/// reserved area, before the allocator's own reservations (1,463,968 on Wormhole B0).
pub fn get_max_worker_l1_unreserved_size<D: InspectMemory + ?Sized>(device: &D) -> u64 {
    device.arch_spec().max_worker_l1_unreserved_size()
}

/// TT-NN's `device.compute_with_storage_grid_size()`: the grid of cores whose L1 are banks.
pub fn compute_with_storage_grid_size<D: InspectMemory + ?Sized>(device: &D) -> CoreCoord {
    let (x, y) = device.arch_spec().compute_grid;
    CoreCoord { x, y }
}

/// TT-NN's `device.dram_grid_size()`: one column per DRAM bank, one row.
pub fn dram_grid_size<D: InspectMemory + ?Sized>(device: &D) -> CoreCoord {
    CoreCoord {
        x: device.arch_spec().num_dram_banks,
        y: 1,
    }
}

/// TT-NN's `get_dram_alignment()` for the device's architecture.
pub fn get_dram_alignment<D: InspectMemory + ?Sized>(device: &D) -> u64 {
    device.arch_spec().dram_alignment
}

/// TT-NN's `get_l1_alignment()` for the device's architecture.
pub fn get_l1_alignment<D: InspectMemory + ?Sized>(device: &D) -> u64 {
    device.arch_spec().l1_alignment
}

/// The types a memory report covers, in the order the files list them: tt-metal's DRAM and L1
/// first, then ttmesh's L1_SMALL and TRACE.
pub const REPORTED_TYPES: [BufferType; 4] = [
    BufferType::Dram,
    BufferType::L1,
    BufferType::L1Small,
    BufferType::Trace,
];

/// TT-NN's `dump_device_memory_state(device, prefix)`: writes tt-metal's three memory report
/// files, `{prefix}memory_usage_summary.csv`, `{prefix}l1_usage_summary.csv` and
/// `{prefix}detailed_memory_usage.csv`, and returns their paths.
///
/// tt-metal puts them in its reports folder with `prefix` prepended to the name; here `prefix`
/// is a path prefix (`"reports/before_op_"`), and a missing folder is created. The layout is
/// tt-metal's: the summary has one row per type, its per-bank figures in bytes (tt-metal's
/// header says KB for two columns; the values are bytes there too); the detailed report gives
/// each type's totals over all banks, then its block table. tt-metal reports DRAM and L1;
/// ttmesh adds rows for L1_SMALL and TRACE after them.
pub fn dump_device_memory_state<D: InspectMemory + ?Sized>(
    device: &D,
    prefix: &str,
) -> Result<Vec<PathBuf>, D::Error> {
    let mut views = Vec::with_capacity(REPORTED_TYPES.len());
    for t in REPORTED_TYPES {
        views.push((t, device.memory_view(t)?));
    }
    let files = render_reports(&views);
    // "reports/" names a folder; "reports/before_" a folder and the start of the file names.
    let dir = if prefix.ends_with('/') || prefix.ends_with(std::path::MAIN_SEPARATOR) {
        Some(Path::new(prefix))
    } else {
        Path::new(prefix).parent()
    };
    if let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(|e| report_error(device, dir, e))?;
    }
    let mut written = Vec::with_capacity(files.len());
    for (name, text) in files {
        let path = PathBuf::from(format!("{prefix}{name}"));
        fs::File::create(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| report_error(device, &path, e))?;
        written.push(path);
    }
    Ok(written)
}

fn report_error<D: InspectMemory + ?Sized>(device: &D, path: &Path, e: std::io::Error) -> D::Error {
    device.device_error(ChipError::ReportWrite {
        device: device.device_label(),
        path: path.to_path_buf(),
        source: crate::error::IoError::from(e),
    })
}

/// The three report files (name, contents) for views of [`REPORTED_TYPES`].
fn render_reports(views: &[(BufferType, MemoryView)]) -> [(&'static str, String); 3] {
    let mut summary = String::from(
        ", Total Allocatable Size (B), Total Allocated (B), Total Free (KB), Largest Free Block (KB)\n",
    );
    let mut l1 = String::from(
        "This report indicates available space for interleaving L1 buffers\n, Largest Contiguous Free Block (B), Total Free L1 Space (B)\n",
    );
    let mut detailed = String::new();
    for (t, v) in views {
        summary.push_str(&format!(
            ",{},{},{},{}\n",
            v.total_bytes_per_bank,
            v.total_bytes_allocated_per_bank,
            v.total_bytes_free_per_bank,
            v.largest_contiguous_bytes_free_per_bank
        ));
        if *t == BufferType::L1 {
            l1.push_str(&format!(
                ",{},{}\n",
                v.largest_contiguous_bytes_free_per_bank,
                v.largest_contiguous_bytes_free_per_bank * v.num_banks
            ));
        }
        detailed.push_str(&format!(
            ",{t}\n,Total allocatable (B):,{}\n,Total allocated (B):,{}\n,Total free (B):,{}\n",
            v.total_bytes_per_bank * v.num_banks,
            v.total_bytes_allocated_per_bank * v.num_banks,
            v.total_bytes_free_per_bank * v.num_banks
        ));
        detailed.push_str(&render_block_table(&v.block_table));
    }
    [
        ("memory_usage_summary.csv", summary),
        ("l1_usage_summary.csv", l1),
        ("detailed_memory_usage.csv", detailed),
    ]
}

/// tt-metal's block table dump: right-aligned columns 12 wide, "none" for a missing neighbour.
fn render_block_table(blocks: &[MemoryBlock]) -> String {
    let cell = |s: &str| format!("{s:>12} ");
    let id = |v: Option<u64>| v.map_or("none".to_string(), |v| v.to_string());
    let mut out = String::from("Block table:\n");
    for h in ["Block", "Address", "Size", "PrevID", "NextID", "Allocated"] {
        out.push_str(&cell(h));
    }
    out.push('\n');
    for b in blocks {
        out.push_str(&cell(&b.block_id.to_string()));
        out.push_str(&cell(&b.address.to_string()));
        out.push_str(&cell(&b.size.to_string()));
        out.push_str(&cell(&id(b.prev_id)));
        out.push_str(&cell(&id(b.next_id)));
        out.push_str(&format!("{:>12}\n", if b.allocated { "yes" } else { "no" }));
    }
    out
}
