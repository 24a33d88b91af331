//! A watcher of everything the host sends to a chip's queues, for tools that model or record
//! what the chip would do (the profiler). The chip only calls it; it never knows what it is.
//!
//! With no observer set, the cost on the dispatch path is one relaxed atomic load per
//! submission.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::{Chip, CqId};

/// Told of every submission on the host thread that makes it, in the host's order.
pub trait CommandObserver: Send + Sync {
    /// `bytes` (whole records) went to `cq`, or into the trace being captured on it when
    /// `captured` (captured records do not run until a replay).
    fn submitted(&self, chip: &Chip, cq: CqId, bytes: &[u8], captured: bool);
    /// The host blocks until everything enqueued on `cq` so far has run (finish, a blocking
    /// read, an event synchronize).
    fn host_waits(&self, chip: u32, cq: CqId);
}

/// The chip's observer slot.
#[derive(Default)]
pub(crate) struct ObserverSlot {
    set: AtomicBool,
    observer: RwLock<Option<Arc<dyn CommandObserver>>>,
}

impl ObserverSlot {
    /// Calls `f` with the observer, if one is set (under a read lock: no reference counting
    /// on the dispatch path).
    #[inline]
    pub(crate) fn with(&self, f: impl FnOnce(&dyn CommandObserver)) {
        if !self.set.load(Ordering::Relaxed) {
            return;
        }
        if let Some(o) = self.observer.read().as_deref() {
            f(o);
        }
    }
}

impl Chip {
    /// Sets (or with `None` removes) the observer told of every submission to this chip.
    pub fn set_command_observer(&self, observer: Option<Arc<dyn CommandObserver>>) {
        let slot = &self.shared.observer;
        let set = observer.is_some();
        *slot.observer.write() = observer;
        slot.set.store(set, Ordering::Release);
    }
}
