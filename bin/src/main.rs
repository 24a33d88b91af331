//! The `ttmesh` command line: parses arguments and prints; the work is in the library crates.

#![forbid(unsafe_code)]

mod bench;
mod decode;
mod graph_report;
mod limits;
mod mesh_args;
mod plan;
mod plan_decode;
mod profile;
mod report;
mod run;
mod soak;
mod stress;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ttmesh",
    version,
    about = "Emulate Tenstorrent multi-chip meshes: trace, fabric, collectives, memory"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: a tensor-parallel MLP block across the mesh, untraced, captured and replayed in lockstep.
    Run(run::RunArgs),
    /// Size `run`'s block (`plan` / `plan run`) or `decode`'s model (`plan decode`) before running:
    /// per chip trace_region_size, peak DRAM / L1 / L1_SMALL, fits.
    Plan(plan::PlanArgs),
    /// Greedy LLM decode on the mesh: weights and KV cache in DRAM, one traced step per token.
    Decode(decode::DecodeArgs),
    /// Print a cluster topology: arch, shape, chips with coordinates, links.
    Topo {
        /// A shipped name (n150, n300, t3k, galaxy, p150, p300, line-N, ring-N) or a TOML path.
        #[arg(default_value = "t3k")]
        topology: String,
        #[arg(long)]
        json: bool,
    },
    /// Watch per-chip DRAM / L1 / L1_SMALL / TRACE of running ttmesh processes.
    Monitor(ttmesh_monitor::MonitorArgs),
    /// Benchmarks, each printing side-by-side ratios.
    Bench(bench::BenchArgs),
    /// Topology stress: a seeded matrix of collectives and sends, with faults, every result checked.
    Stress(stress::StressArgs),
    /// Graph-capture reports: `report import REPORT.json OUT_DIR` writes a ttnn-visualizer folder.
    Report(report::ReportArgs),
}

/// Output piped into `head` (or any reader that stops early) ends the command quietly, with
/// the status a process killed by SIGPIPE has (128 + 13), instead of a panic message: Rust
/// ignores SIGPIPE, so printing to a closed pipe panics inside `println!`.
fn exit_quietly_on_closed_stdout() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default_hook(info);
    }));
}

fn main() -> ExitCode {
    exit_quietly_on_closed_stdout();
    // Before any thread starts (see the function's docs).
    ttmesh::cap_malloc_arenas();
    let cli = Cli::parse();
    // Under `mpirun` a build without MPI would open the whole mesh once per rank, each
    // believing it alone: refuse before any chip opens.
    if let Err(e) = ttmesh::ranks::check_launch() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Plan(args) => plan::run(&args),
        Command::Decode(args) => decode::run(&args),
        Command::Topo { topology, json } => topo(&topology, json),
        Command::Monitor(args) => {
            let mut out = std::io::stdout();
            ttmesh_monitor::run_monitor(&args, &mut out).map_err(|e| e.to_string())
        }
        Command::Bench(args) => bench::run(&args),
        Command::Stress(args) => stress::run(&args),
        Command::Report(args) => report::run(&args),
    };
    // Every command ends the captures it begins; one left open lost its graph.
    if let Some(warning) = ttmesh::graph::capture_left_open_warning() {
        eprintln!("{warning}");
    }
    if let Err(e) = &result {
        eprintln!("error: {e}");
    }
    // Under mpirun: finalise MPI after every rank got here, or end the whole job now.
    ttmesh::ranks::end_of_job(&result);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

fn topo(name: &str, json: bool) -> Result<(), String> {
    let g = ttmesh_topologies::load(name).map_err(|e| e.to_string())?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&g).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", g.summary());
    }
    Ok(())
}
