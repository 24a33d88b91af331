//! A replay whose peer timed out: the one `synchronize_device` that reports the timeout also
//! leaves the mesh usable, so the next replay runs and is right without a second call.

mod common;

use std::time::Duration;

use common::*;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::*;

const DTYPE: DataType = DataType::BFloat16;
const TIMEOUT: Duration = Duration::from_millis(500);

/// Holds `chip`'s command queue 0 past its finish's wait (timeout, a quarter more, half a
/// second), as the stress crate's stalled chip does; its part of the collective runs after.
fn stall(mesh: &MeshDevice, chip: usize) {
    let hold = TIMEOUT + TIMEOUT / 2 + Duration::from_secs(1);
    mesh.chips()[chip]
        .enqueue_host_callback(CqId(0), move || {
            std::thread::sleep(hold);
            Ok(())
        })
        .unwrap();
}

fn replay_after_a_peer_timeout(topology: &str, op: Op) {
    let mesh = open_with(MeshConfig {
        topology: topology.into(),
        fabric_config: FabricConfig::Fabric1D,
        trace_region_size: 1 << 20,
        operation_timeout: Some(TIMEOUT),
        ..Default::default()
    });
    let n = mesh.num_devices();
    let shape = vec![1, 1, 32, 32 * n];
    let parts: Vec<HostTensor> = (0..n)
        .map(|i| exact(&shape, DTYPE, 70 + i as u64))
        .collect();
    let data: Vec<Vec<f32>> = parts.iter().map(|h| h.to_f32_vec()).collect();
    let want = reference(&mesh, op, None, None, &shape, 3, DTYPE, &data);
    let x = per_chip(&mesh, &parts, Layout::Tile);
    let run = |x: &MeshTensor| match op {
        Op::AllGather => ccl::all_gather(x, 3, &CclArgs::default()),
        Op::ReduceScatter => ccl::reduce_scatter(x, 3, &CclArgs::default()),
        Op::AllReduce => ccl::all_reduce(x, &CclArgs::default()),
    };
    run(&x).unwrap();
    mesh.synchronize_device().unwrap();
    let tid = mesh.begin_trace_capture(CqId(0)).unwrap();
    let out = run(&x).unwrap();
    mesh.end_trace_capture(tid, CqId(0)).unwrap();
    let check = |what: &str| {
        for (i, (g, w)) in shards_f32(&out).iter().zip(&want).enumerate() {
            assert_bits_eq(&format!("{topology} {op:?} {what}, chip index {i}"), g, w);
        }
    };
    mesh.execute_trace(tid, CqId(0), false).unwrap();
    mesh.synchronize_device().unwrap();
    check("healthy replay");

    // A chip in the middle of the line stalls: its peers' waits time out.
    stall(&mesh, n / 2);
    let stalled = mesh.chips()[n / 2].id();
    mesh.execute_trace(tid, CqId(0), false).unwrap();
    let e = mesh.synchronize_device().unwrap_err().to_string();
    assert!(
        e.contains(&format!("[{stalled}] never reached")) || e.contains("timed out"),
        "{topology} {op:?}: the error does not say chip {stalled} was late: {e}"
    );

    // One synchronize was enough: the next replay runs and is right, and so does the one after.
    for round in 0..2 {
        mesh.execute_trace(tid, CqId(0), false)
            .unwrap_or_else(|e| panic!("{topology} {op:?}: replay {round} after the timeout: {e}"));
        mesh.synchronize_device().unwrap_or_else(|e| {
            panic!("{topology} {op:?}: synchronize {round} after the timeout: {e}")
        });
        check(&format!("replay {round} after the timeout"));
    }
    mesh.release_trace(tid).unwrap();
    mesh.close().unwrap();
}

#[test]
fn one_synchronize_after_a_peer_timeout_leaves_the_next_all_reduce_replay_right() {
    replay_after_a_peer_timeout("t3k", Op::AllReduce);
}

#[test]
fn one_synchronize_after_a_peer_timeout_leaves_the_next_all_gather_replay_right() {
    replay_after_a_peer_timeout("line-4", Op::AllGather);
}

#[test]
fn one_synchronize_after_a_peer_timeout_leaves_the_next_reduce_scatter_replay_right() {
    replay_after_a_peer_timeout("t3k", Op::ReduceScatter);
}
