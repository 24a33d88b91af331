//! `ttmesh bench`: every benchmark prints its own side-by-side figures and ratios.

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Which benchmark: chip, trace, fabric, ccl, fabric2d, monitor, decode, profile, predict, mesh-monitor, or all; and ranks (not in all: run it under mpirun).
    #[arg(default_value = "all")]
    pub which: String,
    /// Short runs (CI smoke test).
    #[arg(long)]
    pub quick: bool,
}

pub fn run(args: &BenchArgs) -> Result<(), String> {
    if args.which == "ranks" {
        let r = ttmesh_benches::ranks::run(args.quick)?;
        if r.speaks {
            println!("== bench ranks ==\n{}", r.text);
        }
        return Ok(());
    }
    let all = args.which == "all";
    let mut ran = false;
    let mut section = |name: &str, f: &dyn Fn() -> String| {
        if all || args.which == name {
            println!("== bench {name} ==\n{}", f());
            ran = true;
        }
    };
    let q = args.quick;
    section("chip", &|| ttmesh_benches::chip::chip_bench(q));
    section("trace", &|| ttmesh_benches::chip::trace_bench(q));
    section("fabric", &|| ttmesh_benches::fabric::run(q));
    section("ccl", &|| ttmesh_benches::ccl::run(q));
    section("fabric2d", &|| ttmesh_benches::fabric2d::run(q));
    section("monitor", &|| ttmesh_benches::monitor::publish_cost(q));
    section("decode", &|| ttmesh_benches::decode::run(q));
    section("profile", &|| ttmesh_benches::profile::run(q));
    section("predict", &|| ttmesh_benches::predict::run(q));
    section("mesh-monitor", &|| {
        ttmesh::monitor_bench::monitor_overhead(q)
    });
    if !ran {
        return Err(format!(
            "unknown benchmark '{}': use chip, trace, fabric, ccl, fabric2d, monitor, decode, profile, predict, mesh-monitor, all or ranks",
            args.which
        ));
    }
    Ok(())
}
