//! The data-movement mesh ops on a T3K, tensor-parallel the way a decode step uses them: a
//! fused QKV projection sharded by heads over the 8 chips, each chip splitting its Q and K,
//! splitting heads, permuting and re-joining, all inside one mesh trace replayed on new data.
//! Every chip's result must equal the chip references applied to that chip's shard (exact).

mod common;

use common::{mapped_f32, open_with, random, shards_f32};
use ttmesh::ops::{self, MeshOpOptions};
use ttmesh::*;
use ttmesh_chip::compute::reference;

const CQ0: CqId = CqId(0);

#[test]
fn t3k_head_moves_replay_in_a_mesh_trace() {
    let mesh = open_with(MeshConfig {
        topology: "t3k".into(),
        trace_region_size: 1 << 20,
        ..Default::default()
    });
    // Per chip: 2 query heads and 1 KV head of 32, fused as [q | k] on the last dim.
    let (b, n, k, d, chips) = (1, 2, 1, 32, 8);
    let w = (n + k) * d;
    let dt = DataType::BFloat16;
    let full = [1, 1, b, w * chips];
    let shard = ShardTensorToMesh(3);
    let x = MeshTensor::from_host(
        &random(&full, dt, 1),
        &mesh,
        &shard,
        Layout::Tile,
        MemoryConfig::L1,
        CQ0,
    )
    .unwrap();
    let run = |outs: Option<&[MeshTensor; 4]>| -> [MeshTensor; 4] {
        let o = |i: usize| MeshOpOptions {
            output: outs.map(|t| t[i].clone()),
            ..Default::default()
        };
        let q = ops::slice(&x, &[0, 0, 0, 0], &[1, 1, b, n * d], &o(0)).unwrap();
        let kk = ops::slice(
            &x,
            &[0, 0, 0, n * d],
            &[1, 1, b, w],
            &MeshOpOptions::default(),
        )
        .unwrap();
        let heads = ops::reshape(&q, &[1, b, n, d], &o(1)).unwrap();
        let by_head = ops::transpose(&heads, 1, 2, &o(2)).unwrap();
        let joined = ops::concat(&[&kk, &q], -1, &o(3)).unwrap();
        [q, heads, by_head, joined]
    };
    let outs = run(None);
    let tid = mesh.begin_trace_capture(CQ0).unwrap();
    run(Some(&outs));
    mesh.end_trace_capture(tid, CQ0).unwrap();
    for step in 0..2u64 {
        let host = random(&full, dt, 10 + step);
        x.copy_from_host(&host, &shard, CQ0).unwrap();
        mesh.execute_trace(tid, CQ0, true).unwrap();
        let per_chip = mapped_f32(&mesh, &host, &shard);
        let got: Vec<Vec<Vec<f32>>> = outs.iter().map(shards_f32).collect();
        let s = [1, 1, b, w];
        for (c, xv) in per_chip.iter().enumerate() {
            let q = reference::slice(xv, &s, &[0, 0, 0, 0], &[1, 1, b, n * d]).unwrap();
            let kk = reference::slice(xv, &s, &[0, 0, 0, n * d], &[1, 1, b, w]).unwrap();
            assert_eq!(got[0][c], q, "step {step} chip {c}: slice");
            assert_eq!(got[1][c], q, "step {step} chip {c}: reshape");
            assert_eq!(
                got[2][c],
                reference::permute(&q, &[1, b, n, d], &[0, 2, 1, 3]).unwrap(),
                "step {step} chip {c}: transpose"
            );
            let want = reference::concat(
                &[
                    (&kk[..], &[1, 1, b, k * d][..]),
                    (&q[..], &[1, 1, b, n * d][..]),
                ],
                3,
            )
            .unwrap();
            assert_eq!(got[3][c], want, "step {step} chip {c}: concat");
        }
    }
    mesh.release_trace(tid).unwrap();
}

#[test]
fn mesh_shape_errors_name_the_shapes() {
    let mesh = open_with(MeshConfig {
        topology: "n300".into(),
        ..Default::default()
    });
    let x = MeshTensor::from_host(
        &random(&[1, 1, 4, 64], DataType::Float32, 2),
        &mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        CQ0,
    )
    .unwrap();
    let e = ops::reshape(&x, &[1, 4, 3, 16], &MeshOpOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("[1, 1, 4, 64]") && e.contains("[1, 4, 3, 16]"),
        "{e}"
    );
    let r = ops::reshape(&x, &[1, 4, 4, 16], &MeshOpOptions::default()).unwrap();
    let want = mapped_f32(
        &mesh,
        &random(&[1, 1, 4, 64], DataType::Float32, 2),
        &ReplicateTensorToMesh,
    );
    assert_eq!(shards_f32(&r), want);
}
