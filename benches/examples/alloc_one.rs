//! The chip allocate+free loop alone, for profilers: `cargo run --release -p ttmesh-benches
//! --example alloc_one -- 4000000` (pairs; the bare allocator runs 4x as many).

fn main() {
    let pairs: usize = std::env::args()
        .nth(1)
        .map_or(Ok(4_000_000), |a| a.parse())
        .expect("pairs");
    let chip = ttmesh_benches::chip::open(0).expect("chip");
    match ttmesh_benches::chip::bench_alloc(&chip, pairs) {
        Ok((bare, via_chip)) => println!(
            "allocator {:.2} M pairs/s, Chip {:.2} M pairs/s",
            bare / 1e6,
            via_chip / 1e6
        ),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
    match ttmesh_benches::chip::bench_alloc_with_data(&chip, pairs / 4) {
        Ok(r) => println!("Chip, DRAM holding data {:.2} M pairs/s", r / 1e6),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
