//! The one seam through which tools above the chip watch it: [`ChipObserver`]. The profiler,
//! graph capture, the monitor's statistics and the mesh's fault handling are all observers;
//! the chip does not know who listens.
//!
//! What an observer is told, each on the thread where it happens:
//! - every allocator event (`allocator_event`), with the chip's allocator locked, so events
//!   arrive in order;
//! - every program launch `ops::launch` enqueues (`program_launched`);
//! - every submission of records to a command queue (`submitted`), on the host thread that
//!   makes it, in the host's order, handed over decoded by the chip's one decoder
//!   ([`Submission::commands`]), so no tool decodes command bytes itself;
//! - every host wait for a queue (`host_waits`: finish, a blocking read, an event
//!   synchronize);
//! - every record a dispatcher refuses (`record_refused`: a damaged trace, a kernel's panic),
//!   on the dispatcher thread, as it happens rather than at the next finish.
//!
//! Every method has an empty default, so an observer implements what it needs, and says
//! which events it wants (`interests`): a chip skips the work of a hook no attached observer
//! wants. Observers must be short, must not block, and must never call back into a chip
//! (some calls hold the chip's locks).
//!
//! Where an observer is attached: on one chip ([`Chip::add_observer`], any number: the
//! profiler, the monitor, the mesh), or process-wide ([`set_observer`], one at a time: graph
//! capture, which in TT-NN is process-wide too and sees chips opened after it began). With
//! none attached, each hook costs one relaxed atomic load.
//!
//! NO_DISPATCH ([`set_no_dispatch`]): the allocator still allocates and every command is still
//! encoded (so memory figures and trace sizes are exact), but nothing reaches a dispatcher,
//! no data is written, and reads are refused (nothing ran, so there is nothing to read).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::allocator::{AllocatorEvent, BufferType};
use crate::command::{decode, Record};
use crate::device::{Chip, CqId};
use crate::error::ChipError;
use crate::program::Program;

/// One program launch, as `ops::launch` enqueued it.
pub struct LaunchEvent<'a> {
    pub chip: u32,
    pub cq: CqId,
    /// The op's name as the chip knows it ("BinaryNg", "Matmul", "AllGather", ...).
    pub name: &'static str,
    pub program: &'a Program,
    /// False when this launch compiled the program.
    pub program_cache_hit: bool,
    /// Page size of each operand, in the kernel's operand order.
    pub page_sizes: &'a [u64],
    pub buffer_types: &'a [BufferType],
    /// The chip's compute grid (columns, rows): the worker cores a program may use.
    pub compute_grid: (u32, u32),
}

/// Whole records the host sent to a queue, or into the trace being captured on it.
pub struct Submission<'a> {
    pub chip: &'a Chip,
    pub cq: CqId,
    /// Into a trace capture: the records do not run until a replay.
    pub captured: bool,
    bytes: &'a [u8],
}

impl<'a> Submission<'a> {
    /// The records, decoded, each with its encoded size in bytes.
    pub fn commands(&self) -> Commands<'a> {
        Commands::new(self.bytes)
    }

    /// The records as encoded (what a trace capture stores).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// Records decoded one by one with their encoded sizes, up to the first that does not decode
/// (records the chip encoded always do; a trace read back from DRAM may be damaged).
pub struct Commands<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Commands<'a> {
    /// The records of `bytes` (a submission, or a trace's commands read back from DRAM with
    /// `Chip::read_trace_commands`).
    pub fn new(bytes: &'a [u8]) -> Commands<'a> {
        Commands { bytes, at: 0 }
    }
}

impl<'a> Iterator for Commands<'a> {
    type Item = (Record<'a>, usize);
    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        match decode(self.bytes, self.at) {
            Ok((record, next)) => {
                let size = next - self.at;
                self.at = next;
                Some((record, size))
            }
            Err(_) => {
                self.at = self.bytes.len();
                None
            }
        }
    }
}

/// What an observer wants to be told of (`ChipObserver::interests`): a chip does the work of a
/// hook (building a launch's event, a submission's view) only if an observer wants it, so a
/// mesh's always-attached observers (the monitor's statistics, stop-the-fabric-on-refusal)
/// cost nothing on the dispatch path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interests(u8);

impl Interests {
    pub const NONE: Interests = Interests(0);
    pub const ALLOCATOR: Interests = Interests(1);
    pub const LAUNCHES: Interests = Interests(2);
    pub const SUBMISSIONS: Interests = Interests(4);
    pub const HOST_WAITS: Interests = Interests(8);
    pub const REFUSALS: Interests = Interests(16);
    pub const ALL: Interests = Interests(31);

    /// Both sets.
    pub const fn and(self, other: Interests) -> Interests {
        Interests(self.0 | other.0)
    }

    /// True if any of `other` is in this set.
    pub const fn has(self, other: Interests) -> bool {
        self.0 & other.0 != 0
    }
}

/// Whatever watches a chip (see the module docs for threads and rules).
pub trait ChipObserver: Send + Sync {
    /// The events this observer is told of (all by default); asked once, when attached.
    fn interests(&self) -> Interests {
        Interests::ALL
    }
    fn allocator_event(&self, _event: &AllocatorEvent) {}
    fn program_launched(&self, _launch: &LaunchEvent<'_>) {}
    fn submitted(&self, _submission: &Submission<'_>) {}
    fn host_waits(&self, _chip: u32, _cq: CqId) {}
    /// `error` names the refused record; the queue reports it at its next finish too.
    fn record_refused(&self, _chip: u32, _error: &ChipError) {}
}

/// The observers attached to one chip, each with its interests.
#[derive(Default)]
pub(crate) struct Observers {
    /// The union of the attached observers' interests.
    wanted: AtomicU8,
    list: RwLock<Vec<(Interests, Arc<dyn ChipObserver>)>>,
}

impl Observers {
    pub(crate) fn add(&self, observer: Arc<dyn ChipObserver>) {
        let mut list = self.list.write();
        list.push((observer.interests(), observer));
        self.refresh(&list);
    }

    /// Detaches `observer` (the same `Arc`); true if it was attached.
    pub(crate) fn remove(&self, observer: &Arc<dyn ChipObserver>) -> bool {
        let mut list = self.list.write();
        let before = list.len();
        list.retain(|(_, o)| !Arc::ptr_eq(o, observer));
        self.refresh(&list);
        list.len() != before
    }

    fn refresh(&self, list: &[(Interests, Arc<dyn ChipObserver>)]) {
        let wanted = list.iter().fold(Interests::NONE, |w, (i, _)| w.and(*i));
        self.wanted.store(wanted.0, Ordering::Release);
    }

    /// True if an attached observer wants `what`.
    #[inline]
    pub(crate) fn want(&self, what: Interests) -> bool {
        Interests(self.wanted.load(Ordering::Relaxed)).has(what)
    }

    /// Calls `f` with each observer that wants `what` (under a read lock: no reference
    /// counting on the dispatch path).
    #[inline]
    pub(crate) fn each(&self, what: Interests, mut f: impl FnMut(&dyn ChipObserver)) {
        if !self.want(what) {
            return;
        }
        for (i, o) in self.list.read().iter() {
            if i.has(what) {
                f(&**o);
            }
        }
    }
}

impl Chip {
    /// Hands `bytes`, just submitted to `cq` (or captured on it), to the chip's observers.
    #[inline]
    pub(crate) fn observe_submission(&self, cq: CqId, bytes: &[u8], captured: bool) {
        if !self.shared.observers.want(Interests::SUBMISSIONS) {
            return;
        }
        let submission = Submission {
            chip: self,
            cq,
            captured,
            bytes,
        };
        self.shared
            .observers
            .each(Interests::SUBMISSIONS, |o| o.submitted(&submission));
    }

    /// Tells the chip's observers and the process's of a launch just enqueued.
    pub(crate) fn observe_launch(&self, launch: &LaunchEvent<'_>) {
        self.shared
            .observers
            .each(Interests::LAUNCHES, |o| o.program_launched(launch));
        process_wide(|o| o.program_launched(launch));
    }

    /// True if an observer wants this chip's launches, on it or process-wide.
    pub(crate) fn launches_observed(&self) -> bool {
        self.shared.observers.want(Interests::LAUNCHES) || active()
    }

    /// Attaches `observer` to this chip (and its allocator) until `remove_observer`.
    pub fn add_observer(&self, observer: Arc<dyn ChipObserver>) {
        if observer.interests().has(Interests::ALLOCATOR) {
            self.shared.allocator.lock().add_observer(observer.clone());
        }
        self.shared.observers.add(observer);
    }

    /// Detaches `observer` (the `Arc` given to `add_observer`); false if it was not attached.
    pub fn remove_observer(&self, observer: &Arc<dyn ChipObserver>) -> bool {
        self.shared.allocator.lock().remove_observer(observer);
        self.shared.observers.remove(observer)
    }
}

static ACTIVE: AtomicBool = AtomicBool::new(false);
static NO_DISPATCH: AtomicBool = AtomicBool::new(false);
static OBSERVER: RwLock<Option<Arc<dyn ChipObserver>>> = parking_lot::const_rwlock(None);

/// Installs (or with `None` removes) the process's chip observer, told of every chip.
pub fn set_observer(observer: Option<Arc<dyn ChipObserver>>) {
    let mut slot = OBSERVER.write();
    ACTIVE.store(observer.is_some(), Ordering::Release);
    *slot = observer;
}

/// Turns NO_DISPATCH on or off for every chip of the process.
pub fn set_no_dispatch(on: bool) {
    NO_DISPATCH.store(on, Ordering::Release);
}

/// True while NO_DISPATCH is on.
pub fn no_dispatch() -> bool {
    NO_DISPATCH.load(Ordering::Acquire)
}

/// True while a process-wide observer is installed.
pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Calls `f` with the process-wide observer, if one is installed.
#[inline]
pub(crate) fn process_wide(f: impl FnOnce(&dyn ChipObserver)) {
    if !active() {
        return;
    }
    if let Some(o) = OBSERVER.read().as_deref() {
        f(o);
    }
}
