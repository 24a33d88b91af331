//! The chip crate's one error type. Every variant names the thing that is wrong and, where there
//! is one, the fix.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use crate::allocator::{BufferType, MemSpace};
use crate::command::Opcode;
use crate::compute::ComputeError;
use crate::format::FormatError;

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ChipError {
    #[error("unknown architecture '{0}': known are wormhole_b0 (n150, n300, T3K, Galaxy) and blackhole (p150, p300)")]
    UnknownArch(String),

    /// tt-metal's exact out-of-memory text; TT-NN's hint follows when the L1_SMALL region is 0 B.
    #[error("Out of Memory: Not enough space to allocate {total} B {buffer_type} buffer across {num_banks} banks, where each bank needs to store {per_bank} B, but bank size is {bank_size} B (allocated: {allocated} B, free: {free} B, largest free block: {largest_free} B).{}", empty_region_hint(*.buffer_type, *.bank_size))]
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

    #[error("{what} are not available during a NO_DISPATCH graph capture: nothing runs on the device, so there is nothing to read. End the capture, or capture with RunMode::Normal")]
    NoDispatch { what: &'static str },

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

    #[error("tensor data: {0}")]
    Format(#[from] FormatError),

    #[error("shape mismatch in compute: {0}")]
    Compute(#[from] ComputeError),

    #[error("kernel {kernel} failed on chip {chip}: {reason}")]
    Kernel {
        kernel: String,
        chip: u32,
        reason: String,
    },

    /// A kernel stopped on an error from outside the chip (a collective's fabric send); the
    /// error is kept whole as the source.
    #[error("kernel {kernel} failed on chip {chip}: {source}")]
    KernelFault {
        kernel: String,
        chip: u32,
        source: ForeignError,
    },

    #[error("command decode error at byte {offset}: {reason}")]
    Decode { offset: usize, reason: String },

    /// A command record the dispatcher refused before acting on it (or whose kernel
    /// panicked); the queue goes on with the next command.
    #[error("{site}: {fault}")]
    BadRecord {
        site: RecordSite,
        fault: RecordFault,
    },

    /// A host request refused before it became a command, for the reason its record would be.
    #[error("chip {chip} CQ {cq}: {request} refused: {fault}")]
    BadRequest {
        chip: u32,
        cq: u8,
        request: &'static str,
        fault: RecordFault,
    },

    #[error("{0}")]
    Trace(String),

    /// A write refused because it would land inside a live trace's bytes in DRAM.
    #[error("{0}")]
    IntoLiveTrace(LiveTraceWrite),

    #[error("{0}")]
    Queue(String),

    #[error("timed out after {seconds:.1} s: {what}. Raise TTMESH_OPERATION_TIMEOUT_SECONDS if the work is just slow")]
    Timeout { what: String, seconds: f64 },

    #[error("chip {0} is closed")]
    Closed(u32),

    #[error("chip {chip} has no {buffer_type} memory to inspect: {buffer_type} is host memory; ask about DRAM, L1, L1_SMALL or TRACE")]
    NotDeviceMemory { chip: u32, buffer_type: BufferType },

    #[error("cannot write the memory report of {device} to {}: {source}. Pass a prefix in a folder you can write to", path.display())]
    ReportWrite {
        device: String,
        path: std::path::PathBuf,
        #[source]
        source: IoError,
    },
}

/// An I/O error that ChipError can hold while staying `Clone` and `PartialEq` (compared by kind
/// and text).
#[derive(Debug, Clone)]
pub struct IoError(pub std::sync::Arc<std::io::Error>);

impl From<std::io::Error> for IoError {
    fn from(e: std::io::Error) -> Self {
        IoError(std::sync::Arc::new(e))
    }
}

impl PartialEq for IoError {
    fn eq(&self, other: &Self) -> bool {
        self.0.kind() == other.0.kind() && self.0.to_string() == other.0.to_string()
    }
}

impl std::fmt::Display for IoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for IoError {
    // The text is this error's own; the chain continues below the io::Error.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Where a command record sits: the chip and queue that ran it, the trace it came from (None
/// for commands the host sent directly) and its byte offset in that trace or submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSite {
    pub chip: u32,
    pub cq: u8,
    pub trace: Option<u32>,
    pub offset: usize,
    /// None when the header itself could not be read.
    pub opcode: Option<Opcode>,
}

impl fmt::Display for RecordSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chip {} CQ {}, ", self.chip, self.cq)?;
        match self.trace {
            Some(t) => write!(f, "trace {t}, ")?,
            None => write!(f, "host commands, ")?,
        }
        match self.opcode {
            Some(op) => write!(f, "{op:?} record at byte {}", self.offset),
            None => write!(f, "record at byte {}", self.offset),
        }
    }
}

/// Why the dispatcher refused a record.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum RecordFault {
    #[error("corrupt record: {reason}")]
    Corrupt { reason: String },

    #[error("a trace holds only program launches, and this record cannot be one of them; the trace's bytes in DRAM were overwritten: release_trace and capture again")]
    NotInTrace,

    #[error("the trace's last record, at byte {end}, is not its end marker (EXEC_BUF_END); the trace's bytes in DRAM were overwritten: release_trace and capture again")]
    NoEnd { end: usize },

    #[error("an end marker (EXEC_BUF_END) before the trace's own at byte {end} would stop the replay early, skipping the rest; the trace's bytes in DRAM were overwritten: release_trace and capture again")]
    EarlyEnd { end: usize },

    #[error("launch of unknown program {program} (this chip has compiled {compiled})")]
    UnknownProgram { program: u32, compiled: usize },

    #[error("{what} for program {program} without its launch")]
    NoLaunch { program: u32, what: &'static str },

    #[error("program {program} ({kernel}) has {expected} {what}, but its record says {found}; the record is corrupt")]
    LaunchMismatch {
        program: u32,
        kernel: String,
        what: &'static str,
        found: u64,
        expected: u64,
    },

    #[error("program {program} ({kernel}) was given {given} operand addresses but has {needs} operands; its runtime-args record is missing or corrupt")]
    MissingOperands {
        program: u32,
        kernel: String,
        given: usize,
        needs: usize,
    },

    #[error("program {program} ({kernel}) operand {operand} at {address:#x} spans {size} B per bank, outside the {buffer_type} range [{base:#x}, {top:#x})")]
    OperandOutOfRange {
        program: u32,
        kernel: String,
        operand: usize,
        buffer_type: BufferType,
        address: u32,
        size: u64,
        base: u64,
        top: u64,
    },

    #[error("{pages} pages of {page_size} B to read exceed the {capacity} B of {space:?} memory ({banks} banks of {bank_size} B); a read cannot be larger than the memory it reads")]
    ReadTooLarge {
        space: MemSpace,
        pages: usize,
        page_size: u32,
        banks: u32,
        bank_size: u64,
        capacity: u64,
    },

    #[error("the host cannot allocate the {bytes} B it reads")]
    HostAllocation { bytes: u64 },

    #[error("page {page} names bank {bank} address {address:#x} (+{page_size} B), outside {space:?} memory ({banks} banks of {bank_size} B)")]
    PageOutOfRange {
        space: MemSpace,
        page: usize,
        bank: u32,
        address: u64,
        page_size: u64,
        banks: u32,
        bank_size: u64,
    },

    #[error("EXEC_BUF of trace {trace} names {pages} pages of {page_size} B holding {size} B, more than the {region} B TRACE region")]
    TraceTooLarge {
        trace: u32,
        pages: u32,
        page_size: u64,
        size: u64,
        region: u64,
    },

    /// The trace's bytes read back for a replay are not those its capture wrote (their digest
    /// differs): caught before any record runs. `offset` is the first byte that differs; the
    /// site names the captured record holding it.
    #[error("the trace's bytes in DRAM differ from those its capture wrote, first at byte {offset} (captured {captured:#04x}, now {found:#04x}); nothing of it ran. Something wrote over the trace without the emulator seeing it (an injected fault): release_trace and capture again")]
    Damaged {
        offset: usize,
        captured: u8,
        found: u8,
    },

    /// An EXEC_BUF whose trace id, address or size is not that of a live trace on this chip.
    #[error("EXEC_BUF of trace {trace} names {pages} pages of {page_size} B at {address:#x} holding {size} B, but {captured}; the command is corrupt")]
    NotCaptured {
        trace: u32,
        address: u32,
        pages: u32,
        page_size: u64,
        size: u64,
        captured: String,
    },

    /// The record writes into a live trace's bytes (refused before any of its pages is written).
    #[error("{0}")]
    IntoLiveTrace(LiveTraceWrite),

    #[error("kernel {kernel} panicked: {message}; this is a bug in ttmesh (the queue goes on with the next command)")]
    Panicked { kernel: String, message: String },
}

pub type Result<T, E = ChipError> = std::result::Result<T, E>;

/// A write that would land inside a live trace's bytes: a replay would run whatever it wrote
/// (on hardware, how an out-of-bounds kernel corrupts a trace), so it is refused.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveTraceWrite {
    /// What wrote, as precisely as the refusing code knew it ("a write" at the memory; the
    /// record, kernel or fabric delivery where its caller names it).
    pub by: String,
    pub chip: u32,
    pub bank: u32,
    pub address: u64,
    pub len: u64,
    pub trace: u32,
    /// The trace's bytes in every DRAM bank: [start, end).
    pub trace_bytes: (u64, u64),
}

impl fmt::Display for LiveTraceWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} B to chip {} DRAM bank {} at {:#x} would land inside live trace {}'s bytes ([{:#x}, {:#x}) of every DRAM bank) and was refused: a replay would run whatever it wrote. Write only inside buffers that are allocated, or release_trace first",
            self.by,
            self.len,
            self.chip,
            self.bank,
            self.address,
            self.trace,
            self.trace_bytes.0,
            self.trace_bytes.1
        )
    }
}

impl ChipError {
    /// Names what wrote in a refused write into a live trace (see [`LiveTraceWrite::by`]);
    /// any other error is returned as it is.
    pub fn written_by(self, by: impl FnOnce() -> String) -> ChipError {
        match self {
            ChipError::IntoLiveTrace(mut w) => {
                w.by = by();
                ChipError::IntoLiveTrace(w)
            }
            other => other,
        }
    }
}

/// The sentence TT-NN appends to an out-of-memory error when the L1_SMALL region is 0 B.
pub const L1_SMALL_EMPTY_HINT: &str = "The L1_SMALL region is 0 B because it is reserved at device open; set l1_small_size large enough for this allocation when opening the device.";

fn empty_region_hint(buffer_type: BufferType, bank_size: u64) -> String {
    if buffer_type == BufferType::L1Small && bank_size == 0 {
        format!(" {L1_SMALL_EMPTY_HINT}")
    } else {
        String::new()
    }
}

/// An error from another crate carried inside a [`ChipError`] (which the chip's queues clone and
/// hand to every waiter). `source()` of the error holding it reaches the original, and
/// `downcast_ref` recovers its type. Two are equal when they say the same.
#[derive(Clone)]
pub struct ForeignError(Arc<dyn Error + Send + Sync>);

impl ForeignError {
    pub fn new(e: impl Error + Send + Sync + 'static) -> ForeignError {
        ForeignError(Arc::new(e))
    }
}

impl std::ops::Deref for ForeignError {
    type Target = dyn Error + Send + Sync + 'static;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for ForeignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for ForeignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl PartialEq for ForeignError {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}
