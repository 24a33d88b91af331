//! Running a line's step lists on two threads at once: the thread that runs the meeting and
//! ccl's helper thread (`helper`). One thread doing a mid-sized collective's work (64 KiB per chip
//! and up) leaves the host's second core idle; n threads, one per chip, pay context switches at
//! every step. Two threads that each take whichever part has a step ready (a part is locked
//! while one of them runs it) keep both cores busy with no switch.
//!
//! Each part's steps still run in list order, one at a time, with the same operands: the bits
//! are those of one runner. The helper is asked, not waited for: if it does not come (it helps
//! another line), the meeting's thread runs everything and the late job finds nothing to do.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ttmesh_fabric::{Fabric, FabricError};

use super::meeting::Part;
use super::one_thread::{receiver, region_busy, shared_regions, slot_count};
use crate::kernels::chip_io::{Local, StepError};

/// The pool job has not started; it runs; it is over (or will never start).
const IDLE: u8 = 0;
const RUNNING: u8 = 1;
const CLOSED: u8 = 2;

/// One part and how far its steps have run.
struct Cell {
    part: Part,
    pc: usize,
}

struct Shared {
    cells: Vec<Mutex<Option<Cell>>>,
    /// sent[p * slots + s]: pieces sent into position p's slot s and not yet received.
    sent: Vec<AtomicUsize>,
    /// unread[p * slots + s]: pieces written into position p's slot s's memory and not yet
    /// read (the read done, not just begun: the other thread may be reading it).
    unread: Vec<AtomicUsize>,
    /// Slots sharing memory (`one_thread::alias_slots`).
    regions: Option<usize>,
    slots: usize,
    total: usize,
    done: AtomicUsize,
    failed: Mutex<Option<(usize, StepError)>>,
    stop: AtomicBool,
    helper: AtomicU8,
    fabric: Arc<Fabric>,
    chips: Vec<u32>,
    name: &'static str,
    timeout: Duration,
    progress: Arc<AtomicU64>,
}

/// True if a second thread is there to ask: the host has a second core and the helper
/// thread (`helper`) runs.
pub(crate) fn available() -> bool {
    ttmesh_chip::device::host_cores() >= 2 && super::helper::running()
}

/// Runs every part's steps on this thread and the helper thread; the parts come back in order,
/// with the first failure (its line position and error).
pub(crate) fn drive(
    fabric: &Arc<Fabric>,
    chips: &[u32],
    name: &'static str,
    timeout: Duration,
    parts: Vec<Part>,
    progress: Arc<AtomicU64>,
) -> (Vec<Part>, Result<(), (usize, StepError)>) {
    let n = parts.len();
    let regions = shared_regions(&parts);
    let slots = slot_count(&parts);
    let total = parts.iter().map(|p| p.steps.len()).sum();
    let shared = Arc::new(Shared {
        cells: parts
            .into_iter()
            .map(|part| Mutex::new(Some(Cell { part, pc: 0 })))
            .collect(),
        sent: (0..n * slots).map(|_| AtomicUsize::new(0)).collect(),
        unread: (0..if regions.is_some() { n * slots } else { 0 })
            .map(|_| AtomicUsize::new(0))
            .collect(),
        regions,
        slots,
        total,
        done: AtomicUsize::new(0),
        failed: Mutex::new(None),
        stop: AtomicBool::new(false),
        helper: AtomicU8::new(IDLE),
        fabric: fabric.clone(),
        chips: chips.to_vec(),
        name,
        timeout,
        progress,
    });
    let job = shared.clone();
    super::helper::submit(move || {
        if job
            .helper
            .compare_exchange(IDLE, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // Closed even if the job panics, so the meeting's thread never waits for it.
            let _closed = Closing(&job.helper);
            work(&job, job.cells.len() / 2);
        }
    });
    work(&shared, 0);
    // The pool job either never started (it is closed now and will not) or ends promptly:
    // every step has run or the run stopped.
    if shared
        .helper
        .compare_exchange(IDLE, CLOSED, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        let mut spins = 0u32;
        while shared.helper.load(Ordering::Acquire) != CLOSED {
            backoff(&mut spins);
        }
    }
    let failed = shared
        .failed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    let parts = shared
        .cells
        .iter()
        .map(|c| {
            let cell = c.lock().unwrap_or_else(|p| p.into_inner()).take();
            cell.expect("every part is back once both threads are done")
                .part
        })
        .collect();
    (parts, failed.map_or(Ok(()), Err))
}

/// Marks the helper's job over when dropped.
struct Closing<'a>(&'a AtomicU8);

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.0.store(CLOSED, Ordering::Release);
    }
}

fn backoff(spins: &mut u32) {
    *spins += 1;
    if (*spins).is_multiple_of(32) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

impl Shared {
    fn fail(&self, at: usize, e: StepError) {
        let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert((at, e));
        self.stop.store(true, Ordering::Release);
    }

    /// Runs part `p`'s steps while they are ready; how many ran, or None if the other thread
    /// holds the part.
    fn run_part(&self, p: usize) -> Option<usize> {
        let n = self.cells.len();
        let Ok(mut guard) = self.cells[p].try_lock() else {
            return None;
        };
        let cell = guard.as_mut()?;
        let mem = Local::Fabric(&self.fabric);
        let mut ran = 0;
        while let Some(&s) = cell.part.steps.get(cell.pc) {
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            if let (Some(r), Some((side, slot))) = (self.regions, s.writes_slot()) {
                // One writer per chip's slots (`alias_slots`): this part is the only one that
                // writes the receiver's slots, so the check cannot race another write.
                let q = receiver(p, n, side) * self.slots;
                let unread = |s: usize| self.unread[q + s].load(Ordering::Acquire);
                if region_busy(unread, self.slots, slot, r) {
                    break;
                }
            }
            if let Some(slot) = s.receives() {
                let count = &self.sent[p * self.slots + slot];
                let took =
                    count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1));
                if took.is_err() {
                    break;
                }
            }
            let Cell { part, .. } = cell;
            if let Err(e) = part
                .ep
                .step(s, &mut part.work, &self.fabric, mem, self.timeout)
            {
                self.fail(p, e);
                break;
            }
            if self.regions.is_some() {
                if let Some(slot) = s.reads_slot() {
                    self.unread[p * self.slots + slot].fetch_sub(1, Ordering::AcqRel);
                }
                if let Some((side, slot)) = s.writes_slot() {
                    let q = receiver(p, n, side);
                    self.unread[q * self.slots + slot].fetch_add(1, Ordering::AcqRel);
                }
            }
            if let Some((side, slot)) = s.sends() {
                let q = receiver(p, n, side);
                self.sent[q * self.slots + slot].fetch_add(1, Ordering::AcqRel);
            }
            cell.pc += 1;
            ran += 1;
            self.done.fetch_add(1, Ordering::AcqRel);
            self.progress.fetch_add(1, Ordering::Relaxed);
        }
        Some(ran)
    }
}

/// One thread's share: passes over the parts from `start`, running whatever is ready, until
/// every step has run or the run stopped.
fn work(sh: &Shared, start: usize) {
    let n = sh.cells.len();
    let mut spins = 0u32;
    let mut last_progress = Instant::now();
    let mut seen = sh.done.load(Ordering::Acquire);
    loop {
        if sh.stop.load(Ordering::Acquire) || sh.done.load(Ordering::Acquire) == sh.total {
            return;
        }
        let alone = sh.helper.load(Ordering::Acquire) != RUNNING;
        let before = sh.done.load(Ordering::Acquire);
        let mut ran = 0;
        let mut busy = false;
        for i in 0..n {
            match sh.run_part((start + i) % n) {
                Some(r) => ran += r,
                None => busy = true,
            }
        }
        let now_done = sh.done.load(Ordering::Acquire);
        if ran > 0 || now_done != seen {
            seen = now_done;
            spins = 0;
            last_progress = Instant::now();
            continue;
        }
        // Alone (the other thread is not running, at the start of the pass and after it)
        // with nothing ready and nothing changed: the step lists wait on each other, a bug.
        let still_alone = sh.helper.load(Ordering::Acquire) != RUNNING;
        if alone && still_alone && !busy && sh.done.load(Ordering::Acquire) == before {
            let at: Vec<usize> = sh
                .cells
                .iter()
                .map(|c| {
                    c.lock()
                        .ok()
                        .and_then(|g| g.as_ref().map(|c| c.pc))
                        .unwrap_or(0)
                })
                .collect();
            let reason = format!(
                "{}: the line's step lists cannot proceed (at steps {at:?})",
                sh.name
            );
            let chip = sh.chips[0];
            sh.fail(
                0,
                StepError::Fabric(FabricError::KernelFailed { chip, reason }),
            );
            return;
        }
        // The other thread runs a step that will make one ready; its waits are bounded, so
        // a run with no progress for the timeout is stuck.
        if last_progress.elapsed() > sh.timeout {
            let chip = sh.chips[0];
            let reason = format!(
                "{}: the line made no progress for {:?}",
                sh.name, sh.timeout
            );
            sh.fail(
                0,
                StepError::Fabric(FabricError::KernelFailed { chip, reason }),
            );
            return;
        }
        backoff(&mut spins);
    }
}
