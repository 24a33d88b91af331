//! After a faulted collective, the mesh is right or says so. For every collective, fault kind
//! and mode (untraced, traced), on one mesh that lives through all cases: the faulted run
//! either fails with an error naming the link or returns the host reference; once the fault
//! is cleared, the same collective returns the host reference (or a clear error says to
//! reopen the mesh). Never a silently wrong value, never a hang.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::*;
use ttmesh_fabric::Fault;

const DTYPE: DataType = DataType::BFloat16;

struct FaultCase {
    label: String,
    links: Vec<usize>,
    fault: Fault,
    /// The collective's packets cross the link and the fault loses them: it must fail.
    must_fail: bool,
}

/// Every fault kind on the middle hop of the first line, and a down link off every line.
fn fault_cases(mesh: &MeshDevice, axis: Option<usize>) -> Vec<FaultCase> {
    let fabric = mesh.fabric().unwrap();
    let lines = mesh.ccl_lines(axis).unwrap();
    let chips = &lines[0].0.chips;
    let mid = chips.len() / 2;
    let on_path: Vec<usize> = (0..fabric.spec().links.len())
        .filter(|&i| fabric.spec().links[i].joins(chips[mid - 1], chips[mid]))
        .collect();
    assert!(!on_path.is_empty());
    let adjacent = |a: u32, b: u32| {
        lines.iter().any(|(l, _)| {
            let n = l.chips.len();
            (0..n).any(|p| {
                let q = (p + 1) % n;
                (q > p || l.is_ring) && {
                    let (x, y) = (l.chips[p], l.chips[q]);
                    (x, y) == (a, b) || (x, y) == (b, a)
                }
            })
        })
    };
    let off_path = (0..fabric.spec().links.len())
        .find(|&i| {
            let l = fabric.spec().links[i];
            mesh.chips().iter().any(|c| c.id() == l.a.0)
                && mesh.chips().iter().any(|c| c.id() == l.b.0)
                && !adjacent(l.a.0, l.b.0)
        })
        .into_iter()
        .collect::<Vec<_>>();
    let mut cases: Vec<FaultCase> = [
        ("down", Fault::Down, true),
        ("slow x4", Fault::Slow { factor: 4.0 }, false),
        ("slow x1e300", Fault::Slow { factor: 1e300 }, false),
        ("drop every packet", Fault::Drop { every_nth: 1 }, true),
        ("drop every 7th", Fault::Drop { every_nth: 7 }, false),
        (
            "corrupt every packet",
            Fault::Corrupt { every_nth: 1 },
            true,
        ),
        ("corrupt every 7th", Fault::Corrupt { every_nth: 7 }, false),
    ]
    .into_iter()
    .map(|(label, fault, must_fail)| FaultCase {
        label: label.into(),
        links: on_path.clone(),
        fault,
        must_fail,
    })
    .collect();
    if !off_path.is_empty() {
        cases.push(FaultCase {
            label: "down off the path".into(),
            links: off_path,
            fault: Fault::Down,
            must_fail: false,
        });
    }
    cases
}

fn run_op(op: Op, x: &MeshTensor, args: &CclArgs) -> MeshTensor {
    // Enqueueing succeeds whatever the fabric's state: failures surface on the devices.
    match op {
        Op::AllGather => ccl::all_gather(x, 3, args),
        Op::ReduceScatter => ccl::reduce_scatter(x, 3, args),
        Op::AllReduce => ccl::all_reduce(x, args),
    }
    .unwrap()
}

/// Runs every collective under every fault, untraced and traced, on one mesh.
fn matrix(topology: &str, fabric: FabricConfig, axis: Option<usize>) {
    matrix_of(
        topology,
        fabric,
        axis,
        32,
        &[Op::AllGather, Op::ReduceScatter, Op::AllReduce],
    );
}

/// Every fault case on each of `ops`, on a [1, 1, rows, 32 x line length] tensor per chip.
fn matrix_of(topology: &str, fabric: FabricConfig, axis: Option<usize>, rows: usize, ops: &[Op]) {
    let started = Instant::now();
    let mesh = open_with(MeshConfig {
        topology: topology.into(),
        fabric_config: fabric,
        trace_region_size: 1 << 20,
        operation_timeout: Some(Duration::from_secs(3)),
        ..Default::default()
    });
    let n = mesh.ccl_lines(axis).unwrap()[0].1.len();
    let shape = vec![1, 1, rows, 32 * n];
    let parts: Vec<HostTensor> = (0..mesh.num_devices())
        .map(|i| exact(&shape, DTYPE, 40 + i as u64))
        .collect();
    let data: Vec<Vec<f32>> = parts.iter().map(|h| h.to_f32_vec()).collect();
    let x = per_chip(&mesh, &parts, Layout::Tile);
    let args = CclArgs {
        cluster_axis: axis,
        ..Default::default()
    };
    let cases = fault_cases(&mesh, axis);
    let f = mesh.fabric().unwrap().clone();
    let mut counts = (0, 0);
    for &op in ops {
        let want = reference(&mesh, op, axis, None, &shape, 3, DTYPE, &data);
        // Healthy run first (compiles the programs), then a trace of the same collective.
        let healthy = run_op(op, &x, &args);
        mesh.synchronize_device().unwrap();
        check(
            &format!("{topology} {op:?} healthy"),
            &shards_f32(&healthy),
            &want,
        );
        let tid = mesh.begin_trace_capture(CqId(0)).unwrap();
        let traced_out = run_op(op, &x, &args);
        mesh.end_trace_capture(tid, CqId(0)).unwrap();
        for traced in [false, true] {
            let run = || -> (std::result::Result<(), MeshError>, MeshTensor) {
                if traced {
                    let r = mesh.execute_trace(tid, CqId(0), true);
                    let r = r.and_then(|_| mesh.synchronize_device());
                    (r, traced_out.clone())
                } else {
                    let out = run_op(op, &x, &args);
                    (mesh.synchronize_device(), out)
                }
            };
            for case in &cases {
                let what = format!(
                    "{topology} {fabric:?} axis {axis:?} {op:?} {} {}",
                    if traced { "traced" } else { "untraced" },
                    case.label
                );
                let names: Vec<String> = case
                    .links
                    .iter()
                    .map(|&i| f.spec().links[i].to_string())
                    .collect();
                for &l in &case.links {
                    f.inject(l, case.fault).unwrap();
                }
                let t = Instant::now();
                let (r, out) = run();
                let took = t.elapsed();
                assert!(
                    took < Duration::from_secs(5),
                    "{what}: faulted run took {took:?}"
                );
                match r {
                    Ok(()) => {
                        assert!(!case.must_fail, "{what}: the faulted collective succeeded");
                        check(&format!("{what}: faulted run"), &shards_f32(&out), &want);
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        assert!(
                            names.iter().any(|n| msg.contains(&format!("link {n}"))),
                            "{what}: the error does not name the link {names:?}: {msg}"
                        );
                        counts.0 += 1;
                    }
                }
                for &l in &case.links {
                    f.clear_fault(l).unwrap();
                }
                let (r, out) = run();
                match r {
                    Ok(()) => check(&format!("{what}: after clearing"), &shards_f32(&out), &want),
                    Err(e) => panic!("{what}: the collective after clearing the fault failed: {e}"),
                }
                counts.1 += 1;
            }
        }
        mesh.release_trace(tid).unwrap();
    }
    mesh.close().unwrap();
    eprintln!(
        "{topology} {fabric:?} axis {axis:?}: {} cases, {} faulted runs failed naming the link, every rerun right, {:?}",
        counts.1,
        counts.0,
        started.elapsed()
    );
}

fn check(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_bits_eq(&format!("{what}, chip index {i}"), g, w);
    }
}

#[test]
fn t3k_line_recovers_from_every_fault() {
    matrix("t3k", FabricConfig::Fabric1D, None);
}

#[test]
fn t3k_ring_recovers_from_every_fault() {
    matrix("t3k", FabricConfig::Fabric1DRing, None);
}

#[test]
fn galaxy_rows_recover_from_every_fault() {
    matrix("galaxy", FabricConfig::Fabric1D, Some(1));
}

/// Under FABRIC_2D, a fault on a link of each dimension: the middle hop of a column (Y) for
/// collectives along axis 0, of a row (X) along axis 1, and a link of the other axis off the
/// path.
#[test]
fn galaxy_2d_recovers_from_every_fault_on_either_dimension() {
    matrix("galaxy", FabricConfig::Fabric2D, Some(0));
    matrix("galaxy", FabricConfig::Fabric2D, Some(1));
}

/// On a torus, the rows and columns are rings of the fabric (the collectives still run them
/// as lines); a fault on either dimension ends as on a mesh.
#[test]
fn torus_recovers_from_every_fault_on_either_dimension() {
    matrix("torus-4x4", FabricConfig::Fabric2DTorusXY, Some(0));
    matrix("torus-4x4", FabricConfig::Fabric2DTorusXY, Some(1));
}

/// A mid-sized all_reduce (256 tiles over 8 chips) runs together on two threads, the
/// meeting's and a pool thread (ccl's `pair`): a fault still fails every chip naming the link,
/// no thread is left waiting, and the next run is right.
#[test]
fn t3k_ring_mid_all_reduce_on_two_runners_recovers_from_every_fault() {
    matrix_of(
        "t3k",
        FabricConfig::Fabric1DRing,
        None,
        256,
        &[Op::AllReduce],
    );
}

/// A large all_reduce or reduce_scatter runs on each chip's own thread and moves in several
/// pieces per chunk (2,048 bf16 tiles over 8 chips: 512 KiB chunks, 2 pieces each), its ring
/// slots sharing memory, each reader crediting the writer over the fabric (ccl's `sharing`):
/// a fault mid-stream, losing data or credits, still fails every chip naming the link, and
/// the next run is right.
#[test]
fn t3k_ring_large_all_reduce_recovers_from_every_fault() {
    matrix_of(
        "t3k",
        FabricConfig::Fabric1DRing,
        None,
        8192,
        &[Op::AllReduce, Op::ReduceScatter],
    );
}
