//! The two ways a collective's steps run (each chip's on its own dispatcher, or the whole
//! line's on one thread) give the same bits, on lines and rings, for every op, on
//! full-precision data whose sums depend on the order. One test: the runner is per process.

mod common;

use common::*;
use ttmesh::ccl::{self, CclArgs, StepRunner};
use ttmesh::*;

fn run(mesh: &MeshDevice, t: &MeshTensor, op: Op, axis: Option<usize>) -> Vec<Vec<f32>> {
    let args = CclArgs {
        cluster_axis: axis,
        ..Default::default()
    };
    let r = match op {
        Op::AllGather => ccl::all_gather(t, 3, &args),
        Op::ReduceScatter => ccl::reduce_scatter(t, 3, &args),
        Op::AllReduce => ccl::all_reduce(t, &args),
    }
    .unwrap();
    mesh.synchronize_device().unwrap();
    let got = shards_f32(&r);
    r.deallocate(true).unwrap();
    got
}

#[test]
fn together_and_own_threads_agree_bit_for_bit() {
    for (topo, fabric, axis) in [
        ("t3k", FabricConfig::Fabric1DRing, None),
        ("t3k", FabricConfig::Fabric1D, None),
        ("t3k", FabricConfig::Fabric1D, Some(1)),
        ("n300", FabricConfig::Fabric1D, None),
    ] {
        let mesh = open(topo, fabric);
        for dtype in [DataType::BFloat16, DataType::Float32] {
            for (op, rows) in [
                (Op::AllReduce, 96),
                (Op::ReduceScatter, 96),
                (Op::AllGather, 96),
                // Several pieces per chunk (see ccl's step lists).
                (Op::AllReduce, 864),
            ] {
                // 9 tiles do not split evenly over 2, 4 or 8 chips (all_reduce's own split).
                let shape = [1, 1, rows, 96 * 8];
                let parts: Vec<HostTensor> = (0..mesh.num_devices())
                    .map(|i| random(&shape, dtype, 40 + i as u64))
                    .collect();
                let t = per_chip(&mesh, &parts, Layout::Tile);
                ccl::set_step_runner(StepRunner::Together);
                let together = run(&mesh, &t, op, axis);
                ccl::set_step_runner(StepRunner::OwnThreads);
                let own = run(&mesh, &t, op, axis);
                for (i, (a, b)) in together.iter().zip(&own).enumerate() {
                    assert_bits_eq(
                        &format!(
                            "{topo} {fabric:?} axis {axis:?} {dtype:?} {op:?}: chip index {i}"
                        ),
                        a,
                        b,
                    );
                }
                t.deallocate(true).unwrap();
            }
        }
    }
}
