//! `ttmesh plan`: the run block sized before running. The block runs once under a NO_DISPATCH
//! graph capture (nothing runs, nothing is written) on the mesh the user names; per chip it
//! prints the trace_region_size that holds its trace, the peaks of DRAM / L1 / L1_SMALL, and
//! whether it fits.

use serde_json::json;
use ttmesh::graph::{self, Plan};
use ttmesh::models::TpMlp;
use ttmesh::{
    CqId, DataType, FabricConfig, Layout, MemoryConfig, MeshConfig, MeshTensor, TensorSpec,
};

#[derive(clap::Args, Debug, Clone)]
pub struct PlanArgs {
    /// n150, n300, t3k, galaxy, p150, p300, line-N, ring-N, or a topology TOML file.
    #[arg(long, default_value = "t3k")]
    pub mesh: String,
    /// 1d or 1d-ring.
    #[arg(long, default_value = "1d")]
    pub fabric: String,
    /// Hidden size of `ttmesh run`'s block.
    #[arg(long, default_value_t = 512)]
    pub hidden: usize,
    /// FFN size of the block.
    #[arg(long, default_value_t = 2048)]
    pub ffn: usize,
    /// Tokens per step.
    #[arg(long, default_value_t = 32)]
    pub tokens: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &PlanArgs) -> Result<(), String> {
    let fabric_config = match args.fabric.as_str() {
        "1d" => FabricConfig::Fabric1D,
        "1d-ring" => FabricConfig::Fabric1DRing,
        other => return Err(format!("unknown --fabric '{other}': use 1d or 1d-ring")),
    };
    let config = MeshConfig {
        topology: args.mesh.clone(),
        fabric_config,
        ..Default::default()
    };
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
    print(&plan, args);
    if let Some(e) = &plan.error {
        return Err(format!("the block does not run: {e}"));
    }
    if !plan.fits() {
        return Err("the block does not fit on every chip (see the table)".into());
    }
    Ok(())
}

fn print(plan: &Plan, args: &PlanArgs) {
    if args.json {
        let v = json!({
            "mesh": args.mesh,
            "model": {"block": "tensor-parallel MLP", "hidden": args.hidden, "ffn": args.ffn, "tokens": args.tokens},
            "chips": plan.chips,
            "fits": plan.fits(),
            "error": plan.error,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    println!(
        "ttmesh plan: run's block (hidden {}, ffn {}, tokens {}) on {}, sized under NO_DISPATCH",
        args.hidden, args.ffn, args.tokens, args.mesh
    );
    println!(
        "{:>5} {:>20} {:>14} {:>14} {:>14} {:>5}",
        "chip", "trace_region_size", "peak DRAM", "peak L1", "peak L1_SMALL", "fits"
    );
    for c in &plan.chips {
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
