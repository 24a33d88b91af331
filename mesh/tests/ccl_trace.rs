//! Collectives captured in a mesh trace and replayed many times, with new inputs copied in
//! between replays: every replay is correct, and replays of the same inputs agree bit for bit.

mod common;

use common::*;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::*;

const REPLAYS: usize = 20;

/// Captures all_gather, reduce_scatter and all_reduce of one input on `axis`, then replays.
fn capture_and_replay(topology: &str, fabric: FabricConfig, axis: Option<usize>, dtype: DataType) {
    let mesh = open_with(MeshConfig {
        topology: topology.into(),
        fabric_config: fabric,
        trace_region_size: 4 << 20,
        ..Default::default()
    });
    let what = format!("{topology} {fabric:?} axis {axis:?} {dtype}");
    let n = mesh.ccl_lines(axis).unwrap()[0].1.len();
    let shape = vec![1, 1, 32, 32 * n];
    let (ag_dim, rs_dim) = (2, 3);
    let inputs = |round: u64| -> Vec<HostTensor> {
        (0..mesh.num_devices())
            .map(|i| exact(&shape, dtype, round * 100 + i as u64))
            .collect()
    };
    // reduce_scatter gets full-precision data so its bitwise check exercises the order.
    let rs_inputs = |round: u64| -> Vec<HostTensor> {
        (0..mesh.num_devices())
            .map(|i| random(&shape, dtype, 5000 + round * 100 + i as u64))
            .collect()
    };
    let x = per_chip(&mesh, &inputs(0), Layout::Tile);
    let y = per_chip(&mesh, &rs_inputs(0), Layout::Tile);
    let args = CclArgs {
        cluster_axis: axis,
        ..Default::default()
    };
    let block = || -> (MeshTensor, MeshTensor, MeshTensor) {
        (
            ccl::all_gather(&x, ag_dim, &args).unwrap(),
            ccl::reduce_scatter(&y, rs_dim, &args).unwrap(),
            ccl::all_reduce(&x, &args).unwrap(),
        )
    };
    // Compile run: every program in the cache, outputs checked untraced first.
    let (g0, r0, a0) = block();
    let expect = |xd: &[Vec<f32>], yd: &[Vec<f32>]| {
        (
            reference(
                &mesh,
                Op::AllGather,
                axis,
                None,
                &shape,
                ag_dim as usize,
                dtype,
                xd,
            ),
            reference(
                &mesh,
                Op::ReduceScatter,
                axis,
                None,
                &shape,
                rs_dim as usize,
                dtype,
                yd,
            ),
            reference(&mesh, Op::AllReduce, axis, None, &shape, 0, dtype, xd),
        )
    };
    let values = |p: &[HostTensor]| p.iter().map(|h| h.to_f32_vec()).collect::<Vec<_>>();
    let (eg, er, ea) = expect(&values(&inputs(0)), &values(&rs_inputs(0)));
    assert_eq!(shards_f32(&g0), eg, "{what}: untraced all_gather");
    for (i, (g, e)) in shards_f32(&r0).iter().zip(&er).enumerate() {
        assert_bits_eq(
            &format!("{what}: untraced reduce_scatter, chip index {i}"),
            g,
            e,
        );
    }
    assert_eq!(shards_f32(&a0), ea, "{what}: untraced all_reduce");

    let tid = mesh.begin_trace_capture(CqId(0)).unwrap();
    let (g, r, a) = block();
    mesh.end_trace_capture(tid, CqId(0)).unwrap();
    let mut first: Option<[Vec<Vec<f32>>; 3]> = None;
    for round in 0..REPLAYS as u64 {
        // Every fifth replay repeats round 0's inputs: its outputs must match round 0 exactly.
        let src = if round % 5 == 0 { 0 } else { round };
        let (xp, yp) = (inputs(src), rs_inputs(src));
        x.copy_from_host(&xp[0], &PerChip(xp.clone()), CqId(0))
            .unwrap();
        y.copy_from_host(&yp[0], &PerChip(yp.clone()), CqId(0))
            .unwrap();
        mesh.execute_trace(tid, CqId(0), round % 2 == 0).unwrap();
        let got = [shards_f32(&g), shards_f32(&r), shards_f32(&a)];
        let (eg, er, ea) = expect(&values(&xp), &values(&yp));
        for (k, (gv, ev)) in got.iter().zip([&eg, &er, &ea]).enumerate() {
            for (i, (gc, ec)) in gv.iter().zip(ev.iter()).enumerate() {
                assert_bits_eq(
                    &format!(
                        "{what}: replay {round}, op {k}, chip {}",
                        mesh.chips()[i].id()
                    ),
                    gc,
                    ec,
                );
            }
        }
        match &first {
            None => first = Some(got),
            Some(f) if src == 0 => {
                for (k, (fv, gv)) in f.iter().zip(&got).enumerate() {
                    for (fc, gc) in fv.iter().zip(gv) {
                        assert_bits_eq(&format!("{what}: replay {round} op {k} differs"), fc, gc);
                    }
                }
            }
            _ => {}
        }
        let report = mesh.last_replay();
        if round % 2 == 0 {
            // A blocking replay has finished on every chip.
            let rep = report.expect("a finished lockstep replay has a report");
            assert_eq!(rep.per_chip_us.len(), mesh.num_devices());
            assert!(rep.skew_us >= 0.0);
        }
    }
    mesh.synchronize_device().unwrap();
    for c in mesh.reports() {
        assert_eq!(c.trace_replays, REPLAYS as u64, "chip {}", c.id);
        assert_eq!(c.live_traces, 1);
    }
    mesh.release_trace(tid).unwrap();
    for c in mesh.reports() {
        assert_eq!((c.live_traces, c.trace_allocated), (0, 0), "chip {}", c.id);
    }
    mesh.close().unwrap();
}

#[test]
fn t3k_line_trace_replays() {
    capture_and_replay("t3k", FabricConfig::Fabric1D, None, DataType::Float32);
    capture_and_replay("t3k", FabricConfig::Fabric1D, Some(1), DataType::BFloat16);
}

#[test]
fn t3k_ring_trace_replays() {
    capture_and_replay("t3k", FabricConfig::Fabric1DRing, None, DataType::BFloat16);
    capture_and_replay(
        "t3k",
        FabricConfig::Fabric1DRing,
        Some(0),
        DataType::Float32,
    );
}

#[test]
fn galaxy_rows_trace_replays() {
    capture_and_replay("galaxy", FabricConfig::Fabric1D, Some(1), DataType::Float32);
}

#[test]
fn ring_of_five_trace_replays() {
    capture_and_replay(
        "ring-5",
        FabricConfig::Fabric1DRing,
        None,
        DataType::Float32,
    );
}

/// Two traces on one mesh, replayed alternately: the collectives' semaphores and scratch
/// slots never leak state from one trace into the other. The second trace's output is
/// allocated before the first capture: a buffer allocated after a capture may sit where that
/// trace's freed intermediates (CCL scratch) are written on replay.
#[test]
fn two_traces_interleaved() {
    let mesh = open_with(MeshConfig {
        topology: "t3k".into(),
        fabric_config: FabricConfig::Fabric1DRing,
        trace_region_size: 4 << 20,
        ..Default::default()
    });
    let shape = [1, 1, 32, 256];
    let parts: Vec<HostTensor> = (0..8)
        .map(|i| exact(&shape, DataType::Float32, i))
        .collect();
    let x = per_chip(&mesh, &parts, Layout::Tile);
    let gathered = TensorSpec::new(
        vec![1, 1, 32, 2048],
        DataType::Float32,
        Layout::Tile,
        MemoryConfig::DRAM,
    );
    let g_out = MeshTensor::allocate(&mesh, &gathered).unwrap();
    let args = CclArgs::default();
    let g_args = CclArgs {
        output: Some(g_out.clone()),
        ..Default::default()
    };
    let _ = ccl::all_reduce(&x, &args).unwrap();
    let _ = ccl::all_gather(&x, 3, &g_args).unwrap();
    let t1 = mesh.begin_trace_capture(CqId(0)).unwrap();
    let a = ccl::all_reduce(&x, &args).unwrap();
    mesh.end_trace_capture(t1, CqId(0)).unwrap();
    let t2 = mesh.begin_trace_capture(CqId(0)).unwrap();
    let g = ccl::all_gather(&x, 3, &g_args).unwrap();
    mesh.end_trace_capture(t2, CqId(0)).unwrap();
    assert_ne!(t1, t2);
    assert_eq!(g.buffer_address().unwrap(), g_out.buffer_address().unwrap());
    for round in 0..10u64 {
        let parts: Vec<HostTensor> = (0..8)
            .map(|i| exact(&shape, DataType::Float32, 10 * round + i))
            .collect();
        x.copy_from_host(&parts[0], &PerChip(parts.clone()), CqId(0))
            .unwrap();
        let data: Vec<Vec<f32>> = parts.iter().map(|p| p.to_f32_vec()).collect();
        if round % 2 == 0 {
            mesh.execute_trace(t1, CqId(0), Blocking::No).unwrap();
            let want = reference(
                &mesh,
                Op::AllReduce,
                None,
                None,
                &shape,
                0,
                DataType::Float32,
                &data,
            );
            assert_eq!(shards_f32(&a), want, "replay {round}");
        } else {
            mesh.execute_trace(t2, CqId(0), Blocking::No).unwrap();
            let want = reference(
                &mesh,
                Op::AllGather,
                None,
                None,
                &shape,
                3,
                DataType::Float32,
                &data,
            );
            assert_eq!(shards_f32(&g), want, "replay {round}");
        }
    }
    mesh.close().unwrap();
}

/// The hazard tt-metal users hit silently (corrupted outputs): a buffer allocated after a
/// capture overlaps that trace's freed intermediates. The replay sanitizer refuses the replay
/// and names the chip, the address and the fix.
#[test]
fn allocation_over_a_traced_intermediate_is_refused() {
    let mesh = open_with(MeshConfig {
        topology: "t3k".into(),
        fabric_config: FabricConfig::Fabric1DRing,
        trace_region_size: 4 << 20,
        ..Default::default()
    });
    let shape = [1, 1, 32, 256];
    let parts: Vec<HostTensor> = (0..8)
        .map(|i| exact(&shape, DataType::Float32, i))
        .collect();
    let x = per_chip(&mesh, &parts, Layout::Tile);
    let _ = ccl::all_reduce(&x, &CclArgs::default()).unwrap();
    let tid = mesh.begin_trace_capture(CqId(0)).unwrap();
    let _a = ccl::all_reduce(&x, &CclArgs::default()).unwrap();
    mesh.end_trace_capture(tid, CqId(0)).unwrap();
    // Lands where the all_reduce's freed intermediates are.
    let late = MeshTensor::allocate(
        &mesh,
        &TensorSpec::new(
            vec![1, 1, 32, 2048],
            DataType::Float32,
            Layout::Tile,
            MemoryConfig::DRAM,
        ),
    )
    .unwrap();
    let e = mesh
        .execute_trace(tid, CqId(0), Blocking::Yes)
        .unwrap_err()
        .to_string();
    let first = mesh.chips()[0].id();
    assert!(
        e.contains(&format!("chip {first}"))
            && e.contains("overlaps")
            && e.contains("release_trace"),
        "{e}"
    );
    // Freeing the late buffer makes the replay safe again.
    late.deallocate(false).unwrap();
    mesh.execute_trace(tid, CqId(0), Blocking::Yes).unwrap();
    mesh.close().unwrap();
}
