//! The crate's one error enum. Messages name the chip, link or value at fault and the fix.

use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FabricError {
    #[error(
        "unknown fabric config '{name}'; use one of disabled, 1d-neighbor-exchange, 1d, \
         1d-ring, 2d, 2d-torus-x, 2d-torus-y, 2d-torus-xy (or tt-metal's DISABLED, \
         FABRIC_1D_NEIGHBOR_EXCHANGE, FABRIC_1D, FABRIC_1D_RING, FABRIC_2D, FABRIC_2D_TORUS_X, \
         FABRIC_2D_TORUS_Y, FABRIC_2D_TORUS_XY)"
    )]
    UnknownConfig { name: String },

    #[error("fabric config {config} cannot run on this topology: {reason}; use one of {fits}")]
    ConfigNotCarried {
        config: String,
        reason: String,
        fits: String,
    },

    #[error(
        "FABRIC_1D_NEIGHBOR_EXCHANGE reaches only neighbours, and chip {dst} is {hops} hops \
         from chip {src}; open the fabric with FABRIC_1D to send farther"
    )]
    NotNeighbours { src: u32, dst: u32, hops: u32 },

    #[error(
        "the fabric is disabled (FabricConfig::Disabled): chip {chip} cannot reach other chips; \
         open the mesh with FabricConfig::Fabric1D or Fabric1DRing"
    )]
    Disabled { chip: u32 },

    #[error("invalid fabric spec: {0}")]
    InvalidSpec(String),

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    #[error("chip {chip} does not exist: the fabric has {num_chips} chips (0..{num_chips})")]
    NoSuchChip { chip: u32, num_chips: u32 },

    #[error(
        "no route from chip {src} to chip {dst}: no axis line contains both; the 1D fabric routes \
         only along one row, column or line (relay through a chip on both lines, or use a \
         topology whose lines join them)"
    )]
    NoRoute { src: u32, dst: u32 },

    #[error(
        "route from chip {src} to chip {dst} needs {hops} hops, but a packet header's route \
         encodes at most 16 (15 on a 2D route that turns)"
    )]
    RouteTooLong { src: u32, dst: u32, hops: u32 },

    #[error("link {link} is down: packet from chip {src} to chip {dst} not delivered")]
    LinkDown { link: String, src: u32, dst: u32 },

    #[error(
        "link {link} dropped packet {seq} from chip {src} to chip {dst}: not delivered \
         (fault injected with Fault::Drop; clear it with clear_fault)"
    )]
    Dropped {
        link: String,
        src: u32,
        dst: u32,
        seq: u16,
    },

    #[error(
        "link {link} corrupted packet {seq} from chip {src} to chip {dst}: checksum mismatch \
         detected at chip {at}, not delivered"
    )]
    Corrupted {
        link: String,
        src: u32,
        dst: u32,
        seq: u16,
        at: u32,
    },

    #[error("chip {chip} rejected a fabric write from chip {src} to {addr}: {source}")]
    WriteFailed {
        chip: u32,
        src: u32,
        addr: String,
        source: MemoryError,
    },

    #[error("chip {chip} could not read its own memory at {addr}: {source}")]
    ReadFailed {
        chip: u32,
        addr: String,
        source: MemoryError,
    },

    #[error(
        "chip {src} waited {waited:?} for a free slot on link {link} toward chip {dst}: the \
         receiving router is not draining (raise the operation timeout if the load is legitimate)"
    )]
    SendTimeout {
        link: String,
        src: u32,
        dst: u32,
        waited: Duration,
    },

    #[error(
        "flush on chip {chip} timed out after {waited:?}: {outstanding} deliveries still \
         outstanding{cause}"
    )]
    FlushTimeout {
        chip: u32,
        outstanding: u64,
        waited: Duration,
        cause: String,
    },

    #[error(
        "semaphore {sem} on chip {chip} waited for {wanted}, saw {saw} after {waited:?}{cause}"
    )]
    SemaphoreWait {
        sem: u32,
        chip: u32,
        wanted: u64,
        saw: u64,
        waited: Duration,
        cause: String,
    },

    #[error("the fabric has shut down; open a new one to send again")]
    ShutDown,

    #[error(
        "the fabric stopped after a collective failed on chip {chip}: {cause}; it takes no \
         new work until every chip is idle and it is reset (MeshDevice::synchronize_device \
         does both), or close and reopen the mesh"
    )]
    Aborted {
        chip: u32,
        #[source]
        cause: Box<FabricError>,
    },

    #[error("rank {rank} (which holds chip {chip}): {reason}")]
    OtherRank {
        rank: u32,
        chip: u32,
        reason: String,
    },

    #[error("chip {chip}'s part of a collective failed: {reason}")]
    KernelFailed { chip: u32, reason: String },

    #[error("chip {chip} refused a command, so its part of a collective may never run: {reason}")]
    ChipStopped { chip: u32, reason: String },

    #[error(
        "the fabric cannot be reset: {what}; its state after the failed collective is \
         unknown, close and reopen the mesh"
    )]
    ResetFailed { what: String },

    #[error("fabric shutdown did not finish: {0}")]
    ShutdownTimeout(String),
}

/// Why a chip's memory refused a fabric write: the chip's own error, kept whole, so
/// `source()` of [`FabricError::WriteFailed`] reaches it and `downcast_ref` recovers its type.
/// Two are equal when they say the same.
#[derive(Clone, Debug)]
pub struct MemoryError(Arc<dyn std::error::Error + Send + Sync>);

/// A refusal that is only a message (test memories).
#[derive(Debug, Error)]
#[error("{0}")]
struct Refused(String);

impl FabricError {
    /// The error for chip `chip` failing to read its own memory at `at` (one message for
    /// every local read: staging a send, a kernel's read, a fill's tried read).
    pub fn read_failed(
        chip: u32,
        at: impl std::fmt::Display,
    ) -> impl FnOnce(MemoryError) -> FabricError {
        move |source| FabricError::ReadFailed {
            chip,
            addr: at.to_string(),
            source,
        }
    }
}

impl MemoryError {
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> MemoryError {
        MemoryError(Arc::new(e))
    }
}

impl From<String> for MemoryError {
    fn from(message: String) -> MemoryError {
        MemoryError::new(Refused(message))
    }
}

impl std::ops::Deref for MemoryError {
    type Target = dyn std::error::Error + Send + Sync + 'static;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::fmt::Display for MemoryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for MemoryError {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl Eq for MemoryError {}
