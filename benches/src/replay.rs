//! The run block's traced replay next to the time its kernels themselves took. A replay +
//! finish costs the kernels plus everything around them (waking dispatchers, the lockstep
//! barrier, fabric hand-offs, the finish); this prints both and their ratio on a T3K and a
//! Galaxy. Kernel time is the chips' own count (`Chip::dispatch_stats().kernel_ns`, taken
//! around each kernel's execute), so nothing is timed twice. Kernel times are wall-clock on a
//! host whose cores the chips share, and a collective kernel's time includes its waits for
//! the other chips: the busiest chip's sum is what the replay is compared with (what a chip
//! spent inside kernels), not a sum over chips, which counts shared time once per chip.

use std::fmt::Write as _;
use std::time::Instant;

use ttmesh::{
    Blocking, CqId, DataType, FabricConfig, Layout, MemoryConfig, MeshConfig, MeshDevice,
    MeshTensor, ReplicateTensorToMesh,
};

/// Per iteration, in microseconds.
pub struct ReplayVsKernels {
    pub replay_and_finish_us: f64,
    /// The busiest chip's kernel time.
    pub busiest_chip_kernels_us: f64,
    /// The least busy chip's.
    pub idlest_chip_kernels_us: f64,
}

impl ReplayVsKernels {
    /// Replay + finish over the busiest chip's kernel time.
    pub fn ratio(&self) -> f64 {
        self.replay_and_finish_us / self.busiest_chip_kernels_us.max(1e-9)
    }
}

/// The run block's input (replicated, bf16, DRAM) and its tensor-parallel MLP on `mesh`.
pub(crate) fn run_block_on(
    mesh: &MeshDevice,
    (t, h, f): (usize, usize, usize),
) -> ttmesh::Result<(MeshTensor, ttmesh::models::TpMlp)> {
    let x = MeshTensor::from_host(
        &ttmesh::models::random_host(&[1, 1, t, h], DataType::BFloat16, 1, 1.0)?,
        mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )?;
    Ok((x, ttmesh::models::TpMlp::new(mesh, h, f, 2)?))
}

/// Runs the run block (TP MLP, t x h x f, bf16) traced on `topology` for `iters` replays.
pub fn measure(
    topology: &str,
    (t, h, f): (usize, usize, usize),
    iters: usize,
) -> Result<ReplayVsKernels, String> {
    let err = |e: ttmesh::MeshError| e.to_string();
    let mesh = MeshDevice::open(MeshConfig {
        topology: topology.into(),
        fabric_config: FabricConfig::Fabric1D,
        trace_region_size: 10_000_000,
        ..Default::default()
    })
    .map_err(err)?;
    let (x, mlp) = run_block_on(&mesh, (t, h, f)).map_err(err)?;
    drop(mlp.forward(&x).map_err(err)?);
    mesh.finish(CqId(0)).map_err(err)?;
    let tid = mesh.begin_trace_capture(CqId(0)).map_err(err)?;
    let y = mlp.forward(&x);
    mesh.end_trace_capture(tid, CqId(0)).map_err(err)?;
    let _y = y.map_err(err)?;
    mesh.execute_trace(tid, CqId(0), Blocking::Yes)
        .map_err(err)?;
    let kernel_ns = |m: &MeshDevice| -> Vec<u64> {
        m.chips()
            .iter()
            .map(|c| c.dispatch_stats().kernel_ns)
            .collect()
    };
    let before = kernel_ns(&mesh);
    let start = Instant::now();
    for _ in 0..iters {
        mesh.execute_trace(tid, CqId(0), Blocking::No)
            .map_err(err)?;
        mesh.finish(CqId(0)).map_err(err)?;
    }
    let elapsed = start.elapsed();
    let per_chip: Vec<f64> = kernel_ns(&mesh)
        .iter()
        .zip(&before)
        .map(|(a, b)| (a - b) as f64 / 1e3 / iters as f64)
        .collect();
    let _ = mesh.close();
    Ok(ReplayVsKernels {
        replay_and_finish_us: elapsed.as_secs_f64() * 1e6 / iters as f64,
        busiest_chip_kernels_us: per_chip.iter().copied().fold(0.0, f64::max),
        idlest_chip_kernels_us: per_chip.iter().copied().fold(f64::INFINITY, f64::min),
    })
}

/// The trace digest's cost on the run block (TP MLP, t x h x f, bf16) replayed on `topology`:
/// replay + finish per iteration, [kept, re-read][off, on] (see
/// `chip::digest_side_by_side`; re-read forces every chip to read its trace again).
pub fn digest_cost(
    topology: &str,
    (t, h, f): (usize, usize, usize),
    rounds: (usize, usize),
) -> Result<DigestCost, String> {
    let err = |e: ttmesh::MeshError| e.to_string();
    let mesh = MeshDevice::open(MeshConfig {
        topology: topology.into(),
        fabric_config: FabricConfig::Fabric1D,
        trace_region_size: 10_000_000,
        ..Default::default()
    })
    .map_err(err)?;
    let (x, mlp) = run_block_on(&mesh, (t, h, f)).map_err(err)?;
    drop(mlp.forward(&x).map_err(err)?);
    mesh.finish(CqId(0)).map_err(err)?;
    let tid = mesh.begin_trace_capture(CqId(0)).map_err(err)?;
    let y = mlp.forward(&x);
    mesh.end_trace_capture(tid, CqId(0)).map_err(err)?;
    let _y = y.map_err(err)?;
    let infos: Vec<_> = mesh.trace_info(tid).into_iter().flatten().collect();
    let bytes = infos.iter().map(|i| i.command_bytes).max().unwrap_or(0);
    let epochs = || -> Vec<u64> {
        mesh.chips()
            .iter()
            .map(|c| c.memory().watched_epoch())
            .collect()
    };
    mesh.execute_trace(tid, CqId(0), Blocking::Yes)
        .map_err(err)?;
    let before = epochs();
    mesh.execute_trace(tid, CqId(0), Blocking::Yes)
        .map_err(err)?;
    let kept = epochs() == before;
    // The hashes alone, every chip's one after another (more than a replay pays: the chips'
    // dispatchers check their own traces side by side).
    let traces = mesh
        .chips()
        .iter()
        .zip(&infos)
        .map(|(c, info)| c.read_trace_commands(info))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let mut hashes: Vec<std::time::Duration> = (0..101)
        .map(|_| {
            let t = Instant::now();
            for bytes in &traces {
                std::hint::black_box(ttmesh_chip::device::trace_digest(std::hint::black_box(
                    bytes,
                )));
            }
            t.elapsed()
        })
        .collect();
    hashes.sort_unstable();
    let times = crate::chip::digest_side_by_side(
        &|on| mesh.set_trace_digest(on),
        &|| {
            mesh.chips()
                .iter()
                .zip(&infos)
                .try_for_each(|(c, info)| crate::chip::force_trace_reread(c, info))
        },
        &mut || {
            let start = Instant::now();
            mesh.execute_trace(tid, CqId(0), Blocking::No)
                .map_err(err)?;
            mesh.finish(CqId(0)).map_err(err)?;
            Ok(start.elapsed())
        },
        rounds,
    );
    let _ = mesh.close();
    Ok(DigestCost {
        times: times?,
        largest_trace_bytes: bytes,
        kept,
        hashes_alone: hashes[hashes.len() / 2],
    })
}

/// What `digest_cost` measured.
pub struct DigestCost {
    /// Replay + finish per iteration, [kept, re-read][off, on].
    pub times: [[std::time::Duration; 2]; 2],
    pub largest_trace_bytes: u64,
    /// A replay left every chip's TRACE region unwritten: the next one keeps the bytes it
    /// read, and checks nothing.
    pub kept: bool,
    /// Every chip's trace hashed one after another (median).
    pub hashes_alone: std::time::Duration,
}

/// The report lines, for the T3K and the Galaxy.
pub fn report(quick: bool, out: &mut String) {
    let iters = if quick { 5 } else { 30 };
    let shape = (32, 512, 2048);
    for topology in ["t3k", "galaxy"] {
        match measure(topology, shape, iters) {
            Ok(r) => {
                let _ = writeln!(
                    out,
                    "run block replay vs kernels ({topology}, {iters} replays): replay + finish {:.1} us/iter; kernel time per chip {:.1} to {:.1} us; replay / busiest chip's kernels {:.2}x (goal <= 1.5x)",
                    r.replay_and_finish_us,
                    r.idlest_chip_kernels_us,
                    r.busiest_chip_kernels_us,
                    r.ratio()
                );
            }
            Err(e) => {
                let _ = writeln!(out, "run block replay vs kernels ({topology}): failed: {e}");
            }
        }
    }
}
