//! The seed's multi-chip pattern ("Multi-Chip Traces": matmul + all_reduce captured on a mesh,
//! executed with blocking=True) and the tensor-parallel matmuls, against f64 host references.

use ttmesh::ccl::{self, CclArgs};
use ttmesh::ops::{self, MeshMatmulConfig, MeshOpOptions};
use ttmesh::*;

fn random(shape: &[usize], dtype: DataType, seed: u64, scale: f32) -> HostTensor {
    ttmesh::models::random_host(shape, dtype, seed, scale).unwrap()
}

/// x [.., m, k] @ w [k, n] in f64, from the (already rounded) values the device holds.
fn host_matmul(x: &HostTensor, w: &HostTensor) -> Vec<f64> {
    let k = w.shape[0];
    let n = w.shape[1];
    let m = x.volume() / k;
    let (xv, wv) = (x.to_f32_vec(), w.to_f32_vec());
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let a = xv[i * k + p] as f64;
            for j in 0..n {
                out[i * n + j] += a * wv[p * n + j] as f64;
            }
        }
    }
    out
}

/// bf16 products accumulated on the device: a few bf16 ulps of the output's scale.
fn assert_close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let tol = 2f64.powi(-6) * scale + 1e-3;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= tol,
            "{what}: element {i}: got {g}, want {w} (tolerance {tol:.4})"
        );
    }
}

fn dram(host: &HostTensor, mesh: &MeshDevice, mapper: &dyn MeshMapper) -> MeshTensor {
    MeshTensor::from_host(
        host,
        mesh,
        mapper,
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .unwrap()
}

#[test]
fn seed_multi_chip_trace_matmul_all_reduce_blocking() {
    let mesh = MeshDevice::open(MeshConfig {
        topology: "t3k".into(),
        trace_region_size: 100_000_000,
        num_command_queues: 2,
        fabric_config: FabricConfig::Fabric1D,
        ..Default::default()
    })
    .unwrap();
    let (m, k, n) = (32, 512, 256);
    let xs: Vec<HostTensor> = (0..6)
        .map(|i| random(&[1, 1, m, k], DataType::BFloat16, 10 + i, 1.0))
        .collect();
    let w_host = random(&[k, n], DataType::BFloat16, 3, 1.0 / (k as f32).sqrt());
    // x_sharded on its inner dim, w_sharded on its rows: each chip's partial product, summed.
    let x = dram(&xs[0], &mesh, &ShardTensorToMesh(3));
    let w = dram(&w_host, &mesh, &ShardTensorToMesh(0));
    let block = || {
        let partial = ops::matmul(&x, &w, &MeshMatmulConfig::default()).unwrap();
        ccl::all_reduce(&partial, &CclArgs::default()).unwrap()
    };
    // Compile run (every program into the cache), checked untraced.
    let untraced = block();
    let untraced_shards = untraced.to_host_shards(CqId(0)).unwrap();
    let want0 = host_matmul(&xs[0], &w_host);
    for s in &untraced_shards {
        assert_eq!(s.shape, vec![1, 1, m, n]);
        assert_close("untraced", &s.to_f32_vec(), &want0);
    }

    let tid = mesh.begin_trace_capture(CqId(0)).unwrap();
    let reduced = block();
    mesh.end_trace_capture(tid, CqId(0)).unwrap();

    for (i, xh) in xs.iter().enumerate() {
        x.copy_from_host(xh, &ShardTensorToMesh(3), CqId(0))
            .unwrap();
        mesh.execute_trace(tid, CqId(0), Blocking::Yes).unwrap();
        let want = host_matmul(xh, &w_host);
        let shards = reduced.to_host_shards(CqId(0)).unwrap();
        for (c, s) in shards.iter().enumerate() {
            let v = s.to_f32_vec();
            assert_close(&format!("replay {i} chip index {c}"), &v, &want);
            // all_reduce leaves one answer on every chip.
            assert_eq!(
                s, &shards[0],
                "replay {i}: chip index {c} differs from chip index 0"
            );
        }
        if i == 0 {
            // The same inputs as the untraced run: the same bits.
            assert_eq!(
                shards, untraced_shards,
                "replay 0 differs from the untraced run"
            );
        }
    }
    let reports = mesh.reports();
    for r in &reports {
        assert_eq!(r.trace_replays, xs.len() as u64, "chip {}", r.id);
        assert!(r.trace_allocated > 0, "chip {}", r.id);
    }
    mesh.release_trace(tid).unwrap();
    mesh.close().unwrap();
}

#[test]
fn column_parallel_matmul_with_and_without_gather() {
    let mesh = MeshDevice::open(MeshConfig {
        topology: "t3k".into(),
        ..Default::default()
    })
    .unwrap();
    let (m, k, n) = (32, 128, 512);
    let x_host = random(&[1, 1, m, k], DataType::BFloat16, 1, 1.0);
    let w_host = random(&[k, n], DataType::BFloat16, 2, 0.1);
    let want = host_matmul(&x_host, &w_host);
    let x = dram(&x_host, &mesh, &ReplicateTensorToMesh);
    let w = dram(&w_host, &mesh, &ShardTensorToMesh(1));
    let cfg = MeshMatmulConfig::default();
    let y = ops::column_parallel_matmul(&x, &w, &cfg, None).unwrap();
    assert_eq!(y.shape(), &[1, 1, m, n / 8]);
    let composed = y.to_host(&ConcatMeshToTensor(3), CqId(0)).unwrap();
    assert_close("column-parallel slices", &composed.to_f32_vec(), &want);
    for topology in [None, Some(Topology::Linear)] {
        let g = ops::column_parallel_matmul(
            &x,
            &w,
            &cfg,
            Some(&CclArgs {
                topology,
                ..Default::default()
            }),
        )
        .unwrap();
        for (c, s) in g.to_host_shards(CqId(0)).unwrap().iter().enumerate() {
            assert_eq!(s.shape, vec![1, 1, m, n]);
            // The gather moves bits: exactly the composed slices.
            assert_eq!(s, &composed, "gathered chip index {c}");
        }
    }
    mesh.close().unwrap();
}

#[test]
fn row_parallel_matmul_with_bias() {
    let mesh = MeshDevice::open(MeshConfig {
        topology: "t3k".into(),
        fabric_config: FabricConfig::Fabric1DRing,
        ..Default::default()
    })
    .unwrap();
    let (m, k, n) = (64, 512, 128);
    let x_host = random(&[1, 1, m, k], DataType::BFloat16, 4, 1.0);
    let w_host = random(&[k, n], DataType::BFloat16, 5, 1.0 / (k as f32).sqrt());
    let b_host = random(&[1, 1, m, n], DataType::BFloat16, 6, 1.0);
    let x = dram(&x_host, &mesh, &ShardTensorToMesh(3));
    let w = dram(&w_host, &mesh, &ShardTensorToMesh(0));
    let y = ops::row_parallel_matmul(&x, &w, &MeshMatmulConfig::default(), &CclArgs::default())
        .unwrap();
    let want = host_matmul(&x_host, &w_host);
    let shards = y.to_host_shards(CqId(0)).unwrap();
    for (c, s) in shards.iter().enumerate() {
        assert_close(
            &format!("row-parallel chip index {c}"),
            &s.to_f32_vec(),
            &want,
        );
        assert_eq!(s, &shards[0]);
    }
    // Bias is added once, after the reduction.
    let bias = dram(&b_host, &mesh, &ReplicateTensorToMesh);
    let cfg = MeshMatmulConfig {
        bias: Some(bias),
        ..Default::default()
    };
    let yb = ops::row_parallel_matmul(&x, &w, &cfg, &CclArgs::default()).unwrap();
    let b = b_host.to_f32_vec();
    let want_b: Vec<f64> = want.iter().zip(&b).map(|(a, c)| a + *c as f64).collect();
    for (c, s) in yb.to_host_shards(CqId(0)).unwrap().iter().enumerate() {
        assert_close(
            &format!("row-parallel + bias chip index {c}"),
            &s.to_f32_vec(),
            &want_b,
        );
    }
    mesh.close().unwrap();
}

/// Tensor parallelism along the rows of a Galaxy: weights split over the 8 chips of each row
/// (replicated down the columns), collectives on cluster_axis 1. An MLP: column-parallel up,
/// relu, row-parallel down.
#[test]
fn galaxy_rows_tensor_parallel_mlp() {
    let mesh = MeshDevice::open(MeshConfig {
        topology: "galaxy".into(),
        ..Default::default()
    })
    .unwrap();
    let (m, h, f) = (32, 128, 256);
    let x_host = random(&[1, 1, m, h], DataType::BFloat16, 7, 1.0);
    let w1_host = random(&[h, f], DataType::BFloat16, 8, 1.0 / (h as f32).sqrt());
    let w2_host = random(&[f, h], DataType::BFloat16, 9, 1.0 / (f as f32).sqrt());
    let x = dram(&x_host, &mesh, &ReplicateTensorToMesh);
    let w1 = dram(&w1_host, &mesh, &ShardTensor2dMesh([None, Some(1)]));
    let w2 = dram(&w2_host, &mesh, &ShardTensor2dMesh([None, Some(0)]));
    let rows = CclArgs {
        cluster_axis: Some(1),
        ..Default::default()
    };
    let up = ops::column_parallel_matmul(&x, &w1, &MeshMatmulConfig::default(), None).unwrap();
    let act = ops::relu(&up, &MeshOpOptions::default()).unwrap();
    let y = ops::row_parallel_matmul(&act, &w2, &MeshMatmulConfig::default(), &rows).unwrap();
    // Reference: relu(x W1) rounded to bf16 as the device stores it, then @ W2.
    let up_ref = host_matmul(&x_host, &w1_host);
    let act_ref = HostTensor::from_f32(
        vec![1, 1, m, f],
        DataType::BFloat16,
        up_ref.iter().map(|v| v.max(0.0) as f32).collect(),
    )
    .unwrap();
    let want = host_matmul(&act_ref, &w2_host);
    for (c, s) in y.to_host_shards(CqId(0)).unwrap().iter().enumerate() {
        assert_close(&format!("galaxy chip index {c}"), &s.to_f32_vec(), &want);
    }
    // The up projection gathered along rows is the whole x W1 on every chip.
    let g =
        ops::column_parallel_matmul(&x, &w1, &MeshMatmulConfig::default(), Some(&rows)).unwrap();
    for (c, s) in g.to_host_shards(CqId(0)).unwrap().iter().enumerate() {
        assert_close(
            &format!("galaxy gathered chip index {c}"),
            &s.to_f32_vec(),
            &up_ref,
        );
    }
    mesh.close().unwrap();
}
