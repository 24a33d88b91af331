//! Runs cases on worker threads, each with its own mesh, under a watchdog: a case still running
//! past the operation timeout plus a grace period is reported as a hang with what is still
//! waiting, its mesh is abandoned, and the worker goes on with a fresh one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use ttmesh::MeshDevice;

use crate::cases::Case;
use crate::exec::{chain, open_mesh, run_case, CaseResult, Probe, Verdict};
use crate::spec::TopologyChoice;

#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The operation timeout every mesh is opened with.
    pub timeout: Duration,
    /// A case still running after this is reported as a hang.
    pub watchdog: Duration,
    pub jobs: usize,
    /// No case starts after this.
    pub deadline: Option<Instant>,
    /// Set (by Ctrl-C) to stop between cases.
    pub stop: Arc<AtomicBool>,
}

impl RunOptions {
    /// One job, no deadline, and a watchdog past every wait a case makes: its waits are bounded
    /// by the timeout (a stalled chip's by about 1.5 of it; a traced case waits twice), plus a
    /// grace of 2 s.
    pub fn new(timeout: Duration) -> RunOptions {
        RunOptions {
            timeout,
            watchdog: timeout * 3 + Duration::from_secs(2),
            jobs: 1,
            deadline: None,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// Runs `cases` (possibly endless) until they end, the deadline passes or `stop` is set;
/// `on_done` sees each result as it comes. Results are returned in case order.
pub fn run_cases(
    cases: &mut (dyn Iterator<Item = Case> + Send),
    opts: &RunOptions,
    on_done: &(dyn Fn(&CaseResult) + Sync),
) -> Vec<CaseResult> {
    let source = Mutex::new(cases);
    let results = Mutex::new(Vec::new());
    let next = || -> Option<Case> {
        if opts.stop.load(Ordering::Relaxed) || opts.deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        source.lock().next()
    };
    thread::scope(|s| {
        for _ in 0..opts.jobs.max(1) {
            s.spawn(|| {
                let mut worker = Worker { mesh: None };
                while let Some(case) = next() {
                    let r = worker.run(case, opts);
                    on_done(&r);
                    results.lock().push(r);
                }
                worker.close();
            });
        }
    });
    let mut v = results.into_inner();
    v.sort_by_key(|r| r.index);
    v
}

struct Worker {
    mesh: Option<(TopologyChoice, MeshDevice)>,
}

impl Worker {
    fn close(&mut self) {
        if let Some((_, m)) = self.mesh.take() {
            let _ = m.close();
        }
    }

    fn mesh_for(&mut self, t: &TopologyChoice, timeout: Duration) -> Result<MeshDevice, String> {
        if let Some((have, m)) = &self.mesh {
            if have.mesh_key() == t.mesh_key() {
                return Ok(m.clone());
            }
        }
        self.close();
        let m =
            open_mesh(t, timeout).map_err(|e| format!("opening {}: {}", t.name(), chain(&e)))?;
        self.mesh = Some((t.clone(), m.clone()));
        Ok(m)
    }

    fn run(&mut self, case: Case, opts: &RunOptions) -> CaseResult {
        let mesh = match self.mesh_for(&case.topology, opts.timeout) {
            Ok(m) => m,
            Err(e) => return CaseResult::new(&case, Verdict::UnexpectedError, e),
        };
        let probe = Arc::new(Probe::default());
        *probe.mesh.lock() = Some(mesh.clone());
        let dirty = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let started = Instant::now();
        {
            let (probe, dirty, case, timeout) =
                (probe.clone(), dirty.clone(), case.clone(), opts.timeout);
            thread::Builder::new()
                .name(format!("stress case {}", case.index))
                .spawn(move || {
                    let r = run_case(&mesh, &case, timeout, &probe, &dirty);
                    let _ = tx.send(r);
                })
                .expect("a thread for the case");
        }
        match rx.recv_timeout(opts.watchdog) {
            Ok(r) => {
                if dirty.load(Ordering::Relaxed) {
                    self.close();
                }
                r
            }
            Err(_) => {
                let detail = format!(
                    "no result after {:.1} s (watchdog {:.1} s, operation timeout {:.1} s): {}",
                    started.elapsed().as_secs_f64(),
                    opts.watchdog.as_secs_f64(),
                    opts.timeout.as_secs_f64(),
                    probe.describe()
                );
                // The case's thread still holds the mesh; leave both to it and start afresh.
                *probe.mesh.lock() = None;
                self.mesh = None;
                let mut r = CaseResult::new(&case, Verdict::Hang, detail);
                r.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
                r
            }
        }
    }
}
