//! Process-wide observation of what chips do, for tools above the chip (graph capture):
//! every allocator event and every program launch, in order, and the NO_DISPATCH switch.
//!
//! The chip does not know who listens. One observer at a time is installed from above
//! ([`set_observer`]); when none is, each hook costs one relaxed atomic load.
//!
//! NO_DISPATCH ([`set_no_dispatch`]): the allocator still allocates and every command is still
//! encoded (so memory figures and trace sizes are exact), but nothing reaches a dispatcher,
//! no data is written, and reads are refused (nothing ran, so there is nothing to read).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::allocator::{AllocatorEvent, BufferType};
use crate::device::CqId;
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

/// Whatever watches the chips. Called on the thread that allocates or launches (allocator
/// events with the chip's allocator locked): keep it short and never call back into a chip.
pub trait ChipObserver: Send + Sync {
    fn allocator_event(&self, event: &AllocatorEvent);
    fn program_launched(&self, launch: &LaunchEvent<'_>);
}

static ACTIVE: AtomicBool = AtomicBool::new(false);
static NO_DISPATCH: AtomicBool = AtomicBool::new(false);
static OBSERVER: RwLock<Option<Arc<dyn ChipObserver>>> = parking_lot::const_rwlock(None);

/// Installs (or with `None` removes) the process's chip observer.
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

pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

pub(crate) fn allocator_event(event: &AllocatorEvent) {
    if let Some(o) = OBSERVER.read().as_ref() {
        o.allocator_event(event);
    }
}

pub(crate) fn program_launched(launch: &LaunchEvent<'_>) {
    if let Some(o) = OBSERVER.read().as_ref() {
        o.program_launched(launch);
    }
}
