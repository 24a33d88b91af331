//! `cargo run -p ttmesh-monitor --release --example publish_cost [-- --quick]`
fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    print!("{}", ttmesh_monitor::bench::publish_cost(quick));
}
