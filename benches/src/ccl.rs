//! `ttmesh bench ccl`: collectives in nccl-tests' columns next to the host's aggregate memcpy
//! bandwidth, and the host cost of the `ttmesh run` block traced vs untraced. Prints figures and
//! ratios; asserts nothing (machines are noisy).
//!
//! Conventions (nccl-tests, FACTS.md): `size` S is the per-chip buffer nccl-tests reports:
//! all_reduce's tensor; all_gather's output (input S/n); reduce_scatter's input (output S/n).
//! algbw = S / t; busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for the others. Time t is
//! enqueue + finish of one collective on a warmed-up program cache, averaged. On an emulated
//! mesh every chip shares host memory, so busbw cannot exceed M / n, where M is the aggregate
//! memcpy bandwidth of all host cores copying at once; busbw x n / M is the efficiency.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use ttmesh::ccl::{self, CclArgs};
use ttmesh::{
    Blocking, CqId, DataType, FabricConfig, Layout, MemoryConfig, MeshConfig, MeshDevice,
    MeshTensor, ReplicateTensorToMesh, TensorSpec,
};

const MIB: usize = 1 << 20;

/// Aggregate memcpy bandwidth (bytes copied per second) of every core copying its own buffers
/// at once: the ceiling for data that moves between emulated chips.
pub fn memcpy_bandwidth(bytes_per_thread: usize, rounds: usize) -> f64 {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut best = 0f64;
    let mut bufs: Vec<(Vec<u8>, Vec<u8>)> = (0..threads)
        .map(|t| {
            (
                vec![t as u8 + 1; bytes_per_thread],
                vec![0u8; bytes_per_thread],
            )
        })
        .collect();
    for _ in 0..rounds {
        let start = std::sync::Barrier::new(threads);
        let took = std::thread::scope(|s| {
            let hs: Vec<_> = bufs
                .iter_mut()
                .map(|(src, dst)| {
                    let start = &start;
                    s.spawn(move || {
                        start.wait();
                        let t = Instant::now();
                        for _ in 0..4 {
                            dst.copy_from_slice(src);
                            std::hint::black_box(&mut dst[..]);
                        }
                        t.elapsed()
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or(Duration::MAX))
                .max()
                .unwrap_or(Duration::MAX)
        });
        best = best.max((4 * threads * bytes_per_thread) as f64 / took.as_secs_f64());
    }
    best
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "all_reduce",
            Op::AllGather => "all_gather",
            Op::ReduceScatter => "reduce_scatter",
        }
    }
    fn bus_factor(self, n: usize) -> f64 {
        let f = (n as f64 - 1.0) / n as f64;
        if self == Op::AllReduce {
            2.0 * f
        } else {
            f
        }
    }
}

struct Row {
    op: Op,
    n: usize,
    mesh: String,
    size: usize,
    time: Duration,
    /// The ring floor's time for the same all_reduce (`ring_floor`); none for the other ops.
    floor: Option<Duration>,
}

/// How many timed iterations: a count, or as many as fit a time budget (3 to 200).
#[derive(Clone, Copy)]
pub(crate) enum Iters {
    Exactly(usize),
    Within(Duration),
}

/// Times one collective of `size` bytes per chip (bf16, DRAM, tile layout) on `mesh`.
fn time_collective(
    mesh: &MeshDevice,
    op: Op,
    size: usize,
    iters: Iters,
) -> Result<Duration, String> {
    let rows = size / 2 / 1024;
    time_collective_shaped(mesh, op, &[1, 1, rows, 1024], iters)
}

/// Times one collective of a bf16 tile tensor of shape `full` per chip (all_gather's output,
/// reduce_scatter's input) over all chips.
fn time_collective_shaped(
    mesh: &MeshDevice,
    op: Op,
    full: &[usize],
    iters: Iters,
) -> Result<Duration, String> {
    time_collective_along(mesh, op, full, None, iters)
}

/// [`time_collective_shaped`] along `cluster_axis` (TT-NN's: 0 columns, 1 rows, None all).
pub(crate) fn time_collective_along(
    mesh: &MeshDevice,
    op: Op,
    full: &[usize],
    cluster_axis: Option<usize>,
    iters: Iters,
) -> Result<Duration, String> {
    let err = |e: ttmesh::MeshError| e.to_string();
    let s = mesh.shape();
    let n = match cluster_axis {
        Some(0) => s.rows,
        Some(_) => s.cols,
        None => mesh.num_devices(),
    };
    let rows = full[2];
    let full = full.to_vec();
    let (in_shape, out_shape) = match op {
        Op::AllReduce => (full.clone(), full.clone()),
        Op::AllGather => (vec![1, 1, rows, full[3] / n], full.clone()),
        Op::ReduceScatter => (full.clone(), vec![1, 1, rows, full[3] / n]),
    };
    let x = MeshTensor::from_host(
        &ttmesh::models::random_host(&in_shape, DataType::BFloat16, 7, 0.5)
            .map_err(|e| e.to_string())?,
        mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .map_err(err)?;
    let out_spec = TensorSpec::new(
        out_shape,
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::DRAM,
    );
    let out = MeshTensor::allocate(mesh, &out_spec).map_err(err)?;
    let args = CclArgs {
        cluster_axis,
        output: Some(out.clone()),
        ..Default::default()
    };
    let once = || -> Result<Duration, String> {
        let t = Instant::now();
        let r = match op {
            Op::AllReduce => ccl::all_reduce(&x, &args),
            Op::AllGather => ccl::all_gather(&x, 3, &args),
            Op::ReduceScatter => ccl::reduce_scatter(&x, 3, &args),
        };
        r.map_err(err)?;
        mesh.finish(CqId(0)).map_err(err)?;
        Ok(t.elapsed())
    };
    once()?; // compile + first touch of every buffer
    let iters = match iters {
        Iters::Exactly(n) => n,
        // One timed run sizes the loop: a fixed 10 iterations of a 1 MiB collective (a few
        // ms in all) were decided by a single stall of the shared host.
        Iters::Within(budget) => {
            let probe = once()?.max(Duration::from_micros(1));
            (budget.as_secs_f64() / probe.as_secs_f64()).clamp(3.0, 200.0) as usize
        }
    };
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        total += once()?;
    }
    out.deallocate(true).map_err(err)?;
    x.deallocate(true).map_err(err)?;
    Ok(total / iters as u32)
}

/// Times `op` ("all_reduce", "all_gather", "reduce_scatter") of `size` bytes per chip on
/// `topology` (rings under Fabric1DRing, the rest Fabric1D), `iters` times after a warm-up:
/// the loop the `ccl_one` example runs under a profiler.
pub fn time_one(op: &str, topology: &str, size: usize, iters: usize) -> Result<Duration, String> {
    let op = match op {
        "all_reduce" => Op::AllReduce,
        "all_gather" => Op::AllGather,
        "reduce_scatter" => Op::ReduceScatter,
        other => {
            return Err(format!(
                "unknown collective {other:?}; use all_reduce, all_gather or reduce_scatter"
            ))
        }
    };
    // The mesh refuses a ring fabric where no line of chips closes into a ring.
    let has_ring = matches!(topology, "t3k" | "galaxy") || topology.starts_with("ring-");
    let fabric = if has_ring {
        FabricConfig::Fabric1DRing
    } else {
        FabricConfig::Fabric1D
    };
    let mesh = open(topology, fabric)?;
    // Below 1 MiB, one 32-row block as the small-size table (and decode) has it: 36864 bytes
    // is 32x576, whose tiles are all full; 1024-wide rows would pad it to 64 KiB.
    let t = if size < 1 << 20 && size.is_multiple_of(32 * 32 * 2) {
        time_collective_shaped(&mesh, op, &[1, 1, 32, size / 64], Iters::Exactly(iters))
    } else {
        time_collective(&mesh, op, size, Iters::Exactly(iters))
    };
    let _ = mesh.close();
    t
}

pub(crate) fn open(topology: &str, fabric: FabricConfig) -> Result<MeshDevice, String> {
    MeshDevice::open(MeshConfig {
        topology: topology.into(),
        fabric_config: fabric,
        trace_region_size: 10_000_000,
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

/// The ring floor's time (`ring_floor`) for an all_reduce of each size per chip on each mesh's
/// chip count, in the time budget the emulated rows have; none where the floor failed (said
/// in `out`). Timed before any mesh opens: a mesh's threads, spinning a while after its last
/// collective, would take the cores the floor's spinning threads need.
fn floor_times(
    meshes: &[(usize, &str, FabricConfig)],
    sizes: impl Iterator<Item = usize> + Clone,
    quick: bool,
    out: &mut String,
) -> std::collections::HashMap<(usize, usize), Option<Duration>> {
    let budget = Duration::from_millis(if quick { 30 } else { 150 });
    let mut floors = std::collections::HashMap::new();
    for &(n, ..) in meshes {
        for size in sizes.clone() {
            let t = crate::ring_floor::time_ring_floor(n, size, budget)
                .inspect_err(|e| {
                    let _ = writeln!(out, "ring floor, {n} chips, {size} B: failed: {e}");
                })
                .ok();
            floors.insert((n, size), t);
        }
    }
    floors
}

/// `t` in microseconds with `decimals` places.
fn micros(t: Duration, decimals: usize) -> String {
    format!("{:.*}", decimals, t.as_secs_f64() * 1e6)
}

fn gbps(bytes: f64, t: Duration) -> f64 {
    bytes / t.as_secs_f64() / 1e9
}

/// The collectives table. Meshes: 2 and 4 chips as lines, 8 as a T3K under Fabric1DRing (its
/// perimeter ring).
fn collectives(quick: bool, m: f64, mpi: &MpiFigures, out: &mut String) -> Vec<Row> {
    let meshes: &[(usize, &str, FabricConfig)] = if quick {
        &[
            (2, "line-2", FabricConfig::Fabric1D),
            (8, "t3k", FabricConfig::Fabric1DRing),
        ]
    } else {
        &[
            (2, "line-2", FabricConfig::Fabric1D),
            (4, "line-4", FabricConfig::Fabric1D),
            (8, "t3k", FabricConfig::Fabric1DRing),
        ]
    };
    let sizes: &[usize] = if quick { &[MIB] } else { &[MIB, 16 * MIB] };
    let mut rows = Vec::new();
    let mut modeled = Vec::new();
    let _ = writeln!(
        out,
        "{:<15} {:>5} {:<14} {:>9} {:>11} {:>12} {:>12} {:>10} {:>10} {:>11}",
        "op",
        "chips",
        "mesh",
        "size",
        "time (us)",
        "algbw GB/s",
        "busbw GB/s",
        "busbw*n/M",
        "MPI (us)",
        "floor (us)"
    );
    let floors = floor_times(meshes, sizes.iter().copied(), quick, out);
    for &(n, topo, fabric) in meshes {
        let Some((mesh, label)) = open_labelled(out, n, topo, fabric) else {
            continue;
        };
        for &size in sizes {
            let iters = match quick {
                true => Iters::Within(Duration::from_millis(30)),
                false => Iters::Within(Duration::from_millis(150)),
            };
            for op in [Op::AllReduce, Op::AllGather, Op::ReduceScatter] {
                match time_collective(&mesh, op, size, iters) {
                    Ok(t) => {
                        let alg = gbps(size as f64, t);
                        let bus = alg * op.bus_factor(n);
                        let floor = (op == Op::AllReduce)
                            .then(|| floors.get(&(n, size)).copied().flatten())
                            .flatten();
                        let _ = writeln!(
                            out,
                            "{:<15} {:>5} {:<14} {:>5} MiB {:>11.1} {:>12.2} {:>12.2} {:>10.2} {:>10} {:>11}",
                            op.name(),
                            n,
                            label,
                            size / MIB,
                            t.as_secs_f64() * 1e6,
                            alg,
                            bus,
                            bus * 1e9 * n as f64 / m,
                            mpi.us(n, size)
                                .filter(|_| op == Op::AllReduce)
                                .map_or("-".into(), |us| format!("{us:.0}")),
                            floor.map_or("-".into(), |t| micros(t, 0))
                        );
                        rows.push(Row {
                            op,
                            n,
                            mesh: label.clone(),
                            size,
                            time: t,
                            floor,
                        });
                        let run_once =
                            || time_collective(&mesh, op, size, Iters::Exactly(1)).map(|_| ());
                        if let Ok(Some(ns)) = crate::profile::modeled_collective_ns(&mesh, run_once)
                        {
                            modeled.push(crate::profile::ModeledRow {
                                op: op.name(),
                                n,
                                mesh: label.clone(),
                                size,
                                bus_factor: op.bus_factor(n),
                                emulated: t,
                                modeled_ns: ns,
                            });
                        }
                    }
                    Err(e) => {
                        let _ = writeln!(out, "{:<15} {n:>5} {label:<14} failed: {e}", op.name());
                    }
                }
            }
        }
        let _ = mesh.close();
    }
    crate::profile::modeled_table(&modeled, out);
    rows
}

/// OpenMPI's MPI_Allreduce (float sum, processes on this same 2-core host, shared memory), as
/// measured for the issue that set these goals: (ranks, bytes per rank, microseconds).
const MPI_ALLREDUCE_US: &[(usize, usize, f64)] = &[
    (8, 36 * 1024, 190.0),
    (32, 36 * 1024, 1200.0),
    (2, MIB, 170.0),
    (8, MIB, 1090.0),
    (8, 16 * MIB, 20600.0),
];

/// Goals for the small all_reduce (what one LLM decode layer needs twice per token).
const SMALL_GOALS_US: &[(usize, usize, f64)] = &[(8, 36 * 1024, 150.0), (32, 36 * 1024, 1000.0)];

/// The MPI_Allreduce figures printed beside ours: measured on this host by
/// `scripts/mpi-allreduce.sh` when its results file exists, else the ones above.
pub struct MpiFigures {
    rows: Vec<(usize, usize, f64)>,
    /// Where the figures come from, printed with the tables.
    pub source: String,
}

impl MpiFigures {
    /// Reads `TTMESH_MPI_RESULTS` or `target/mpi-allreduce.tsv` (lines: ranks, bytes per
    /// rank, microseconds, tab-separated); falls back to the figures in this file.
    pub fn load() -> MpiFigures {
        let path = ttmesh_settings::settings()
            .mpi_results
            .as_ref()
            .map_or_else(
                || "target/mpi-allreduce.tsv".into(),
                |p| p.display().to_string(),
            );
        Self::from_path(&path)
    }

    /// The figures in the results file at `path`, or the fallback with the reason.
    pub fn from_path(path: &str) -> MpiFigures {
        let fallback = |why: String| {
            MpiFigures {
            rows: MPI_ALLREDUCE_US.to_vec(),
            source: format!(
                "MPI figures: measured for the goals on a reference 2-core host ({why}; run scripts/mpi-allreduce.sh to measure this one)"
            ),
        }
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => return fallback(format!("{path}: {e}")),
        };
        let parse = |line: &str| -> Option<(usize, usize, f64)> {
            let mut f = line.split('\t');
            let row = (
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
            );
            f.next().is_none().then_some(row)
        };
        let mut rows = Vec::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            match parse(line) {
                Some(r) => rows.push(r),
                None => {
                    return fallback(format!(
                        "{path} line {} is not 'ranks<TAB>bytes<TAB>us'",
                        i + 1
                    ))
                }
            }
        }
        MpiFigures {
            rows,
            source: format!(
                "MPI figures: OpenMPI on this host, from {path} (scripts/mpi-allreduce.sh)"
            ),
        }
    }

    /// Microseconds of MPI_Allreduce on `n` ranks of `size` bytes each, if measured.
    pub fn us(&self, n: usize, size: usize) -> Option<f64> {
        self.rows
            .iter()
            .find(|&&(r, s, _)| r == n && s == size)
            .map(|&(_, _, us)| us)
    }
}

/// Small all_reduce latency: one 32-row tile row-block per chip (4 KiB = 32x64, 36 KiB =
/// 32x576 as a decode layer's, 256 KiB = 32x4096 bf16), on 2, 4, 8 and 32 chips, next to
/// the MPI figures measured on this host. `quick`: 36 KiB on 8 chips only.
fn small_all_reduce(quick: bool, mpi: &MpiFigures, out: &mut String) {
    let meshes: &[(usize, &str, FabricConfig)] = if quick {
        &[(8, "t3k", FabricConfig::Fabric1DRing)]
    } else {
        &[
            (2, "line-2", FabricConfig::Fabric1D),
            (4, "line-4", FabricConfig::Fabric1D),
            (8, "t3k", FabricConfig::Fabric1DRing),
            (32, "galaxy", FabricConfig::Fabric1DRing),
        ]
    };
    let widths: &[usize] = if quick { &[576] } else { &[64, 576, 4096] };
    let _ = writeln!(
        out,
        "{:<15} {:>5} {:<14} {:>9} {:>11} {:>11} {:>9} {:>11} {:>10}",
        "op", "chips", "mesh", "size", "time (us)", "MPI (us)", "MPI/us", "floor (us)", "goal (us)"
    );
    let floors = floor_times(meshes, widths.iter().map(|w| 32 * w * 2), quick, out);
    for &(n, topo, fabric) in meshes {
        let Some((mesh, label)) = open_labelled(out, n, topo, fabric) else {
            continue;
        };
        for &w in widths {
            let size = 32 * w * 2;
            // Enough iterations that one stall of the shared host does not decide the mean
            // (a 36 KiB collective on 32 chips takes about a millisecond).
            let iters = if quick {
                20
            } else if n >= 32 && size > 64 << 10 {
                30
            } else if n >= 32 {
                200
            } else {
                300
            };
            match time_collective_shaped(
                &mesh,
                Op::AllReduce,
                &[1, 1, 32, w],
                Iters::Exactly(iters),
            ) {
                Ok(t) => {
                    let us = t.as_secs_f64() * 1e6;
                    let mpi = mpi.us(n, size);
                    let goal = SMALL_GOALS_US
                        .iter()
                        .find(|&&(r, s, _)| r == n && s == size)
                        .map(|&(_, _, g)| format!("{g:.0}"))
                        .unwrap_or_else(|| "-".into());
                    let _ = writeln!(
                        out,
                        "{:<15} {:>5} {:<14} {:>5} KiB {:>11.1} {:>11} {:>9} {:>11} {:>10}",
                        "all_reduce",
                        n,
                        label,
                        size / 1024,
                        us,
                        mpi.map_or("-".into(), |m| format!("{m:.0}")),
                        mpi.map_or("-".into(), |m| format!("{:.2}", m / us)),
                        floors
                            .get(&(n, size))
                            .copied()
                            .flatten()
                            .map_or("-".into(), |t| micros(t, 1)),
                        goal
                    );
                }
                Err(e) => {
                    let _ = writeln!(out, "{:<15} {n:>5} {label:<14} failed: {e}", "all_reduce");
                }
            }
        }
        let _ = mesh.close();
    }
}

/// Host time per iteration of the run block: enqueueing every op (untraced) vs one lockstep
/// replay (traced). Each iteration finishes before the next, so queues never back up.
fn run_block(quick: bool, out: &mut String) -> Result<(f64, f64), String> {
    let err = |e: ttmesh::MeshError| e.to_string();
    let mesh = open("t3k", FabricConfig::Fabric1D)?;
    let (t, h, f) = (32, 512, 2048);
    let (x, mlp) = crate::replay::run_block_on(&mesh, (t, h, f)).map_err(err)?;
    let mlp_block = |x: &MeshTensor| mlp.forward(x);
    let iters = if quick { 10 } else { 50 };
    let _ = mlp_block(&x).map_err(err)?;
    mesh.finish(CqId(0)).map_err(err)?;
    let mut untraced = Duration::ZERO;
    for _ in 0..iters {
        let s = Instant::now();
        let y = mlp_block(&x).map_err(err)?;
        untraced += s.elapsed();
        mesh.finish(CqId(0)).map_err(err)?;
        drop(y);
    }
    let tid = mesh.begin_trace_capture(CqId(0)).map_err(err)?;
    let y = mlp_block(&x);
    mesh.end_trace_capture(tid, CqId(0)).map_err(err)?;
    let _y = y.map_err(err)?;
    mesh.execute_trace(tid, CqId(0), Blocking::Yes)
        .map_err(err)?;
    let mut traced = Duration::ZERO;
    let mut device = Duration::ZERO;
    for _ in 0..iters {
        let s = Instant::now();
        mesh.execute_trace(tid, CqId(0), Blocking::No)
            .map_err(err)?;
        traced += s.elapsed();
        mesh.finish(CqId(0)).map_err(err)?;
        device += s.elapsed();
    }
    let (u, tr) = (
        untraced.as_secs_f64() * 1e6 / iters as f64,
        traced.as_secs_f64() * 1e6 / iters as f64,
    );
    let _ = writeln!(
        out,
        "run block (t3k, TP MLP 32x512x2048 bf16, {iters} iterations): host us/iter untraced {u:.1}, traced {tr:.1} ({:.1}x less; goal >= 10x); traced replay + finish {:.1} us/iter",
        u / tr.max(1e-9),
        device.as_secs_f64() * 1e6 / iters as f64
    );
    let _ = mesh.close();
    Ok((u, tr))
}

/// Runs every benchmark and returns the report. `quick`: 1 MiB only, 2 and 8 chips.
pub fn run(quick: bool) -> String {
    let mut out = String::new();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let m = memcpy_bandwidth(
        if quick { 16 * MIB } else { 64 * MIB },
        if quick { 3 } else { 5 },
    );
    let _ = writeln!(
        out,
        "host memcpy bandwidth M = {:.2} GB/s ({threads} threads copying at once)",
        m / 1e9
    );
    let mpi = MpiFigures::load();
    let _ = writeln!(out, "{}", mpi.source);
    small_all_reduce(quick, &mpi, &mut out);
    let rows = collectives(quick, m, &mpi, &mut out);
    if let Some(r) = rows
        .iter()
        .filter(|r| r.op == Op::AllReduce && r.n == 8)
        .max_by_key(|r| r.size)
    {
        let efficiency =
            |t: Duration| gbps(r.size as f64, t) * 1e9 * r.op.bus_factor(r.n) * r.n as f64 / m;
        let _ = writeln!(
            out,
            "all_reduce {} MiB on {} chips ({}): efficiency busbw*n/M = {:.2} (goal >= 0.5)",
            r.size / MIB,
            r.n,
            r.mesh,
            efficiency(r.time)
        );
        if let Some(f) = r.floor {
            let _ = writeln!(
                out,
                "  the ring floor (a plain ring all_reduce on host arrays, no emulation) took {:.1} us there: efficiency {:.2}; emulated / floor {:.2}x",
                f.as_secs_f64() * 1e6,
                efficiency(f),
                r.time.as_secs_f64() / f.as_secs_f64().max(1e-12)
            );
        }
    }
    if let Err(e) = run_block(quick, &mut out) {
        let _ = writeln!(out, "run block: failed: {e}");
    }
    crate::replay::report(quick, &mut out);
    out
}

/// Opens a benchmark mesh and names it "topo ring" or "topo line"; a mesh that does not open is
/// reported in `out` and skipped.
fn open_labelled(
    out: &mut String,
    n: usize,
    topo: &str,
    fabric: FabricConfig,
) -> Option<(MeshDevice, String)> {
    let mesh = match open(topo, fabric) {
        Ok(m) => m,
        Err(e) => {
            let _ = writeln!(out, "{topo}: cannot open: {e}");
            return None;
        }
    };
    let kind = if n > 2 && fabric == FabricConfig::Fabric1DRing {
        "ring"
    } else {
        "line"
    };
    Some((mesh, format!("{topo} {kind}")))
}
