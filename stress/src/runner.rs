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
    /// Under `mpirun`: why the ranks could not go on together (a hang, or ranks that stopped
    /// making the same calls), set when the run stopped for it; the job must then end.
    pub fatal: Arc<Mutex<Option<String>>>,
}

impl RunOptions {
    /// One job, no deadline, and a watchdog past every wait a case makes: its waits are bounded
    /// by the timeout (a stalled chip's by about 1.5 of it; a traced case waits twice), plus a
    /// grace of 2 s.
    /// Under `mpirun` a case also waits for the other ranks (its evidence and the mesh's
    /// barrier, each bounded by about two timeouts), so the watchdog waits twice as long.
    pub fn new(timeout: Duration) -> RunOptions {
        let watchdog = match ttmesh::ranks::launched() {
            None => timeout * 3 + Duration::from_secs(2),
            Some(_) => timeout * 6 + Duration::from_secs(4),
        };
        RunOptions {
            timeout,
            watchdog,
            jobs: 1,
            deadline: None,
            stop: Arc::new(AtomicBool::new(false)),
            fatal: Arc::new(Mutex::new(None)),
        }
    }
}

/// Under `mpirun`: whether every rank goes on to another case (each says whether it would;
/// any no stops all), so every rank runs the same cases however its clock or Ctrl-C went.
fn every_rank_goes_on(go: bool, opts: &RunOptions) -> bool {
    if ttmesh::ranks::launched().is_none() {
        return go;
    }
    match ttmesh::ranks::exchange_in_job(
        "stress: whether to run another case",
        vec![go as u8],
        opts.watchdog,
    ) {
        Ok(all) => all.iter().all(|w| w.first() == Some(&1)),
        Err(e) => {
            opts.fatal.lock().get_or_insert(e);
            false
        }
    }
}

/// Under `mpirun`: why this case's mesh cannot run split over the ranks (neither its rows nor
/// its columns split evenly), checked before it opens; None when it can, or outside `mpirun`.
fn split_refusal(t: &TopologyChoice) -> Option<String> {
    let (_, ranks) = ttmesh::ranks::launched()?;
    let (name, _, _) = t.mesh_key();
    let cluster = ttmesh_topologies::load(&name).ok()?;
    ttmesh::ranks::RankBindings::split_evenly(&cluster, ranks)
        .err()
        .map(|e| format!("not run over {ranks} ranks: {e}"))
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
        if opts.fatal.lock().is_some() {
            // No more exchanges: the ranks no longer make the same calls.
            return None;
        }
        let go =
            !opts.stop.load(Ordering::Relaxed) && opts.deadline.is_none_or(|d| Instant::now() < d);
        if !every_rank_goes_on(go, opts) {
            return None;
        }
        source.lock().next()
    };
    // Over MPI ranks every rank must open its meshes in the same order: one case at a time.
    let jobs = match ttmesh::ranks::launched() {
        Some(_) => 1,
        None => opts.jobs.max(1),
    };
    thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                let mut worker = Worker { mesh: None };
                while let Some(case) = next() {
                    let r = worker.run(case, opts);
                    on_done(&r);
                    results.lock().push(r);
                }
                if opts.fatal.lock().is_none() {
                    worker.close();
                }
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
        if let Some(why) = split_refusal(&case.topology) {
            return CaseResult::new(&case, Verdict::Skipped, why);
        }
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
                if let Some(e) = probe.fatal.lock().take() {
                    opts.fatal.lock().get_or_insert(e);
                }
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
                if let Some((rank, _)) = ttmesh::ranks::launched() {
                    // Its thread may still make calls the other ranks would take for the
                    // next case's: the ranks cannot go on together.
                    opts.fatal.lock().get_or_insert(format!(
                        "case {} hung on rank {rank}: {detail}",
                        case.index
                    ));
                }
                let mut r = CaseResult::new(&case, Verdict::Hang, detail);
                r.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
                r
            }
        }
    }
}
