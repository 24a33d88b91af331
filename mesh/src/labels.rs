//! What a program says part of each chip's memory holds (model weights, KV cache), so
//! `ttmesh monitor` can show it beside the allocator's DRAM figure. The allocator knows sizes,
//! not purposes; only the program knows which buffers are weights. A label lasts as long as
//! the [`LabelledMemory`] guard the program keeps next to the tensors it describes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A purpose the monitor shows per chip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryRole {
    /// Model weights (and other constant tables a model keeps on the device).
    Weights,
    /// The attention KV cache.
    KvCache,
}

impl MemoryRole {
    fn index(self) -> usize {
        match self {
            MemoryRole::Weights => 0,
            MemoryRole::KvCache => 1,
        }
    }
}

/// Labelled bytes per chip, by role. Every chip of a mesh holds the same (lockstep allocation).
#[derive(Default)]
pub(crate) struct MemoryLabels {
    bytes: [AtomicU64; 2],
}

impl MemoryLabels {
    pub(crate) fn get(&self, role: MemoryRole) -> u64 {
        self.bytes[role.index()].load(Ordering::Relaxed)
    }
}

/// Bytes per chip labelled with a role while this guard lives; dropping it takes them off.
#[must_use = "the label is removed when this guard is dropped"]
pub struct LabelledMemory {
    labels: Arc<MemoryLabels>,
    role: MemoryRole,
    bytes: u64,
}

impl LabelledMemory {
    pub(crate) fn new(labels: &Arc<MemoryLabels>, role: MemoryRole, bytes: u64) -> Self {
        labels.bytes[role.index()].fetch_add(bytes, Ordering::Relaxed);
        LabelledMemory {
            labels: Arc::clone(labels),
            role,
            bytes,
        }
    }

    pub fn role(&self) -> MemoryRole {
        self.role
    }

    /// Bytes per chip this guard labels.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl std::fmt::Debug for LabelledMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LabelledMemory({:?}, {} bytes per chip)",
            self.role, self.bytes
        )
    }
}

impl Drop for LabelledMemory {
    fn drop(&mut self) {
        self.labels.bytes[self.role.index()].fetch_sub(self.bytes, Ordering::Relaxed);
    }
}
