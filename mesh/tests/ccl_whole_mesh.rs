//! Collectives over the whole of a 2D mesh on a 2D fabric (`cluster_axis` None): all_gather,
//! reduce_scatter and all_reduce over every chip, untraced and traced, in bf16, f32 and
//! bfloat8_b, checked bit for bit against a host reference written from the definitions alone
//! (concatenation of every chip's block in mesh order; the sum of every chip, chip `i` keeping
//! chunk `i`), whatever phases the mesh runs them in. Reductions run twice and must agree.

mod common;

use common::*;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::*;

/// Values the reductions sum exactly in every format and order: bf16 and f32 take multiples
/// of 1/16 in [-1/2, 1/2) (`exact`); bfloat8_b, whose 16-value blocks share one exponent and
/// keep 7 mantissa bits, takes -1/8, 0 and 1/8, so every partial sum of 32 chips is a
/// multiple of 1/8 below 8 in magnitude and sits on its block's grid (step 2^-4 at most).
fn values(shape: &[usize], dtype: DataType, seed: u64) -> HostTensor {
    if dtype != DataType::BFloat8B {
        return exact(shape, dtype, seed);
    }
    let mut r = Rng::new(seed);
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|_| (r.next() % 3) as f32 / 8.0 - 0.125)
        .collect();
    HostTensor::from_f32(shape.to_vec(), dtype, v).unwrap()
}

fn open_2d(topology: &str, fabric: FabricConfig) -> MeshDevice {
    open_with(MeshConfig {
        topology: topology.into(),
        fabric_config: fabric,
        trace_region_size: 8 << 20,
        ..Default::default()
    })
}

/// What every chip (mesh order) must hold after `op` over all chips of the mesh.
fn whole_mesh_reference(op: Op, shape: &[usize], dim: usize, data: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let n = data.len();
    let parts: Vec<&[f32]> = data.iter().map(|d| d.as_slice()).collect();
    // Exact data: the f64 sum is each format's own value.
    let sum: Vec<f32> = sum_f64(&parts).into_iter().map(|v| v as f32).collect();
    match op {
        Op::AllGather => vec![concat_ref(&parts, shape, dim).1; n],
        Op::AllReduce => vec![sum; n],
        Op::ReduceScatter => (0..n).map(|i| chunk_ref(&sum, shape, dim, n, i)).collect(),
    }
}

struct Shapes {
    gather: Vec<usize>,
    scatter: Vec<usize>,
    reduce: Vec<usize>,
    /// At least `SCATTERED_ALL_REDUCE_BYTES` per chip in bf16 and f32, rows splitting into
    /// whole tiles over a row: scattered along the rows, reduced along the columns, gathered.
    large_reduce: Vec<usize>,
}

/// Shapes for `n` chips: a gather of one tile per chip, a scatter of one tile per chip on the
/// last dim, an all_reduce of chunks that do not divide over either axis, and a large one.
fn shapes(n: usize) -> Shapes {
    Shapes {
        gather: vec![1, 1, 32, 64],
        scatter: vec![1, 1, 32, 32 * n],
        reduce: vec![1, 1, 64, 32 * 9],
        large_reduce: vec![1, 1, 256, 1024],
    }
}

fn run(op: Op, x: &MeshTensor, shape_dim: usize, args: &CclArgs) -> MeshTensor {
    let dim = shape_dim as isize;
    match op {
        Op::AllGather => ccl::all_gather(x, dim, args),
        Op::ReduceScatter => ccl::reduce_scatter(x, dim, args),
        Op::AllReduce => ccl::all_reduce(x, args),
    }
    .unwrap_or_else(|e| panic!("{op:?}: {e}"))
}

fn check_all(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len(), "{what}: chips");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_bits_eq(&format!("{what}: chip index {i}"), g, w);
    }
}

/// Each op untraced (reductions twice, equal bit for bit), then all three captured in one
/// trace and replayed with new inputs, and with the first inputs again.
fn untraced_and_traced(mesh: &MeshDevice, dtype: DataType, args: &CclArgs) {
    let name = format!("{} {} {dtype}", mesh.cluster().name(), mesh.fabric_config());
    let n = mesh.num_devices();
    let s = shapes(n);
    let cases = [
        (Op::AllGather, s.gather.clone(), 3usize),
        (Op::AllGather, s.gather.clone(), 2),
        (Op::ReduceScatter, s.scatter.clone(), 3),
        (Op::AllReduce, s.reduce.clone(), 3),
        (Op::AllReduce, s.large_reduce.clone(), 3),
    ];
    let inputs = |shape: &[usize], round: u64| -> Vec<HostTensor> {
        (0..n)
            .map(|i| values(shape, dtype, round * 1000 + i as u64 + 1))
            .collect()
    };
    let f32s = |p: &[HostTensor]| p.iter().map(|h| h.to_f32_vec()).collect::<Vec<_>>();
    let mut placed = Vec::new();
    for (op, shape, dim) in &cases {
        let what = format!("{name} untraced {op:?} dim {dim}");
        let parts = inputs(shape, 0);
        let x = per_chip(mesh, &parts, Layout::Tile);
        if *op == Op::AllReduce {
            // The large one (but in bfloat8_b, under the size) scatters along the rows.
            let large = shape == &s.large_reduce && dtype != DataType::BFloat8B;
            let scatters = ccl::scattered_all_reduce_dim(&x, args);
            assert_eq!(scatters, large.then_some(2), "{what}: path");
        }
        let first = run(*op, &x, *dim, args);
        mesh.synchronize_device().unwrap();
        let got = shards_f32(&first);
        check_all(
            &what,
            &got,
            &whole_mesh_reference(*op, shape, *dim, &f32s(&parts)),
        );
        if *op != Op::AllGather {
            let again = run(*op, &x, *dim, args);
            check_all(&format!("{what}: run to run"), &shards_f32(&again), &got);
        }
        placed.push(x);
    }

    let tid = mesh.begin_trace_capture(CqId(0)).unwrap();
    let outs: Vec<MeshTensor> = cases
        .iter()
        .zip(&placed)
        .map(|((op, _, dim), x)| run(*op, x, *dim, args))
        .collect();
    mesh.end_trace_capture(tid, CqId(0)).unwrap();
    let mut first: Option<Vec<Vec<Vec<f32>>>> = None;
    for round in 0..4u64 {
        // Round 3 repeats round 0's inputs: its outputs must be round 0's, bit for bit.
        let src = if round == 3 { 0 } else { round };
        let mut want = Vec::new();
        for ((op, shape, dim), x) in cases.iter().zip(&placed) {
            let parts = inputs(shape, src);
            x.copy_from_host(&parts[0], &PerChip(parts.clone()), CqId(0))
                .unwrap();
            want.push(whole_mesh_reference(*op, shape, *dim, &f32s(&parts)));
        }
        mesh.execute_trace(tid, CqId(0), true).unwrap();
        let got: Vec<Vec<Vec<f32>>> = outs.iter().map(shards_f32).collect();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            check_all(&format!("{name} replay {round} case {k}"), g, w);
        }
        if let (Some(f), 3) = (&first, round) {
            assert_eq!(f, &got, "{name}: replay of round 0's inputs differs");
        }
        first.get_or_insert(got);
    }
    mesh.release_trace(tid).unwrap();
    mesh.synchronize_device().unwrap();
}

#[test]
fn galaxy_whole_mesh_in_every_format_untraced_and_traced() {
    let mesh = open_2d("galaxy", FabricConfig::Fabric2D);
    for dtype in [DataType::BFloat16, DataType::Float32, DataType::BFloat8B] {
        untraced_and_traced(&mesh, dtype, &CclArgs::default());
    }
    mesh.close().unwrap();
}

/// TT-NN's keywords: two links, Linear given, L1 outputs, a preallocated output; on a T3K
/// (2x4) and a 4x8 torus, where Ring runs on the rows and columns the wrap links close
/// (chosen when no topology is given).
#[test]
fn whole_mesh_with_tt_nn_keywords() {
    for (topology, fabric) in [
        ("t3k", FabricConfig::Fabric2D),
        ("torus-4x8", FabricConfig::Fabric2DTorusXY),
    ] {
        let mesh = open_2d(topology, fabric);
        let args = CclArgs {
            topology: Some(Topology::Linear),
            num_links: 2,
            memory_config: Some(MemoryConfig::L1),
            ..Default::default()
        };
        untraced_and_traced(&mesh, DataType::BFloat16, &args);
        if fabric == FabricConfig::Fabric2DTorusXY {
            let f = mesh.fabric().unwrap();
            for axis in [0, 1] {
                for (line, _) in mesh.ccl_lines(Some(axis)).unwrap() {
                    let auto = ttmesh_ccl::CclConfig::default();
                    let t = ttmesh_ccl::resolve_topology("all_reduce", &line, f, &auto).unwrap();
                    assert_eq!(t, Topology::Ring, "axis {axis} line {:?}", line.chips);
                }
            }
            for ring in [None, Some(Topology::Ring)] {
                let args = CclArgs {
                    topology: ring,
                    ..Default::default()
                };
                untraced_and_traced(&mesh, DataType::Float32, &args);
            }
        } else {
            // A T3K's rows of 4 are not closed: Ring is refused naming what closes one.
            let x = per_chip(
                &mesh,
                &(0..8)
                    .map(|i| exact(&[1, 1, 32, 32], DataType::Float32, i))
                    .collect::<Vec<_>>(),
                Layout::Tile,
            );
            let ring = CclArgs {
                topology: Some(Topology::Ring),
                ..Default::default()
            };
            let e = ccl::all_reduce(&x, &ring).unwrap_err().to_string();
            assert!(
                e.contains("a 2D torus config wrapping the line's axis"),
                "{e}"
            );
        }
        // A preallocated output is the result itself.
        let n = mesh.num_devices();
        let shape = shapes(n).reduce;
        let parts: Vec<HostTensor> = (0..n)
            .map(|i| values(&shape, DataType::Float32, 70 + i as u64))
            .collect();
        let x = per_chip(&mesh, &parts, Layout::Tile);
        let out = MeshTensor::allocate(
            &mesh,
            &TensorSpec::new(
                shape.clone(),
                DataType::Float32,
                Layout::Tile,
                MemoryConfig::DRAM,
            ),
        )
        .unwrap();
        let r = ccl::all_reduce(
            &x,
            &CclArgs {
                output: Some(out.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(r.buffer_address().unwrap(), out.buffer_address().unwrap());
        let data: Vec<Vec<f32>> = parts.iter().map(|p| p.to_f32_vec()).collect();
        check_all(
            &format!("{topology}: preallocated all_reduce"),
            &shards_f32(&out),
            &whole_mesh_reference(Op::AllReduce, &shape, 3, &data),
        );
        mesh.close().unwrap();
    }
}

/// A tensor sharded over all chips gathers back to the original, and a replicated one
/// scatters to chunks that compose to 32 times it: the whole-mesh results follow the mappers.
#[test]
fn whole_mesh_results_compose_with_the_mappers() {
    let mesh = open_2d("galaxy", FabricConfig::Fabric2D);
    let full = exact(&[1, 1, 64, 32 * 32], DataType::Float32, 9);
    let sharded = MeshTensor::from_host(
        &full,
        &mesh,
        &ShardTensorToMesh(3),
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .unwrap();
    let g = ccl::all_gather(&sharded, 3, &CclArgs::default()).unwrap();
    for (i, s) in shards_f32(&g).iter().enumerate() {
        assert_bits_eq(
            &format!("gather, chip index {i}"),
            s,
            full.as_f32().unwrap(),
        );
    }
    let replicated = MeshTensor::from_host(
        &full,
        &mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .unwrap();
    let rs = ccl::reduce_scatter(&replicated, 3, &CclArgs::default()).unwrap();
    let composed = rs.to_host(&ConcatMeshToTensor(3), CqId(0)).unwrap();
    let want: Vec<f32> = full.as_f32().unwrap().iter().map(|v| v * 32.0).collect();
    assert_bits_eq("scatter composed", composed.as_f32().unwrap(), &want);
    mesh.close().unwrap();
}

fn along(axis: usize) -> CclArgs {
    CclArgs {
        cluster_axis: Some(axis),
        ..Default::default()
    }
}

/// A cluster_axis the mesh lacks and a dim that does not split over the chips: errors naming
/// the field and the fix, before anything runs; the mesh is usable after.
#[test]
fn bad_axis_and_unsplittable_dim_are_named() {
    let mesh = open_2d("galaxy", FabricConfig::Fabric2D);
    let parts: Vec<HostTensor> = (0..32)
        .map(|i| exact(&[1, 1, 32, 100], DataType::BFloat16, i))
        .collect();
    let x = per_chip(&mesh, &parts, Layout::Tile);
    let axis2 = CclArgs {
        cluster_axis: Some(2),
        ..Default::default()
    };
    for e in [
        ccl::all_reduce(&x, &axis2).unwrap_err(),
        ccl::all_gather(&x, 3, &axis2).unwrap_err(),
        ccl::reduce_scatter(&x, 3, &axis2).unwrap_err(),
    ] {
        let e = e.to_string();
        assert!(
            e.contains("cluster_axis 2 does not exist on the 4x8 mesh"),
            "{e}"
        );
        assert!(
            e.contains("use 0 (along columns, 4 chips), 1 (along rows, 8 chips) or None"),
            "{e}"
        );
    }
    let e = ccl::reduce_scatter(&x, 3, &CclArgs::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("dim 3 of [1, 1, 32, 100] (100) does not split"),
        "{e}"
    );
    assert!(
        e.contains("the 32 chips of the 4x8 mesh (cluster_axis None)"),
        "{e}"
    );
    assert!(e.contains("pad dim 3 to a multiple of 32"), "{e}");
    let e = ccl::reduce_scatter(&x, 3, &along(1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("over the 8 chips along cluster_axis 1"), "{e}");
    // 100 splits over the 4 chips of a column.
    let ok = ccl::reduce_scatter(&x, 3, &along(0)).unwrap();
    assert_eq!(ok.shape(), &[1, 1, 32, 25]);
    mesh.synchronize_device().unwrap();
    mesh.close().unwrap();
}

/// all_reduces alternating between the axes, captured in one trace whose intermediates are
/// freed (so later ones reuse their addresses) and replayed with new inputs: right on a 1D and
/// a 2D fabric, f32 (sums exact). (The race between a row's and a column's "ready" counts is
/// caught by the bfloat8_b gathers of `galaxy_whole_mesh_in_every_format_untraced_and_traced`:
/// with one count per side, 4 runs of 5 failed there.)
#[test]
fn all_reduces_alternating_axes_in_one_trace() {
    for fabric in [FabricConfig::Fabric1D, FabricConfig::Fabric2D] {
        let mesh = open_2d("galaxy", fabric);
        let shape = [1, 1, 64, 256];
        let inputs = |round: u64| -> Vec<HostTensor> {
            (0..32)
                .map(|i| exact(&shape, DataType::Float32, 500 + round * 100 + i))
                .collect()
        };
        let parts = inputs(0);
        let x = per_chip(&mesh, &parts, Layout::Tile);
        let chain = || {
            let mut z = ccl::all_reduce(&x, &along(0)).unwrap();
            for k in 1..6 {
                z = ccl::all_reduce(&z, &along(k % 2)).unwrap();
            }
            z
        };
        chain();
        mesh.synchronize_device().unwrap();
        let tid = mesh.begin_trace_capture(CqId(0)).unwrap();
        let out = chain();
        mesh.end_trace_capture(tid, CqId(0)).unwrap();
        for round in 0..5 {
            let parts = inputs(round);
            x.copy_from_host(&parts[0], &PerChip(parts.clone()), CqId(0))
                .unwrap();
            mesh.execute_trace(tid, CqId(0), false).unwrap();
            let data: Vec<Vec<f32>> = parts.iter().map(|p| p.to_f32_vec()).collect();
            let refs: Vec<&[f32]> = data.iter().map(|d| d.as_slice()).collect();
            // Columns, rows, then twice more each: the whole sum times 4^2 x 8^2.
            let want: Vec<f32> = sum_f64(&refs)
                .into_iter()
                .map(|v| (v * 1024.0) as f32)
                .collect();
            for (i, got) in shards_f32(&out).iter().enumerate() {
                assert_bits_eq(
                    &format!("{fabric} replay {round} chip index {i}"),
                    got,
                    &want,
                );
            }
        }
        mesh.release_trace(tid).unwrap();
        mesh.close().unwrap();
    }
}
