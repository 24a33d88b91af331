//! `ttmesh run`: a tensor-parallel MLP block (column-parallel up projection, activation,
//! row-parallel down projection + all_reduce, bf16) across every chip of a mesh; run untraced,
//! captured, replayed in lockstep; every output checked against the host reference.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use serde_json::json;
use ttmesh::models::{random_host, TpMlp};
use ttmesh::{
    Blocking, CqId, DataType, Layout, MemoryConfig, MeshConfig, MeshDevice, MeshTensor,
    ReplicateTensorToMesh,
};

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub on: crate::mesh_args::MeshArgs,
    /// Bytes per chip reserved for traces.
    #[arg(long, default_value_t = 10_000_000, allow_negative_numbers = true,
          value_parser = crate::limits::whole::<u64>("a number of bytes per chip, 0 or more"))]
    pub trace_region_size: u64,
    /// Iterations of the block, untraced and replayed (1 to 1000000).
    #[arg(long, default_value_t = 20, allow_negative_numbers = true,
          value_parser = crate::limits::whole::<usize>("a whole number of iterations, 1 to 1000000"))]
    pub iters: usize,
    /// Run the block untraced only.
    #[arg(long)]
    pub no_trace: bool,
    /// Keep the mesh open this many seconds after the run (for `ttmesh monitor`).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub hold: f64,
    /// Hidden size (rows of the up projection).
    #[arg(long, default_value_t = 512, allow_negative_numbers = true,
          value_parser = crate::limits::whole::<usize>("a positive multiple of 32"))]
    pub hidden: usize,
    /// FFN size; must split into tile-aligned slices over the chips.
    #[arg(long, default_value_t = 2048, allow_negative_numbers = true,
          value_parser = crate::limits::whole::<usize>("a positive multiple of 32 times the number of chips"))]
    pub ffn: usize,
    /// Tokens per step (rows of the activation).
    #[arg(long, default_value_t = 32, allow_negative_numbers = true,
          value_parser = crate::limits::whole::<usize>("a whole number of tokens, 1 or more"))]
    pub tokens: usize,
    #[command(flatten)]
    pub profile: crate::profile::ProfileArgs,
    /// Capture TT-NN's graph of the run (NORMAL mode) and write DIR/report.json.
    #[arg(long, value_name = "DIR")]
    pub graph: Option<std::path::PathBuf>,
}

/// Median of per-iteration host times in microseconds: on a shared host a few iterations are
/// preempted, and a mean would report the scheduler rather than the dispatch path.
fn median_us(v: &mut [Duration]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub fn run(args: &RunArgs) -> Result<(), String> {
    let fabric_config = args.on.fabric_config()?;
    crate::limits::check_flags(args)?;
    args.profile.check()?;
    let config = MeshConfig {
        topology: args.on.mesh.clone(),
        trace_region_size: args.trace_region_size,
        fabric_config,
        rank_bindings: args.on.rank_bindings.clone(),
        ..Default::default()
    };
    let mesh = MeshDevice::open(config).map_err(|e| args.on.open_error(e))?;
    let n = mesh.num_devices();
    let (t, h, f) = (args.tokens, args.hidden, args.ffn);
    let dram_per_chip = mesh.reports().iter().map(|c| c.dram_capacity).min();
    if let Err(e) = crate::limits::check_fits(args, n, dram_per_chip.unwrap_or(0)) {
        let _ = mesh.close();
        return Err(e);
    }
    let result = crate::graph_report::capture_to_dir(args.graph.as_deref(), &mesh, || {
        args.profile
            .start(&mesh)
            .and_then(|profiler| run_on(&mesh, args, t, h, f, profiler))
    });
    let closed = mesh.close().map_err(|e| e.to_string());
    let report = result?;
    closed?;
    if report["correct"] == json!(true) {
        Ok(())
    } else {
        Err(format!(
            "outputs differ from the host reference (max abs error {})",
            report["max_abs_error"]
        ))
    }
}

fn run_on(
    mesh: &MeshDevice,
    args: &RunArgs,
    t: usize,
    h: usize,
    f: usize,
    profiler: Option<ttmesh_profile::Profiler>,
) -> Result<serde_json::Value, String> {
    // A large block takes seconds per phase (weights, the host reference, each iteration on
    // a single chip): say which one is running. On stderr, and only on a terminal (indicatif
    // hides itself otherwise); gone before the report is printed.
    let bar = if args.on.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar.set_message(format!(
        "placing the weights ({h}x{f} and {f}x{h}) on {} chips",
        mesh.num_devices()
    ));
    let result = run_steps(mesh, args, (t, h, f), profiler, &bar);
    bar.finish_and_clear();
    result
}

/// The run itself, untraced then traced, then its report; returns the report's values.
fn run_steps(
    mesh: &MeshDevice,
    args: &RunArgs,
    (t, h, f): (usize, usize, usize),
    profiler: Option<ttmesh_profile::Profiler>,
    bar: &ProgressBar,
) -> Result<serde_json::Value, String> {
    let err = |e: ttmesh::MeshError| e.to_string();
    let cq = CqId(0);
    let inputs = [
        random_host(&[1, 1, t, h], DataType::BFloat16, 1, 1.0).map_err(err)?,
        random_host(&[1, 1, t, h], DataType::BFloat16, 2, 1.0).map_err(err)?,
    ];
    let mlp = TpMlp::new(mesh, h, f, 3).map_err(err)?;
    bar.set_message(format!("host reference in f64 ({t}x{h} by {h}x{f}, twice)"));
    let references: Vec<Vec<f32>> = inputs
        .iter()
        .map(|x| mlp.host_reference(x))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    let scale = references
        .iter()
        .flatten()
        .fold(0f32, |m, v| m.max(v.abs()));
    let tolerance = 0.03 * scale + 1e-3;

    let x = MeshTensor::from_host(
        &inputs[0],
        mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        cq,
    )
    .map_err(err)?;

    let mut max_err = 0f32;
    // The bits of every output read, in order: two runs (one process, or the mesh split over
    // MPI ranks) computed the same thing exactly if their digests are equal.
    let mut digests = Vec::new();
    let mut check = |y: &MeshTensor, which: usize| -> Result<(), String> {
        let shards = y.to_host_shards(cq).map_err(err)?;
        digests.push(ttmesh::ranks::bits_digest(&shards));
        for shard in shards {
            max_err = max_err.max(max_abs_diff(
                shard.as_f32().unwrap_or(&[]),
                &references[which],
            ));
        }
        Ok(())
    };

    // Untraced: the first iteration compiles every program; later ones hit the program cache.
    let iters = args.iters;
    let mut untraced_host = Vec::with_capacity(iters);
    let wall = Instant::now();
    for i in 0..iters {
        bar.set_message(format!("untraced iteration {} of {iters}", i + 1));
        x.copy_from_host(&inputs[i % 2], &ReplicateTensorToMesh, cq)
            .map_err(err)?;
        let started = Instant::now();
        let y = mlp.forward(&x).map_err(err)?;
        if i > 0 {
            untraced_host.push(started.elapsed());
        }
        check(&y, i % 2)?;
    }
    let untraced_wall = wall.elapsed() / iters as u32;
    let untraced_us = median_us(&mut untraced_host);

    let mut traced_us = None;
    let mut traced_wall_us = None;
    let mut skew_us = None;
    let mut last_replay: Option<ttmesh::ReplayReport> = None;
    let mut trace_bytes = vec![0u64; mesh.num_devices()];
    if !args.no_trace {
        bar.set_message("capturing the trace");
        let tid = mesh.begin_trace_capture(cq).map_err(err)?;
        let y = mlp.forward(&x);
        let end = mesh.end_trace_capture(tid, cq);
        let y = y.map_err(err)?;
        end.map_err(err)?;
        for (bytes, info) in trace_bytes.iter_mut().zip(mesh.trace_info(tid)) {
            *bytes = info.map(|t| t.command_bytes).unwrap_or(0);
        }
        let mut host = Vec::with_capacity(iters);
        let wall = Instant::now();
        let mut skews = Vec::new();
        for i in 0..iters {
            bar.set_message(format!("replay {} of {iters}", i + 1));
            x.copy_from_host(&inputs[i % 2], &ReplicateTensorToMesh, cq)
                .map_err(err)?;
            let started = Instant::now();
            mesh.execute_trace(tid, cq, Blocking::No).map_err(err)?;
            host.push(started.elapsed());
            check(&y, i % 2)?;
            if let Some(r) = mesh.last_replay() {
                skews.push(r.skew_us);
                last_replay = Some(r);
            }
        }
        traced_wall_us = Some((wall.elapsed() / iters as u32).as_secs_f64() * 1e6);
        traced_us = Some(median_us(&mut host));
        skew_us = skews
            .iter()
            .copied()
            .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))));
    }

    let profile = crate::profile::finish(profiler, iters)?;
    let reports = mesh.reports();
    let correct = max_err <= tolerance && max_err.is_finite();
    let chips: Vec<serde_json::Value> = reports
        .iter()
        .zip(&trace_bytes)
        .map(|(r, tb)| {
            json!({
                "id": r.id, "coord": [r.coord.row, r.coord.col],
                "dram_allocated": r.dram_allocated, "l1_allocated": r.l1_allocated,
                "l1_small_allocated": r.l1_small_allocated, "trace_allocated": r.trace_allocated,
                "trace_bytes": tb, "trace_region_size": r.trace_region_size, "trace_replays": r.trace_replays,
            })
        })
        .collect();
    let shape = mesh.shape();
    let mut value = json!({
        "mesh": {"topology": mesh.cluster().name(), "shape": [shape.rows, shape.cols], "arch": mesh.arch().name,
                 "fabric": mesh.fabric_config().tt_metal_name()},
        "model": {"block": "tensor-parallel MLP (column-parallel up + gelu, row-parallel down + all_reduce)",
                  "tokens": t, "hidden": h, "ffn": f, "dtype": "BFLOAT16"},
        "chips": chips,
        "correct": correct,
        "output_digest": format!("{:016x}", digests.iter().fold(0, |h: u64, d| h.rotate_left(5) ^ d)),
        "ranks": mesh.rank().map(|_| ttmesh_settings::settings().mpi_launch.as_ref().map_or(1, |l| l.size)),
        "max_abs_error": max_err,
        "tolerance": tolerance,
        "iterations": iters,
        "host_us_per_iter": {"untraced": untraced_us, "traced": traced_us},
        "wall_us_per_iter": {"untraced": untraced_wall.as_secs_f64() * 1e6, "traced": traced_wall_us},
        "replay": {
            "skew_us": skew_us,
            "last_per_chip_us": last_replay.as_ref().map(|r| r.per_chip_us.clone()),
        },
    });
    if let Some(p) = &profile {
        value["profile"] = crate::profile::to_json(p);
    }
    bar.finish_and_clear();
    // Reported (and held) here, while the model's tensors and the trace are alive: `--hold`
    // shows `ttmesh monitor` exactly what the report says.
    report(
        mesh,
        args,
        Steps {
            value,
            profile,
            trace_bytes,
        },
    )
}

/// What the run measured: the report's values, the modeled profile, each chip's trace bytes.
struct Steps {
    value: serde_json::Value,
    profile: Option<ttmesh_profile::ProfileOutput>,
    trace_bytes: Vec<u64>,
}

/// Prints the report (tables or JSON), then holds the mesh open if asked.
fn report(mesh: &MeshDevice, args: &RunArgs, steps: Steps) -> Result<serde_json::Value, String> {
    let Steps {
        value,
        profile,
        trace_bytes,
    } = steps;
    let reports = mesh.reports();
    // Over MPI ranks every rank has every output; rank 0 speaks for the job. Every rank holds,
    // so `ttmesh monitor` sees each rank's chips.
    if mesh.rank().unwrap_or(0) != 0 {
        hold(args.hold);
        return Ok(value);
    }
    if args.on.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?
        );
    } else {
        print_tables(mesh, &value, &reports, &trace_bytes);
        if let Some(p) = &profile {
            crate::profile::print(p);
        }
    }
    hold(args.hold);
    Ok(value)
}

/// The report is out; keeps the mesh, the model's tensors and the trace alive for watchers
/// (`ttmesh monitor` in another terminal sees exactly what the report says).
fn hold(seconds: f64) {
    if seconds > 0.0 {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::thread::sleep(Duration::from_secs_f64(seconds));
    }
}

fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1024.0 * 1024.0))
}

fn print_tables(
    mesh: &MeshDevice,
    v: &serde_json::Value,
    reports: &[ttmesh::ChipReport],
    trace_bytes: &[u64],
) {
    let s = mesh.shape();
    println!(
        "ttmesh run: {} ({}x{} {}, {}), {} on every chip",
        mesh.cluster().name(),
        s.rows,
        s.cols,
        mesh.arch().name,
        mesh.fabric_config().tt_metal_name(),
        v["model"]["block"].as_str().unwrap_or("")
    );
    println!(
        "{:>5} {:>7} {:>12} {:>12} {:>10} {:>12} {:>11} {:>13} {:>11}",
        "chip", "coord", "DRAM", "L1", "L1_SMALL", "TRACE", "trace B", "trace region", "replay us"
    );
    let replay_us = |i: usize| {
        v["replay"]["last_per_chip_us"][i]
            .as_f64()
            .map_or("-".to_string(), |us| format!("{us:.1}"))
    };
    for (i, (r, tb)) in reports.iter().zip(trace_bytes).enumerate() {
        println!(
            "{:>5} {:>7} {:>12} {:>12} {:>10} {:>12} {:>11} {:>13} {:>11}",
            r.id,
            format!("({},{})", r.coord.row, r.coord.col),
            mib(r.dram_allocated),
            mib(r.l1_allocated),
            mib(r.l1_small_allocated),
            mib(r.trace_allocated),
            tb,
            r.trace_region_size,
            replay_us(i)
        );
    }
    let untraced = v["host_us_per_iter"]["untraced"].as_f64().unwrap_or(0.0);
    match v["host_us_per_iter"]["traced"].as_f64() {
        Some(traced) => println!(
            "host time per iteration (median): untraced {untraced:.1} us, traced {traced:.1} us ({:.1}x less); replay skew up to {:.1} us",
            untraced / traced.max(1e-9),
            v["replay"]["skew_us"].as_f64().unwrap_or(0.0)
        ),
        None => println!("host time per iteration (median): untraced {untraced:.1} us (trace off)"),
    }
    println!(
        "{} iterations, max abs error {:.5} (tolerance {:.5}): {}",
        v["iterations"],
        v["max_abs_error"].as_f64().unwrap_or(f64::NAN),
        v["tolerance"].as_f64().unwrap_or(f64::NAN),
        if v["correct"] == json!(true) {
            "correct"
        } else {
            "WRONG"
        }
    );
}
