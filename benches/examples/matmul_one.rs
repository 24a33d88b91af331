//! Chip matmul next to sgemm alone, for profilers: `cargo run --release -p ttmesh-benches
//! --example matmul_one -- 512 400 bf16` (n, repetitions, bf16 or f32).

use ttmesh_chip::tensor::DataType;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = a.first().map_or(Ok(512), |s| s.parse()).expect("n");
    let reps: usize = a
        .get(1)
        .map_or(Ok(400), |s| s.parse())
        .expect("repetitions");
    let dtype = match a.get(2).map_or("bf16", String::as_str) {
        "bf16" => DataType::BFloat16,
        "f32" => DataType::Float32,
        other => {
            eprintln!("error: dtype {other}: use bf16 or f32");
            std::process::exit(2);
        }
    };
    let chip = ttmesh_benches::chip::open(0).expect("chip");
    match ttmesh_benches::chip::bench_matmul(&chip, n, reps, dtype) {
        Ok((chip_gf, sgemm_gf)) => println!(
            "n={n}: chip {chip_gf:.1} GFLOP/s, sgemm {sgemm_gf:.1} GFLOP/s, ratio {:.2}",
            chip_gf / sgemm_gf
        ),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
