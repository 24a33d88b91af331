//! Trace replay of no-op launches alone, for profilers: `cargo run --release -p
//! ttmesh-benches --example replay_one -- 10000 200` (launches in the trace, replays).

use ttmesh_chip::device::CqId;
use ttmesh_chip::error::Result;
use ttmesh_chip::tensor::{DataType, HostTensor, Layout, MemoryConfig, Tensor};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = a
        .first()
        .map_or(Ok(10_000), |s| s.parse())
        .expect("launches");
    let reps: usize = a.get(1).map_or(Ok(200), |s| s.parse()).expect("replays");
    let run = || -> Result<(f64, f64)> {
        let chip = ttmesh_benches::chip::open(64 << 20)?;
        let host = HostTensor::from_f32(vec![32, 32], DataType::BFloat16, vec![1.0; 1024])?;
        let x = Tensor::from_host(&host, &chip, Layout::Tile, MemoryConfig::L1, CqId(0))?;
        ttmesh_benches::chip::bench_replay(&chip, &x, n, reps)
    };
    match run() {
        Ok((per_record, per_launch)) => {
            println!("replay: {per_record:.1} ns per record, {per_launch:.1} ns per launch (best of {reps})")
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
