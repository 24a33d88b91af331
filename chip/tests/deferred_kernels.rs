//! Kernels that return before their work is done (`Kernel::launch` -> `Launched::Deferred`),
//! as a small collective does when the last chip to arrive runs the whole line: the queue runs
//! nothing after such a kernel until its work is done, `finish` waits for it and reports its
//! error, a wait that never ends times out, and a launch the host may run itself
//! (`Kernel::hands_off`) runs on the host's thread when the queue is idle.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use common::{chip_with, upload, values};
use parking_lot::{Condvar, Mutex};
use ttmesh_chip::ops::{self, LaunchSplit};
use ttmesh_chip::program::{
    program_key, Access, CoreSplit, Deferred, Kernel, KernelContext, Launched,
};
use ttmesh_chip::{Chip, ChipError, CqId, DataType, Layout, MemoryConfig, Tensor};

const CQ0: CqId = CqId(0);
const TIMEOUT: Duration = Duration::from_secs(2);

/// Work handed to "another thread": the test completes it when it chooses.
#[derive(Default)]
struct Job {
    state: Mutex<Option<(Result<(), String>, Instant)>>,
    cv: Condvar,
}

impl Job {
    fn complete(&self, result: Result<(), String>) {
        *self.state.lock() = Some((result, Instant::now()));
        self.cv.notify_all();
    }
}

impl Deferred for Job {
    fn is_done(&self) -> bool {
        self.state.lock().is_some()
    }

    fn wait(&self) -> ttmesh_chip::Result<()> {
        let deadline = Instant::now() + TIMEOUT;
        let mut s = self.state.lock();
        while s.is_none() {
            if self.cv.wait_until(&mut s, deadline).timed_out() && s.is_none() {
                return Err(ChipError::Timeout {
                    what: "the test's handed-off job".into(),
                    seconds: TIMEOUT.as_secs_f64(),
                });
            }
        }
        let (r, _) = s.as_ref().unwrap();
        r.clone().map_err(ChipError::Queue)
    }

    fn done_at(&self) -> Option<Instant> {
        self.state.lock().as_ref().map(|(_, at)| *at)
    }
}

/// Hands each launch's work over as a fresh `Job` the test can reach.
struct HandOff {
    may_run_on_host: bool,
    jobs: Mutex<Vec<Arc<Job>>>,
    threads: Mutex<Vec<ThreadId>>,
}

impl HandOff {
    fn new(may_run_on_host: bool) -> Arc<HandOff> {
        Arc::new(HandOff {
            may_run_on_host,
            jobs: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        })
    }

    /// The job of launch `i`, once the launch has run.
    fn job(&self, i: usize) -> Arc<Job> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(j) = self.jobs.lock().get(i) {
                return j.clone();
            }
            assert!(Instant::now() < deadline, "launch {i} never ran");
            thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Kernel for HandOff {
    fn name(&self) -> &str {
        "HandOff"
    }
    fn execute(&self, _: &KernelContext, _: &[u32]) -> ttmesh_chip::Result<()> {
        unreachable!("the dispatcher calls launch")
    }
    fn launch(&self, _: &KernelContext, _: &[u32]) -> ttmesh_chip::Result<Launched> {
        self.threads.lock().push(thread::current().id());
        let job = Arc::new(Job::default());
        self.jobs.lock().push(job.clone());
        Ok(Launched::Deferred(job))
    }
    fn hands_off(&self) -> bool {
        self.may_run_on_host
    }
}

fn tensor(chip: &Arc<Chip>) -> Tensor {
    upload(
        chip,
        &[32, 32],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::DRAM,
        values(3, 1024, -1.0, 1.0),
    )
    .0
}

fn launch(t: &Tensor, kernel: &Arc<HandOff>, key: &str) {
    let operands = [(t, Access::ReadWrite)];
    let k = kernel.clone();
    ops::launch(
        &ops::Launch {
            name: "HandOff",
            key: program_key(&key),
            operands: &operands,
            split: LaunchSplit::Cores(CoreSplit {
                cores: 1,
                units_per_core: 1,
                args_per_core: 3,
            }),
            cq: CQ0,
        },
        || "hand-off".into(),
        move || Ok(k as Arc<dyn Kernel>),
    )
    .unwrap();
}

#[test]
fn an_idle_queue_runs_a_hand_off_launch_on_the_host_thread() {
    let chip = chip_with(|c| c.operation_timeout = TIMEOUT);
    let t = tensor(&chip);
    chip.finish(CQ0).unwrap();
    // finish returns once the queue's thread has run everything; it then goes to sleep.
    let deadline = Instant::now() + TIMEOUT;
    while !chip.queue_idle(CQ0) {
        assert!(Instant::now() < deadline, "the queue never went idle");
        thread::sleep(Duration::from_millis(1));
    }
    let host = HandOff::new(true);
    launch(&t, &host, "host");
    assert_eq!(host.threads.lock().as_slice(), &[thread::current().id()]);
    host.job(0).complete(Ok(()));
    chip.finish(CQ0).unwrap();

    // The same kernel that may not run on the host runs on the queue's thread.
    let queued = HandOff::new(false);
    launch(&t, &queued, "queued");
    queued.job(0).complete(Ok(()));
    chip.finish(CQ0).unwrap();
    assert_ne!(queued.threads.lock()[0], thread::current().id());
}

#[test]
fn nothing_runs_after_a_deferred_kernel_until_its_work_is_done() {
    let chip = chip_with(|c| c.operation_timeout = TIMEOUT);
    let t = tensor(&chip);
    for may_run_on_host in [true, false] {
        let k = HandOff::new(may_run_on_host);
        let key = format!("order {may_run_on_host}");
        launch(&t, &k, &key);
        let work_done = Arc::new(AtomicBool::new(false));
        let seen = work_done.clone();
        chip.enqueue_host_callback(CQ0, move || {
            if seen.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err(ChipError::Queue(
                    "ran before the deferred work was done".into(),
                ))
            }
        })
        .unwrap();
        // A second launch queues behind the first: it must not run before the first is done.
        launch(&t, &k, &key);
        let job = k.job(0);
        thread::sleep(Duration::from_millis(30));
        assert_eq!(
            k.jobs.lock().len(),
            1,
            "a launch ran before the deferred work was done"
        );
        work_done.store(true, Ordering::SeqCst);
        job.complete(Ok(()));
        k.job(1).complete(Ok(()));
        chip.finish(CQ0).unwrap();
    }
}

#[test]
fn finish_waits_for_deferred_work_and_reports_its_error() {
    let chip = chip_with(|c| c.operation_timeout = TIMEOUT);
    let t = tensor(&chip);
    // Done before finish (settled by the host) and done while finish waits (by the queue).
    for late in [false, true] {
        let k = HandOff::new(true);
        launch(&t, &k, &format!("error {late}"));
        let job = k.job(0);
        // The late completer starts its 50 ms only once this thread is about to call finish,
        // so finish is known to have waited at least that long.
        let (finishing, finish_called) = std::sync::mpsc::channel::<()>();
        let mut completer = Some({
            let job = job.clone();
            thread::spawn(move || {
                if late {
                    let _ = finish_called.recv_timeout(TIMEOUT);
                    thread::sleep(Duration::from_millis(50));
                }
                job.complete(Err(format!("the line failed (late {late})")));
            })
        });
        if !late {
            completer.take().unwrap().join().unwrap();
        }
        let started = Instant::now();
        let _ = finishing.send(());
        let e = chip.finish(CQ0).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("the line failed (late {late})")),
            "{e}"
        );
        if late {
            assert!(
                started.elapsed() >= Duration::from_millis(50),
                "finish did not wait"
            );
        }
        if let Some(c) = completer {
            c.join().unwrap();
        }
        chip.finish(CQ0).unwrap();
    }
    // The kernel's time runs until its work was done.
    let before = chip.dispatch_stats();
    let k = HandOff::new(true);
    launch(&t, &k, "time");
    thread::sleep(Duration::from_millis(40));
    k.job(0).complete(Ok(()));
    chip.finish(CQ0).unwrap();
    let after = chip.dispatch_stats();
    assert_eq!(after.launches, before.launches + 1);
    assert!(after.kernel_ns - before.kernel_ns >= 35_000_000);
}

#[test]
fn deferred_work_that_never_ends_times_out_and_the_queue_lives_on() {
    let chip = chip_with(|c| c.operation_timeout = TIMEOUT);
    let t = tensor(&chip);
    let k = HandOff::new(true);
    launch(&t, &k, "never");
    let started = Instant::now();
    let e = chip.finish(CQ0).unwrap_err();
    assert!(matches!(e, ChipError::Timeout { .. }), "{e}");
    assert!(started.elapsed() < TIMEOUT * 3, "{:?}", started.elapsed());
    // The queue works afterwards.
    let again = ops::relu(&t, &ops::OpOptions::default()).unwrap();
    assert_eq!(common::read(&again).len(), 1024);
    chip.finish(CQ0).unwrap();
}
