//! This process's place among the ranks: MPI started once, on the progress thread, and the
//! calls the mesh makes on it.

use crossbeam_channel::{unbounded, Sender};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use ttmesh_fabric::{ChipMemory, Fabric};

use crate::links::{Incoming, RankLinks};
use crate::outbox::Outboxes;
use crate::progress::{self, Cmd};
use crate::TransportError;

/// MPI in this process (one per process: MPI starts once).
pub struct Transport {
    rank: u32,
    size: u32,
    cmds: Sender<Cmd>,
    out: Arc<Outboxes>,
    thread: Mutex<Option<JoinHandle<()>>>,
    generations: AtomicU32,
    /// The mesh now attached: its generation and incoming side, to detach on close.
    current: Mutex<Option<Arc<Incoming>>>,
}

static TRANSPORT: OnceLock<Result<Transport, TransportError>> = OnceLock::new();

/// The process's transport, starting MPI on first use (under `mpirun`).
pub fn transport() -> Result<&'static Transport, TransportError> {
    TRANSPORT
        .get_or_init(Transport::start)
        .as_ref()
        .map_err(Clone::clone)
}

/// The transport if MPI was started in this process.
pub fn started() -> Option<&'static Transport> {
    TRANSPORT.get().and_then(|t| t.as_ref().ok())
}

impl Transport {
    fn start() -> Result<Transport, TransportError> {
        let (cmds, rx) = unbounded();
        let (ready_tx, ready) = crossbeam_channel::bounded(1);
        // A rank silent this long is taken for gone: half the operation timeout, so the
        // waits it would end at their timeouts end first, naming it.
        let silence = ttmesh_settings::settings().operation_timeout() / 2;
        let bell = cmds.clone();
        let thread = std::thread::Builder::new()
            .name("mpi-progress".into())
            .spawn(move || progress::run(rx, bell, ready_tx, silence))
            .map_err(|e| TransportError(format!("cannot start the MPI progress thread: {e}")))?;
        let (rank, size, out) = ready
            .recv_timeout(Duration::from_secs(60))
            .ok()
            .flatten()
            .ok_or_else(|| {
                TransportError(
                    "MPI did not start (MPI_Init_thread failed or took over 60 s): run under \
                     mpirun from the same OpenMPI the binary was built against"
                        .into(),
                )
            })?;
        Ok(Transport {
            rank,
            size,
            cmds,
            out,
            thread: Mutex::new(Some(thread)),
            generations: AtomicU32::new(0),
            current: Mutex::new(None),
        })
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }
    pub fn size(&self) -> u32 {
        self.size
    }

    /// A new mesh's links: `owner` gives each chip's rank, `memories` this rank's chips'
    /// memories (None for the others'). Every rank opens its meshes in the same order, so the
    /// n-th mesh of each rank is one mesh. Call [`Transport::attach_fabric`] once its fabric
    /// is built; traffic that arrives before then waits.
    pub fn open_mesh(
        &self,
        owner: Vec<u32>,
        memories: Vec<Option<Arc<dyn ChipMemory>>>,
    ) -> (Arc<RankLinks>, MeshLinks) {
        let generation = self.generations.fetch_add(1, Relaxed) + 1;
        let links = Arc::new(RankLinks {
            generation,
            me: self.rank,
            owner,
            out: self.out.clone(),
        });
        let incoming = Arc::new(Incoming {
            generation,
            owner: links.owner.clone(),
            me: self.rank,
            memories,
            fabric: OnceLock::new(),
        });
        (links, MeshLinks { incoming })
    }

    /// The receiving side of `mesh` again, now with this rank's chips' `memories` (the mesh
    /// opens its links before its chips, to check the bindings first).
    pub fn reopen_incoming(
        &self,
        mesh: &MeshLinks,
        memories: Vec<Option<Arc<dyn ChipMemory>>>,
    ) -> MeshLinks {
        MeshLinks {
            incoming: Arc::new(Incoming {
                generation: mesh.incoming.generation,
                owner: mesh.incoming.owner.clone(),
                me: self.rank,
                memories,
                fabric: OnceLock::new(),
            }),
        }
    }

    /// Starts delivering what other ranks send into this mesh's chips through `fabric`.
    pub fn attach_fabric(&self, mesh: &MeshLinks, fabric: &Arc<Fabric>) {
        let _ = mesh.incoming.fabric.set(Arc::downgrade(fabric));
        *self.current.lock() = Some(mesh.incoming.clone());
        let _ = self.cmds.send(Cmd::Attach(mesh.incoming.clone()));
    }

    /// Stops delivering into a closed mesh.
    pub fn detach(&self, mesh: &MeshLinks) {
        let _ = self.cmds.send(Cmd::Detach(mesh.incoming.generation));
    }

    /// Every rank's `data`, by rank (an all-gather on the host side). Every rank must call it
    /// the same number of times, in the same order. Fails after `timeout` naming the ranks
    /// that sent nothing.
    pub fn exchange(
        &self,
        data: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>, TransportError> {
        let (reply, got) = crossbeam_channel::bounded(1);
        let arrived = Arc::new(Mutex::new(vec![false; self.size as usize]));
        self.cmds
            .send(Cmd::Exchange {
                data,
                reply,
                arrived: arrived.clone(),
            })
            .map_err(|_| TransportError("the MPI progress thread has ended".into()))?;
        let got = got.recv_timeout(timeout);
        if let Ok(Err(silent)) = &got {
            return Err(TransportError(format!(
                "rank {}: {silent}; the job cannot go on",
                self.rank
            )));
        }
        got.ok().and_then(Result::ok).ok_or_else(|| {
            let missing: Vec<String> = arrived
                .lock()
                .iter()
                .enumerate()
                .filter(|(_, a)| !**a)
                .map(|(r, _)| r.to_string())
                .collect();
            TransportError(format!(
                "rank {}: no word from rank {} after {timeout:?} (exited, killed, or stuck); \
                 the job cannot go on",
                self.rank,
                missing.join(", rank ")
            ))
        })
    }

    /// OpenMPI's own `MPI_Allreduce` (f32 sum) of `bytes` per rank between the ranks of this
    /// job, timed here: the mean seconds of `iters` calls on the slowest rank, to print beside
    /// the fabric's all_reduce measured in the same run. Every rank must call it, in the same
    /// order as its other exchanges.
    pub fn time_allreduce(
        &self,
        bytes: usize,
        iters: usize,
        timeout: Duration,
    ) -> Result<f64, TransportError> {
        self.time_mpi_call(
            "MPI_Allreduce",
            |reply| Cmd::TimeAllreduce {
                bytes,
                iters,
                reply,
            },
            timeout,
        )
    }

    /// OpenMPI's own `MPI_Barrier` between the ranks of this job, timed here: the mean
    /// seconds of `iters` calls on the slowest rank, to print beside the mesh's barrier
    /// (`synchronize_device` across ranks) measured in the same run. Called as
    /// [`Transport::time_allreduce`] is.
    pub fn time_barrier(&self, iters: usize, timeout: Duration) -> Result<f64, TransportError> {
        self.time_mpi_call(
            "MPI_Barrier",
            |reply| Cmd::TimeBarrier { iters, reply },
            timeout,
        )
    }

    /// Has the progress thread time one of MPI's own calls (`cmd`, replying this rank's mean
    /// seconds) once every rank is here; the slowest rank's mean.
    fn time_mpi_call(
        &self,
        name: &str,
        cmd: impl FnOnce(crossbeam_channel::Sender<f64>) -> Cmd,
        timeout: Duration,
    ) -> Result<f64, TransportError> {
        // Every rank is here before any blocks in MPI's collective.
        self.exchange(Vec::new(), timeout)?;
        let (reply, got) = crossbeam_channel::bounded(1);
        self.cmds
            .send(cmd(reply))
            .map_err(|_| TransportError("the MPI progress thread has ended".into()))?;
        let mine = got.recv_timeout(timeout).map_err(|_| {
            TransportError(format!(
                "rank {}: {name} did not finish within {timeout:?}",
                self.rank
            ))
        })?;
        let all = self.exchange(mine.to_le_bytes().to_vec(), timeout)?;
        Ok(all
            .iter()
            .filter_map(|b| b.as_slice().try_into().ok().map(f64::from_le_bytes))
            .fold(mine, f64::max))
    }

    /// Completes every send and finalises MPI (bounded): the last call of a rank that ends
    /// well. False if a send could not complete (the job is then aborted).
    pub fn finalize(&self, timeout: Duration) -> bool {
        let (done, ok) = crossbeam_channel::bounded(1);
        let _ = self.cmds.send(Cmd::Finalize {
            deadline: Instant::now() + timeout,
            done,
        });
        let ok = ok
            .recv_timeout(timeout + Duration::from_secs(5))
            .unwrap_or(false);
        if let Some(t) = self.thread.lock().take() {
            if ok {
                let _ = t.join();
            }
        }
        ok
    }

    /// Ends the whole job (`MPI_Abort`): what a rank that failed does after printing its
    /// error, so mpirun stops every rank and exits non-zero. Does not return.
    pub fn abort_job(&self, code: i32) -> ! {
        let _ = self.cmds.send(Cmd::Abort(code));
        std::thread::sleep(Duration::from_secs(10));
        std::process::exit(code)
    }
}

/// The receiving side of one mesh's links, kept by the mesh until it closes.
pub struct MeshLinks {
    incoming: Arc<Incoming>,
}
