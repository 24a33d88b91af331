//! `ttmesh plan`: a program sized before running. The program runs once under a NO_DISPATCH
//! graph capture (nothing runs, nothing is written) on the mesh the user names; per chip it
//! prints the trace_region_size that holds its trace, the peaks of DRAM / L1 / L1_SMALL, and
//! whether it fits. `plan run` (or bare `plan`) sizes `ttmesh run`'s block, `plan decode`
//! `ttmesh decode`'s model (see plan_decode.rs).

use serde_json::json;
use ttmesh::graph::{self, ChipPlan};
use ttmesh::models::TpMlp;
use ttmesh::{CqId, DataType, Layout, MemoryConfig, MeshTensor, TensorSpec};

/// `ttmesh plan [run|decode]`; the bare form plans `run`'s block, as it always did.
#[derive(clap::Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct PlanArgs {
    #[command(subcommand)]
    pub what: Option<PlanWhat>,
    #[command(flatten)]
    pub run: RunPlanArgs,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum PlanWhat {
    /// `ttmesh run`'s block (the default).
    Run(RunPlanArgs),
    /// `ttmesh decode`'s traced step, for a GGUF (header only) or shapes given by flags.
    Decode(crate::plan_decode::DecodePlanArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct RunPlanArgs {
    #[command(flatten)]
    pub on: crate::mesh_args::MeshArgs,
    /// Hidden size of `ttmesh run`'s block.
    #[arg(long, default_value_t = 512)]
    pub hidden: usize,
    /// FFN size of the block.
    #[arg(long, default_value_t = 2048)]
    pub ffn: usize,
    /// Tokens per step.
    #[arg(long, default_value_t = 32)]
    pub tokens: usize,
}

pub fn run(args: &PlanArgs) -> Result<(), String> {
    match &args.what {
        None => plan_run(&args.run),
        Some(PlanWhat::Run(a)) => plan_run(a),
        Some(PlanWhat::Decode(a)) => crate::plan_decode::run(a),
    }
}

fn plan_run(args: &RunPlanArgs) -> Result<(), String> {
    let config = args.on.config()?;
    let (h, f, t) = (args.hidden, args.ffn, args.tokens);
    let plan = graph::plan(&config, |mesh| {
        let mlp = TpMlp::new(mesh, h, f, 3)?;
        let spec = TensorSpec::new(
            vec![1, 1, t, h],
            DataType::BFloat16,
            Layout::Tile,
            MemoryConfig::DRAM,
        );
        let x = MeshTensor::allocate(mesh, &spec)?;
        // As `ttmesh run` does: once untraced (compiles), then captured.
        drop(mlp.forward(&x)?);
        let tid = mesh.begin_trace_capture(CqId(0))?;
        let y = mlp.forward(&x);
        mesh.end_trace_capture(tid, CqId(0))?;
        y.map(drop)
    })
    .map_err(|e| e.to_string())?;
    if args.on.json {
        let v = json!({
            "mesh": args.on.mesh,
            "model": {"block": "tensor-parallel MLP", "hidden": h, "ffn": f, "tokens": t},
            "chips": plan.chips,
            "fits": plan.fits(),
            "error": plan.error,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!(
            "ttmesh plan: run's block (hidden {h}, ffn {f}, tokens {t}) on {}, sized under NO_DISPATCH",
            args.on.mesh
        );
        print_chips(&plan.chips);
    }
    if let Some(e) = &plan.error {
        return Err(format!("the block does not run: {e}"));
    }
    if !plan.fits() {
        return Err("the block does not fit on every chip (see the table)".into());
    }
    Ok(())
}

/// The per-chip table both plans print.
pub fn print_chips(chips: &[ChipPlan]) {
    println!(
        "{:>5} {:>20} {:>14} {:>14} {:>14} {:>5}",
        "chip", "trace_region_size", "peak DRAM", "peak L1", "peak L1_SMALL", "fits"
    );
    for c in chips {
        println!(
            "{:>5} {:>20} {:>14} {:>14} {:>14} {:>5}",
            c.chip,
            c.trace_region_size,
            c.peak_bytes.dram,
            c.peak_bytes.l1,
            c.peak_bytes.l1_small,
            if c.fits { "yes" } else { "no" }
        );
        for p in &c.problems {
            println!("      chip {}: {p}", c.chip);
        }
    }
    println!("peaks are bytes over all banks; open the mesh with trace_region_size of at least the figure above");
}
