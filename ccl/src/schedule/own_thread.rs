//! Each chip's steps on its own dispatcher thread: a handshake with the neighbours it writes
//! into, then its list in order, every receive a blocking semaphore wait.
//!
//! Slot memory is shared here too, the counterpart of `one_thread::alias_slots` for large
//! ring collectives.
//!
//! A ring's reduce writes one slot per step into the next chip, and no later step reads a
//! slot again, so a 16 MiB all_reduce on 8 chips left 14 MiB of slots per chip for the host's
//! cache to hold beside the inputs and outputs (~370 MiB touched per collective). Here slots
//! `s` and `s + REGIONS` share memory. A one-thread runner knows when a slot was read; chips
//! on their own threads do not, so the reader says so: after reading a piece of slot `s` it
//! raises semaphore `SEM_FREE_BASE + s + REGIONS` on the chip that wrote it (a fabric atomic
//! increment, so it is counted in the link statistics and faults can drop it), and the
//! writer takes that credit before writing the same piece of slot `s + REGIONS`. Every
//! credit sent is taken within the collective, so no semaphore carries over to the next.
//!
//! Why it cannot deadlock with `REGIONS >= 2`: a writer waiting at slot `s` waits for its
//! neighbour's read of slot `s - REGIONS`, which that neighbour does at its step for slot
//! `s - REGIONS + 1`; following the waits round the ring the slot index falls by at least
//! `REGIONS - 1` per hop, so the chain ends at the first slots, which wait for nothing.
//! The data and its arithmetic are untouched, so the bits are the same either way.

use ttmesh_chip::program::Launched;
use ttmesh_chip::ChipError;

use super::{OWN_THREAD_MIN_SLOT_BYTES as MIN_SLOT_BYTES, OWN_THREAD_REGIONS as REGIONS};
use crate::kernels::chip_io::Local;
use crate::kernels::execute::{Side, Step};
use crate::kernels::work::Work;
use crate::kernels::{Run, SEM_FREE_BASE};

/// Runs this chip's `steps` on `work` here, after the handshake (`writes_left`: the steps
/// write into the left neighbour too). Large ring slots share memory, the reader crediting
/// the writer (`plan`).
pub(crate) fn run(
    run: &Run,
    work: &mut Work,
    steps: Vec<Step>,
    writes_left: bool,
) -> Result<Launched, ChipError> {
    let ring = run.k.topology == crate::Topology::Ring;
    let credits = plan(&steps, ring, run.ep.slots.map.page_size);
    let shared;
    let ep = match credits {
        Some(_) => {
            shared = run.endpoint(Some(REGIONS))?;
            &shared
        }
        None => &run.ep,
    };
    run.handshake(writes_left, true)?;
    let mem = Local::Memory(run.ctx.memory);
    for (i, s) in steps.into_iter().enumerate() {
        if let Some(sem) = credits.as_ref().and_then(|c| c.before(i)) {
            let taken = run
                .fabric
                .wait_semaphore_spinning(ep.me, sem, 1, run.timeout, ep.spins);
            taken.map_err(|e| run.fail(e))?;
        }
        let done = ep.step(s, work, run.fabric, mem, run.timeout);
        done.map_err(|e| run.step_error(e))?;
        if let Some((side, sem)) = credits.as_ref().and_then(|c| c.after(i)) {
            let given = ep.senders[0].atomic_inc(ep.neighbour(side), sem, 1);
            given.map_err(|e| run.fail(e))?;
        }
    }
    ep.flush(run.timeout).map_err(|e| run.fail(e))?;
    Ok(Launched::Done)
}

/// Which steps of one chip's list take a credit before they write a slot, and which give one
/// after they read a slot.
pub(crate) struct Credits {
    /// Per step: the semaphore to take one from (on this chip) before the step.
    take: Vec<Option<u32>>,
    /// Per step: the neighbour to give a credit to after the step, and its semaphore.
    give: Vec<Option<(Side, u32)>>,
}

impl Credits {
    /// The semaphore step `i` takes a credit from before it runs, if any.
    pub(crate) fn before(&self, i: usize) -> Option<u32> {
        self.take.get(i).copied().flatten()
    }

    /// The neighbour and semaphore step `i` gives a credit to once it has run, if any.
    pub(crate) fn after(&self, i: usize) -> Option<(Side, u32)> {
        self.give.get(i).copied().flatten()
    }
}

/// The credits for one chip's `steps` when its slots (of `slot_bytes` each) can share memory,
/// or None when they keep their own: not a ring, slots too small, slot writes in both
/// directions, received blocks kept in their slots (`TakeBlock`) or read by a later step
/// (`Hold`), or a slot's pieces written or read out of order (a credit covers the pieces
/// before it).
pub(crate) fn plan(steps: &[Step], ring: bool, slot_bytes: u64) -> Option<Credits> {
    if !ring || slot_bytes < MIN_SLOT_BYTES {
        return None;
    }
    let keeps = |s: &Step| matches!(s, Step::TakeBlock { .. } | Step::Hold { .. });
    if steps.iter().any(keeps) {
        return None;
    }
    let mut sides = steps
        .iter()
        .filter_map(|s| s.writes_slot().map(|(side, _)| side));
    let out = sides.next()?;
    if sides.any(|s| s != out) {
        return None;
    }
    let slots = 1 + steps
        .iter()
        .filter_map(|s| s.writes_slot().map(|(_, slot)| slot).or(s.reads_slot()))
        .max()?;
    if slots <= REGIONS {
        return None;
    }
    // The k-th write into (read of) each slot must be its piece k.
    let (mut written, mut read) = (vec![0usize; slots], vec![0usize; slots]);
    for s in steps {
        if let Some((_, slot)) = s.writes_slot() {
            (s.piece() == Some(written[slot])).then_some(())?;
            written[slot] += 1;
        }
        if let Some(slot) = s.reads_slot() {
            (s.piece() == Some(read[slot])).then_some(())?;
            read[slot] += 1;
        }
    }
    // Piece k of slot s overwrites piece k of slot s - REGIONS, if that slot has one.
    let credits = |pieces: &[usize], s: usize| match s >= REGIONS {
        true => pieces[s].min(pieces[s - REGIONS]),
        false => 0,
    };
    let from = match out {
        Side::Left => Side::Right,
        Side::Right => Side::Left,
    };
    let (mut nth_write, mut nth_read) = (vec![0usize; slots], vec![0usize; slots]);
    let mut take = Vec::with_capacity(steps.len());
    let mut give = Vec::with_capacity(steps.len());
    for s in steps {
        take.push(s.writes_slot().and_then(|(_, slot)| {
            let k = nth_write[slot];
            nth_write[slot] += 1;
            (k < credits(&written, slot)).then_some(SEM_FREE_BASE + slot as u32)
        }));
        give.push(s.reads_slot().and_then(|slot| {
            let k = nth_read[slot];
            nth_read[slot] += 1;
            let next = slot + REGIONS;
            (next < slots && k < credits(&read, next))
                .then_some((from, SEM_FREE_BASE + next as u32))
        }));
    }
    Some(Credits { take, give })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reduce(from: Option<usize>, piece: usize, to: usize) -> Step {
        Step::Reduce {
            from,
            chunk: 0,
            piece,
            to: Some((Side::Right, to)),
        }
    }

    /// A ring reduce of `slots` hops of `pieces` pieces each, as one chip's list has it.
    fn ring_list(slots: usize, pieces: usize) -> Vec<Step> {
        let mut v = Vec::new();
        for s in 0..slots {
            for q in 0..pieces {
                v.push(reduce(s.checked_sub(1), q, s));
            }
        }
        for q in 0..pieces {
            v.push(Step::ReduceOut {
                from: Some(slots - 1),
                chunk: 0,
                piece: q,
            });
        }
        v
    }

    #[test]
    fn every_credit_given_is_taken_and_only_slots_past_the_regions_wait() {
        let steps = ring_list(7, 2);
        let c = plan(&steps, true, 1 << 20).expect("a large ring shares");
        let taken: Vec<u32> = (0..steps.len()).filter_map(|i| c.before(i)).collect();
        let mut given: Vec<u32> = (0..steps.len())
            .filter_map(|i| c.after(i).map(|g| g.1))
            .collect();
        // Writes into slots 2..7 wait, two pieces each; reads of slots 0..5 free them.
        assert_eq!(taken.len(), 10);
        given.sort();
        let mut t = taken.clone();
        t.sort();
        assert_eq!(t, given);
        assert!(taken.iter().all(|&s| s >= SEM_FREE_BASE + REGIONS as u32));
        assert!((0..steps.len()).all(|i| c.after(i).is_none_or(|g| g.0 == Side::Left)));
        // Step i writes slot i / 2: piece q of slot s waits for piece q of slot s - 2.
        assert_eq!(c.before(4), Some(SEM_FREE_BASE + 2));
        assert_eq!(c.before(3), None);
        // Step 2 reads slot 0 piece 0 (and writes slot 1): it frees slot 2.
        assert_eq!(c.after(2), Some((Side::Left, SEM_FREE_BASE + 2)));
    }

    #[test]
    fn credits_follow_the_shorter_of_two_slots() {
        // Writes: slot 3 has one piece, slot 1 two, so only piece 0 of slot 3 waits. Reads
        // (a reader's list need not mirror its own writes): slot 2 once, so one credit frees
        // it, and slot 3 never, so the reads of slot 1 free nothing.
        let mut steps = vec![reduce(None, 0, 0), reduce(None, 1, 0)];
        steps.extend([reduce(Some(0), 0, 1), reduce(Some(0), 1, 1)]);
        steps.extend([reduce(Some(1), 0, 2), reduce(Some(1), 1, 2)]);
        steps.push(reduce(Some(2), 0, 3));
        let c = plan(&steps, true, 1 << 20).expect("shares");
        let taken: Vec<usize> = (0..steps.len())
            .filter(|&i| c.before(i).is_some())
            .collect();
        let given: Vec<usize> = (0..steps.len()).filter(|&i| c.after(i).is_some()).collect();
        assert_eq!(taken, vec![4, 5, 6]);
        assert_eq!(given, vec![2]);
    }

    #[test]
    fn small_slots_lines_both_ways_and_kept_blocks_keep_their_memory() {
        let steps = ring_list(7, 2);
        assert!(plan(&steps, true, 16 << 10).is_none());
        assert!(plan(&steps, false, 1 << 20).is_none());
        let mut both = steps.clone();
        both[0] = Step::Reduce {
            from: None,
            chunk: 0,
            piece: 0,
            to: Some((Side::Left, 0)),
        };
        assert!(plan(&both, true, 1 << 20).is_none());
        let mut kept = steps.clone();
        kept.push(Step::Hold { slot: 3 });
        assert!(plan(&kept, true, 1 << 20).is_none());
        let mut swapped = steps;
        swapped.swap(0, 1);
        assert!(plan(&swapped, true, 1 << 20).is_none());
    }
}
