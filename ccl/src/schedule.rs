//! Who runs a collective's steps. Every chip's kernel builds the same step list either way
//! (`crate::kernels::execute`), and every step does the same arithmetic on the same operands in
//! the same order, so the runner never changes a bit; it changes only which threads carry
//! the line's steps out, and so the context switches and cores a collective costs.
//!
//! - [`Runner::OwnThreads`] (`own_thread`): each chip's dispatcher runs its own list after a
//!   handshake with its neighbours; waits block on fabric semaphores. Large ring slots share
//!   memory, the reader crediting the writer (`own_thread::Credits`).
//! - [`Runner::OneThread`] (`meeting`, `one_thread`): each chip's kernel hands its part to the
//!   collective's meeting; the last to arrive runs every chip's list, each step as soon as
//!   what it receives was sent. One sleep and one wake per chip instead of a chain of
//!   wake-ups per step; a launch whose steps write the whole output may return at once
//!   (`Launched::Deferred`).
//! - [`Runner::TwoThreads`] (`meeting`, `two_threads`, `helper`): the same meeting, its line
//!   run by the arriving thread and ccl's helper thread, each taking whichever part has a
//!   step ready.
//!
//! [`runner`] is the one table of when each applies; the limits it reads, and those of the
//! runners' own choices (slot sharing, spinning), are the constants below, each with its
//! reason. The figures behind them are in `docs/performance.md` ("The figures behind the
//! limits").

mod helper;
pub(crate) mod meeting;
mod one_thread;
pub(crate) mod own_thread;
mod two_threads;

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use ttmesh_fabric::Fabric;

/// Which thread runs a collective's steps (the override tests and benchmarks use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepRunner {
    /// Small collectives together, large ones on each chip's own thread (the default).
    BySize,
    /// Always every chip's steps on one thread.
    Together,
    /// Always each chip's steps on its own dispatcher thread.
    OwnThreads,
}

/// The runner a collective's steps get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Runner {
    OneThread,
    TwoThreads,
    OwnThreads,
}

// ---------------------------------------------------------------------------------------
// The limits. Input sizes are bytes per chip.
// ---------------------------------------------------------------------------------------

/// Up to which input a line runs together (one or two threads) rather than on its chips' own
/// threads, by line length: `(longest line, alone, paired)`, `alone` when no second thread
/// is available, `paired` when the helper thread takes half the line. One thread doing every
/// chip's work has no context switch at all (a small all_reduce's launches even run on the
/// host's thread); it loses once the work outgrows the switches per step that own threads
/// cost and the second core they add. A second thread moves that point up (to 1-2 MiB), less
/// far on 8 chips, where a ring's slots already share memory on own threads. Only for
/// collectives whose launch may defer; see `WAITING_BYTES_PER_CHIP` for the others.
const TOGETHER_UP_TO: [(usize, usize, usize); 4] = [
    // chips    alone      paired
    (2, 256 << 10, 2 << 20),
    (4, 256 << 10, 2 << 20),
    (8, 256 << 10, 1 << 20),
    (usize::MAX, 512 << 10, 2 << 20),
];

/// Collectives whose launch still waits for the line (an all_gather or reduce_scatter that
/// writes its output after the steps, on the chip's thread) pay a sleep and a wake per chip
/// together, so they run together up to this much input per chip of the line.
const WAITING_BYTES_PER_CHIP: usize = 6 << 10;

/// Input from which a line that runs together runs on two threads: below it the second
/// thread costs more than the second core gives, and in decode (60 all_reduces of 36 KiB per
/// token on t3k) a paired small collective multiplied context switches and left the helper
/// spinning beside the dispatchers.
const PAIR_MIN_INPUT: usize = 64 << 10;

/// How many slots' worth of memory a line that runs together writes its slots into.
const SLOT_REGIONS: usize = 4;

/// Slot bytes a chip's steps write, from which its slots share memory when the line runs
/// together: below, holding writes back costs more than the cache saves.
const ALIAS_MIN_SLOT_BYTES: u64 = 192 << 10;

/// Lines longer than this that run on one thread share their slots' memory at every size: a
/// small collective's per-step cost there is mostly writes missing the cache (32 chips'
/// slots, inputs and outputs are ~4 MiB at 36 KiB), and one thread keeps the held-back
/// writes cheap; 8 chips' working set fits the cache.
const ALIAS_LONG_ALONE: usize = 8;

/// Regions a ring's slots share on own threads: slot `s` lands in slot `s % REGIONS`'s
/// memory. The fewest that cannot deadlock (see `own_thread`), and faster than 3.
pub(crate) const OWN_THREAD_REGIONS: usize = 2;

/// Slots smaller than this keep their own memory on own threads: a credit is a fabric message
/// and a wait per piece, which pays only where the slots are a real part of what the cache
/// must hold.
const OWN_THREAD_MIN_SLOT_BYTES: u64 = 32 << 10;

/// Checks a semaphore wait makes before sleeping when every chip's thread has a core of its
/// own: the peer that will raise the semaphore is running, and a sleep only adds a wake-up to
/// the line's critical path (when threads outnumber cores, spinning takes the core from it).
const SPINS_WHEN_CORES_SUFFICE: u32 = 4096;

// ---------------------------------------------------------------------------------------
// The table.
// ---------------------------------------------------------------------------------------

/// The runner for a collective with `input_bytes` per chip on a line of `n`; `defers`: its
/// steps write the whole output, so its launch may hand its part over and return;
/// `line_is_local`: this process holds every chip of the line (on a big mesh over MPI ranks
/// a line with chips elsewhere runs on own threads, whose steps touch only their own chip's
/// memory and the fabric).
///
/// | collective | line | runs together (one or two threads) up to | on two threads from |
/// |---|---|---|---|
/// | launch waits for the line | any n | `n x WAITING_BYTES_PER_CHIP` | `PAIR_MIN_INPUT` |
/// | launch may defer | by n | `TOGETHER_UP_TO` (alone / paired) | `PAIR_MIN_INPUT` |
/// | line with chips held elsewhere | any | never | never |
///
/// and on each chip's own thread above. Two threads need a second core and the helper thread
/// running. The override (`set_step_runner`, `TTMESH_CCL_RUNNER`) forces together or own
/// threads at every size; together, the size still picks one thread or two.
pub(crate) fn runner(input_bytes: usize, n: usize, defers: bool, line_is_local: bool) -> Runner {
    if !runs_together(input_bytes, n, defers, line_is_local) {
        return Runner::OwnThreads;
    }
    match pairs(input_bytes, n) {
        true => Runner::TwoThreads,
        false => Runner::OneThread,
    }
}

/// True if the line runs together (`runner` is not `OwnThreads`), asked on the dispatch path.
pub(crate) fn runs_together(
    input_bytes: usize,
    n: usize,
    defers: bool,
    line_is_local: bool,
) -> bool {
    if !line_is_local {
        return false;
    }
    match step_runner() {
        StepRunner::BySize => input_bytes <= together_limit(n, defers, pairs(PAIR_MIN_INPUT, n)),
        StepRunner::Together => true,
        StepRunner::OwnThreads => false,
    }
}

/// Input per chip up to which a line of `n` runs together by size; `paired`: a second thread
/// would join it.
fn together_limit(n: usize, defers: bool, paired: bool) -> usize {
    if !defers {
        return n * WAITING_BYTES_PER_CHIP;
    }
    let (_, alone, with_helper) = TOGETHER_UP_TO
        .iter()
        .find(|&&(chips, _, _)| n <= chips)
        .copied()
        .unwrap_or(TOGETHER_UP_TO[TOGETHER_UP_TO.len() - 1]);
    match paired {
        true => with_helper,
        false => alone,
    }
}

/// True if a line of `n` that runs together runs on two threads.
fn pairs(input_bytes: usize, n: usize) -> bool {
    n >= 2 && input_bytes >= PAIR_MIN_INPUT && two_threads::available()
}

/// Checks a chip's semaphore wait makes before sleeping, on a line of `n` chips.
pub(crate) fn wait_spins(n: usize) -> u32 {
    let default = Fabric::default_semaphore_spins();
    match n <= ttmesh_chip::device::host_cores() {
        true => default.max(SPINS_WHEN_CORES_SUFFICE),
        false => default,
    }
}

// ---------------------------------------------------------------------------------------
// The override.
// ---------------------------------------------------------------------------------------

/// 0: unset (read `TTMESH_CCL_RUNNER` on first use), else `StepRunner as u8 + 1`.
static RUNNER: AtomicU8 = AtomicU8::new(0);

/// Chooses the step runner for the whole process (tests and benchmarks compare them).
pub fn set_step_runner(r: StepRunner) {
    RUNNER.store(r as u8 + 1, Relaxed);
}

/// The override in force: `set_step_runner`'s, else the environment's.
fn step_runner() -> StepRunner {
    let mut v = RUNNER.load(Relaxed);
    if v == 0 {
        let _ = RUNNER.compare_exchange(0, runner_from_env() as u8 + 1, Relaxed, Relaxed);
        v = RUNNER.load(Relaxed);
    }
    match v {
        1 => StepRunner::BySize,
        2 => StepRunner::Together,
        _ => StepRunner::OwnThreads,
    }
}

/// `TTMESH_CCL_RUNNER`, as `ttmesh_settings` read it (`together` | `own`; unset: by size).
fn runner_from_env() -> StepRunner {
    match ttmesh_settings::settings().ccl_runner {
        ttmesh_settings::CclRunner::Together => StepRunner::Together,
        ttmesh_settings::CclRunner::OwnThreads => StepRunner::OwnThreads,
        ttmesh_settings::CclRunner::BySize => StepRunner::BySize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_each_line_its_limit() {
        const KIB: usize = 1 << 10;
        const MIB: usize = 1 << 20;
        // (chips, alone, paired), as measured (docs/performance.md).
        let rows = [
            (1, 256 * KIB, 256 * KIB),
            (2, 256 * KIB, 2 * MIB),
            (3, 256 * KIB, 2 * MIB),
            (4, 256 * KIB, 2 * MIB),
            (5, 256 * KIB, MIB),
            (8, 256 * KIB, MIB),
            (9, 512 * KIB, 2 * MIB),
            (32, 512 * KIB, 2 * MIB),
        ];
        for (n, alone, paired) in rows {
            // One chip has no second thread to pair with (`pairs` needs two).
            let paired = if n < 2 { alone } else { paired };
            assert_eq!(together_limit(n, true, false), alone, "{n} chips alone");
            if n >= 2 {
                assert_eq!(together_limit(n, true, true), paired, "{n} chips paired");
            }
            // A launch that waits for the line: 6 KiB per chip of it, paired or not.
            assert_eq!(
                together_limit(n, false, true),
                n * 6 * KIB,
                "{n} chips waiting"
            );
        }
    }
}
