//! The collective's meeting, where a line that runs together gathers: each chip's kernel
//! prepares its part (reads and decodes its input on its own thread) and registers it here; the
//! last to arrive runs every chip's step list (on one thread, `one_thread`, or two,
//! `two_threads`) and hands each part back; the others sleep meanwhile and finish their own
//! part (writing their output), or, deferred, never wait at all. A collective then costs one
//! sleep and one wake per chip instead of a chain of wake-ups per step. Every byte still goes through the fabric senders (packets, credits, link statistics
//! and faults are real) into the receivers' memory, and every receive still waits for its
//! semaphore; the runner only knows which slots were sent so it never waits on a step that
//! has not run.

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use ttmesh_chip::error::ForeignError;
use ttmesh_chip::program::Deferred;
use ttmesh_chip::ChipError;
use ttmesh_fabric::{Fabric, FabricError};

use crate::kernels::chip_io::StepError;
use crate::kernels::execute::{Endpoint, Step};
use crate::kernels::work::Work;

use super::{one_thread, two_threads};

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
    /// Run the line on two threads (`two_threads`; `schedule::runner` decides).
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
        crate::kernels::pages::put_work(*part.work);
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
    one_thread::alias_slots(&mut parts, !c.pair);
    let (parts, ran) = if c.pair {
        let progress = progress.clone();
        two_threads::drive(c.fabric, c.chips, c.name, c.timeout, parts, progress)
    } else {
        let ran = one_thread::drive(c, &mut parts, progress);
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
