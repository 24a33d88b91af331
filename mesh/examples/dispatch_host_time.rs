//! Host time per op through the Rust API, the reference `python/bench/dispatch.py` prints beside
//! the same workloads driven from Python: an untraced op (relu on one bf16 tile), one
//! `execute_trace` of a one-op trace, and a 1,000-op program untraced and traced.
//!
//! `cargo run --release -p ttmesh --example dispatch_host_time -- [ROWSxCOLS] [ITERS]`
//! prints one JSON object (microseconds).

use std::time::Instant;

use ttmesh::ops::{self, MeshOpOptions};
use ttmesh::*;

const PROGRAM_OPS: usize = 1000;

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let shape = args.get(1).map(String::as_str).unwrap_or("1x1");
    let iters: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(2000);
    let (rows, cols) = shape
        .split_once('x')
        .and_then(|(r, c)| Some((r.parse().ok()?, c.parse().ok()?)))
        .ok_or("the mesh shape is ROWSxCOLS, e.g. 1x1 or 2x4")?;
    let mesh = MeshDevice::open(MeshConfig {
        topology: "t3k".into(),
        mesh_shape: Some(MeshShape::new(rows, cols)),
        trace_region_size: 16 << 20,
        fabric_config: FabricConfig::Disabled,
        ..Default::default()
    })?;
    let host = HostTensor::from_f32(vec![1, 1, 32, 32], DataType::BFloat16, vec![0.5; 1024])?;
    let x = MeshTensor::from_host(
        &host,
        &mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )?;
    let opts = MeshOpOptions::default();

    // Untraced: enqueue `iters` ops (their outputs dropped at once, as a Python loop does).
    for _ in 0..100 {
        ops::relu(&x, &opts)?;
    }
    mesh.synchronize_device()?;
    let t = Instant::now();
    for _ in 0..iters {
        ops::relu(&x, &opts)?;
    }
    let op_us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
    mesh.synchronize_device()?;

    // execute_trace of a one-op trace, not blocking.
    let tid = mesh.begin_trace_capture(CqId(0))?;
    let _out = ops::relu(&x, &opts)?;
    mesh.end_trace_capture(tid, CqId(0))?;
    mesh.execute_trace(tid, CqId(0), Blocking::Yes)?;
    let t = Instant::now();
    for _ in 0..iters {
        mesh.execute_trace(tid, CqId(0), Blocking::No)?;
    }
    let execute_trace_us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
    mesh.synchronize_device()?;
    mesh.release_trace(tid)?;

    // A 1,000-op program (a chain of relus), untraced then captured and replayed.
    let program = || -> ttmesh::Result<MeshTensor> {
        let mut y = ops::relu(&x, &opts)?;
        for _ in 1..PROGRAM_OPS {
            y = ops::relu(&y, &opts)?;
        }
        Ok(y)
    };
    program()?;
    mesh.synchronize_device()?;
    let t = Instant::now();
    program()?;
    mesh.synchronize_device()?;
    let program_untraced_us = t.elapsed().as_secs_f64() * 1e6;
    let tid = mesh.begin_trace_capture(CqId(0))?;
    let _y = program()?;
    mesh.end_trace_capture(tid, CqId(0))?;
    mesh.execute_trace(tid, CqId(0), Blocking::Yes)?;
    let t = Instant::now();
    mesh.execute_trace(tid, CqId(0), Blocking::Yes)?;
    let program_traced_us = t.elapsed().as_secs_f64() * 1e6;
    mesh.release_trace(tid)?;
    mesh.close()?;
    println!(
        "{{\"mesh\": \"{shape}\", \"iters\": {iters}, \"op_us\": {op_us:.3}, \"execute_trace_us\": {execute_trace_us:.3}, \"program_untraced_us\": {program_untraced_us:.1}, \"program_traced_us\": {program_traced_us:.1}}}"
    );
    Ok(())
}
