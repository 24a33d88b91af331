//! ttmesh: the user-facing API of the emulator. A [`MeshDevice`] of N chips with per-chip TRACE
//! regions and the 1D fabric; [`MeshTensor`]s distributed by mappers and gathered by composers;
//! every chip op on mesh tensors; collectives along mesh axes; tensor-parallel matmul; mesh
//! trace (one trace per chip, replayed in lockstep); mesh events; per-chip statistics.
//!
//! Owns: the mapping from mesh coordinates to chips, lockstep allocation (a mesh buffer sits at
//! the same address on every chip), mesh-wide trace and event bookkeeping, stats publishing.
//! Must not touch: a chip's internals (it calls the chip's public API), routing (the fabric's),
//! or collective algorithms (ccl's).

#![forbid(unsafe_code)]

pub mod ccl;
mod chip_port;
mod described;
mod device;
mod error;
pub mod graph;
mod inspect;
mod labels;
mod lockstep;
pub mod models;
mod monitor;
pub mod ops;
pub mod ranks;
mod tensor;
mod trace;

pub use described::implied_fabric_config;
pub use device::{ChipReport, MeshConfig, MeshCoordinate, MeshDevice, MeshShape};
pub use error::{error_chain, MeshError, Result};
pub use labels::{LabelledMemory, MemoryRole};
pub use tensor::{
    allocate_tensor_on_device, copy_host_to_device_tensor, ConcatMesh2dToTensor,
    ConcatMeshToTensor, DistinctParts, MeshComposer, MeshMapper, MeshTensor, ReplicateTensorToMesh,
    ShardTensor2dMesh, ShardTensorToMesh,
};
pub use trace::{MeshEvent, MeshTraceId, ReplayReport};

pub use ttmesh_ccl::Topology;
pub use ttmesh_chip::inspect::{
    compute_with_storage_grid_size, dram_grid_size, dump_device_memory_state,
    get_allocator_base_address, get_dram_alignment, get_l1_alignment,
    get_max_worker_l1_unreserved_size, get_memory_view, get_region_base_address, CoreCoord,
    InspectMemory, MemoryBlock, MemoryView,
};
pub use ttmesh_chip::memory::cap_malloc_arenas;
pub use ttmesh_chip::tensor::{
    create_sharded_memory_config, CoreGrid, CoreRange, HostData, PendingTensorRead, ShardCores,
    ShardOrientation, ShardSpec, ShardStrategy, TensorMemoryLayout,
};
pub use ttmesh_chip::{
    compute::Activation, ArchSpec, Blocking, BufferType, CqId, DataType, HostTensor, Layout,
    MathFidelity, MemoryConfig, TensorSpec,
};
pub use ttmesh_fabric::FabricConfig;

/// Benchmarks of statistics publishing (print side-by-side figures; assert nothing).
pub mod monitor_bench {
    pub use crate::monitor::monitor_overhead;
}
