//! ttmesh-ccl: collectives as device kernels over the 1D fabric: all_gather, reduce_scatter and
//! all_reduce, with Linear and Ring algorithms, and the host-side builders that turn one
//! collective over a line of chips into one program per chip.
//!
//! Owns: the collective algorithms, their semaphore protocol and scratch buffers. Must not
//! touch: mesh shapes and coordinates (the mesh crate hands it lines of chips and per-chip
//! tensors), routing (the fabric's), or allocation policy (the chip's).
//!
//! # Layout
//!
//! - One module per collective, first: `all_gather`, `reduce_scatter`, `all_reduce`. Each holds
//!   its public function, its checks, output spec and scratch size, its part of the kernel on
//!   one chip, and its step plan. `collective` is what all three do before a launch (the one
//!   shared preamble, `collective::Call`); `reduction` what the two reductions share.
//! - `kernels`: one chip's program (`CollectiveKernel`) and what its steps are made of: the
//!   step vocabulary (`kernels::step`), its executor (`kernels::execute`), chip memory access
//!   (`kernels::chip_io`) and the data path's parts.
//! - `schedule`: who runs the steps. One table, `schedule::runner`, says when each runner
//!   applies, with every size limit beside it and its reason.
//!
//! # Protocol
//!
//! Every chip of a line runs the same kernel, parameterised by its position. Data moves in
//! slots of a per-chip scratch buffer that sits at the same address on every chip (the mesh
//! allocates in lockstep), each slot guarded by its own fabric semaphore, so chunks that take
//! different links may land in any order. Before writing into a neighbour, a chip waits for
//! that neighbour's "ready" increment, which the neighbour sends only once it has entered the
//! same collective: a fast chip can never overwrite data a slow chip has not consumed, across
//! ops and across trace replays.
//!
//! # Reduction order
//!
//! Sums are added in f32 in a fixed order given by the line: on a ring, chunk `j` starts at
//! chip `j+1` and travels forward to `j`; on a line, chunk `j` is summed from the left end up
//! to `j` and from the right end down to `j`, then `left + right`. A partial sum crosses each
//! link in the tensor's format, as tt-metal's reduce_scatter packs each hop's sum to it: for a
//! bf16 tensor it is rounded to bf16 (nearest even) at every send, and the owner adds what
//! arrives in f32 and rounds once more; f32 tensors stay f32 throughout. The order does not
//! depend on timing, so results are identical run to run and replay to replay. (Chunk `j`
//! here is the one line position `j` owns: data chunk `CclConfig::chunk_order[j]`.)
//!
//! # Faults: right or an error, never wrong
//!
//! A collective that fails on one chip (a link down, a packet dropped or corrupted, a
//! timeout) leaves semaphore counts, slot contents and packets in flight that the next
//! collective would read as its own. So the first chip that fails aborts the fabric
//! (`Fabric::abort`, with the cause, which names the link and fault): every other chip's
//! waits and sends then fail at once with that cause instead of at their timeouts, and every
//! collective kernel started later fails the same way without touching memory. The error each
//! chip reports, traced or untraced, therefore names the link.
//!
//! The mesh's `synchronize_device` (and `finish` on a single-queue mesh) resets the fabric
//! once every chip's queues are idle: it waits until no packet is in flight, zeroes every
//! chip's semaphores and forgets recorded losses (`Fabric::recover`). The next collective
//! then starts clean and, once the fault is cleared, is right. If a chip is still busy the
//! reset waits for the next synchronize, and until then collectives fail naming the original
//! cause; if the fabric cannot be drained, the error says to close and reopen the mesh.
//! Slots need no reset: every slot is written before its semaphore is raised.
//!
//! # Where the time goes
//!
//! Measured with perf on a 2-core host, change by change, with dates and commands:
//! `docs/performance.md` at the repository's root.

#![forbid(unsafe_code)]

mod all_gather;
mod all_reduce;
mod collective;
mod kernels;
#[cfg(test)]
mod plan_tests;
mod reduce_scatter;
mod reduction;
mod schedule;

use ttmesh_chip::device::CqId;
use ttmesh_chip::tensor::{MemoryConfig, Tensor, TensorSpec};
use ttmesh_chip::ChipError;

pub use all_gather::all_gather;
pub use all_reduce::all_reduce;
pub use collective::resolve_topology;
pub use reduce_scatter::reduce_scatter;

pub use kernels::{ready_semaphore, CollectiveKind, MAX_CHIP_ID, SEM_READY_BASE, SEM_SLOT_BASE};
pub use schedule::{set_step_runner, StepRunner};

#[derive(Debug, thiserror::Error)]
pub enum CclError {
    #[error("{op}: {detail}")]
    Invalid { op: &'static str, detail: String },
    #[error(transparent)]
    Chip(#[from] ChipError),
    /// The caller's lockstep allocation failed (its error, whole).
    #[error(transparent)]
    Allocate(Box<dyn std::error::Error + Send + Sync>),
}

/// Allocates one tensor of a spec on the chip of each given tensor, at one address on all of
/// them: every remote write relies on it. The caller owns that rule (the mesh allocates in
/// lockstep and checks it).
pub type LockstepAlloc<'a> = dyn Fn(
        &[Tensor],
        &TensorSpec,
    ) -> std::result::Result<Vec<Tensor>, Box<dyn std::error::Error + Send + Sync>>
    + 'a;

pub type Result<T, E = CclError> = std::result::Result<T, E>;

/// TT-NN's CCL topologies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Topology {
    Linear,
    Ring,
}

/// Chips taking part, in line order (fabric chip ids); a ring if the ends are linked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CclLine {
    pub chips: Vec<u32>,
    pub is_ring: bool,
}

#[derive(Clone, Debug, Default)]
pub struct CclConfig {
    /// Ring needs a ring line and a ring-capable fabric; `None` picks Ring when possible.
    pub topology: Option<Topology>,
    /// Parallel ethernet links to spread slots over (default 1).
    pub num_links: usize,
    pub memory_config: Option<MemoryConfig>,
    pub cq: CqId,
    /// Where each line position's data goes in the result: position `p`'s all_gather block and
    /// reduce_scatter chunk is `chunk_order[p]` (a permutation of 0..n); empty = line order.
    /// The mesh passes mesh order, so results compose with its mappers whatever path the line
    /// takes through the mesh (a T3K's 8-chip line is its perimeter, not row-major order).
    pub chunk_order: Vec<usize>,
}
