//! The two-thread runner's second threads (`two_threads`): threads of ccl's own (one per two host
//! cores) that spin for a while after each job before they sleep, so a collective that
//! follows another finds one awake.
//!
//! Why not rayon's pool: a job given to rayon's shared pool wakes one worker, and that worker,
//! on finding work, wakes a second one, which finds none and spins yielding for a while
//! (rayon's heuristic). On a 2-core host that second worker takes turns from the two threads
//! running the line: ~40 context switches per collective (perf, line-2 1 MiB all_reduce). A
//! pool of one of rayon's own avoided that but slept between collectives, so every job waited
//! for a wake-up. A helper spins only with `spin_loop` (no yield), for `SPIN` after its last
//! job, then sleeps on a condvar; a job given while every helper sleeps wakes one. Lines that
//! run at once (a Galaxy's rows) share the helpers: a job no helper takes in time is done by
//! its line's own thread (see `two_threads::drive`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send>;

struct Helper {
    jobs: Mutex<Queue>,
    wake: Condvar,
    /// Jobs queued and not yet taken: what the spinning thread watches without the lock.
    pending: AtomicUsize,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    sleeping: usize,
}

/// How long the thread stays awake after a job. A line's next collective is usually launched
/// within tens of microseconds of the last one's end (the host's finish and launch).
const SPIN: Duration = Duration::from_micros(200);

fn helper() -> Option<&'static Helper> {
    static HELPER: OnceLock<Option<&'static Helper>> = OnceLock::new();
    *HELPER.get_or_init(|| {
        let h: &'static Helper = Box::leak(Box::new(Helper {
            jobs: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            pending: AtomicUsize::new(0),
        }));
        let threads = (ttmesh_chip::device::host_cores() / 2).clamp(1, 16);
        let started = (0..threads)
            .filter(|i| {
                std::thread::Builder::new()
                    .name(format!("ttmesh-ccl-pair{i}"))
                    .spawn(move || h.run())
                    .is_ok()
            })
            .count();
        (started > 0).then_some(h)
    })
}

/// True if a helper thread runs (they start on first use).
pub(crate) fn running() -> bool {
    helper().is_some()
}

/// Hands `job` to a helper thread; false (and the job dropped) if there is none. The job
/// may start late: callers must not wait for it to start.
pub(crate) fn submit(job: impl FnOnce() + Send + 'static) -> bool {
    let Some(h) = helper() else {
        return false;
    };
    let mut q = h.jobs.lock().unwrap_or_else(|p| p.into_inner());
    q.jobs.push_back(Box::new(job));
    h.pending.fetch_add(1, Ordering::Release);
    if q.sleeping > 0 {
        h.wake.notify_one();
    }
    true
}

impl Helper {
    fn take(&self) -> Option<Job> {
        let mut q = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        let job = q.jobs.pop_front();
        if job.is_some() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
        }
        job
    }

    fn run(&self) {
        loop {
            // Awake: take jobs as they come, until none has come for SPIN.
            let mut idle_since = Instant::now();
            let mut checks = 0u32;
            loop {
                if self.pending.load(Ordering::Acquire) > 0 {
                    if let Some(job) = self.take() {
                        // A job that panics (a bug) must not take the helper with it: the
                        // job's own guards tell its runner it is over.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        idle_since = Instant::now();
                        continue;
                    }
                }
                std::hint::spin_loop();
                checks = checks.wrapping_add(1);
                // The clock only every 64 checks: a spin that reads it each time costs more
                // than the check.
                if checks.is_multiple_of(64) && idle_since.elapsed() > SPIN {
                    break;
                }
            }
            // Asleep until a job comes.
            let mut q = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            q.sleeping += 1;
            while q.jobs.is_empty() {
                q = self.wake.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            q.sleeping -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn jobs_run_whether_the_thread_spins_or_sleeps() {
        let (tx, rx) = mpsc::channel();
        for i in 0..3 {
            let tx = tx.clone();
            assert!(submit(move || tx.send(i).unwrap()));
            assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(i));
        }
        // Long enough for the thread to go to sleep: the next job must wake it.
        std::thread::sleep(SPIN * 20);
        let tx2 = tx.clone();
        assert!(submit(move || tx2.send(7).unwrap()));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(7));
        // A job that panics leaves the helper running the next one.
        assert!(submit(|| panic!("a job's bug")));
        assert!(submit(move || tx.send(8).unwrap()));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(8));
    }
}
