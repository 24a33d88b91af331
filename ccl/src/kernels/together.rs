//! Running a whole line's steps on one thread. Each chip's kernel prepares its part (reads and
//! decodes its input on its own thread) and registers it at the collective's meeting; the last
//! to arrive runs every chip's step list, interleaved as the data allows, and hands each part
//! back; the others sleep meanwhile and finish their own part (writing their output). A
//! collective then costs one sleep and one wake per chip instead of a chain of wake-ups per
//! step. Every byte still goes through the fabric senders (packets, credits, link statistics
//! and faults are real) into the receivers' memory, and every receive still waits for its
//! semaphore; the runner only knows which slots were sent so it never waits on a step that
//! has not run.

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use ttmesh_chip::error::ForeignError;
use ttmesh_chip::program::Deferred;
use ttmesh_chip::ChipError;
use ttmesh_fabric::{Fabric, FabricError};

use super::chip_io::{Local, StepError};
use super::steps::{Endpoint, Side, Step, Work};

/// Which thread runs a collective's steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepRunner {
    /// Small collectives together, large ones on each chip's own thread (the default).
    BySize,
    /// Always every chip's steps on one thread.
    Together,
    /// Always each chip's steps on its own dispatcher thread.
    OwnThreads,
}

/// 0: unset (read `TTMESH_CCL_RUNNER` on first use), else `StepRunner as u8 + 1`.
static RUNNER: AtomicU8 = AtomicU8::new(0);

/// Chooses the step runner for the whole process (tests and benchmarks compare them).
pub fn set_step_runner(r: StepRunner) {
    RUNNER.store(r as u8 + 1, Relaxed);
}

fn step_runner() -> StepRunner {
    let mut v = RUNNER.load(Relaxed);
    if v == 0 {
        let r = match ttmesh_settings::settings().ccl_runner {
            ttmesh_settings::CclRunner::Together => StepRunner::Together,
            ttmesh_settings::CclRunner::OwnThreads => StepRunner::OwnThreads,
            ttmesh_settings::CclRunner::BySize => StepRunner::BySize,
        };
        let _ = RUNNER.compare_exchange(0, r as u8 + 1, Relaxed, Relaxed);
        v = RUNNER.load(Relaxed);
    }
    match v {
        1 => StepRunner::BySize,
        2 => StepRunner::Together,
        _ => StepRunner::OwnThreads,
    }
}

/// Input bytes per chip up to which a collective runs together: one thread doing all n chips'
/// work, with no context switch at all (a small all_reduce's launches even run on the host's
/// thread), beats n threads on a few cores until the work outgrows the switches those
/// threads cost per step and the second core they add. Measured on a 2-core host, all_reduce
/// with `TTMESH_CCL_RUNNER` forced each way (together / own threads, us): line-2 256 KiB
/// 130 / 157 and 1 MiB 748 / 555; line-4 256 KiB 266 / 336, 1 MiB even. Re-measured with
/// bf16 partials and the output-to-output gather: line-4 256 KiB 224-228 / 212-231, 1 MiB
/// 1094-1113 / 828-840.
const TOGETHER_MAX_INPUT: usize = 256 << 10;
/// On a line of 2, where the leaner data path tipped it (bf16 partials, the gather straight
/// into the other chip's output): line-2 512 KiB 157-167 / 233-299 us, 1 MiB 326-337 /
/// 382-398, 2 MiB 784-820 / 816-1089, 4 MiB 2.72-2.87 / 2.20-2.36 ms. Then chip memory took
/// its locks per chunk (the two threads had waited on each other's bank locks), and own
/// threads caught up (medians of 5): 512 KiB 163 / 218 us, 1 MiB 319 / 321, 2 MiB ~650 / 561.
/// With messages lent to the first hop, own threads pass (medians of 7): 384 KiB 116 / 126,
/// 512 KiB 150 / 155, 768 KiB 225 / 195, 1 MiB 289 / 244 us. Once the right end sent
/// before it reduced (`lists::line_reduce_steps`; medians of 5): 128 KiB 46 / 52, 256 KiB
/// 80 / 88, 384 KiB 114 / 95, 512 KiB 148 / 126 us.
const TOGETHER_MAX_INPUT_TWO: usize = 256 << 10;
/// The same on two threads (`pairs`; two / own threads, medians of 5-7): 512 KiB 85 / 109,
/// 768 KiB 131 / 140, 1 MiB 171 / 177 and 180 / 208, 1.5 MiB 266 / 285, 2 MiB 363 / 312 and
/// 378 / 345, 4 MiB 1069 / 756 us. With ccl's own helper thread in place of rayon's pool
/// (no second worker yielding on the line's cores; medians of 5 on a host short of memory
/// bandwidth): 1 MiB 424 / 466, 1.5 MiB 569 / 659, 2 MiB 894 / 1027, 3 MiB 1456 / 1450, 4
/// MiB 2129 / 3050 us (noisy).
const TOGETHER_MAX_INPUT_TWO_PAIRED: usize = 2 << 20;
/// The same when two threads run the line (`pairs`), on 8 chips: t3k 512 KiB 0.94-1.06 /
/// 1.30-1.33 ms, 1 MiB 2.6-2.8 / 2.8-3.1 ms, 4 MiB even, 16 MiB 83-105 / 75-78 ms. With
/// chip memory locked per chunk (medians, us): 512 KiB 591 / 793, 768 KiB 962 / 1033, 1 MiB
/// 1405 / 1363 and 1598 / 1465. With input reads hinted ahead and messages lent to the first
/// hop (medians of 5): 768 KiB 854 / 1297, 1 MiB 1090 / 1622, 1.5 MiB 1840 / 2154, 2 MiB 2770
/// / 2812, 4 MiB 6725 / 6850; 8 MiB 16.2 / 13.8 ms, 16 MiB 36.4 / 26.4 ms (smaller pieces
/// together were slower still: 16 MiB 37-41 ms with 256 or 64 KiB). With ccl's own helper
/// thread (medians of 5, a host short of memory bandwidth): 2 MiB 4.97 / 5.94 ms, 4 MiB 11.6
/// / 13.1 ms, 8 MiB 25.5 / 28.4 ms, 16 MiB 62.6 / 53.8 ms; 8 MiB had gone to own threads on
/// a faster host, so the line stopped at 4 MiB. Once a ring's slots shared memory on own
/// threads too (`sharing`; medians of 5-7, alternated): t3k 1 MiB 863 / 1221 us, 1.5 MiB
/// 1696 / 1390 us, 2 MiB 2.87 / 2.31 ms, 4 MiB 7.42 / 4.58 ms; line-8 (no sharing: its slot
/// writes go both ways) 2 MiB 2.62 / 2.48 ms, 4 MiB 6.13 / 5.31 ms. So 1 MiB.
const TOGETHER_MAX_INPUT_PAIRED: usize = 1 << 20;
/// And past 8 chips: galaxy 256 KiB 4.4-4.7 / 6.0-6.3 ms, 512 KiB and 1 MiB even then (one
/// thread alone: 128 KiB 3.5 / 5.6 ms, 256 KiB 11.8 / 9.1 ms, so half as far). Re-measured
/// with the leaner data path: 256 KiB 3.2-3.4 / 5.7-6.9 ms, 512 KiB 6.2-7.8 / 7.8-7.9 ms,
/// 1 MiB 12.1-12.9 / 13.6-14.4 ms. With input reads hinted ahead and messages lent to the
/// first hop (medians of 5): 512 KiB 6.4 / 7.8 ms, 2 MiB 14.8 / 17.3 ms, 4 MiB 27.8 / 31.8
/// ms; 8 MiB 83 / 60 ms (3 runs). With ccl's own helper thread: 4 MiB 54 / 67 ms, 8 MiB
/// 100 / 109 ms (medians of 5, a host short of memory bandwidth; kept at 4 MiB for the 8 MiB
/// figure before). With a ring's slots shared on own threads (`sharing`; medians of 5-7):
/// galaxy 1 MiB 6.05 / 6.61 ms, 2 MiB 9.47 / 9.98 ms, 3 MiB 14.3 / 13.7 ms, 4 MiB 28.2 / 21.6
/// ms. So 2 MiB.
const TOGETHER_MAX_INPUT_LONG: usize = 2 << 20;
/// Past 8 chips with no second thread (one thread alone measured half as far as two then).
const TOGETHER_MAX_INPUT_LONG_ALONE: usize = 512 << 10;

/// Lines of 3 or 4 chips on two threads, since chip memory takes its locks per chunk (the
/// two threads had parked on each other's bank locks before). line-4, medians of 3-5 (us;
/// two threads / one / own threads): 512 KiB 318 / 413 / 341, 1 MiB 638 / 923 / 833, 2 MiB
/// 1748 / 2939 / 1936 and 1704 / - / 1829, 3 MiB 2912 / - / 2909, 4 MiB 4044 / - / 3632;
/// line-3 1 MiB 432 / 475 (one thread).
const TOGETHER_MAX_INPUT_SHORT_PAIRED: usize = 2 << 20;

/// Input bytes per chip from which a line that runs together runs on two threads
/// (`pair.rs`): below it the second thread costs more than the second core gives (first
/// measured with a pool thread of rayon's, whose wake-up cost tens of microseconds).
/// Measured first (us, one thread / two): t3k 64 KiB 210-216 / 142-147, 256 KiB 765-772 /
/// 360-376; galaxy 128 KiB 4.06-4.14 / 2.23-3.03 ms; line-4 64 KiB 82 / 70. Line-2 lost then
/// (256 KiB 85 / 141): its right end reduced before it sent, so the two threads took turns.
/// With the line's steps in arrival order (`lists::line_reduce_steps`), line-2 wins too: 64
/// KiB 26.8 / 22.0, 256 KiB 77.6 / 48.0. Smaller collectives win alone as well (t3k 8 KiB
/// 49.1 / 44.2, 36 KiB 134 / 96; galaxy 36 KiB 837 / 559; line-4 36 KiB 51.7 / 40.8), but
/// not in decode: its 60 all_reduces of 36 KiB per token on t3k, paired, took the median
/// step from 40.2 to 43.8 ms (8 runs each) and its context switches from ~560 to ~3950 per
/// token (the pool's workers wake and sleep around every collective, among 8 dispatchers).
/// Nor reliably alone: an hour later the same t3k 36 KiB ran at 183-190 us paired against
/// 127-131 on one thread, and pairing only when the host's thread runs the line on an idle
/// mesh did no better (179-190 us, 93 once). Two threads at these sizes hang on where the
/// scheduler puts the pool's worker; one thread does not. With ccl's own helper (medians of
/// 5, us, alone / paired, a slow hour of the host): t3k 36 KiB 283 / 250, galaxy 36 KiB 1995
/// / 1823, line-2 36 KiB 35 / 43, line-4 36 KiB 87 / 92, t3k 4 KiB 54 / 72: no clear gain,
/// and in decode a paired small collective would leave the helper spinning beside the
/// dispatchers after each one.
const PAIR_MIN_INPUT: usize = 64 << 10;

/// True if a line of `n` that runs together should run on two threads (`pair.rs`).
pub(crate) fn pairs(input_bytes: usize, n: usize) -> bool {
    n >= 2 && input_bytes >= PAIR_MIN_INPUT && super::pair::available()
}

/// Collectives whose launch still waits for the line (an all_gather or reduce_scatter that
/// writes its output after the steps, on the chip's thread) pay a sleep and a wake per chip
/// together, so they keep the rule measured before launches could defer: input up to 6 KiB
/// per chip of the line (36 KiB on 8 chips and 256 KiB on 32 about even then; all_gather
/// on line-2 at 128 KiB per chip: 48-68 us on own threads, 73-104 us together).
const WAITING_BYTES_PER_CHIP: usize = 6 << 10;

/// True if a collective with `input_bytes` per chip on a line of `n` should run together;
/// `defers`: its launch hands its part over and returns (`meet_deferred`).
pub(crate) fn wanted(input_bytes: usize, n: usize, defers: bool) -> bool {
    let most = if !defers {
        n * WAITING_BYTES_PER_CHIP
    } else if n <= 2 {
        match pairs(PAIR_MIN_INPUT, n) {
            true => TOGETHER_MAX_INPUT_TWO_PAIRED,
            false => TOGETHER_MAX_INPUT_TWO,
        }
    } else if !pairs(PAIR_MIN_INPUT, n) {
        if n > 8 {
            TOGETHER_MAX_INPUT_LONG_ALONE
        } else {
            TOGETHER_MAX_INPUT
        }
    } else if n <= 4 {
        TOGETHER_MAX_INPUT_SHORT_PAIRED
    } else if n <= 8 {
        TOGETHER_MAX_INPUT_PAIRED
    } else {
        TOGETHER_MAX_INPUT_LONG
    };
    match step_runner() {
        StepRunner::BySize => input_bytes <= most,
        StepRunner::Together => true,
        StepRunner::OwnThreads => false,
    }
}

/// What one chip brings to the meeting and gets back.
pub(crate) struct Part {
    pub ep: Endpoint,
    /// Boxed so a line's parts stay small: the meeting keeps a vector of them, and a vector
    /// past 1 KiB sent glibc's malloc into `malloc_consolidate` at every collective (5% of a
    /// 4 KiB all_reduce on 2 chips).
    pub work: Box<Work>,
    pub steps: Vec<Step>,
}

enum Phase {
    Gathering,
    Running {
        runner: u32,
    },
    Done,
    /// A chip gave up waiting (timeout or abort): the meeting never runs.
    Abandoned,
}

struct State {
    parts: Vec<Option<Part>>,
    arrived: usize,
    phase: Phase,
    results: Vec<Option<Result<Part, ChipError>>>,
    /// When the runner finished (the deferred kernels' end).
    done_at: Option<Instant>,
    /// Chips asleep on the meeting's condvar. The runner wakes them only if there are any:
    /// a deferred launch's chip usually looks after the line is done, and a notify always
    /// costs a futex system call (5% of a 4 KiB all_reduce on 2 chips).
    sleepers: usize,
}

struct Meeting {
    state: Mutex<State>,
    cv: Condvar,
    /// Steps the runner has done: a waiter's timeout counts from the last progress.
    progress: Arc<AtomicU64>,
}

/// Open meetings by (fabric, collective). The Weak keeps the fabric's allocation, so its
/// address is not reused while an entry names it. Fx-hashed: every arrival looks it up.
type Registry = FxHashMap<(usize, u64), (Weak<Fabric>, Arc<Meeting>)>;

fn registry() -> MutexGuard<'static, Registry> {
    static MEETINGS: OnceLock<Mutex<Registry>> = OnceLock::new();
    MEETINGS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn lock(m: &Meeting) -> MutexGuard<'_, State> {
    m.state.lock().unwrap_or_else(|p| p.into_inner())
}

/// How often a sleeping chip looks whether the fabric was aborted (by a chip elsewhere).
const ABORT_POLL: Duration = Duration::from_millis(10);

/// The collective one kernel instance is part of.
pub(crate) struct Collective<'a> {
    pub fabric: &'a Arc<Fabric>,
    /// Identifies the collective (the same on every chip of the line).
    pub key: u64,
    pub name: &'static str,
    pub chips: &'a [u32],
    pub pos: usize,
    pub timeout: Duration,
    /// Run the line on two threads (`pair`): worth the helper thread from mid sizes up.
    pub pair: bool,
}

fn fault(chip: u32, name: &str, e: FabricError) -> ChipError {
    ChipError::KernelFault {
        kernel: name.into(),
        chip,
        source: ForeignError::new(e),
    }
}

/// Brings `part` to the meeting and returns it once every chip's steps have run.
pub(crate) fn meet(c: &Collective, part: Part) -> Result<Part, ChipError> {
    match arrive(c, part)? {
        Arrival::Ran(mine) => *mine,
        Arrival::Waiting(m, id) => wait(c, &m, id),
    }
}

/// What a chip's kernel gets back from `meet_deferred`.
pub(crate) enum Met {
    /// This chip arrived last and ran the whole line: its part, done.
    Ran(Box<Part>),
    /// The others have yet to arrive: the last of them runs this part too; the handle waits
    /// for it (bounded by the timeout) and tells when it is done.
    Deferred(Arc<dyn Deferred>),
}

/// Brings `part` to the meeting without waiting for the others: the kernel's launch returns,
/// and its chip's queue waits (`Deferred::wait`) only when its next command runs. A host
/// thread may therefore launch a whole line's kernels itself.
pub(crate) fn meet_deferred(c: &Collective, part: Part) -> Result<Met, ChipError> {
    Ok(match arrive(c, part)? {
        Arrival::Ran(mine) => Met::Ran(Box::new((*mine)?)),
        Arrival::Waiting(meeting, id) => Met::Deferred(Arc::new(Handle {
            meeting,
            id,
            fabric: c.fabric.clone(),
            key: c.key,
            name: c.name,
            chips: c.chips.to_vec(),
            pos: c.pos,
            timeout: c.timeout,
        })),
    })
}

/// A chip's place in a meeting it left before the line ran.
struct Handle {
    meeting: Arc<Meeting>,
    id: (usize, u64),
    fabric: Arc<Fabric>,
    key: u64,
    name: &'static str,
    chips: Vec<u32>,
    pos: usize,
    timeout: Duration,
}

impl Deferred for Handle {
    fn is_done(&self) -> bool {
        matches!(lock(&self.meeting).phase, Phase::Done | Phase::Abandoned)
    }

    fn wait(&self) -> Result<(), ChipError> {
        let c = Collective {
            fabric: &self.fabric,
            key: self.key,
            name: self.name,
            chips: &self.chips,
            pos: self.pos,
            timeout: self.timeout,
            pair: false,
        };
        let part = wait(&c, &self.meeting, self.id)?;
        super::pages::put_work(*part.work);
        Ok(())
    }

    fn done_at(&self) -> Option<Instant> {
        lock(&self.meeting).done_at
    }
}

enum Arrival {
    /// The last to arrive ran every chip's steps: this chip's result.
    Ran(Box<Result<Part, ChipError>>),
    Waiting(Arc<Meeting>, (usize, u64)),
}

/// Registers `part` at its meeting; the last to arrive runs the line.
fn arrive(c: &Collective, part: Part) -> Result<Arrival, ChipError> {
    let n = c.chips.len();
    let me = c.chips[c.pos];
    let id = (Arc::as_ptr(c.fabric) as usize, c.key);
    let meeting = {
        let mut reg = registry();
        // An abandoned meeting may linger until its waiter removes it: start a fresh one.
        let open = reg
            .get(&id)
            .filter(|(_, m)| !matches!(lock(m).phase, Phase::Abandoned))
            .map(|(_, m)| m.clone());
        let m = match open {
            Some(m) => m,
            None => {
                let m = Arc::new(Meeting {
                    state: Mutex::new(State {
                        parts: (0..n).map(|_| None).collect(),
                        arrived: 0,
                        phase: Phase::Gathering,
                        results: (0..n).map(|_| None).collect(),
                        done_at: None,
                        sleepers: 0,
                    }),
                    cv: Condvar::new(),
                    progress: Arc::new(AtomicU64::new(0)),
                });
                reg.insert(id, (Arc::downgrade(c.fabric), m.clone()));
                m
            }
        };
        let mut st = lock(&m);
        if st.parts[c.pos].is_some() {
            let reason = format!(
                "{} on line {:?}: chip {me} arrived twice at one collective (the chips' command streams diverged)",
                c.name, c.chips
            );
            return Err(fault(
                me,
                c.name,
                FabricError::KernelFailed { chip: me, reason },
            ));
        }
        st.parts[c.pos] = Some(part);
        st.arrived += 1;
        if st.arrived == n {
            // Complete: later arrivals start the next collective.
            reg.remove(&id);
            st.phase = Phase::Running { runner: me };
            let parts: Vec<Part> = st.parts.iter_mut().map(|p| p.take().unwrap()).collect();
            drop(st);
            drop(reg);
            let results = run_all(c, parts, &m.progress);
            let mut st = lock(&m);
            st.results = results.into_iter().map(Some).collect();
            st.phase = Phase::Done;
            st.done_at = Some(Instant::now());
            let mine = st.results[c.pos].take().unwrap();
            // A chip that goes to sleep later sees `Done` first, under this lock.
            let sleepers = st.sleepers;
            drop(st);
            if sleepers > 0 {
                m.cv.notify_all();
            }
            return Ok(Arrival::Ran(Box::new(mine)));
        }
        drop(st);
        m
    };
    Ok(Arrival::Waiting(meeting, id))
}

fn wait(c: &Collective, m: &Arc<Meeting>, id: (usize, u64)) -> Result<Part, ChipError> {
    let me = c.chips[c.pos];
    let mut deadline = Instant::now() + c.timeout;
    let mut seen = m.progress.load(Relaxed);
    let mut st = lock(m);
    loop {
        match st.phase {
            Phase::Done => {
                return st.results[c.pos].take().unwrap_or_else(|| {
                    let reason = format!("{}: chip {me}'s result was already taken", c.name);
                    Err(fault(
                        me,
                        c.name,
                        FabricError::KernelFailed { chip: me, reason },
                    ))
                })
            }
            Phase::Abandoned => {
                let e = c.fabric.failure().unwrap_or(FabricError::KernelFailed {
                    chip: me,
                    reason: format!("{} on line {:?} was abandoned", c.name, c.chips),
                });
                return Err(fault(me, c.name, e));
            }
            Phase::Gathering | Phase::Running { .. } => {}
        }
        let now = Instant::now();
        let gathering = matches!(st.phase, Phase::Gathering);
        if gathering {
            if let Some(e) = c.fabric.failure() {
                abandon(st, m, id);
                return Err(fault(me, c.name, e));
            }
        } else {
            let p = m.progress.load(Relaxed);
            if p != seen {
                seen = p;
                deadline = now + c.timeout;
            }
        }
        if now >= deadline {
            let (what, reason) = match &st.phase {
                Phase::Running { runner } => (
                    format!(
                        "{} on line {:?}: chip {runner}, running every chip's part, made no progress for {:?}",
                        c.name, c.chips, c.timeout
                    ),
                    format!("chip {runner} made no progress running the line's collective"),
                ),
                _ => {
                    let missing: Vec<u32> = st
                        .parts
                        .iter()
                        .zip(c.chips)
                        .filter(|(p, _)| p.is_none())
                        .map(|(_, &chip)| chip)
                        .collect();
                    (
                        format!(
                            "{} on line {:?}: chip(s) {missing:?} had not reached it after {:?} (their queues are behind or stopped)",
                            c.name, c.chips, c.timeout
                        ),
                        format!("chip(s) {missing:?} never reached {}", c.name),
                    )
                }
            };
            // The cause first, so the others, woken by the abandon, report it.
            c.fabric
                .abort(me, FabricError::KernelFailed { chip: me, reason });
            if gathering {
                abandon(st, m, id);
            }
            return Err(ChipError::Timeout {
                what,
                seconds: c.timeout.as_secs_f64(),
            });
        }
        let slice = if gathering {
            ABORT_POLL.min(deadline - now)
        } else {
            deadline - now
        };
        st.sleepers += 1;
        st = (m.cv.wait_timeout(st, slice))
            .unwrap_or_else(|p| p.into_inner())
            .0;
        st.sleepers -= 1;
    }
}

/// Ends a meeting that can no longer complete: every waiter fails, and it leaves the
/// registry (taken after the meeting's lock is released: `meet` takes them the other way).
fn abandon(mut st: MutexGuard<'_, State>, m: &Arc<Meeting>, id: (usize, u64)) {
    st.phase = Phase::Abandoned;
    drop(st);
    m.cv.notify_all();
    let mut reg = registry();
    if reg.get(&id).is_some_and(|(_, x)| Arc::ptr_eq(x, m)) {
        reg.remove(&id);
    }
}

/// Runs every part's steps, each as soon as what it receives was sent, then flushes. On a
/// failure the fabric is aborted with its cause, and every chip reports it.
fn run_all(
    c: &Collective,
    parts: Vec<Part>,
    progress: &Arc<AtomicU64>,
) -> Vec<Result<Part, ChipError>> {
    let mut parts = parts;
    alias_slots(&mut parts, !c.pair);
    let (parts, ran) = if c.pair {
        let progress = progress.clone();
        super::pair::drive(c.fabric, c.chips, c.name, c.timeout, parts, progress)
    } else {
        let ran = drive(c, &mut parts, progress);
        (parts, ran)
    };
    let flushed = ran.and_then(|()| {
        parts.iter().enumerate().try_for_each(|(p, part)| {
            part.ep
                .flush(c.timeout)
                .map_err(|e| (p, StepError::Fabric(e)))
        })
    });
    match flushed {
        Ok(()) => parts.into_iter().map(Ok).collect(),
        Err((at, e)) => {
            let chip = c.chips[at];
            let mine = match e {
                StepError::Fabric(e) => {
                    c.fabric.abort(chip, e.clone());
                    fault(chip, c.name, e)
                }
                StepError::Chip(e) => {
                    c.fabric.abort(
                        chip,
                        FabricError::KernelFailed {
                            chip,
                            reason: e.to_string(),
                        },
                    );
                    e
                }
            };
            let mut mine = Some(mine);
            (0..parts.len())
                .map(|p| {
                    Err(if p == at {
                        mine.take().unwrap()
                    } else {
                        let cause = c.fabric.failure().unwrap_or(FabricError::ShutDown);
                        fault(c.chips[p], c.name, cause)
                    })
                })
                .collect()
        }
    }
}

/// How many slots' worth of memory a line that runs together writes its slots into.
const SLOT_REGIONS: usize = 4;

/// Slot bytes a chip's steps write, from which its slots share memory when the line runs
/// together (unless `TTMESH_CCL_RUNNER=together` forces it, which shares at every size so
/// tests run it). Below, holding writes back costs more than the cache saves. A/B on a
/// 2-core host, all_reduce (medians, us; separate slots / four regions): galaxy 36 KiB 784 /
/// 831, 128 KiB 1285 / 1314, 256 KiB 2984 / 2805 and 2772 / 2413, 1 MiB 11592 / 10376; t3k
/// 256 KiB 355 / 352, 768 KiB 947 / 886. Re-measured once the fabric delivered one-hop
/// messages directly (medians of 5): galaxy 128 KiB (two threads) 1620 / 1889, so the
/// threshold stays for two threads; but see `ALIAS_LONG_ALONE`.
const ALIAS_MIN_SLOT_BYTES: u64 = 192 << 10;

/// Lines longer than this that run on one thread share their slots' memory at every size.
/// Once the fabric delivered one-hop messages directly, a small collective's per-step cost
/// was mostly its writes missing the cache (32 chips' slots, inputs and outputs are ~4 MiB
/// at 36 KiB), and one thread keeps the held-back writes cheap. Medians of 5 (us, separate
/// slots / four regions): galaxy 36 KiB 873 / 768, 4 KiB 165 / 175 (noise); t3k 36 KiB
/// 114.8 / 115.4 (its working set fits the cache), so 8 chips stay as they were.
const ALIAS_LONG_ALONE: usize = 8;

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

fn drive(
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
