//! `cargo run -p ttmesh-fabric --release --example bench_fabric [-- --quick]`
fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    print!("{}", ttmesh_fabric::bench::run(quick));
}
