//! MeshDevice: N chips of one cluster, their fabric, and the mesh-wide view of them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use ttmesh_ccl::CclLine;
use ttmesh_chip::observe::{ChipObserver, Interests};
use ttmesh_chip::{ArchSpec, BufferType, Chip, ChipConfig, ChipError, CqId};
use ttmesh_fabric::{
    AxisLine, EthLink, Fabric, FabricConfig, FabricError, FabricSpec, LinkParams, MeshGrid,
};
use ttmesh_topologies::{ArchName, ClusterGraph};

use crate::chip_port::ChipPort;
use crate::error::{invalid, on_chip, MeshError, Result};
use crate::labels::{LabelledMemory, MemoryLabels, MemoryRole};
use crate::monitor::MeshMonitor;
use crate::trace::ReplayReport;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MeshShape {
    pub rows: usize,
    pub cols: usize,
}

impl MeshShape {
    pub fn new(rows: usize, cols: usize) -> MeshShape {
        MeshShape { rows, cols }
    }
    pub fn num_devices(&self) -> usize {
        self.rows * self.cols
    }
}

impl std::fmt::Display for MeshShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MeshCoordinate {
    pub row: usize,
    pub col: usize,
}

/// What `open_mesh_device` takes.
#[derive(Clone, Debug)]
pub struct MeshConfig {
    /// A shipped topology name (n150, n300, t3k, galaxy, p150, p300, line-N, ring-N) or a path.
    pub topology: String,
    /// The cluster's own shape when None; a sub-grid from (0, 0); or 1xN over all chips of a 2D
    /// cluster (chips ordered along its ring or line, as TT-NN uses a T3K as 1x8).
    pub mesh_shape: Option<MeshShape>,
    pub trace_region_size: u64,
    pub l1_small_size: u64,
    /// TT-NN's `worker_l1_size`: when set, every chip's L1 base moves to `top - worker_l1_size`.
    pub worker_l1_size: Option<u64>,
    pub num_command_queues: u8,
    pub fabric_config: FabricConfig,
    pub operation_timeout: Option<Duration>,
    pub replay_sanitizer: bool,
    /// Check each chip's trace bytes against their capture's digest at replay (on by
    /// default; see `ChipConfig::trace_digest`).
    pub trace_digest: bool,
    /// Under `mpirun`: the rank-bindings file saying which chips each rank opens
    /// (`ttmesh::ranks::RankBindings`); None splits the mesh's rows evenly over the ranks.
    pub rank_bindings: Option<std::path::PathBuf>,
}

impl Default for MeshConfig {
    fn default() -> Self {
        MeshConfig {
            topology: "t3k".into(),
            mesh_shape: None,
            trace_region_size: 0,
            l1_small_size: 0,
            worker_l1_size: None,
            num_command_queues: 1,
            fabric_config: FabricConfig::Fabric1D,
            operation_timeout: None,
            replay_sanitizer: true,
            trace_digest: true,
            rank_bindings: None,
        }
    }
}

/// Per-chip memory figures (bytes summed over the banks of each type).
#[derive(Clone, Debug, PartialEq)]
pub struct ChipReport {
    pub id: u32,
    pub coord: MeshCoordinate,
    pub dram_allocated: u64,
    pub dram_capacity: u64,
    pub l1_allocated: u64,
    pub l1_capacity: u64,
    pub l1_small_allocated: u64,
    pub l1_small_capacity: u64,
    pub trace_allocated: u64,
    pub trace_region_size: u64,
    pub live_traces: u64,
    pub trace_replays: u64,
    /// Host bytes behind this chip's memory: what it alone holds, plus an equal share of the
    /// chunks it holds with other chips (equal contents are stored once), so the sum over
    /// the chips is their host memory. Device figures above are unchanged by sharing.
    pub host_bytes: u64,
}

pub(crate) struct MeshInner {
    pub(crate) config: MeshConfig,
    pub(crate) cluster: ClusterGraph,
    pub(crate) shape: MeshShape,
    /// Chips in mesh row-major order.
    pub(crate) chips: Vec<Arc<Chip>>,
    pub(crate) fabric: Option<Arc<Fabric>>,
    pub(crate) closed: AtomicBool,
    pub(crate) last_replay: Mutex<Option<Arc<crate::trace::ReplayTimes>>>,
    /// Wakes the chips' dispatchers for a lockstep replay, off the host thread.
    pub(crate) waker: crate::trace::LockstepWaker,
    /// Statistics publishing for `ttmesh monitor`; None when off (`TTMESH_MONITOR=0`).
    pub(crate) monitor: Mutex<Option<MeshMonitor>>,
    /// What the program labelled (weights, KV cache), published by the monitor.
    pub(crate) labels: Arc<MemoryLabels>,
    /// This rank's part of a mesh over MPI ranks; None when the mesh is wholly here.
    pub(crate) ranks: Option<crate::ranks::MeshRanks>,
    /// Over MPI ranks: the trace calls since the last barrier, compared across ranks there.
    pub(crate) trace_calls: Mutex<crate::lockstep::ReplayLog>,
}

/// A mesh of chips. Cloning shares the mesh.
#[derive(Clone)]
pub struct MeshDevice {
    pub(crate) inner: Arc<MeshInner>,
}

impl MeshDevice {
    pub fn open(config: MeshConfig) -> Result<MeshDevice> {
        crate::ranks::check_launch().map_err(MeshError::Config)?;
        let cluster = ttmesh_topologies::load(&config.topology)?;
        // Under mpirun: which chips this rank holds, checked before any chip opens.
        let mut ranks =
            crate::ranks::MeshRanks::for_open(config.rank_bindings.as_deref(), &cluster)?;
        let arch = match cluster.arch() {
            ArchName::WormholeB0 => ArchSpec::wormhole_b0(),
            ArchName::Blackhole => ArchSpec::blackhole(),
        };
        let (rows, cols) = cluster.mesh_shape();
        let shape = config.mesh_shape.unwrap_or(MeshShape::new(rows, cols));
        let ids = mesh_chip_ids(&cluster, shape)?;
        let mut chips = Vec::with_capacity(ids.len());
        for &id in &ids {
            let mut cc = ChipConfig::new(id, arch.clone());
            cc.trace_region_size = config.trace_region_size;
            cc.l1_small_size = config.l1_small_size;
            cc.worker_l1_size = config.worker_l1_size;
            cc.num_command_queues = config.num_command_queues;
            cc.replay_sanitizer = config.replay_sanitizer;
            cc.trace_digest = config.trace_digest;
            cc.elsewhere = ranks.as_ref().is_some_and(|r| !r.is_local(id));
            if let Some(t) = config.operation_timeout {
                cc.operation_timeout = t;
            }
            chips.push(Chip::open(cc).map_err(on_chip(id))?);
        }
        let fabric = match config.fabric_config {
            FabricConfig::Disabled => None,
            fc => Some(Arc::new(build_fabric(
                &cluster,
                shape,
                &ids,
                &chips,
                fc,
                &config,
                ranks.as_mut(),
            )?)),
        };
        if let (Some(r), Some(f)) = (&ranks, &fabric) {
            r.attach(f);
        }
        if let Some(f) = &fabric {
            stop_fabric_on_refusal(&chips, f);
        }
        // Before anyone else can allocate on the chips, so the listeners see every buffer.
        let mut info = ttmesh_monitor::ProcessInfo::for_current_process(
            cluster.name(),
            (shape.rows as u32, shape.cols as u32),
            arch.name,
            config.fabric_config.tt_metal_name(),
        );
        let timeout = config
            .operation_timeout
            .unwrap_or_else(ttmesh_chip::device::default_operation_timeout);
        info.mesh_id = crate::monitor::mesh_id(ranks.as_ref(), timeout)?;
        if let Some(r) = &ranks {
            // This rank publishes its own chips only, labelled with its rank.
            let mesh_id = std::mem::take(&mut info.mesh_id);
            info = info.for_rank(r.rank(), r.size(), &mesh_id);
        }
        let labels = Arc::new(MemoryLabels::default());
        let holds = |chip: u32| ranks.as_ref().is_none_or(|r| r.is_local(chip));
        let monitor =
            MeshMonitor::start(&info, &chips, shape.cols, fabric.as_ref(), &labels, holds);
        Ok(MeshDevice {
            inner: Arc::new(MeshInner {
                config,
                cluster,
                shape,
                chips,
                fabric,
                closed: AtomicBool::new(false),
                last_replay: Mutex::new(None),
                waker: crate::trace::LockstepWaker::default(),
                monitor: Mutex::new(monitor),
                labels,
                ranks,
                trace_calls: Mutex::default(),
            }),
        })
    }

    /// Labels `bytes_per_chip` of every chip's memory as holding `role` (model weights, KV
    /// cache) until the returned guard is dropped, for `ttmesh monitor`, which shows them per
    /// chip beside the allocator's figures. Labels add up; the allocator is not consulted, so
    /// label what you allocated.
    pub fn label_memory(&self, role: MemoryRole, bytes_per_chip: u64) -> LabelledMemory {
        LabelledMemory::new(&self.inner.labels, role, bytes_per_chip)
    }

    /// Bytes per chip currently labelled with `role`.
    pub fn labelled_bytes(&self, role: MemoryRole) -> u64 {
        self.inner.labels.get(role)
    }

    /// The shared-memory segment this mesh publishes its statistics in (e.g. "ttmesh-1234",
    /// shown by `ttmesh monitor`), or None when publishing is off (`TTMESH_MONITOR=0`), failed
    /// (reported once on stderr), or the mesh is closed.
    pub fn monitor_segment(&self) -> Option<String> {
        self.inner
            .monitor
            .lock()
            .as_ref()
            .and_then(|m| m.segment().map(str::to_string))
    }

    pub fn shape(&self) -> MeshShape {
        self.inner.shape
    }
    pub fn num_devices(&self) -> usize {
        self.inner.chips.len()
    }
    pub fn chips(&self) -> &[Arc<Chip>] {
        &self.inner.chips
    }
    /// This process's MPI rank when the mesh spans ranks (`mpirun`), else None.
    pub fn rank(&self) -> Option<u32> {
        self.inner.ranks.as_ref().map(|r| r.rank())
    }
    /// True if this process holds `chip` (always, unless the mesh spans MPI ranks).
    pub fn holds_chip(&self, chip: u32) -> bool {
        self.inner.ranks.as_ref().is_none_or(|r| r.is_local(chip))
    }
    pub(crate) fn ranks(&self) -> Option<&crate::ranks::MeshRanks> {
        self.inner.ranks.as_ref()
    }
    pub fn chip(&self, coord: MeshCoordinate) -> Result<&Arc<Chip>> {
        let s = self.inner.shape;
        if coord.row >= s.rows || coord.col >= s.cols {
            return Err(invalid(
                "mesh",
                format!(
                    "coordinate ({}, {}) is outside the {s} mesh",
                    coord.row, coord.col
                ),
            ));
        }
        Ok(&self.inner.chips[coord.row * s.cols + coord.col])
    }
    pub fn coord_of_index(&self, i: usize) -> MeshCoordinate {
        MeshCoordinate {
            row: i / self.inner.shape.cols,
            col: i % self.inner.shape.cols,
        }
    }
    pub fn cluster(&self) -> &ClusterGraph {
        &self.inner.cluster
    }
    pub fn arch(&self) -> &ArchSpec {
        self.inner.chips[0].arch()
    }
    pub fn config(&self) -> &MeshConfig {
        &self.inner.config
    }
    pub fn fabric(&self) -> Option<&Arc<Fabric>> {
        self.inner.fabric.as_ref()
    }
    pub fn fabric_config(&self) -> FabricConfig {
        self.inner.config.fabric_config
    }

    pub(crate) fn require_fabric(&self, op: &str) -> Result<&Arc<Fabric>> {
        self.inner.fabric.as_ref().ok_or_else(|| {
            invalid(op, "the mesh was opened with FabricConfig::Disabled; open it with Fabric1D or Fabric1DRing to run collectives")
        })
    }

    /// The lines a collective runs on: every column (axis 0), every row (axis 1), or one line
    /// through all chips (None). A whole-mesh collective on a 2D fabric runs on the lines of
    /// one axis and then the other instead ([`crate::ccl::whole_mesh_axes`]).
    pub fn ccl_lines(&self, cluster_axis: Option<usize>) -> Result<Vec<(CclLine, Vec<usize>)>> {
        let s = self.inner.shape;
        let id_of = |i: usize| self.inner.chips[i].id();
        let make = |idx: Vec<usize>| {
            let chips: Vec<u32> = idx.iter().map(|&i| id_of(i)).collect();
            let is_ring = chips.len() > 2
                && self
                    .inner
                    .cluster
                    .link_count(chips[0], *chips.last().unwrap())
                    > 0;
            (CclLine { chips, is_ring }, idx)
        };
        match cluster_axis {
            Some(0) => Ok((0..s.cols)
                .map(|c| make((0..s.rows).map(|r| r * s.cols + c).collect()))
                .collect()),
            Some(1) => Ok((0..s.rows)
                .map(|r| make((0..s.cols).map(|c| r * s.cols + c).collect()))
                .collect()),
            Some(a) => Err(crate::ccl::bad_axis(self, a)),
            None => {
                if s.rows == 1 || s.cols == 1 {
                    return Ok(vec![make((0..self.num_devices()).collect())]);
                }
                let line = self.inner.cluster.linearize().filter(|l| l.chips.len() == self.num_devices()).ok_or_else(|| {
                    invalid("ccl", format!("the {s} mesh has no line through all its chips; pass cluster_axis 0 or 1"))
                })?;
                let idx = line
                    .chips
                    .iter()
                    .map(|id| {
                        self.inner
                            .chips
                            .iter()
                            .position(|c| c.id() == *id)
                            .expect("linearize lists mesh chips")
                    })
                    .collect();
                Ok(vec![make(idx)])
            }
        }
    }

    /// Waits for every queue of every chip; the error returned names its chip. A chip's own
    /// error (a kernel's, which names the link and fault behind a failed collective) is
    /// preferred over another chip's bare finish timeout.
    ///
    /// After a failed collective the fabric refuses new work (see `ttmesh_ccl`'s "Faults");
    /// once every chip's queues are idle, this resets it (semaphores zeroed, in-flight
    /// packets drained), so the next collective starts from a clean state. If a chip is still
    /// busy the reset waits for the next synchronize; if the fabric cannot be drained, the
    /// error says to reopen the mesh.
    pub fn synchronize_device(&self) -> Result<()> {
        let results = self
            .inner
            .chips
            .iter()
            .map(|c| (c.id(), c.synchronize()))
            .collect();
        crate::graph::record_error("synchronize_device", self.after_wait(results, true))
    }

    /// Waits for queue `cq` of every chip; errors as [`MeshDevice::synchronize_device`]. The
    /// fabric is reset here only when the mesh has one command queue per chip (another queue
    /// could still be running a collective).
    pub fn finish(&self, cq: CqId) -> Result<()> {
        let results = self
            .inner
            .chips
            .iter()
            .map(|c| (c.id(), c.finish(cq)))
            .collect();
        // With another queue, a collective could still be running: no reset here.
        let may_reset = self.inner.config.num_command_queues == 1;
        crate::graph::record_error("finish", self.after_wait(results, may_reset))
    }

    /// Resets an aborted fabric if every chip reached the end of its queues (and `may_reset`),
    /// then picks the error to report. Over MPI ranks this is the ranks' barrier
    /// (`ranks::barrier`): every rank reaches the same verdict, and resets together.
    fn after_wait(
        &self,
        mut results: Vec<(u32, std::result::Result<(), ChipError>)>,
        may_reset: bool,
    ) -> Result<()> {
        let idle = may_reset && self.wait_for_stalled_peer(&mut results);
        if let Some(ranks) = self.ranks() {
            return crate::ranks::barrier(self, ranks, results, idle);
        }
        if !may_reset {
            return pick_error(results);
        }
        if let (Some(f), true) = (&self.inner.fabric, idle) {
            if let Some(failure) = f.failure() {
                if let Err(e) = f.recover(self.operation_timeout()) {
                    // The first error still names the fault; the reset's says to reopen.
                    return Err(match pick_error(results) {
                        Err(first) => MeshError::Config(format!(
                            "{first}; then {e} (the collective failed with: {failure})"
                        )),
                        Ok(()) => MeshError::Fabric(e),
                    });
                }
                if results.iter().all(|(_, r)| r.is_ok()) {
                    // The failure was already reported (its queue error taken) by a chip's
                    // own synchronize; still say why the fabric had stopped.
                    return Err(MeshError::Fabric(failure));
                }
            }
        }
        pick_error(results)
    }

    /// True if every chip reached the end of its queues. A chip whose wait timed out while
    /// the fabric is stopped is a stalled peer: waited for here, and its own error replaces
    /// the timeout.
    fn wait_for_stalled_peer(
        &self,
        results: &mut [(u32, std::result::Result<(), ChipError>)],
    ) -> bool {
        let timed_out =
            |r: &std::result::Result<(), ChipError>| matches!(r, Err(ChipError::Timeout { .. }));
        let mut idle = !results.iter().any(|(_, r)| timed_out(r));
        if let (Some(f), false) = (&self.inner.fabric, idle) {
            // A chip whose finish timed out is still running: a stalled peer, whose part of
            // the collective fails at once on the stopped fabric when it comes. Wait for it
            // here (one more operation timeout at most), so the call that reports the fault
            // also resets the fabric and the next operation runs; its own error, which says
            // more than "finish timed out", replaces the timeout.
            if f.failure().is_some() && self.wait_all_idle(self.operation_timeout()) {
                idle = true;
                for (chip, r) in results.iter_mut().filter(|(_, r)| timed_out(r)) {
                    let own = self.inner.chips.iter().find(|c| c.id() == *chip);
                    if let Some(Err(e)) = own.map(|c| c.synchronize()) {
                        *r = Err(e);
                    }
                }
            }
        }
        idle
    }

    /// Waits until every queue of every chip has run all it was given; false if one is still
    /// busy after `limit`.
    fn wait_all_idle(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let all_idle = || {
            self.inner
                .chips
                .iter()
                .all(|c| (0..c.num_command_queues()).all(|cq| c.queue_idle(CqId(cq))))
        };
        while !all_idle() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    }

    /// The mesh's operation timeout (its config's, else the default).
    pub(crate) fn operation_timeout(&self) -> Duration {
        self.inner
            .config
            .operation_timeout
            .unwrap_or_else(ttmesh_chip::device::default_operation_timeout)
    }

    pub fn reports(&self) -> Vec<ChipReport> {
        self.inner
            .chips
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let used = |t: BufferType| {
                    let banks = c.with_allocator(|a| a.num_banks(t)) as u64;
                    (
                        c.usage().snapshot(t).allocated_per_bank * banks,
                        c.statistics(t).total_allocatable_size_bytes * banks,
                    )
                };
                let (dram, dram_cap) = used(BufferType::Dram);
                let (l1, l1_cap) = used(BufferType::L1);
                let (l1s, l1s_cap) = used(BufferType::L1Small);
                let (trace, _) = used(BufferType::Trace);
                let ts = c.trace_stats();
                ChipReport {
                    id: c.id(),
                    coord: self.coord_of_index(i),
                    dram_allocated: dram,
                    dram_capacity: dram_cap,
                    l1_allocated: l1,
                    l1_capacity: l1_cap,
                    l1_small_allocated: l1s,
                    l1_small_capacity: l1s_cap,
                    trace_allocated: trace,
                    trace_region_size: c.config().trace_region_size,
                    live_traces: ts.live_traces,
                    trace_replays: ts.replays,
                    host_bytes: c.memory().host_bytes(),
                }
            })
            .collect()
    }

    /// Timing of the last lockstep replay, once every chip finished it.
    pub fn last_replay(&self) -> Option<ReplayReport> {
        self.inner
            .last_replay
            .lock()
            .as_ref()
            .and_then(|t| t.report())
    }

    /// Stops the fabric and every chip's dispatchers after their queued work, and removes the
    /// monitor's segment.
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // First, so the segment goes even if closing a chip fails.
        if let Some(mut m) = self.inner.monitor.lock().take() {
            m.stop();
        }
        let sync = self.synchronize_device();
        self.inner.waker.stop();
        if let Some(f) = &self.inner.fabric {
            f.shutdown()?;
        }
        if let Some(r) = &self.inner.ranks {
            r.close();
        }
        for c in &self.inner.chips {
            c.close().map_err(on_chip(c.id()))?;
        }
        sync
    }
}

impl Drop for MeshInner {
    fn drop(&mut self) {
        if let Some(mut m) = self.monitor.get_mut().take() {
            m.stop();
        }
        self.waker.stop();
        if let Some(f) = &self.fabric {
            let _ = f.shutdown();
        }
    }
}

/// A chip that refuses a record (a damaged trace) may have skipped its part of a collective
/// the other chips are in: stop the fabric at once, so theirs fail now naming this chip instead
/// of waiting for it until the operation timeout. The next synchronize resets the fabric, as
/// after any failed collective. Weak, so the chips do not keep the fabric alive.
fn stop_fabric_on_refusal(chips: &[Arc<Chip>], fabric: &Arc<Fabric>) {
    let stop: Arc<dyn ChipObserver> = Arc::new(StopFabricOnRefusal(Arc::downgrade(fabric)));
    for c in chips {
        c.add_observer(stop.clone());
    }
}

/// The chips' observer that stops the fabric when one of them refuses a record.
struct StopFabricOnRefusal(std::sync::Weak<Fabric>);

impl ChipObserver for StopFabricOnRefusal {
    fn interests(&self) -> Interests {
        Interests::REFUSALS
    }
    fn record_refused(&self, chip: u32, e: &ChipError) {
        if let Some(f) = self.0.upgrade() {
            f.abort(
                chip,
                FabricError::ChipStopped {
                    chip,
                    reason: e.to_string(),
                },
            );
        }
    }
}

/// The error to report from per-chip results. A record a chip refused (a damaged trace) comes
/// first: it is the cause, and the other chips' collectives then fail waiting for the chip
/// that stopped. Next any error that is not a bare timeout (a kernel's error names what
/// failed), else the first.
pub(crate) fn pick_error(results: Vec<(u32, std::result::Result<(), ChipError>)>) -> Result<()> {
    let mut errors: Vec<(u32, ChipError)> = results
        .into_iter()
        .filter_map(|(id, r)| r.err().map(|e| (id, e)))
        .collect();
    let rank = |e: &ChipError| match e {
        ChipError::BadRecord { .. } => 0,
        ChipError::Timeout { .. } => 2,
        _ => 1,
    };
    let Some(pick) = (0..errors.len()).min_by_key(|&i| rank(&errors[i].1)) else {
        return Ok(());
    };
    let (chip, source) = errors.swap_remove(pick);
    Err(MeshError::Chip { chip, source })
}

/// Chip ids of a mesh view, row-major.
fn mesh_chip_ids(cluster: &ClusterGraph, shape: MeshShape) -> Result<Vec<u32>> {
    let (rows, cols) = cluster.mesh_shape();
    if shape.rows == 0 || shape.cols == 0 {
        return Err(MeshError::Config(format!("mesh shape {shape} is empty")));
    }
    if shape.rows <= rows && shape.cols <= cols {
        let mut ids = Vec::new();
        for r in 0..shape.rows {
            for c in 0..shape.cols {
                ids.push(cluster.chip_at(r, c).ok_or_else(|| {
                    MeshError::Config(format!("{} has no chip at ({r}, {c})", cluster.name()))
                })?);
            }
        }
        return Ok(ids);
    }
    if (shape.rows == 1 || shape.cols == 1) && shape.num_devices() == cluster.num_chips() {
        if let Some(line) = cluster.linearize() {
            return Ok(line.chips);
        }
    }
    Err(MeshError::Config(format!(
        "mesh shape {shape} does not fit {} ({rows}x{cols}, {} chips): use a sub-grid of it, or 1x{} along its ring",
        cluster.name(),
        cluster.num_chips(),
        cluster.num_chips()
    )))
}

fn build_fabric(
    cluster: &ClusterGraph,
    shape: MeshShape,
    ids: &[u32],
    chips: &[Arc<Chip>],
    config: FabricConfig,
    mesh: &MeshConfig,
    ranks: Option<&mut crate::ranks::MeshRanks>,
) -> Result<Fabric> {
    // Every chip of a mesh has one arch (the cluster's).
    let arch = chips[0].arch();
    let in_mesh = |id: u32| ids.contains(&id);
    let links: Vec<EthLink> = cluster
        .links()
        .iter()
        .filter(|l| in_mesh(l.a.0) && in_mesh(l.b.0))
        .map(|l| EthLink::new(l.a, l.b))
        .collect();
    let ring_ok = |v: &[u32]| v.len() > 2 && cluster.link_count(v[0], *v.last().unwrap()) > 0;
    let mut axes = Vec::new();
    let mut push = |v: Vec<u32>| {
        if v.len() > 1 && !axes.iter().any(|a: &AxisLine| a.chips == v) {
            let is_ring = ring_ok(&v);
            axes.push(AxisLine { chips: v, is_ring });
        }
    };
    for r in 0..shape.rows {
        push((0..shape.cols).map(|c| ids[r * shape.cols + c]).collect());
    }
    for c in 0..shape.cols {
        push((0..shape.rows).map(|r| ids[r * shape.cols + c]).collect());
    }
    if shape.rows > 1 && shape.cols > 1 {
        if let Some(line) = cluster.linearize().filter(|l| l.chips.len() == ids.len()) {
            push(line.chips);
        }
    }
    let params = match arch.arch {
        ttmesh_chip::Arch::Blackhole => LinkParams::blackhole(),
        _ if config.is_2d() => LinkParams::wormhole_2d(),
        _ => LinkParams::wormhole(),
    };
    let grid = MeshGrid::new(shape.rows as u32, shape.cols as u32, ids.to_vec());
    let mut spec =
        FabricSpec::new(cluster.num_chips() as u32, links, axes, params, config).with_grid(grid);
    // A config the mesh's links cannot carry (a torus without wrap links, 2D on a line, a
    // ring config with no ring) is refused here, naming what would work.
    spec.check_config()?;
    // One timeout for every wait of the mesh: the chips' (TTMESH_OPERATION_TIMEOUT_SECONDS,
    // default 60 s) unless the config sets one.
    spec.timeout = mesh
        .operation_timeout
        .unwrap_or_else(ttmesh_chip::device::default_operation_timeout);
    let memories = ChipPort::for_fabric(cluster.num_chips() as u32, chips);
    Ok(match ranks {
        Some(r) => r.fabric(spec, memories)?,
        None => Fabric::new(spec, memories)?,
    })
}
