//! The two ways a collective's steps run (each chip's on its own dispatcher, or the whole
//! line's on one thread) give the same bits, on lines and rings, for every op, on
//! full-precision data whose sums depend on the order, and large rings whose slots share
//! memory on the chips' own threads (credits sent back over the fabric) give the bits the
//! one-thread runner gives. One test: the runner is per process.

mod common;

use common::*;
use ttmesh::ccl::{self, CclArgs, StepRunner};
use ttmesh::*;
use ttmesh_fabric::LinkDirection;

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
    large_ring_slots_shared_on_own_threads();
}

/// Packets each link carried in each direction so far, by link index.
fn link_packets(mesh: &MeshDevice) -> Vec<[u64; 2]> {
    let stats = mesh
        .fabric()
        .expect("a mesh of 8 chips has a fabric")
        .link_stats();
    let mut by_link = vec![[0; 2]; stats.iter().map(|l| l.link_index + 1).max().unwrap_or(0)];
    for l in &stats {
        let d = usize::from(l.direction != LinkDirection::AToB);
        by_link[l.link_index][d] += l.packets;
    }
    by_link
}

/// Packets sent against the data between `before` and now: per link, the direction that
/// carried fewer (a ring's reduce and gather each go one way round).
fn packets_against_the_data(mesh: &MeshDevice, before: &[[u64; 2]]) -> u64 {
    (link_packets(mesh).iter().zip(before))
        .map(|(now, was)| (now[0] - was[0]).min(now[1] - was[1]))
        .sum()
}

/// A 4 MiB bf16 all_reduce and a reduce_scatter of the same input on the T3K ring: slots of
/// 512 KiB and more, which share memory on own threads, the reader crediting the writer.
fn large_ring_slots_shared_on_own_threads() {
    let mesh = open("t3k", FabricConfig::Fabric1DRing);
    // 2816 x 768 bf16 is 4.1 MiB per chip: chunks (and all_reduce's slots) over 512 KiB.
    let shape = [1, 1, 2816, 768];
    let parts: Vec<HostTensor> = (0..8)
        .map(|i| random(&shape, DataType::BFloat16, 70 + i as u64))
        .collect();
    let t = per_chip(&mesh, &parts, Layout::Tile);
    for op in [Op::AllReduce, Op::ReduceScatter] {
        ccl::set_step_runner(StepRunner::Together);
        let together = run(&mesh, &t, op, None);
        ccl::set_step_runner(StepRunner::OwnThreads);
        let before = link_packets(&mesh);
        let own = run(&mesh, &t, op, None);
        let against = packets_against_the_data(&mesh, &before);
        // One handshake per chip goes against the data; the credits are the rest: the reduce
        // writes slots 0 to 5 (its 7th hop adds at delivery), two pieces each, and slots 2 to
        // 5 wait for one credit per piece on every chip.
        assert!(
            against >= 8 + 8 * 8,
            "{op:?}: {against} packets went against the data: the slots' credits are missing"
        );
        for (i, (a, b)) in together.iter().zip(&own).enumerate() {
            assert_bits_eq(&format!("large ring {op:?}: chip index {i}"), a, b);
        }
    }
    ccl::set_step_runner(StepRunner::BySize);
    t.deallocate(true).unwrap();
}
