//! The chip's allocator: one bank manager per `BufferType`, laid out as tt-metal lays them out
//! (FACTS.md "Memory and allocator"), plus the event stream every consumer of allocation data
//! reads (statistics counters, graph capture, the monitor).
//!
//! Layout of every DRAM bank: `[reserved | DRAM (bottom-up) | TRACE region (bottom-up)]`.
//! Layout of every L1 bank (one per compute core): `[reserved | L1 (top-down) | L1_SMALL (top-down)]`.

mod bank_manager;
mod events;

pub use bank_manager::{round_up, AllocDirection, AllocatedBlock, BankManager, BlockRow};
pub use events::{AllocatorEvent, AllocatorEventKind, UsageCounters, UsageSnapshot};

use std::fmt;
use std::sync::Arc;
/// Physical memory of a chip (or its host): the one vocabulary the chip and the fabric share.
pub use ttmesh_noc::MemSpace;

use crate::arch::{
    ArchSpec, BANK_SHARE_ALIGNMENT, L1_SMALL_GRANULARITY, TRACE_REGION_BANK_GRANULARITY,
};
use crate::error::{ChipError, Result};
use crate::observe::ChipObserver;

/// tt-metal's buffer types, with its numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum BufferType {
    Dram = 0,
    L1 = 1,
    SystemMemory = 2,
    L1Small = 3,
    Trace = 4,
}

impl BufferType {
    pub const ALL: [BufferType; 5] = [
        BufferType::Dram,
        BufferType::L1,
        BufferType::SystemMemory,
        BufferType::L1Small,
        BufferType::Trace,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BufferType::Dram => "DRAM",
            BufferType::L1 => "L1",
            BufferType::SystemMemory => "SYSTEM_MEMORY",
            BufferType::L1Small => "L1_SMALL",
            BufferType::Trace => "TRACE",
        }
    }

    /// The physical memory the type lives in (DRAM and TRACE share DRAM banks; L1 and L1_SMALL
    /// share L1 banks).
    pub fn space(self) -> MemSpace {
        match self {
            BufferType::Dram | BufferType::Trace => MemSpace::Dram,
            BufferType::L1 | BufferType::L1Small => MemSpace::L1,
            BufferType::SystemMemory => MemSpace::Host,
        }
    }

    pub fn from_u8(v: u8) -> Option<BufferType> {
        BufferType::ALL.into_iter().find(|t| *t as u8 == v)
    }
}

impl fmt::Display for BufferType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Sizes a user chooses when opening a device (tt-metal's device parameters).
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorConfig {
    pub arch: ArchSpec,
    /// Bytes per device reserved for traces, spread over the DRAM banks.
    pub trace_region_size: u64,
    /// Bytes taken off the top of every L1 bank for L1_SMALL (rounded up to 1 KiB).
    pub l1_small_size: u64,
    /// When set, the L1 base moves to `top - worker_l1_size`.
    pub worker_l1_size: Option<u64>,
    /// Size of the host-side SYSTEM_MEMORY range.
    pub system_memory_size: u64,
}

impl AllocatorConfig {
    pub fn new(arch: ArchSpec) -> AllocatorConfig {
        AllocatorConfig {
            arch,
            trace_region_size: 0,
            l1_small_size: 0,
            worker_l1_size: None,
            system_memory_size: 1 << 30,
        }
    }

    /// The TRACE region in every DRAM bank: round_up(ceil(size / banks), 8192).
    pub fn trace_region_per_bank(&self) -> u64 {
        if self.trace_region_size == 0 {
            0
        } else {
            round_up(
                self.trace_region_size
                    .div_ceil(self.arch.num_dram_banks as u64),
                TRACE_REGION_BANK_GRANULARITY,
            )
        }
    }

    pub fn l1_small_per_bank(&self) -> u64 {
        round_up(self.l1_small_size, L1_SMALL_GRANULARITY)
    }
}

/// How a buffer's pages are spread over banks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Pages round-robin over every bank of the type.
    Interleaved,
    /// One shard per listed bank; each shard holds `pages_per_shard` pages.
    Sharded {
        banks: Vec<u32>,
        pages_per_shard: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AllocationRequest {
    pub buffer_type: BufferType,
    pub page_size: u64,
    pub num_pages: u64,
    pub placement: Placement,
}

/// A live allocation: where it is and how big it is in each bank.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Allocation {
    pub id: u64,
    pub chip: u32,
    pub buffer_type: BufferType,
    pub address: u64,
    /// Bytes reserved in each bank used.
    pub per_bank_size: u64,
    /// Distance between consecutive pages of one bank (page size rounded to the alignment).
    pub page_stride: u64,
    pub page_size: u64,
    pub num_pages: u64,
    pub placement: Placement,
    pub num_banks: u32,
}

impl Allocation {
    /// Bytes the buffer holds (pages x page size), as tt-metal reports a buffer's size.
    pub fn size(&self) -> u64 {
        self.page_size * self.num_pages
    }

    pub fn page_map(&self) -> PageMap {
        PageMap {
            space: self.buffer_type.space(),
            address: self.address,
            page_size: self.page_size,
            page_stride: self.page_stride,
            num_pages: self.num_pages,
            num_banks: self.num_banks,
            placement: self.placement.clone(),
        }
    }
}

/// Where each page of a buffer lives: enough to read or write it knowing only its address, which
/// is all a kernel's runtime arguments carry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PageMap {
    pub space: MemSpace,
    pub address: u64,
    pub page_size: u64,
    pub page_stride: u64,
    pub num_pages: u64,
    pub num_banks: u32,
    pub placement: Placement,
}

impl PageMap {
    /// Bank and address of buffer page `page` (pages are numbered shard by shard when sharded).
    pub fn location(&self, page: u64) -> (u32, u64) {
        match &self.placement {
            Placement::Interleaved => {
                let bank = (page % self.num_banks as u64) as u32;
                (
                    bank,
                    self.address + (page / self.num_banks as u64) * self.page_stride,
                )
            }
            Placement::Sharded {
                banks,
                pages_per_shard,
            } => {
                let shard = (page / pages_per_shard) as usize;
                (
                    banks[shard],
                    self.address + (page % pages_per_shard) * self.page_stride,
                )
            }
        }
    }
}

/// tt-metal's allocator statistics, per bank.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Statistics {
    pub total_allocatable_size_bytes: u64,
    pub total_allocated_bytes: u64,
    pub total_free_bytes: u64,
    pub largest_free_block_bytes: u64,
    pub largest_free_block_addrs: Vec<u64>,
}

pub struct Allocator {
    chip: u32,
    config: AllocatorConfig,
    managers: [BankManager; 5],
    next_id: u64,
    /// Bumped on every allocate and free: lets a trace skip its sanitizer when nothing moved.
    generation: u64,
    /// Told of every event (the chip's observers and its usage counters).
    observers: Vec<Arc<dyn ChipObserver>>,
}

impl Allocator {
    pub fn new(chip: u32, config: AllocatorConfig) -> Result<Allocator> {
        let arch = &config.arch;
        let trace_per_bank = config.trace_region_per_bank();
        let dram_top = arch.dram_bank_size;
        if arch.dram_reserved_base + trace_per_bank > dram_top {
            return Err(ChipError::InvalidConfig(format!(
                "trace_region_size {} B needs {} B in each of {} DRAM banks, but a bank has only {} B above its reserved base",
                config.trace_region_size,
                trace_per_bank,
                arch.num_dram_banks,
                dram_top - arch.dram_reserved_base
            )));
        }
        let l1_small = config.l1_small_per_bank();
        let l1_top = arch.l1_size_per_core;
        let l1_base = match config.worker_l1_size {
            Some(w) => l1_top
                .checked_sub(w)
                .filter(|b| *b >= arch.l1_reserved_base)
                .ok_or_else(|| {
                    ChipError::InvalidConfig(format!(
                        "worker_l1_size {} B is larger than the {} B of L1 above the reserved base",
                        w,
                        l1_top - arch.l1_reserved_base
                    ))
                })?,
            None => arch.l1_reserved_base,
        };
        if l1_base + l1_small > l1_top {
            return Err(ChipError::InvalidConfig(format!(
                "l1_small_size {} B does not fit in the {} B of L1 per core; use a smaller l1_small_size",
                config.l1_small_size,
                l1_top - l1_base
            )));
        }
        let dram_trace_base = dram_top - trace_per_bank;
        let managers = [
            BankManager::new(
                arch.dram_reserved_base,
                dram_trace_base,
                arch.dram_alignment,
                AllocDirection::BottomUp,
            ),
            BankManager::new(
                l1_base,
                l1_top - l1_small,
                arch.l1_alignment,
                AllocDirection::TopDown,
            ),
            BankManager::new(
                0,
                config.system_memory_size,
                arch.pcie_alignment,
                AllocDirection::BottomUp,
            ),
            BankManager::new(
                l1_top - l1_small,
                l1_top,
                arch.l1_alignment,
                AllocDirection::TopDown,
            ),
            BankManager::new(
                dram_trace_base,
                dram_top,
                arch.dram_alignment,
                AllocDirection::BottomUp,
            ),
        ];
        Ok(Allocator {
            chip,
            config,
            managers,
            next_id: 1,
            generation: 0,
            observers: Vec::new(),
        })
    }

    pub fn chip(&self) -> u32 {
        self.chip
    }
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn manager(&self, t: BufferType) -> &BankManager {
        &self.managers[t as usize]
    }

    /// Banks of a type as TT-NN reports them: an L1_SMALL region of 0 B has no banks (TT-NN
    /// creates none), while a TRACE region of 0 B still reports one per DRAM bank.
    pub fn num_banks(&self, t: BufferType) -> u32 {
        if t == BufferType::L1Small && self.managers[t as usize].capacity() == 0 {
            return 0;
        }
        self.physical_banks(t)
    }

    /// Banks of the memory a type lives in (DRAM banks or compute cores), whatever its size.
    pub fn physical_banks(&self, t: BufferType) -> u32 {
        match t.space() {
            MemSpace::Dram => self.config.arch.num_dram_banks,
            MemSpace::L1 => self.config.arch.num_l1_banks(),
            MemSpace::Host => 1,
        }
    }

    pub fn alignment(&self, t: BufferType) -> u64 {
        self.managers[t as usize].alignment()
    }

    /// Tells `observer` of every allocator event from now on (`ChipObserver::allocator_event`).
    pub fn add_observer(&mut self, observer: Arc<dyn ChipObserver>) {
        self.observers.push(observer);
    }

    /// Stops telling `observer` (the `Arc` given to `add_observer`).
    pub fn remove_observer(&mut self, observer: &Arc<dyn ChipObserver>) {
        self.observers.retain(|o| !Arc::ptr_eq(o, observer));
    }

    /// Per-bank bytes a request needs, as tt-metal computes it.
    pub fn per_bank_size(&self, req: &AllocationRequest) -> Result<(u64, u64, u32)> {
        let t = req.buffer_type;
        if req.page_size == 0 {
            return Err(ChipError::InvalidBuffer(format!(
                "{t} buffer with page size 0; pages must hold at least one byte"
            )));
        }
        let stride = round_up(req.page_size, self.alignment(t));
        // Shards are placed on physical banks: an empty L1_SMALL region reports 0 banks, but a
        // shard on core 0 is still a valid request (it fails for lack of space, with the hint).
        let num_banks = self.physical_banks(t);
        match &req.placement {
            Placement::Interleaved => {
                if t == BufferType::L1Small {
                    return Err(ChipError::L1SmallInterleaved);
                }
                let pages_per_bank = req.num_pages.div_ceil(num_banks as u64);
                Ok((
                    round_up(pages_per_bank * stride, BANK_SHARE_ALIGNMENT),
                    stride,
                    num_banks,
                ))
            }
            Placement::Sharded {
                banks,
                pages_per_shard,
            } => {
                if banks.is_empty() || *pages_per_shard == 0 {
                    return Err(ChipError::InvalidBuffer(
                        "sharded buffer with no shards or empty shards".into(),
                    ));
                }
                if let Some(b) = banks.iter().find(|b| **b >= num_banks) {
                    return Err(ChipError::InvalidBuffer(format!(
                        "shard placed on bank {b}, but {t} has banks 0..{}; use cores inside the compute grid",
                        num_banks - 1
                    )));
                }
                if req.num_pages > banks.len() as u64 * pages_per_shard {
                    return Err(ChipError::InvalidBuffer(format!(
                        "{} pages do not fit in {} shards of {} pages",
                        req.num_pages,
                        banks.len(),
                        pages_per_shard
                    )));
                }
                Ok((
                    round_up(pages_per_shard * stride, BANK_SHARE_ALIGNMENT),
                    stride,
                    num_banks,
                ))
            }
        }
    }

    pub fn allocate(&mut self, req: &AllocationRequest) -> Result<Allocation> {
        let (per_bank, stride, num_banks) = self.per_bank_size(req)?;
        if per_bank == 0 {
            return Err(ChipError::InvalidBuffer(format!(
                "{} buffer of 0 pages; allocate at least one page",
                req.buffer_type
            )));
        }
        let id = self.next_id;
        let t = req.buffer_type;
        let manager = &mut self.managers[t as usize];
        let Some(address) = manager.allocate(per_bank, id) else {
            let banks_used = match &req.placement {
                Placement::Interleaved => num_banks,
                Placement::Sharded { banks, .. } => banks.len() as u32,
            };
            return Err(ChipError::OutOfMemory {
                total: req.page_size * req.num_pages,
                buffer_type: t,
                num_banks: banks_used,
                per_bank,
                bank_size: manager.capacity(),
                allocated: manager.allocated_bytes(),
                free: manager.free_bytes(),
                largest_free: manager.largest_free_block().0,
            });
        };
        self.next_id += 1;
        self.generation += 1;
        let alloc = Allocation {
            id,
            chip: self.chip,
            buffer_type: t,
            address,
            per_bank_size: round_up(per_bank, manager.alignment()),
            page_stride: stride,
            page_size: req.page_size,
            num_pages: req.num_pages,
            placement: req.placement.clone(),
            num_banks,
        };
        self.publish(AllocatorEventKind::Allocate, &alloc);
        Ok(alloc)
    }

    pub fn deallocate(&mut self, alloc: &Allocation) -> Result<()> {
        let manager = &mut self.managers[alloc.buffer_type as usize];
        if manager
            .deallocate_if(alloc.address, |b| b.buffer_id == alloc.id)
            .is_none()
        {
            return Err(ChipError::DoubleFree {
                chip: self.chip,
                buffer_type: alloc.buffer_type,
                address: alloc.address,
            });
        }
        self.generation += 1;
        self.publish(AllocatorEventKind::Deallocate, alloc);
        Ok(())
    }

    fn publish(&self, kind: AllocatorEventKind, a: &Allocation) {
        if self.observers.is_empty() && !crate::observe::active() {
            return;
        }
        let event = AllocatorEvent::from_allocation(kind, a);
        for o in &self.observers {
            o.allocator_event(&event);
        }
        crate::observe::process_wide(|o| o.allocator_event(&event));
    }

    pub fn statistics(&self, t: BufferType) -> Statistics {
        let m = &self.managers[t as usize];
        let (largest, addrs) = m.largest_free_block();
        Statistics {
            total_allocatable_size_bytes: m.capacity(),
            total_allocated_bytes: m.allocated_bytes(),
            total_free_bytes: m.free_bytes(),
            largest_free_block_bytes: largest,
            largest_free_block_addrs: addrs,
        }
    }

    /// The block table of one type: tt-metal's memory view.
    pub fn memory_view(&self, t: BufferType) -> Vec<BlockRow> {
        self.managers[t as usize].block_table()
    }

    /// Is `id` still allocated at `address`?
    pub fn is_live(&self, t: BufferType, address: u64, id: u64) -> bool {
        self.managers[t as usize]
            .block_at(address)
            .is_some_and(|b| b.buffer_id == id)
    }

    pub fn overlapping(
        &self,
        t: BufferType,
        address: u64,
        size: u64,
    ) -> Vec<(u64, AllocatedBlock)> {
        self.managers[t as usize]
            .overlapping(address, size)
            .collect()
    }

    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        for t in BufferType::ALL {
            self.managers[t as usize]
                .check_invariants()
                .map_err(|e| format!("{t}: {e}"))?;
        }
        Ok(())
    }
}
