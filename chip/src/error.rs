//! The chip crate's one error type. Every variant names the thing that is wrong and, where there
//! is one, the fix.

use crate::allocator::BufferType;

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ChipError {
    #[error("unknown architecture '{0}': known are wormhole_b0 (n150, n300, T3K, Galaxy) and blackhole (p150, p300)")]
    UnknownArch(String),

    /// tt-metal's exact out-of-memory text.
    #[error("Out of Memory: Not enough space to allocate {total} B {buffer_type} buffer across {num_banks} banks, where each bank needs to store {per_bank} B, but bank size is {bank_size} B (allocated: {allocated} B, free: {free} B, largest free block: {largest_free} B).")]
    OutOfMemory {
        total: u64,
        buffer_type: BufferType,
        num_banks: u32,
        per_bank: u64,
        bank_size: u64,
        allocated: u64,
        free: u64,
        largest_free: u64,
    },

    #[error("L1_SMALL only supports sharded allocations")]
    L1SmallInterleaved,

    #[error("invalid buffer: {0}")]
    InvalidBuffer(String),

    #[error("double free: {buffer_type} buffer at address {address:#x} on chip {chip} is not allocated (already freed?)")]
    DoubleFree {
        chip: u32,
        buffer_type: BufferType,
        address: u64,
    },

    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    #[error("invalid shard spec for {tensor}: {reason}")]
    InvalidShardSpec { tensor: String, reason: String },

    #[error("{tensor} was deallocated; it cannot be {action}. Keep the tensor alive, or allocate a new one")]
    Deallocated {
        tensor: String,
        action: &'static str,
    },

    #[error("shape mismatch in {op}: {detail}")]
    ShapeMismatch { op: String, detail: String },

    #[error("{op} does not support {what}: {hint}")]
    Unsupported {
        op: String,
        what: String,
        hint: String,
    },

    #[error("memory access out of range: {0}")]
    MemoryRange(String),

    #[error("tensor data: {0}")]
    Data(String),

    #[error("kernel {kernel} failed on chip {chip}: {reason}")]
    Kernel {
        kernel: String,
        chip: u32,
        reason: String,
    },

    #[error("command decode error at byte {offset}: {reason}")]
    Decode { offset: usize, reason: String },

    #[error("{0}")]
    Trace(String),

    #[error("{0}")]
    Queue(String),

    #[error("timed out after {seconds:.1} s: {what}. Raise TTMESH_OPERATION_TIMEOUT_SECONDS if the work is just slow")]
    Timeout { what: String, seconds: f64 },

    #[error("chip {0} is closed")]
    Closed(u32),
}

pub type Result<T, E = ChipError> = std::result::Result<T, E>;

impl From<crate::format::FormatError> for ChipError {
    fn from(e: crate::format::FormatError) -> Self {
        ChipError::Data(e.to_string())
    }
}

impl From<crate::compute::ComputeError> for ChipError {
    fn from(e: crate::compute::ComputeError) -> Self {
        ChipError::ShapeMismatch {
            op: "compute".into(),
            detail: e.to_string(),
        }
    }
}
