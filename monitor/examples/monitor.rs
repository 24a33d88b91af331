//! Stand-in for `ttmesh monitor` until the bin crate wires it:
//! `cargo run -p ttmesh-monitor --release --example monitor -- --once`
use clap::Parser;

fn main() {
    let args = ttmesh_monitor::MonitorArgs::parse();
    if let Err(e) = ttmesh_monitor::run_monitor(&args, &mut std::io::stdout()) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
