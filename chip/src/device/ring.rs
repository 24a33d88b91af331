//! The host-to-dispatcher ring of one command queue: what is queued, whether the dispatcher
//! sleeps, whether the host runs records itself, and a kernel still finishing elsewhere. The
//! dispatcher (`queue.rs`) executes; this only decides who runs what, and when a queue is idle.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::queue::Dispatcher;
use super::ChipShared;
use crate::command::{decode, Record};
use crate::error::Result;
use crate::program::Deferred;

/// The host-to-dispatcher ring of one queue. A push can leave a parked dispatcher asleep
/// (`wake = false`) so that a mesh can fill every chip's queue first and hand the wake-ups to
/// another thread: the host then pays one wake for a whole mesh instead of one per chip.
///
/// The host may also run records itself, in queue order, while the dispatcher sleeps with
/// nothing queued (`push_or_run`, `run_idle_discards`): the dispatcher's state sits behind a
/// mutex that either thread takes to execute, so the order of a queue's records is kept
/// whichever thread runs them.
pub(crate) struct HostRing {
    state: Mutex<RingState>,
    cv: Condvar,
}

struct RingState {
    items: VecDeque<Vec<u8>>,
    sleeping: bool,
    /// The host runs records of this queue now (it holds the dispatcher's state).
    inline: bool,
    /// A kernel that returned before its work was done (see `Kernel::launch`): nothing
    /// after it runs until it is settled.
    pending: Option<PendingKernel>,
}

/// A deferred kernel and when its launch started (its kernel time ends when it is done).
pub(crate) struct PendingKernel {
    deferred: Arc<dyn Deferred>,
    started: Instant,
}

impl PendingKernel {
    pub(super) fn new(deferred: Arc<dyn Deferred>, started: Instant) -> PendingKernel {
        PendingKernel { deferred, started }
    }

    /// Waits for the work (bounded by the kernel's own timeout), counts its kernel time and
    /// returns its result.
    pub(crate) fn settle(self, shared: &ChipShared) -> Result<()> {
        let result = self.deferred.wait();
        let end = self.deferred.done_at().unwrap_or_else(Instant::now);
        shared.record_launch(end.saturating_duration_since(self.started));
        result
    }
}

impl RingState {
    /// The dispatcher sleeps with nothing queued, nobody runs its records and no deferred
    /// kernel is still working: everything pushed so far is done.
    fn idle(&self) -> bool {
        self.sleeping
            && !self.inline
            && self.items.is_empty()
            && self.pending.as_ref().is_none_or(|p| p.deferred.is_done())
    }
}

impl HostRing {
    pub(super) fn new() -> HostRing {
        HostRing {
            state: Mutex::new(RingState {
                items: VecDeque::new(),
                sleeping: false,
                inline: false,
                pending: None,
            }),
            cv: Condvar::new(),
        }
    }

    /// Runs `bytes` on this thread if the queue is idle and its state free, else pushes them
    /// (waking the dispatcher). For launches of kernels that only hand their work over
    /// (`Kernel::hands_off`): the host then pays no wake-up and no context switch.
    pub(crate) fn push_or_run(&self, bytes: Vec<u8>, dispatcher: &Mutex<Dispatcher>) {
        let mut s = self.state.lock();
        if s.idle() {
            // Taken while the ring is locked, so no record pushed after these runs first.
            if let Some(mut d) = dispatcher.try_lock() {
                s.inline = true;
                drop(s);
                // A record that stops the queue (Terminate) is never run this way.
                let _ = d.run_bytes(&bytes);
                d.flush_discards();
                drop(d);
                self.state.lock().inline = false;
                crate::command::spare::give_back(bytes);
                return;
            }
        }
        drop(s);
        self.push(bytes, true);
    }

    /// If the dispatcher sleeps and only discards are queued (frees, which never wake it),
    /// runs them on this thread; true if the queue is then idle. A host about to wait for
    /// the queue (`finish`) saves the dispatcher's wake-up and its own.
    pub(crate) fn run_idle_discards(&self, dispatcher: &Mutex<Dispatcher>) -> bool {
        let mut s = self.state.lock();
        // The cheap checks first: the items are decoded only when the dispatcher sleeps.
        let only_discards = |items: &VecDeque<Vec<u8>>| {
            items.iter().all(
                |b| matches!(decode(b, 0), Ok((Record::Discard { .. }, next)) if next == b.len()),
            )
        };
        if !s.sleeping || s.inline || !only_discards(&s.items) {
            return false;
        }
        let Some(mut d) = dispatcher.try_lock() else {
            return false;
        };
        let items = std::mem::take(&mut s.items);
        s.inline = true;
        drop(s);
        for bytes in &items {
            let _ = d.run_bytes(bytes);
        }
        d.flush_discards();
        drop(d);
        let mut s = self.state.lock();
        s.inline = false;
        s.idle()
    }

    /// Takes a deferred kernel that is done, once the queue is idle: its result and kernel
    /// time are then the host's to record (the dispatcher would only see it at its next
    /// record).
    pub(crate) fn take_done_pending(&self) -> Option<PendingKernel> {
        let mut s = self.state.lock();
        if s.idle() {
            s.pending.take()
        } else {
            None
        }
    }

    pub(super) fn set_pending(&self, p: PendingKernel) {
        self.state.lock().pending = Some(p);
    }

    pub(super) fn take_pending(&self) -> Option<PendingKernel> {
        self.state.lock().pending.take()
    }

    pub(crate) fn push(&self, bytes: Vec<u8>, wake: bool) {
        let mut s = self.state.lock();
        s.items.push_back(bytes);
        // Pushes that do not wake (discards, a mesh's deferred replays) still wake a sleeping
        // dispatcher once many pile up, so the ring cannot grow without bound.
        let notify = s.sleeping && (wake || s.items.len() >= UNWOKEN_LIMIT);
        drop(s);
        if notify {
            self.cv.notify_one();
        }
    }

    /// Wakes the dispatcher if it sleeps with work queued.
    pub(crate) fn wake(&self) {
        let s = self.state.lock();
        let notify = s.sleeping && !s.items.is_empty();
        drop(s);
        if notify {
            self.cv.notify_one();
        }
    }

    /// True if everything pushed so far has run (see `RingState::idle`).
    pub(crate) fn drained(&self) -> bool {
        self.state.lock().idle()
    }

    /// Blocks (parked, no spinning) until there is work; takes all of it.
    pub(super) fn pop_all(&self, out: &mut VecDeque<Vec<u8>>) {
        let mut s = self.state.lock();
        while s.items.is_empty() {
            s.sleeping = true;
            self.cv.wait(&mut s);
            s.sleeping = false;
        }
        std::mem::swap(out, &mut s.items);
    }
}

/// Items a sleeping dispatcher may have queued before a push wakes it regardless.
const UNWOKEN_LIMIT: usize = 1024;
