//! ttmesh-chip: one emulated Tenstorrent chip (Wormhole B0 or Blackhole).
//!
//! Owns: the architecture's numbers, the allocator (tt-metal's addresses, banks and rules) and
//! its event stream, sparse backing memory, tensors and their page formats, ops as kernels with
//! host references, the program cache, command queues with byte-encoded commands and their
//! dispatcher threads, events, and Metal Trace (capture, TRACE region, replay, sanitizer).
//!
//! Must not touch: other chips, the fabric, topologies or anything mesh-wide. A kernel that
//! needs the fabric (a collective) is supplied from outside through the [`program::Kernel`]
//! trait; the chip runs it without knowing what it does.

pub mod allocator;
pub mod arch;
pub mod command;
pub mod compute;
pub mod device;
pub mod error;
pub mod format;
pub mod inspect;
pub mod memory;
pub mod observe;
pub mod ops;
mod par;
pub mod program;
pub mod tensor;

pub use allocator::{BufferType, Statistics};
pub use arch::{Arch, ArchSpec, MathFidelity};
pub use device::{Chip, ChipConfig, CqId, Event, TraceId};
pub use error::{ChipError, ForeignError, Result};
pub use inspect::{
    compute_with_storage_grid_size, dram_grid_size, dump_device_memory_state,
    get_allocator_base_address, get_dram_alignment, get_l1_alignment,
    get_max_worker_l1_unreserved_size, get_memory_view, get_region_base_address, CoreCoord,
    InspectMemory, MemoryBlock, MemoryView,
};
pub use tensor::{
    allocate_tensor_on_device, copy_host_to_device_tensor, Blocking, DataType, HostTensor, Layout,
    MemoryConfig, Tensor, TensorSpec,
};
