//! Every op reaches a chip through one launch entry point (`ttmesh_chip::ops::launch`): a
//! matmul and the collectives alike are counted there, once per chip per launch.

mod common;

use common::*;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::ops::{self as mesh_ops, MeshMatmulConfig};
use ttmesh::*;

fn launches(mesh: &MeshDevice) -> Vec<u64> {
    mesh.chips().iter().map(|c| c.enqueued_launches()).collect()
}

fn grew_by(before: &[u64], after: &[u64]) -> Vec<u64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

#[test]
fn matmul_and_collectives_go_through_the_one_launch_entry_point() {
    let mesh = open("t3k", FabricConfig::Fabric1D);
    let n = mesh.num_devices();
    let a = per_chip(
        &mesh,
        &(0..n)
            .map(|i| exact(&[1, 1, 32, 64], DataType::Float32, i as u64))
            .collect::<Vec<_>>(),
        Layout::Tile,
    );
    let b = per_chip(
        &mesh,
        &(0..n)
            .map(|i| exact(&[1, 1, 64, 32 * n], DataType::Float32, 100 + i as u64))
            .collect::<Vec<_>>(),
        Layout::Tile,
    );

    let before = launches(&mesh);
    let y = mesh_ops::matmul(&a, &b, &MeshMatmulConfig::default()).unwrap();
    let after_matmul = launches(&mesh);
    assert_eq!(
        grew_by(&before, &after_matmul),
        vec![1; n],
        "one matmul launch per chip"
    );

    let args = CclArgs::default();
    let g = ccl::all_gather(&y, 3, &args).unwrap();
    let after_gather = launches(&mesh);
    assert_eq!(
        grew_by(&after_matmul, &after_gather),
        vec![1; n],
        "one all_gather launch per chip"
    );

    // A float32 all_reduce is one kernel on pages: one launch per chip.
    let r = ccl::all_reduce(&y, &args).unwrap();
    let after_reduce = launches(&mesh);
    assert_eq!(
        grew_by(&after_gather, &after_reduce),
        vec![1; n],
        "all_reduce launches per chip"
    );

    // The launches did their work: every chip holds the whole gather and the whole sum.
    let y_parts = shards_f32(&y);
    let parts: Vec<&[f32]> = y_parts.iter().map(|v| v.as_slice()).collect();
    let sum = sum_f64(&parts);
    for (chip, (got_g, got_r)) in shards_f32(&g).iter().zip(shards_f32(&r)).enumerate() {
        assert_eq!(got_g.len(), 32 * 32 * n * n, "chip {chip} gather size");
        assert_close(
            &format!("all_reduce on chip {chip}"),
            &got_r,
            &sum,
            1e-5,
            1e-4,
        );
    }
}
