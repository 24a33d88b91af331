//! One collective in a loop, for profilers: `cargo run --release -p ttmesh-benches --example
//! ccl_one -- all_reduce t3k 16777216 10` (op, topology, bytes per chip, iterations).

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let get = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let op = get(0, "all_reduce");
    let topo = get(1, "t3k");
    let size: usize = get(2, "16777216").parse().expect("size in bytes");
    let iters: usize = get(3, "10").parse().expect("iterations");
    match ttmesh_benches::ccl::time_one(&op, &topo, size, iters) {
        Ok(t) => println!("{op} {topo} {size} B: {:.1} us", t.as_secs_f64() * 1e6),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
