//! The profiler's cost on the host: the run block (`ttmesh run`'s tensor-parallel MLP on a
//! T3K) enqueued untraced and replayed from a trace, with and without the profiler recording,
//! side by side. Goal: at most 10 % more host time per iteration with profiling on. Rounds
//! alternate off and on so a noisy host hurts both alike; medians over iterations.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use ttmesh::models::{random_host, TpMlp};
use ttmesh::ReplicateTensorToMesh;
use ttmesh::{Blocking, CqId, DataType, Layout, MemoryConfig, MeshConfig, MeshDevice, MeshTensor};
use ttmesh_profile::{timeline, Calibration, DeviceModel, HostModel, Recorder};

fn median_us(mut v: Vec<Duration>) -> f64 {
    v.sort_unstable();
    v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

pub fn run(quick: bool) -> String {
    match bench(quick) {
        Ok(s) => s,
        Err(e) => format!("profile bench failed: {e}\n"),
    }
}

fn bench(quick: bool) -> Result<String, String> {
    let e = |x: ttmesh::MeshError| x.to_string();
    let mesh = MeshDevice::open(MeshConfig {
        topology: "t3k".into(),
        trace_region_size: 10_000_000,
        ..Default::default()
    })
    .map_err(e)?;
    let mlp = TpMlp::new(&mesh, 512, 2048, 3).map_err(e)?;
    let host = random_host(&[1, 1, 32, 512], DataType::BFloat16, 1, 1.0).map_err(e)?;
    let x = MeshTensor::from_host(
        &host,
        &mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .map_err(e)?;
    let y = mlp.forward(&x).map_err(e)?;
    mesh.synchronize_device().map_err(e)?;
    let tid = mesh.begin_trace_capture(CqId(0)).map_err(e)?;
    let _traced = mlp.forward(&x);
    mesh.end_trace_capture(tid, CqId(0)).map_err(e)?;
    drop(y);
    let (rounds, iters) = if quick { (2, 10) } else { (6, 40) };
    // [untraced off, untraced on, traced off, traced on]
    let mut times: [Vec<Duration>; 4] = Default::default();
    let mut recorded = 0;
    let recorder = Recorder::new();
    for round in 0..rounds * 2 {
        let on = round % 2 == 1;
        if on {
            recorder.attach(mesh.chips());
        }
        for i in 0..iters {
            let t = Instant::now();
            let out = mlp.forward(&x).map_err(e)?;
            times[on as usize].push(t.elapsed());
            drop(out);
            let t = Instant::now();
            mesh.execute_trace(tid, CqId(0), Blocking::No).map_err(e)?;
            times[2 + on as usize].push(t.elapsed());
            if i % 8 == 7 {
                mesh.synchronize_device().map_err(e)?;
            }
        }
        mesh.synchronize_device().map_err(e)?;
        if on {
            recorder.detach(mesh.chips());
        }
    }
    let events = recorder.events();
    recorded += events.len();
    let model = DeviceModel::new(Calibration::for_arch(mesh.arch()));
    let t = Instant::now();
    let tl = timeline::build(&events, &model, HostModel::Cpp);
    let build_ms = t.elapsed().as_secs_f64() * 1e3;
    let _ = mesh.close();
    let [uo, un, to, tn] = times.map(median_us);
    let mut s = String::new();
    let _ = writeln!(s, "profiler cost on the run block (t3k, MLP 512x2048, 32 tokens), host us per iteration (median), goal <= 1.10x");
    let _ = writeln!(
        s,
        "{:>10} {:>14} {:>14} {:>8}",
        "phase", "profiler off", "profiler on", "ratio"
    );
    for (name, off, on) in [("untraced", uo, un), ("traced", to, tn)] {
        let _ = writeln!(
            s,
            "{name:>10} {off:>14.1} {on:>14.1} {:>7.2}x",
            on / off.max(1e-9)
        );
    }
    let _ = writeln!(
        s,
        "modeling afterwards: {recorded} host events, {} op spans in {build_ms:.1} ms (not on the dispatch path)",
        tl.ops.len()
    );
    Ok(s)
}

/// Modeled device time of what `run` enqueues when it runs twice (a warm-up, then the one
/// measured): from the first start to the last end of the second half of the collective ops
/// on the first chip. `None` if it recorded no collective.
pub fn modeled_collective_ns(
    mesh: &MeshDevice,
    run: impl FnOnce() -> Result<(), String>,
) -> Result<Option<f64>, String> {
    let recorder = Recorder::new();
    recorder.attach(mesh.chips());
    let ran = run();
    recorder.detach(mesh.chips());
    ran?;
    let model = DeviceModel::new(Calibration::for_arch(mesh.arch()));
    let t = timeline::build(&recorder.events(), &model, HostModel::Cpp);
    let first = mesh.chips().first().map(|c| c.id());
    let ops: Vec<_> = t
        .ops
        .iter()
        .filter(|o| Some(o.chip) == first && o.program.cost.collective.is_some())
        .collect();
    let measured = &ops[ops.len() / 2..];
    Ok(match (measured.first(), measured.last()) {
        (Some(a), Some(b)) => Some(b.end_ns - a.start_ns),
        _ => None,
    })
}

/// One collective of the CCL benchmark, emulated and modeled.
pub struct ModeledRow {
    pub op: &'static str,
    pub n: usize,
    pub mesh: String,
    pub size: usize,
    pub bus_factor: f64,
    pub emulated: Duration,
    pub modeled_ns: f64,
}

/// The modeled figures next to the emulated ones, in nccl-tests' columns.
pub fn modeled_table(rows: &[ModeledRow], out: &mut String) {
    let _ = writeln!(
        out,
        "modeled on hardware (Wormhole link model: 12.5 GB/s x 0.94 per link, 711 ns per hop; see ttmesh-profile's calibration)"
    );
    let _ = writeln!(
        out,
        "{:<15} {:>5} {:<14} {:>9} {:>13} {:>15} {:>15} {:>9}",
        "op", "chips", "mesh", "size", "model us", "model busbw", "emulated busbw", "emu/model"
    );
    for r in rows {
        let bus = |secs: f64| r.size as f64 / secs / 1e9 * r.bus_factor;
        let model = bus(r.modeled_ns / 1e9);
        let emulated = bus(r.emulated.as_secs_f64());
        let _ = writeln!(
            out,
            "{:<15} {:>5} {:<14} {:>5} MiB {:>13.1} {:>10.2} GB/s {:>10.2} GB/s {:>8.2}x",
            r.op,
            r.n,
            r.mesh,
            r.size >> 20,
            r.modeled_ns / 1e3,
            model,
            emulated,
            emulated / model.max(1e-12)
        );
    }
}
