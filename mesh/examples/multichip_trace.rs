//! The multi-chip Metal Trace pattern on an emulated T3K: a row-parallel matmul whose partial
//! products are joined by all_reduce, captured once and replayed in lockstep with new inputs.
//!
//! Run it with `cargo run --release -p ttmesh --example multichip_trace`.

use ttmesh::ccl::{self, CclArgs};
use ttmesh::ops::{self, MeshMatmulConfig};
use ttmesh::*;

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    // TT-NN: set_fabric_config(FABRIC_1D); open_mesh_device(MeshShape(2, 4), trace_region_size=...)
    let mesh = MeshDevice::open(MeshConfig {
        topology: "t3k".into(),
        trace_region_size: 100_000_000,
        fabric_config: FabricConfig::Fabric1D,
        ..Default::default()
    })?;
    let (m, k, n) = (32, 1024, 512);
    let random = |shape: &[usize], seed, scale| {
        ttmesh::models::random_host(shape, DataType::BFloat16, seed, scale)
    };
    let w_host = random(&[k, n], 1, 1.0 / (k as f32).sqrt())?;
    let place = |h: &HostTensor, mapper: &dyn MeshMapper| {
        MeshTensor::from_host(h, &mesh, mapper, Layout::Tile, MemoryConfig::DRAM, CqId(0))
    };
    // Weights sharded on their rows, the persistent input sharded on its inner dim: every chip
    // multiplies its slice, and all_reduce sums the partial products.
    let w = place(&w_host, &ShardTensorToMesh(0))?;
    let x = place(&random(&[1, 1, m, k], 2, 1.0)?, &ShardTensorToMesh(3))?;
    let block = || -> ttmesh::Result<MeshTensor> {
        let partial = ops::matmul(&x, &w, &MeshMatmulConfig::default())?;
        ccl::all_reduce(&partial, &CclArgs::default())
    };

    // 1. Compile run: every program enters the cache (capture refuses to compile).
    block()?;
    // 2. Capture: the ops' commands go to a trace per chip, stored in each chip's TRACE region.
    let tid = mesh.begin_trace_capture(CqId(0))?;
    let reduced = block()?;
    mesh.end_trace_capture(tid, CqId(0))?;
    // 3. Replay with new inputs: copy into the persistent input, execute, read.
    for step in 0..4 {
        let x_host = random(&[1, 1, m, k], 10 + step, 1.0)?;
        copy_host_to_device_tensor(&x_host, &x, &ShardTensorToMesh(3), CqId(0))?;
        mesh.execute_trace(tid, CqId(0), Blocking::Yes)?;
        let out = reduced.to_host_shards(CqId(0))?;
        let first = out[0].to_f32_vec();
        println!(
            "replay {step}: {} chips agree: {}, out[0..4] = {:?}",
            out.len(),
            out.iter().all(|s| s == &out[0]),
            &first[..4]
        );
    }
    for r in mesh.reports() {
        println!(
            "chip {}: TRACE {} B, replays {}",
            r.id, r.trace_allocated, r.trace_replays
        );
    }
    mesh.release_trace(tid)?;
    mesh.close()?;
    Ok(())
}
