//! Running a whole line's steps on one thread, for the meeting (`meeting`): every part's
//! steps, each as soon as what it receives was sent. Every byte still goes through the fabric
//! senders (packets, credits, link statistics and faults are real) into the receivers'
//! memory, and every receive still waits for its semaphore; the runner only knows which slots
//! were sent, so it never waits on a step that has not run. Also what the two-thread runner
//! shares with it: which slots share memory and when a write into them must wait.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use ttmesh_fabric::FabricError;

use super::meeting::{Collective, Part};
use super::{step_runner, StepRunner, ALIAS_LONG_ALONE, ALIAS_MIN_SLOT_BYTES, SLOT_REGIONS};
use crate::kernels::chip_io::{Local, StepError};
use crate::kernels::execute::{Side, Step};

/// Lets the parts' slots share memory (`Endpoint::regions`) when a runner can keep them
/// apart (`shared_regions` then says in how many regions). A collective's slots are scratch, one per step, so a
/// line of n writes ~n slots per chip that no later step reads again: at 256 KiB on 32 chips
/// that is 8 MiB more memory the host's cache must hold. Sharing is safe when each chip's
/// slots have one writer (every slot write goes the same way round), and the runner holds a
/// write back until the slots it would overwrite were read (`region_busy`). Lists that keep
/// received blocks in their slots until the kernel writes its output (`Step::TakeBlock`)
/// keep a slot per step.
pub(crate) fn alias_slots(parts: &mut [Part], alone: bool) {
    let slots = slot_count(parts);
    let Some(page) = parts.first().map(|p| p.ep.slots.map.page_size) else {
        return;
    };
    let any_size =
        step_runner() == StepRunner::Together || (alone && parts.len() > ALIAS_LONG_ALONE);
    // Cheap bound first: most collectives are small and stop here.
    if slots <= SLOT_REGIONS || (!any_size && slots as u64 * page < ALIAS_MIN_SLOT_BYTES) {
        return;
    }
    let mut sides = parts
        .iter()
        .flat_map(|p| p.steps.iter())
        .filter_map(|s| s.writes_slot().map(|(side, _)| side));
    let Some(first) = sides.next() else {
        return;
    };
    let keeps_blocks = |p: &Part| p.steps.iter().any(|s| matches!(s, Step::TakeBlock { .. }));
    if sides.any(|s| s != first) || parts.iter().any(keeps_blocks) {
        return;
    }
    let mut written = vec![false; slots];
    for (_, slot) in parts[0].steps.iter().filter_map(Step::writes_slot) {
        written[slot] = true;
    }
    let bytes = written.iter().filter(|&&w| w).count() as u64 * page;
    if !any_size && bytes < ALIAS_MIN_SLOT_BYTES {
        return;
    }
    for p in parts.iter_mut() {
        p.ep.regions = Some(SLOT_REGIONS);
    }
}

/// How many regions the parts' slots share memory in (`alias_slots`), if they do.
pub(crate) fn shared_regions(parts: &[Part]) -> Option<usize> {
    parts.first().and_then(|p| p.ep.regions)
}

/// True if writing into slot `slot` of a chip must wait: another slot sharing its memory
/// (of `slots`, in `regions`) holds pieces not read yet (`unread(s)`).
pub(crate) fn region_busy(
    unread: impl Fn(usize) -> usize,
    slots: usize,
    slot: usize,
    regions: usize,
) -> bool {
    (slot % regions..slots)
        .step_by(regions)
        .any(|s| s != slot && unread(s) > 0)
}

/// Slots the parts' steps use (a runner counts the pieces sent into each).
pub(crate) fn slot_count(parts: &[Part]) -> usize {
    parts
        .iter()
        .flat_map(|p| p.steps.iter())
        .filter_map(|s| s.receives().or(s.sends().map(|(_, slot)| slot)))
        .max()
        .map_or(0, |m| m + 1)
}

/// The line position a step of position `p` (of `n`, a ring's wrap included) sends to.
pub(crate) fn receiver(p: usize, n: usize, side: Side) -> usize {
    match side {
        Side::Right => (p + 1) % n,
        Side::Left => (p + n - 1) % n,
    }
}

pub(crate) fn drive(
    c: &Collective,
    parts: &mut [Part],
    progress: &AtomicU64,
) -> Result<(), (usize, StepError)> {
    let n = parts.len();
    let regions = shared_regions(parts);
    let slots = slot_count(parts);
    // sent[p * slots + s]: pieces sent into position p's slot s and not yet received.
    let mut sent = vec![0usize; n * slots];
    // unread[p * slots + s]: pieces written into position p's slot s's memory, not yet read
    // (kept only when slots share memory).
    let mut unread = vec![0usize; if regions.is_some() { n * slots } else { 0 }];
    let mut pc = vec![0usize; n];
    let mem = Local::Fabric(c.fabric);
    loop {
        let mut moved = false;
        let mut done = true;
        for p in 0..n {
            let part = &mut parts[p];
            while let Some(&s) = part.steps.get(pc[p]) {
                if s.receives().is_some_and(|slot| sent[p * slots + slot] == 0) {
                    break;
                }
                if let (Some(r), Some((side, slot))) = (regions, s.writes_slot()) {
                    let q = receiver(p, n, side) * slots;
                    if region_busy(|s| unread[q + s], slots, slot, r) {
                        break;
                    }
                }
                if let Some(slot) = s.receives() {
                    sent[p * slots + slot] -= 1;
                }
                part.ep
                    .step(s, &mut part.work, c.fabric, mem, c.timeout)
                    .map_err(|e| (p, e))?;
                if regions.is_some() {
                    if let Some(slot) = s.reads_slot() {
                        unread[p * slots + slot] -= 1;
                    }
                    if let Some((side, slot)) = s.writes_slot() {
                        unread[receiver(p, n, side) * slots + slot] += 1;
                    }
                }
                if let Some((side, slot)) = s.sends() {
                    sent[receiver(p, n, side) * slots + slot] += 1;
                }
                pc[p] += 1;
                moved = true;
                progress.fetch_add(1, Relaxed);
            }
            done &= pc[p] == part.steps.len();
        }
        if done {
            break;
        }
        if !moved {
            // The step lists wait on each other: a bug in them, not a runtime condition.
            return Err((
                0,
                StepError::Fabric(FabricError::KernelFailed {
                    chip: c.chips[0],
                    reason: format!(
                        "{}: the line's step lists cannot proceed (at steps {pc:?})",
                        c.name
                    ),
                }),
            ));
        }
    }
    Ok(())
}
