//! Trace replay of no-op launches alone, for profilers: `cargo run --release -p
//! ttmesh-benches --example replay_one -- 10000 200` (launches in the trace, replays). With
//! `dispatch` first (`-- dispatch 1000 200`): untraced host dispatch of a chain of eltwise ops
//! instead (ops, runs), as `bench trace` (c) measures it.

use ttmesh_chip::device::CqId;
use ttmesh_chip::error::Result;
use ttmesh_chip::tensor::{DataType, HostTensor, Layout, MemoryConfig, Tensor};

fn main() {
    let mut a: Vec<String> = std::env::args().skip(1).collect();
    let dispatch = a.first().is_some_and(|s| s == "dispatch");
    if dispatch {
        a.remove(0);
    }
    let n: usize = a
        .first()
        .map_or(Ok(10_000), |s| s.parse())
        .expect("launches");
    let reps: usize = a.get(1).map_or(Ok(200), |s| s.parse()).expect("replays");
    let run = || -> Result<(f64, f64)> {
        let chip = ttmesh_benches::chip::open(64 << 20)?;
        let host = HostTensor::from_f32(vec![32, 32], DataType::BFloat16, vec![1.0; 1024])?;
        let x = Tensor::from_host(&host, &chip, Layout::Tile, MemoryConfig::L1, CqId(0))?;
        if dispatch {
            let best = ttmesh_benches::chip::bench_dispatch(&chip, &x, n, reps)?;
            let per_op = best.as_secs_f64() * 1e9 / n as f64;
            return Ok((per_op, 0.0));
        }
        ttmesh_benches::chip::bench_replay(&chip, &x, n, reps)
    };
    match run() {
        Ok((per_op, _)) if dispatch => {
            println!("untraced dispatch: {per_op:.0} ns per op (best of {reps})")
        }
        Ok((per_record, per_launch)) => {
            println!("replay: {per_record:.1} ns per record, {per_launch:.1} ns per launch (best of {reps})")
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
