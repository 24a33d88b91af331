//! `ttmesh bench ranks`: a mesh over MPI ranks (run it under `mpirun`; alone it is one rank).
//!
//! Bits: every collective (all_gather, reduce_scatter, all_reduce) on every axis of a Galaxy
//! (Fabric1D) and a T3K (Fabric1DRing, its 8-chip ring as a ring), each chip's input different, one line
//! per case with the digest of every chip's output. The lines are the same whatever the
//! ranks, so `diff` of a one-process run and an `mpirun -np N` run checks that collectives
//! across ranks give the same bits (`.ci/run` does).
//!
//! Speed (2 ranks only): all_reduce of 36 KiB and 16 MiB per chip on an n300 split one chip
//! per rank, next to OpenMPI's MPI_Allreduce between the same 2 processes timed in batches
//! alternating with it (so both see the same host load), with the ratio of the medians. Then the lockstep barrier: what one
//! `synchronize_device` costs on that n300 (idle, and after an `execute_trace`) beside OpenMPI's
//! MPI_Barrier timed right after and the same n300 in one process, and how late a rank that
//! arrived early leaves it (under `mpirun -np 1`: the barrier as an exchange with itself). On 4
//! ranks: a 128-chip all_reduce (four Galaxies as one mesh, a Galaxy per rank), its time and
//! each rank's peak memory, and that mesh's barrier beside MPI_Barrier. Prints figures;
//! asserts nothing.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use ttmesh::ccl::{self, CclArgs};
use ttmesh::{
    Blocking, CqId, DataType, FabricConfig, Layout, MemoryConfig, MeshConfig, MeshDevice,
    MeshTensor, ShardTensorToMesh, Topology,
};

use crate::ccl::MpiFigures;

/// What the benchmark printed, and whether this process prints it (rank 0, or alone).
pub struct RanksReport {
    pub text: String,
    pub speaks: bool,
}

/// The collectives whose bits are compared.
const OPS: [&str; 3] = ["all_gather", "reduce_scatter", "all_reduce"];

/// Opens `topology` split over the ranks running: by the shipped bindings
/// `topologies/bindings/{topology}-{ranks}-ranks.toml` where there is one (a mesh whose rows
/// do not split that many ways), else by rows.
fn open(topology: &str, fabric: FabricConfig, ranks: u32) -> Result<MeshDevice, String> {
    open_with(config(topology, fabric, ranks))
}

/// The configuration [`open`] opens.
fn config(topology: &str, fabric: FabricConfig, ranks: u32) -> MeshConfig {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../topologies/bindings")
        .join(format!("{topology}-{ranks}-ranks.toml"));
    MeshConfig {
        topology: topology.into(),
        fabric_config: fabric,
        rank_bindings: (ranks > 1 && file.exists()).then_some(file),
        ..Default::default()
    }
}

fn open_with(config: MeshConfig) -> Result<MeshDevice, String> {
    let topology = config.topology.clone();
    MeshDevice::open(config).map_err(|e| format!("--mesh {topology}: {e}"))
}

/// Runs `op` on `x` (per chip `[1, 1, rows, cols]` bf16) along `axis`; the output tensor.
fn collective(
    x: &MeshTensor,
    op: &str,
    axis: Option<usize>,
    topology: Topology,
) -> Result<MeshTensor, String> {
    let args = CclArgs {
        cluster_axis: axis,
        topology: Some(topology),
        ..Default::default()
    };
    let y = match op {
        "all_gather" => ccl::all_gather(x, 3, &args),
        "reduce_scatter" => ccl::reduce_scatter(x, 3, &args),
        _ => ccl::all_reduce(x, &args),
    };
    y.map_err(|e| format!("{op} on axis {axis:?}: {e}"))
}

/// Each chip its own input: a `[chips, 1, rows, cols]` tensor sharded on dim 0.
fn inputs(mesh: &MeshDevice, rows: usize, cols: usize, seed: u64) -> Result<MeshTensor, String> {
    let n = mesh.num_devices();
    let host = ttmesh::models::random_host(&[n, 1, rows, cols], DataType::BFloat16, seed, 1.0)
        .map_err(|e| e.to_string())?;
    MeshTensor::from_host(
        &host,
        mesh,
        &ShardTensorToMesh(0),
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .map_err(|e| e.to_string())
}

/// One line per (mesh, collective, axis, size): the digest of every chip's output.
fn bits(quick: bool, ranks: u32, out: &mut String) -> Result<(), String> {
    // 64 KiB (32 tiles across: every line length here divides it) and 1 MiB per chip.
    let sizes: &[(usize, usize)] = if quick {
        &[(32, 1024)]
    } else {
        &[(32, 1024), (256, 2048)]
    };
    let meshes = [
        ("galaxy", FabricConfig::Fabric1D, Topology::Linear),
        ("t3k", FabricConfig::Fabric1DRing, Topology::Ring),
    ];
    for (name, fabric, topology) in meshes {
        let mesh = open(name, fabric, ranks)?;
        let mut run = || -> Result<(), String> {
            for &(rows, cols) in sizes {
                let x = inputs(&mesh, rows, cols, (rows * cols) as u64)?;
                for op in OPS {
                    for axis in [Some(0), Some(1), None] {
                        // A T3K's ring closes through all 8 chips only.
                        let topology = if axis.is_none() {
                            topology
                        } else {
                            Topology::Linear
                        };
                        let y = collective(&x, op, axis, topology)?;
                        let d = y.bits_digest(CqId(0)).map_err(|e| e.to_string())?;
                        let kib = rows * cols * 2 / 1024;
                        let axis = axis.map_or("all".to_string(), |a| a.to_string());
                        writeln!(out, "bits {name} {op} axis={axis} {kib}KiB {d:016x}").unwrap();
                        y.deallocate(true).map_err(|e| e.to_string())?;
                    }
                }
                x.deallocate(true).map_err(|e| e.to_string())?;
            }
            Ok(())
        };
        let r = run();
        let closed = mesh.close().map_err(|e| e.to_string());
        r?;
        closed?;
    }
    Ok(())
}

/// The mesh `speed` times: an n300 split one chip per rank.
pub fn speed_mesh() -> Result<MeshDevice, String> {
    open("n300", FabricConfig::Fabric1D, 2)
}

/// Mean time of one all_reduce of `rows x cols` bf16 per chip on `mesh` over `iters` runs
/// (after one untimed run), in us: the slowest rank's, so every rank returns the same.
pub fn time_all_reduce(
    mesh: &MeshDevice,
    rows: usize,
    cols: usize,
    iters: usize,
) -> Result<f64, String> {
    let x = inputs(mesh, rows, cols, 5)?;
    let mine = mean_all_reduce_us(mesh, &x, iters)?;
    x.deallocate(true).map_err(|e| e.to_string())?;
    let all = ttmesh::ranks::exchange_f64(mesh, mine, Duration::from_secs(60))?;
    Ok(all.iter().copied().fold(0.0, f64::max))
}

/// This rank's mean time of an all_reduce of `x` (us over `iters`, after one untimed run that
/// compiles and first touches), each finished and its output freed.
fn mean_all_reduce_us(mesh: &MeshDevice, x: &MeshTensor, iters: usize) -> Result<f64, String> {
    let args = CclArgs::default();
    let once = || -> Result<Duration, String> {
        let t = Instant::now();
        let y = ccl::all_reduce(x, &args).map_err(|e| e.to_string())?;
        mesh.finish(CqId(0)).map_err(|e| e.to_string())?;
        let took = t.elapsed();
        y.deallocate(true).map_err(|e| e.to_string())?;
        Ok(took)
    };
    once()?;
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        total += once()?;
    }
    Ok(total.as_secs_f64() * 1e6 / iters.max(1) as f64)
}

/// OpenMPI's MPI_Allreduce of `bytes` per rank between this job's ranks, timed now (mean
/// us of `iters`, slowest rank); None when this build has no MPI.
pub fn mpi_allreduce_us(bytes: usize, iters: usize) -> Result<Option<f64>, String> {
    #[cfg(feature = "mpi")]
    if let Some(t) = ttmesh_transport_mpi::started() {
        return t
            .time_allreduce(bytes, iters, Duration::from_secs(60))
            .map(|s| Some(s * 1e6))
            .map_err(|e| e.to_string());
    }
    let _ = (bytes, iters);
    Ok(None)
}

/// all_reduce across 2 ranks (an n300, one chip each) beside MPI_Allreduce between the same
/// 2 processes, each size timed both ways one after the other.
fn speed(quick: bool, out: &mut String) -> Result<(), String> {
    let mesh = speed_mesh()?;
    let recorded = MpiFigures::load();
    let mut source = format!("MPI figures: MPI_Allreduce (f32 sum) between these 2 ranks, timed in this run in batches alternating with ours (medians of {BATCHES} batch means)");
    writeln!(
        out,
        "all_reduce across 2 ranks (n300, one chip per rank) vs OpenMPI MPI_Allreduce, 2 processes\n{:>10} {:>12} {:>12} {:>8}",
        "size", "ttmesh us", "MPI us", "ratio"
    )
    .unwrap();
    // (rows, cols, iterations per batch, MPI's per batch) per chip: 36 KiB as a decode
    // layer's 32x576; 16 MiB as 8192x1024. MPI's small call takes microseconds: more of them.
    for (rows, cols, iters, mpi_iters) in [
        (32, 576, if quick { 10 } else { 40 }, 200),
        (
            8192,
            1024,
            if quick { 2 } else { 4 },
            if quick { 2 } else { 4 },
        ),
    ] {
        let size = rows * cols * 2;
        let x = inputs(&mesh, rows, cols, 5)?;
        // Ours and MPI's alternate batch by batch, each figure the median of its batches: a
        // burst of other load (or one of MPI's slower runs: its 16 MiB mean read 3.8 and
        // 8.1 ms in back-to-back runs) then moves one batch of each, not one side.
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..BATCHES {
            let mine = mean_all_reduce_us(&mesh, &x, iters)?;
            let all = ttmesh::ranks::exchange_f64(&mesh, mine, Duration::from_secs(60))?;
            ours.push(all.into_iter().fold(mine, f64::max));
            if let Some(m) = mpi_allreduce_us(size, mpi_iters)? {
                theirs.push(m);
            }
        }
        x.deallocate(true).map_err(|e| e.to_string())?;
        let us = crate::median(ours);
        let mpi_us = match theirs.is_empty() {
            false => Some(crate::median(theirs)),
            true => {
                source = recorded.source.clone();
                recorded.us(2, size)
            }
        };
        let (mpi_us, ratio) = match mpi_us {
            Some(m) => (format!("{m:.1}"), format!("{:.2}x", us / m)),
            None => ("-".into(), "-".into()),
        };
        writeln!(out, "{:>10} {us:>12.1} {mpi_us:>12} {ratio:>8}", size).unwrap();
    }
    writeln!(out, "{source}").unwrap();
    mesh.close().map_err(|e| e.to_string())
}

/// What one `synchronize_device` costs, in us.
#[derive(Clone, Copy, Default)]
struct SyncCosts {
    /// With no work queued.
    idle: f64,
    /// Right after an `execute_trace` (not waited for) of a one-op trace.
    traced: f64,
    /// A bare host exchange (empty bytes) between the mesh's ranks: the barrier's transport
    /// without the mesh's state (nothing to exchange on a mesh wholly in this process).
    exchange: f64,
}

/// Timing batches: each figure is the median of the batches' means, so a burst of other load
/// on the host moves one batch, not the figure.
const BATCHES: usize = 5;

/// The median of `BATCHES` means of `iters` runs of `once` (each returning the time it counts).
fn median_of_batches(
    iters: usize,
    mut once: impl FnMut() -> Result<Duration, String>,
) -> Result<f64, String> {
    let per = iters.div_ceil(BATCHES).max(1);
    let mut means = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let mut total = Duration::ZERO;
        for _ in 0..per {
            total += once()?;
        }
        means.push(total.as_secs_f64() * 1e6 / per as f64);
    }
    Ok(crate::median(means))
}

/// This rank's [`SyncCosts`] on `mesh`, the trace a relu of one tile per chip. On a mesh split
/// over ranks each synchronize is one barrier: a host exchange of every rank's state.
fn synchronize_costs(
    mesh: &MeshDevice,
    idle_iters: usize,
    traced_iters: usize,
) -> Result<SyncCosts, String> {
    let err = |e: ttmesh::MeshError| e.to_string();
    let timed = |f: &dyn Fn() -> ttmesh::Result<()>| -> Result<Duration, String> {
        let t = Instant::now();
        f().map_err(err)?;
        Ok(t.elapsed())
    };
    mesh.synchronize_device().map_err(err)?;
    let idle = median_of_batches(idle_iters, || timed(&|| mesh.synchronize_device()))?;
    let bare = || {
        ttmesh::ranks::exchange_bytes(mesh, "timing", Vec::new(), Duration::from_secs(60)).map(drop)
    };
    let exchange = median_of_batches(idle_iters, || timed(&bare))?;

    let x = inputs(mesh, 32, 32, 3)?;
    // Compiled before capture, as a trace requires.
    ttmesh::ops::relu(&x, &Default::default())
        .and_then(|y| y.deallocate(true))
        .map_err(err)?;
    let tid = mesh.begin_trace_capture(CqId(0)).map_err(err)?;
    let y = ttmesh::ops::relu(&x, &Default::default());
    mesh.end_trace_capture(tid, CqId(0)).map_err(err)?;
    let y = y.map_err(err)?;
    mesh.execute_trace(tid, CqId(0), Blocking::Yes)
        .map_err(err)?;
    mesh.synchronize_device().map_err(err)?;
    let traced = median_of_batches(traced_iters, || {
        mesh.execute_trace(tid, CqId(0), Blocking::No)
            .map_err(err)?;
        timed(&|| mesh.synchronize_device())
    });
    mesh.release_trace(tid).map_err(err)?;
    y.deallocate(true).map_err(err)?;
    x.deallocate(true).map_err(err)?;
    Ok(SyncCosts {
        idle,
        traced: traced?,
        exchange,
    })
}

/// The slowest rank's costs, exchanged over `mesh`'s ranks.
fn slowest(mesh: &MeshDevice, mine: SyncCosts) -> Result<SyncCosts, String> {
    let max = |v: f64| -> Result<f64, String> {
        let all = ttmesh::ranks::exchange_f64(mesh, v, Duration::from_secs(60))?;
        Ok(all.into_iter().fold(v, f64::max))
    };
    Ok(SyncCosts {
        idle: max(mine.idle)?,
        traced: max(mine.traced)?,
        exchange: max(mine.exchange)?,
    })
}

/// A round trip between two threads of this process over a channel, in us (median of
/// batches): the floor under a host exchange, whose caller hands its bytes to MPI's progress
/// thread and is woken by it with the answer.
fn thread_round_trip_us(iters: usize) -> Result<f64, String> {
    let (ask, asked) = std::sync::mpsc::channel::<()>();
    let (answer, answered) = std::sync::mpsc::channel::<()>();
    let echo = std::thread::spawn(move || {
        while asked.recv().is_ok() {
            if answer.send(()).is_err() {
                break;
            }
        }
    });
    let gone = || "the echo thread ended".to_string();
    let us = median_of_batches(iters, || {
        let t = Instant::now();
        ask.send(()).map_err(|_| gone())?;
        answered
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| gone())?;
        Ok(t.elapsed())
    });
    drop(ask);
    let _ = echo.join();
    us
}

/// The lockstep barrier's cost: `synchronize_device` on an n300 split over the
/// `ranks_running` ranks (one chip per rank on 2), beside OpenMPI's MPI_Barrier between the
/// same ranks timed right after it, and beside the same n300 opened wholly in rank 0's
/// process (the other rank waiting meanwhile, so the host runs 2 chips either way).
fn lockstep(quick: bool, ranks_running: u32, out: &mut String) -> Result<(), String> {
    let (idle_iters, traced_iters, mpi_iters) = if quick {
        (200, 50, 1000)
    } else {
        (2000, 500, 10000)
    };
    let mut cfg = config("n300", FabricConfig::Fabric1D, ranks_running);
    cfg.trace_region_size = 1 << 20;
    let split = open_with(cfg.clone())?;
    let mut run = || -> Result<(), String> {
        let ranks = slowest(&split, synchronize_costs(&split, idle_iters, traced_iters)?)?;
        let mpi = mpi_barrier_us(mpi_iters)?;
        let mut alone = SyncCosts::default();
        let mut handoff = 0.0;
        if launched_rank() == 0 {
            let mesh = ttmesh::ranks::open_in_this_process(MeshConfig {
                rank_bindings: None,
                ..cfg.clone()
            })
            .map_err(|e| format!("n300 in one process: {e}"))?;
            let costs = synchronize_costs(&mesh, idle_iters, traced_iters);
            let closed = mesh.close().map_err(|e| e.to_string());
            alone = costs?;
            closed?;
            handoff = thread_round_trip_us(idle_iters)?;
        }
        let alone = slowest(&split, alone)?;
        let handoff = ttmesh::ranks::exchange_f64(&split, handoff, Duration::from_secs(60))?
            .into_iter()
            .fold(0.0, f64::max);
        writeln!(
            out,
            "synchronize_device on an n300: split over {n} rank(s) under mpirun (a barrier), in one process, and OpenMPI MPI_Barrier between the same {n} rank(s)\n{:<34} {:>10} {:>10} {:>10} {:>12} {:>12}",
            "", format!("{ranks_running} rank(s) us"), "1 proc us", "MPI us", "ranks/1 proc", "ranks/MPI",
            n = ranks_running
        )
        .unwrap();
        let rows = [
            ("idle (nothing queued)", ranks.idle, Some(alone.idle)),
            (
                "after execute_trace (1-op trace)",
                ranks.traced,
                Some(alone.traced),
            ),
            ("bare host exchange (no mesh state)", ranks.exchange, None),
        ];
        let ratio = |a: f64, b: f64| format!("{:.1}x", a / b.max(1e-9));
        for (what, r, a) in rows {
            let (m, vs_mpi) = match mpi {
                Some(m) => (format!("{m:.1}"), ratio(r, m)),
                None => ("-".into(), "-".into()),
            };
            let (a, vs_one) = match a {
                Some(a) => (format!("{a:.1}"), ratio(r, a)),
                None => ("-".into(), "-".into()),
            };
            writeln!(
                out,
                "{what:<34} {r:>10.1} {a:>10} {m:>10} {vs_one:>12} {vs_mpi:>12}"
            )
            .unwrap();
        }
        writeln!(out, "(medians of {BATCHES} batch means, slowest rank: {idle_iters} idle and {traced_iters} traced synchronizes, {idle_iters} exchanges, {mpi_iters} MPI_Barriers)").unwrap();
        writeln!(out, "for scale: a round trip between two threads of one process over a channel (a host exchange's caller and MPI's progress thread make one): {handoff:.1} us").unwrap();
        if ranks_running == 2 {
            let iters = if quick { 50 } else { 200 };
            let mut lags = Vec::new();
            for early in [Duration::from_micros(500), Duration::from_millis(2)] {
                lags.push(release_lag_us(&split, early, iters)?);
            }
            writeln!(
                out,
                "rank 0, arriving early, leaves the barrier this long after rank 1 leaves it (median of {iters}): {:.1} us when it waited 0.5 ms, {:.1} us when it waited 2 ms",
                lags[0], lags[1]
            )
            .unwrap();
        }
        Ok(())
    };
    let r = run();
    let closed = split.close().map_err(|e| e.to_string());
    r?;
    closed
}

/// How long after the last rank's barrier ends the barrier of a rank that arrived `early`
/// ends, in us (median of `iters`; the same on every rank): rank 1 idles `early` before each
/// `synchronize_device`, so rank 0 waits for it that long. What a rank whose share of the work
/// is smaller loses at each barrier on top of the wait itself.
fn release_lag_us(mesh: &MeshDevice, early: Duration, iters: usize) -> Result<f64, String> {
    let late = launched_rank() == 1;
    // Wall-clock times (ns): the ranks compare them, which holds on one host.
    let mut ends = Vec::with_capacity(iters * 8);
    for _ in 0..iters {
        if late {
            std::thread::sleep(early);
        }
        mesh.synchronize_device().map_err(|e| e.to_string())?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| e.to_string())?;
        ends.extend((now.as_nanos() as u64).to_le_bytes());
    }
    let all = ttmesh::ranks::exchange_bytes(mesh, "barrier ends", ends, Duration::from_secs(60))
        .map_err(|e| e.to_string())?;
    let times = |r: usize| -> Vec<f64> {
        all.get(r).map_or_else(Vec::new, |b| {
            b.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as f64)
                .collect()
        })
    };
    let (first, last) = (times(0), times(1));
    let mut lags: Vec<f64> = first
        .iter()
        .zip(&last)
        .map(|(a, b)| (a - b) / 1e3)
        .collect();
    if lags.is_empty() {
        return Err("barrier ends: a rank sent no times".into());
    }
    lags.sort_by(f64::total_cmp);
    Ok(lags[lags.len() / 2])
}

/// This process's rank (0 outside mpirun).
fn launched_rank() -> u32 {
    ttmesh::ranks::launched().map_or(0, |(rank, _)| rank)
}

/// OpenMPI's MPI_Barrier between this job's ranks, timed now: the median of [`BATCHES`]
/// means of `iters / BATCHES` barriers each (slowest rank's), in us; None when this build has
/// no MPI.
fn mpi_barrier_us(iters: usize) -> Result<Option<f64>, String> {
    #[cfg(feature = "mpi")]
    if let Some(t) = ttmesh_transport_mpi::started() {
        let mut means = Vec::with_capacity(BATCHES);
        for _ in 0..BATCHES {
            let s = t
                .time_barrier(iters / BATCHES, Duration::from_secs(60))
                .map_err(|e| e.to_string())?;
            means.push(s * 1e6);
        }
        means.sort_by(f64::total_cmp);
        return Ok(Some(means[BATCHES / 2]));
    }
    let _ = iters;
    Ok(None)
}

/// Peak resident memory of this process (VmHWM), in MiB; 0 where /proc does not say.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// A 128-chip all_reduce (four Galaxies as one mesh, one per rank) over all chips: time and
/// each rank's peak memory.
fn big_mesh(quick: bool, ranks: u32, out: &mut String) -> Result<(), String> {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../topologies/descriptors/4xgalaxy.toml"
    );
    let mesh = open(file, FabricConfig::Fabric1D, ranks)?;
    let timeout = Duration::from_secs(120);
    let sizes: &[(usize, usize)] = if quick {
        &[(32, 576)]
    } else {
        &[(32, 576), (512, 1024)]
    };
    writeln!(
        out,
        "all_reduce over all 128 chips of 4xgalaxy on {ranks} ranks (one host)\n{:>10} {:>12} {:>22}",
        "size", "us", "peak RSS per rank MiB"
    )
    .unwrap();
    for &(rows, cols) in sizes {
        let x = inputs(&mesh, rows, cols, 11)?;
        let mine = mean_all_reduce_us(&mesh, &x, if quick { 3 } else { 10 })?;
        let us = ttmesh::ranks::exchange_f64(&mesh, mine, timeout)?
            .into_iter()
            .fold(0.0, f64::max);
        let rss = ttmesh::ranks::exchange_f64(&mesh, peak_rss_mib(), timeout)?;
        let rss: Vec<String> = rss.iter().map(|m| format!("{m:.0}")).collect();
        writeln!(
            out,
            "{:>10} {us:>12.1} {:>22}",
            rows * cols * 2,
            rss.join(" ")
        )
        .unwrap();
        x.deallocate(true).map_err(|e| e.to_string())?;
    }
    let iters = if quick { 200 } else { 2000 };
    let sync = median_of_batches(iters, || {
        let t = Instant::now();
        mesh.synchronize_device().map_err(|e| e.to_string())?;
        Ok(t.elapsed())
    })?;
    let sync = ttmesh::ranks::exchange_f64(&mesh, sync, timeout)?
        .into_iter()
        .fold(sync, f64::max);
    let (mpi, ratio) = match mpi_barrier_us(iters * 5)? {
        Some(m) => (format!("{m:.1}"), format!("{:.1}x", sync / m.max(1e-9))),
        None => ("-".into(), "-".into()),
    };
    writeln!(
        out,
        "synchronize_device with nothing queued (a barrier of {ranks} ranks): {sync:.1} us; OpenMPI MPI_Barrier between the same ranks {mpi} us; ratio {ratio} (medians of {BATCHES} batch means, slowest rank)"
    )
    .unwrap();
    mesh.close().map_err(|e| e.to_string())
}

/// The benchmark: the bits on every split, then (on 2 ranks) the speed and the barrier beside
/// MPI.
pub fn run(quick: bool) -> Result<RanksReport, String> {
    let launch = ttmesh_settings::settings().mpi_launch.clone();
    let ranks = launch.as_ref().map_or(1, |l| l.size);
    let mut text = format!("ranks: {ranks}\n");
    bits(quick, ranks, &mut text)?;
    match ranks {
        2 => {
            speed(quick, &mut text)?;
            lockstep(quick, 2, &mut text)?;
        }
        4 => big_mesh(quick, ranks, &mut text)?,
        // One rank under mpirun: its barrier is an exchange with itself, the hand-offs to
        // MPI's progress thread and back with no message between ranks.
        1 if launch.is_some() => lockstep(quick, 1, &mut text)?,
        _ => text.push_str(
            "speed beside MPI_Allreduce and the barrier beside MPI_Barrier: run under mpirun -np 2; a 128-chip mesh: -np 4\n",
        ),
    }
    Ok(RanksReport {
        text,
        speaks: launch.is_none_or(|l| l.rank == 0),
    })
}
