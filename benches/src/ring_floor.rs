//! The ring floor: a plain ring all_reduce over host arrays, with no emulation at all, timed
//! beside the emulated collectives. It shows what this host itself allows.
//!
//! Each of `n` "chips" is a bf16 input, a bf16 output and two partial-sum buffers. The data
//! takes the path a ring all_reduce takes on hardware, and the memory passes are the ones an
//! emulation that really moves the bytes cannot avoid:
//! - Reduce-scatter, `n - 1` hops. Chunk `k`'s partial sum starts on chip `k + 1` and travels
//!   round the ring. Each hop reads the chip's input and the partial that arrived, and writes
//!   the sum, rounded to bf16, where the next chip receives it. Chip `k` adds the last input
//!   straight into its output.
//! - All-gather, `n - 1` hops. Each hop copies a finished chunk from one chip's output into the
//!   next chip's output.
//!
//! Every hop of a step runs before any hop of the next, like chips in lockstep: one thread per
//! core, each pinned to its core, takes a share of the chunks, and the threads meet at a
//! barrier after every hop (`HopBarrier`: spin, then yield, then sleep). There are no fabric
//! messages,
//! semaphores, page tables, bank locks or dispatchers: the emulated collective's time beyond
//! this floor is what the emulation costs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

// Each hop's sum is the emulation's own (rounded by the CPU's bf16 conversion where it has
// one), so the floor is as fast as this host allows and differs only in what surrounds it.
use ttmesh_chip::format::sum_bf16;

/// `n` chips' buffers for one ring all_reduce of `elems` bf16 elements per chip.
pub struct RingFloor {
    n: usize,
    /// Chunk `k` is elements `bounds[k]..bounds[k + 1]` of every buffer.
    bounds: Vec<usize>,
    inputs: Vec<Vec<u16>>,
    outputs: Vec<Vec<u16>>,
    /// Per chunk: where its partial sum arrives, on alternate hops (a hop reads one while
    /// writing the other, as a chip reads one slot while its neighbour fills the next).
    partials: Vec<[Vec<u16>; 2]>,
}

impl RingFloor {
    /// Buffers for `n` chips (at least 1) of `elems` elements each; inputs are seeded values
    /// in [-0.5, 0.5), different on every chip.
    pub fn new(n: usize, elems: usize, seed: u64) -> RingFloor {
        let n = n.max(1);
        let bounds: Vec<usize> = (0..=n).map(|k| k * elems / n).collect();
        let inputs = (0..n)
            .map(|c| random_bf16(elems, seed ^ (c as u64 + 1).wrapping_mul(0x9E37_79B9)))
            .collect();
        let partials = bounds
            .windows(2)
            .map(|w| [vec![0; w[1] - w[0]], vec![0; w[1] - w[0]]])
            .collect();
        RingFloor {
            n,
            bounds,
            inputs,
            outputs: vec![vec![0; elems]; n],
            partials,
        }
    }

    /// Chip `c`'s input.
    pub fn input(&self, c: usize) -> &[u16] {
        &self.inputs[c]
    }

    /// Chip `c`'s output (the sum of every input after `run`).
    pub fn output(&self, c: usize) -> &[u16] {
        &self.outputs[c]
    }

    /// `times` ring all_reduces in a row; each leaves every chip's output the bf16 sum of all
    /// inputs. `threads` (at least 1, the caller's among them) share the chunks and meet at a
    /// `HopBarrier` after every hop, so on an idle host no step waits for a thread to wake.
    /// Fails only if a
    /// barrier waits longer than `BARRIER_TIMEOUT` (a thread that never arrives).
    pub fn run(&mut self, times: usize, threads: usize) -> Result<(), String> {
        let n = self.n;
        let (inputs, bounds) = (&self.inputs, &self.bounds);
        let mut columns = chunk_columns(&mut self.outputs, bounds);
        let per_thread = n.div_ceil(threads.clamp(1, n));
        let groups = columns
            .chunks_mut(per_thread)
            .zip(self.partials.chunks_mut(per_thread))
            .enumerate()
            .map(|(g, (cols, parts))| Group {
                first: g * per_thread,
                cols,
                parts,
            });
        let barrier = HopBarrier::new(n.div_ceil(per_thread));
        std::thread::scope(|scope| {
            let mut groups = groups;
            let Some(mine) = groups.next() else {
                return Ok(()); // no chunks: `new` makes at least one chip, so never
            };
            let helpers: Vec<_> = groups
                .enumerate()
                .map(|(i, g)| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        let _pinned = Pinned::to_nth_cpu(i + 1);
                        g.run(times, n, (inputs, bounds), barrier)
                    })
                })
                .collect();
            let result = {
                let _pinned = Pinned::to_nth_cpu(0);
                mine.run(times, n, (inputs, bounds), &barrier)
            };
            helpers.into_iter().fold(result, |r, h| {
                let other = h
                    .join()
                    .unwrap_or_else(|_| Err("a ring floor thread panicked".into()));
                r.and(other)
            })
        })
    }
}

/// The calling thread held to one CPU until dropped, when it gets its old CPU set back. The
/// floor's threads each take a core of their own: a new thread may start on its parent's
/// core, and two threads meeting at every hop on one core ran small all_reduces 50 times
/// slower. On other systems, or when the CPU set cannot be changed, nothing is pinned.
struct Pinned {
    #[cfg(target_os = "linux")]
    was: Option<nix::sched::CpuSet>,
}

impl Pinned {
    /// Pins to the `nth` CPU this thread may run on (wrapping round).
    fn to_nth_cpu(nth: usize) -> Pinned {
        #[cfg(target_os = "linux")]
        {
            use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
            use nix::unistd::Pid;
            let Ok(was) = sched_getaffinity(Pid::from_raw(0)) else {
                return Pinned { was: None };
            };
            let allowed: Vec<usize> = (0..CpuSet::count())
                .filter(|&c| was.is_set(c).unwrap_or(false))
                .collect();
            let Some(&cpu) = allowed.get(nth % allowed.len().max(1)) else {
                return Pinned { was: None };
            };
            let mut one = CpuSet::new();
            let pinned = one.set(cpu).is_ok() && sched_setaffinity(Pid::from_raw(0), &one).is_ok();
            Pinned {
                was: pinned.then_some(was),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = nth;
            Pinned {}
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(was) = self.was.take() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &was);
        }
    }
}

/// How long a thread of the floor waits at a barrier before it gives up: a whole all_reduce
/// of the benchmark's sizes takes well under a second.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(30);

/// Pause-hinted checks of a barrier before a waiter starts yielding its core: a few
/// microseconds, longer than a small hop takes on the other core.
const SPINS_BEFORE_YIELD: u32 = 4096;

/// How long a waiter yields before it sleeps: longer than a hop of the benchmark's sizes
/// takes on an idle host (so no wake-up is paid there), short enough that a thread whose core
/// other work wants gives it back soon.
const YIELD_BEFORE_SLEEP: Duration = Duration::from_millis(2);

/// One thread's share of the chunks: `cols[j]` and `parts[j]` are chunk `first + j`'s.
struct Group<'a, 'b> {
    first: usize,
    cols: &'a mut [Vec<&'b mut [u16]>],
    parts: &'a mut [[Vec<u16>; 2]],
}

impl Group<'_, '_> {
    fn run(
        self,
        times: usize,
        n: usize,
        (inputs, bounds): (&[Vec<u16>], &[usize]),
        barrier: &HopBarrier,
    ) -> Result<(), String> {
        for _ in 0..times {
            for hop in 0..n {
                // Chunk k's hop `hop` runs on chip k + 1 + hop; the last is chip k itself.
                for (j, (outs, [p0, p1])) in
                    self.cols.iter_mut().zip(self.parts.iter_mut()).enumerate()
                {
                    let k = self.first + j;
                    let chip = (k + 1 + hop) % n;
                    let input = &inputs[chip][bounds[k]..bounds[k + 1]];
                    let (arrived, next) = if hop % 2 == 0 { (p1, p0) } else { (p0, p1) };
                    match hop {
                        _ if n == 1 => outs[chip].copy_from_slice(input),
                        0 => next.copy_from_slice(input),
                        _ if hop == n - 1 => sum_bf16(outs[chip], (input, arrived)),
                        _ => sum_bf16(next, (input, arrived)),
                    }
                }
                barrier.wait()?;
            }
            for hop in 0..n.saturating_sub(1) {
                // Chunk k leaves chip k on hop 0 and reaches chip k - 1 on the last.
                for (j, outs) in self.cols.iter_mut().enumerate() {
                    let from = (self.first + j + hop) % n;
                    let (src, dst) = two_mut(outs, from, (from + 1) % n);
                    dst.copy_from_slice(src);
                }
                barrier.wait()?;
            }
        }
        Ok(())
    }
}

/// A barrier whose waiters spin (with the CPU's pause hint), then yield, then sleep: the
/// floor's threads are one per core, and on an idle host a sleeping waiter's wake-up would
/// cost more than a small hop; on a busy one (other work on the floor's cores) spinning and
/// yielding would hold a core the late thread needs, so a long wait sleeps.
struct HopBarrier {
    parties: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    /// Sleepers wait here for `generation` to move.
    lock: Mutex<()>,
    moved: Condvar,
}

impl HopBarrier {
    fn new(parties: usize) -> HopBarrier {
        HopBarrier {
            parties,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            lock: Mutex::new(()),
            moved: Condvar::new(),
        }
    }

    fn wait(&self) -> Result<(), String> {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parties {
            self.arrived.store(0, Ordering::Relaxed);
            // Moved under the lock, so a waiter that checked and is about to sleep cannot
            // miss the notification.
            let guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.generation.fetch_add(1, Ordering::Release);
            drop(guard);
            self.moved.notify_all();
            return Ok(());
        }
        let moved = || self.generation.load(Ordering::Acquire) != generation;
        for _ in 0..SPINS_BEFORE_YIELD {
            if moved() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        // Then yield: two of the floor's threads can share a core until the scheduler moves
        // one (a new thread starts beside its parent), and spinning would hold the core the
        // other needs for a whole time slice.
        let yielding = Instant::now();
        while yielding.elapsed() < YIELD_BEFORE_SLEEP {
            if moved() {
                return Ok(());
            }
            std::thread::yield_now();
        }
        let deadline = Instant::now() + BARRIER_TIMEOUT;
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while !moved() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "ring floor: a barrier waited {BARRIER_TIMEOUT:?} for {} threads",
                    self.parties
                ));
            }
            guard = match self.moved.wait_timeout(guard, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        Ok(())
    }
}

/// `outputs` cut into chunk columns: `columns[k][c]` is chunk `k` of chip `c`'s output.
fn chunk_columns<'a>(outputs: &'a mut [Vec<u16>], bounds: &[usize]) -> Vec<Vec<&'a mut [u16]>> {
    let n = bounds.len() - 1;
    let mut columns: Vec<Vec<&mut [u16]>> = (0..n).map(|_| Vec::with_capacity(n)).collect();
    for out in outputs.iter_mut() {
        let mut rest: &mut [u16] = out;
        for (k, w) in bounds.windows(2).enumerate() {
            let (chunk, tail) = std::mem::take(&mut rest).split_at_mut(w[1] - w[0]);
            columns[k].push(chunk);
            rest = tail;
        }
    }
    columns
}

/// Shared `v[a]` and exclusive `v[b]` (`a != b`).
fn two_mut<'a>(v: &'a mut [&mut [u16]], a: usize, b: usize) -> (&'a [u16], &'a mut [u16]) {
    if a < b {
        let (lo, hi) = v.split_at_mut(b);
        (&*lo[a], &mut *hi[0])
    } else {
        let (lo, hi) = v.split_at_mut(a);
        (&*hi[0], &mut *lo[b])
    }
}

/// `len` bf16 values in [-0.5, 0.5) from a small LCG.
fn random_bf16(len: usize, seed: u64) -> Vec<u16> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let unit = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            (unit.to_bits() >> 16) as u16
        })
        .collect()
}

/// Time of one ring all_reduce of `bytes` bytes of bf16 per chip on `n` chips, one thread per
/// host core: the median of five batches' means, the batches together sized to `budget` (3 to
/// 1000 runs each), after one untimed run that touches every buffer. The median, since a
/// spinning thread the host preempts stalls its batch for a whole time slice (one mean of
/// 4 KiB runs read 556 us against 1.4 us).
pub fn time_ring_floor(n: usize, bytes: usize, budget: Duration) -> Result<Duration, String> {
    const BATCHES: u32 = 5;
    let threads = std::thread::available_parallelism().map_or(2, |c| c.get());
    let mut floor = RingFloor::new(n, bytes / 2, 0x5EED);
    floor.run(1, threads)?;
    let probe = Instant::now();
    floor.run(1, threads)?;
    let probe = probe.elapsed().max(Duration::from_micros(1));
    let batch = budget / BATCHES;
    let times = (batch.as_secs_f64() / probe.as_secs_f64()).clamp(3.0, 1000.0) as u32;
    let mut means = Vec::with_capacity(BATCHES as usize);
    for _ in 0..BATCHES {
        let start = Instant::now();
        floor.run(times as usize, threads)?;
        means.push(start.elapsed() / times);
    }
    means.sort_unstable();
    Ok(means[means.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    /// Chunk k's sum in the ring's order (chip k + 1 first, chip k last), rounded after every
    /// add with `half`'s conversion, not the floor's own.
    fn ring_order_sum(f: &RingFloor, k: usize, i: usize) -> u16 {
        let n = f.n;
        let value = |c: usize| bf16::from_bits(f.input(c)[i]).to_f32();
        let mut sum = bf16::from_f32(value((k + 1) % n));
        for hop in 1..n {
            sum = bf16::from_f32(sum.to_f32() + value((k + 1 + hop) % n));
        }
        sum.to_bits()
    }

    #[test]
    fn every_chip_ends_with_the_ring_order_sum() {
        // Chunk counts that do and do not divide the length, a line of 1, and a long ring.
        for (n, elems) in [(1, 100), (2, 1024), (3, 1000), (8, 4096 + 5), (32, 3000)] {
            let mut f = RingFloor::new(n, elems, 42);
            // On 1, 2 and 3 threads, and twice in a row: the second run must not see the
            // first one's partials or outputs.
            for (threads, times) in [(1, 1), (2, 2), (3, 1)] {
                f.run(times, threads).unwrap();
                for k in 0..n {
                    for i in f.bounds[k]..f.bounds[k + 1] {
                        let want = ring_order_sum(&f, k, i);
                        for c in 0..n {
                            assert_eq!(f.output(c)[i], want, "n {n} chip {c} element {i}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_sum_is_not_the_input() {
        // Guards the check above against a floor that copies inputs around without adding.
        let mut f = RingFloor::new(4, 256, 7);
        f.run(1, 2).unwrap();
        let differs = (0..256)
            .filter(|&i| f.output(0)[i] != f.input(0)[i])
            .count();
        assert!(
            differs > 200,
            "only {differs} of 256 outputs differ from chip 0's input"
        );
    }
}
