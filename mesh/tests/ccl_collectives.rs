//! Every collective on every shipped kind of mesh, checked against host references: all_gather
//! exactly, reduce_scatter bit-exactly against its documented reduction order, all_reduce
//! bit-exactly on data whose sums are exact (and within a stated tolerance on full-precision
//! data). Reductions run twice and must agree bit for bit.

mod common;

use common::*;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::*;

#[derive(Clone, Debug)]
struct Case {
    op: Op,
    shape: Vec<usize>,
    dim: usize,
    dtype: DataType,
    layout: Layout,
    axis: Option<usize>,
    topology: Option<Topology>,
    preallocate: bool,
    memory_config: MemoryConfig,
    num_links: usize,
}

impl Case {
    fn new(op: Op, shape: &[usize], dim: usize, dtype: DataType, axis: Option<usize>) -> Case {
        Case {
            op,
            shape: shape.to_vec(),
            dim,
            dtype,
            layout: Layout::Tile,
            axis,
            topology: None,
            preallocate: false,
            memory_config: MemoryConfig::DRAM,
            num_links: 1,
        }
    }
}

fn output_shape(c: &Case, n: usize) -> Vec<usize> {
    let mut s = c.shape.clone();
    match c.op {
        Op::AllGather => s[c.dim] *= n,
        Op::ReduceScatter => s[c.dim] /= n,
        Op::AllReduce => {}
    }
    s
}

fn run_op(mesh: &MeshDevice, t: &MeshTensor, c: &Case, out: Option<&MeshTensor>) -> MeshTensor {
    let args = CclArgs {
        cluster_axis: c.axis,
        topology: c.topology,
        num_links: c.num_links,
        memory_config: Some(c.memory_config.clone()),
        output: out.cloned(),
        cq: CqId(0),
    };
    let r = match c.op {
        Op::AllGather => ccl::all_gather(t, c.dim as isize, &args),
        Op::ReduceScatter => ccl::reduce_scatter(t, c.dim as isize, &args),
        Op::AllReduce => ccl::all_reduce(t, &args),
    };
    let r = r.unwrap_or_else(|e| panic!("{c:?} on {}: {e}", mesh.cluster().name()));
    mesh.synchronize_device()
        .unwrap_or_else(|e| panic!("{c:?} on {}: {e}", mesh.cluster().name()));
    r
}

/// Runs one case (reductions twice) and checks every chip's output against the references.
fn check(mesh: &MeshDevice, c: &Case, seed: u64) {
    let name = mesh.cluster().name().to_string();
    let what = format!("{name} {c:?}");
    // reduce_scatter gets full-precision data, so only its documented order matches bit for
    // bit; all_reduce gets data whose sums are exact in any order.
    let make = if c.op == Op::AllReduce { exact } else { random };
    let parts: Vec<HostTensor> = (0..mesh.num_devices())
        .map(|i| make(&c.shape, c.dtype, seed * 1000 + i as u64))
        .collect();
    let data: Vec<Vec<f32>> = parts.iter().map(|p| p.to_f32_vec()).collect();
    let t = per_chip(mesh, &parts, c.layout);
    let lines = mesh.ccl_lines(c.axis).unwrap();
    let n = lines[0].1.len();
    let out_spec = TensorSpec::new(
        output_shape(c, n),
        c.dtype,
        c.layout,
        c.memory_config.clone(),
    );
    let pre = c
        .preallocate
        .then(|| MeshTensor::allocate(mesh, &out_spec).unwrap());
    let first = run_op(mesh, &t, c, pre.as_ref());
    assert_eq!(first.spec(), &out_spec, "{what}: output spec");
    if let Some(p) = &pre {
        assert_eq!(
            first.buffer_address().unwrap(),
            p.buffer_address().unwrap(),
            "{what}: the preallocated output was not used"
        );
    }
    let got = shards_f32(pre.as_ref().unwrap_or(&first));
    if c.op != Op::AllGather {
        let again = shards_f32(&run_op(mesh, &t, c, pre.as_ref()));
        for (i, (a, b)) in got.iter().zip(&again).enumerate() {
            assert_bits_eq(&format!("{what}: chip index {i} differs run to run"), a, b);
        }
    }
    let want = reference(
        mesh, c.op, c.axis, c.topology, &c.shape, c.dim, c.dtype, &data,
    );
    for (line, idx) in &lines {
        for (pos, &i) in idx.iter().enumerate() {
            let chip = mesh.chips()[i].id();
            assert_bits_eq(
                &format!(
                    "{what}: chip {chip} (position {pos} of line {:?})",
                    line.chips
                ),
                &got[i],
                &want[i],
            );
        }
    }
    // A preallocated output is the result itself: free it once.
    first.deallocate(true).unwrap();
    t.deallocate(true).unwrap();
}

/// The standard matrix for one mesh and axis: every op on dims 0..3, both float dtypes,
/// aligned and unaligned chunks, with and without a preallocated output.
fn matrix(mesh: &MeshDevice, axis: Option<usize>, topology: Option<Topology>) {
    let n = mesh.ccl_lines(axis).unwrap()[0].1.len();
    let mut seed = 1;
    for dtype in [DataType::Float32, DataType::BFloat16] {
        for dim in 0..4 {
            // Gather: a small shape whose last two dims are not tile multiples on odd dims.
            let g = if dim % 2 == 0 {
                vec![1, 2, 32, 32]
            } else {
                vec![2, 1, 16, 48]
            };
            // Scatter: dim `dim` splits into n chunks (tile-aligned on dims 2 and 3 when even);
            // on dims 1 and 3 with two slices above it, so each chunk is two runs of pages.
            let mut s = vec![1, 1, 32, 32];
            s[dim] = if dim >= 2 && dtype == DataType::Float32 {
                32 * n
            } else {
                8 * n
            };
            match dim {
                1 => s[0] = 2,
                3 => s[2] = 64,
                _ => {}
            }
            let mut ar = vec![1, 1, 32, 32 * n.max(2)];
            if dim % 2 == 1 {
                ar = vec![2, n, 16, 32];
            }
            for (op, shape) in [
                (Op::AllGather, g),
                (Op::ReduceScatter, s),
                (Op::AllReduce, ar),
            ] {
                let mut c = Case::new(op, &shape, dim, dtype, axis);
                c.topology = topology;
                c.preallocate = dim == 3;
                check(mesh, &c, seed);
                seed += 1;
            }
        }
    }
}

#[test]
fn n300_every_op_axis_none_and_rows() {
    let mesh = open("n300", FabricConfig::Fabric1D);
    matrix(&mesh, None, None);
    matrix(&mesh, Some(1), Some(Topology::Linear));
    mesh.close().unwrap();
}

#[test]
fn n300_columns_are_single_chips() {
    // cluster_axis 0 on a 1x2 mesh: two lines of one chip; gather and scatter are copies.
    let mesh = open("n300", FabricConfig::Fabric1D);
    for op in [Op::AllGather, Op::ReduceScatter, Op::AllReduce] {
        check(
            &mesh,
            &Case::new(op, &[1, 1, 32, 64], 3, DataType::Float32, Some(0)),
            7,
        );
    }
    mesh.close().unwrap();
}

#[test]
fn t3k_fabric1d_is_linear_on_every_axis() {
    let mesh = open("t3k", FabricConfig::Fabric1D);
    // The line through all chips is the perimeter ring 0 2 6 7 3 1 5 4, used as a line.
    let lines = mesh.ccl_lines(None).unwrap();
    assert_eq!(lines[0].0.chips, vec![0, 2, 6, 7, 3, 1, 5, 4]);
    let cols: Vec<Vec<u32>> = mesh
        .ccl_lines(Some(0))
        .unwrap()
        .into_iter()
        .map(|l| l.0.chips)
        .collect();
    assert_eq!(cols, vec![vec![4, 5], vec![0, 1], vec![2, 3], vec![6, 7]]);
    let rows: Vec<Vec<u32>> = mesh
        .ccl_lines(Some(1))
        .unwrap()
        .into_iter()
        .map(|l| l.0.chips)
        .collect();
    assert_eq!(rows, vec![vec![4, 0, 2, 6], vec![5, 1, 3, 7]]);
    matrix(&mesh, None, None);
    matrix(&mesh, Some(0), None);
    matrix(&mesh, Some(1), Some(Topology::Linear));
    mesh.close().unwrap();
}

#[test]
fn t3k_fabric1d_ring_uses_the_ring() {
    let mesh = open("t3k", FabricConfig::Fabric1DRing);
    matrix(&mesh, None, None);
    matrix(&mesh, None, Some(Topology::Ring));
    // Rows of a T3K are not rings: Linear even under Fabric1DRing.
    matrix(&mesh, Some(1), None);
    mesh.close().unwrap();
}

#[test]
fn t3k_two_links_and_l1_outputs() {
    for fabric in [FabricConfig::Fabric1D, FabricConfig::Fabric1DRing] {
        let mesh = open("t3k", fabric);
        for op in [Op::AllGather, Op::ReduceScatter, Op::AllReduce] {
            let mut c = Case::new(op, &[1, 1, 32, 256], 3, DataType::BFloat16, None);
            c.num_links = 2;
            check(&mesh, &c, 11);
            c.memory_config = MemoryConfig::L1;
            c.preallocate = true;
            check(&mesh, &c, 12);
        }
        mesh.close().unwrap();
    }
}

#[test]
fn row_major_tensors() {
    let mesh = open("t3k", FabricConfig::Fabric1DRing);
    for (op, shape, dim) in [
        (Op::AllGather, vec![1, 1, 3, 20], 3),
        (Op::AllGather, vec![1, 2, 5, 8], 2),
        (Op::ReduceScatter, vec![1, 1, 4, 64], 3),
        (Op::ReduceScatter, vec![1, 8, 3, 4], 1),
        (Op::AllReduce, vec![1, 1, 3, 16], 3),
    ] {
        let mut c = Case::new(op, &shape, dim, DataType::Float32, None);
        c.layout = Layout::RowMajor;
        check(&mesh, &c, 21);
    }
    mesh.close().unwrap();
}

#[test]
fn galaxy_rows_and_columns() {
    let mesh = open("galaxy", FabricConfig::Fabric1D);
    assert_eq!(mesh.num_devices(), 32);
    let cols = mesh.ccl_lines(Some(0)).unwrap();
    assert_eq!(cols.len(), 8);
    assert_eq!(cols[3].0.chips, vec![3, 11, 19, 27]);
    let rows = mesh.ccl_lines(Some(1)).unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[2].0.chips, (16..24).collect::<Vec<u32>>());
    for axis in [Some(0), Some(1)] {
        for dtype in [DataType::Float32, DataType::BFloat16] {
            for (op, shape, dim) in [
                (Op::AllGather, vec![1, 1, 32, 32], 3),
                (Op::AllGather, vec![1, 1, 32, 32], 2),
                (Op::AllGather, vec![2, 1, 32, 32], 0),
                (Op::ReduceScatter, vec![1, 1, 32, 256], 3),
                (Op::ReduceScatter, vec![1, 8, 32, 32], 1),
                (Op::AllReduce, vec![1, 1, 32, 256], 3),
            ] {
                let mut c = Case::new(op, &shape, dim, dtype, axis);
                c.preallocate = op == Op::AllReduce;
                check(&mesh, &c, 31);
            }
        }
    }
    mesh.close().unwrap();
}

#[test]
fn lines_and_rings_of_several_sizes() {
    for (topo, fabric) in [
        ("line-3", FabricConfig::Fabric1D),
        // (a ring config on a line is refused when the mesh opens: tests/fabric_configs.rs)
        ("line-5", FabricConfig::Fabric1D),
        ("ring-3", FabricConfig::Fabric1DRing),
        ("ring-4", FabricConfig::Fabric1DRing),
        ("ring-4", FabricConfig::Fabric1D),
        ("ring-6", FabricConfig::Fabric1DRing),
    ] {
        let mesh = open(topo, fabric);
        let n = mesh.num_devices();
        for dtype in [DataType::Float32, DataType::BFloat16] {
            for (op, shape, dim) in [
                (Op::AllGather, vec![1, 1, 32, 64], 3),
                (Op::AllGather, vec![1, 1, 20, 32], 2),
                (Op::AllGather, vec![3, 1, 32, 32], 0),
                (Op::ReduceScatter, vec![1, 1, 32, 32 * n], 3),
                (Op::ReduceScatter, vec![1, 1, 8 * n, 32], 2),
                (Op::ReduceScatter, vec![n, 1, 32, 32], 0),
                (Op::AllReduce, vec![1, 1, 32, 32 * n], 3),
                (Op::AllReduce, vec![1, 1, 32, 32], 3),
            ] {
                if op == Op::AllReduce && shape[3] == 32 && 32 % n != 0 {
                    continue;
                }
                check(&mesh, &Case::new(op, &shape, dim, dtype, None), 41);
            }
        }
        mesh.close().unwrap();
    }
}

#[test]
fn t3k_as_1x8_view_gathers_back_the_original() {
    let mesh = open_with(MeshConfig {
        topology: "t3k".into(),
        mesh_shape: Some(MeshShape::new(1, 8)),
        fabric_config: FabricConfig::Fabric1DRing,
        ..Default::default()
    });
    assert_eq!(mesh.shape(), MeshShape::new(1, 8));
    let ids: Vec<u32> = mesh.chips().iter().map(|c| c.id()).collect();
    assert_eq!(ids, vec![0, 2, 6, 7, 3, 1, 5, 4]);
    let full = random(&[1, 1, 32, 256], DataType::BFloat16, 5);
    let t = MeshTensor::from_host(
        &full,
        &mesh,
        &ShardTensorToMesh(3),
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .unwrap();
    let g = ccl::all_gather(&t, 3, &CclArgs::default()).unwrap();
    for (i, s) in shards_f32(&g).iter().enumerate() {
        assert_bits_eq(
            &format!("chip index {i} of the 1x8 view"),
            s,
            full.as_f32().unwrap(),
        );
    }
    for op in [Op::ReduceScatter, Op::AllReduce] {
        check(
            &mesh,
            &Case::new(op, &[1, 1, 32, 256], 3, DataType::Float32, Some(1)),
            51,
        );
    }
    mesh.close().unwrap();
}

/// Full-precision data: reductions within a stated tolerance of the f64 sum, and identical run
/// to run. f32: accumulation error <= n ulps of the sum of magnitudes. bf16: partial sums
/// travel in bf16, rounded at each of the n-2 hops that add to them (each off by at most 2^-9
/// of its magnitude, itself at most the sum of magnitudes, below n here), and the result once
/// more (2^-8 relative to be safe).
#[test]
fn reductions_on_full_precision_data_are_close_and_deterministic() {
    let mesh = open("t3k", FabricConfig::Fabric1DRing);
    let n = mesh.num_devices();
    for dtype in [DataType::Float32, DataType::BFloat16] {
        let shape = [1, 1, 64, 256];
        let parts: Vec<HostTensor> = (0..n)
            .map(|i| random(&shape, dtype, 900 + i as u64))
            .collect();
        let data: Vec<Vec<f32>> = parts.iter().map(|p| p.to_f32_vec()).collect();
        let t = MeshTensor::from_host(
            &parts[0],
            &mesh,
            &PerChip(parts.clone()),
            Layout::Tile,
            MemoryConfig::DRAM,
            CqId(0),
        )
        .unwrap();
        let ins: Vec<&[f32]> = data.iter().map(|v| v.as_slice()).collect();
        let want = sum_f64(&ins);
        let rtol = if dtype == DataType::BFloat16 {
            2f64.powi(-8)
        } else {
            0.0
        };
        let mut atol = n as f64 * 2f64.powi(-24) * n as f64;
        if dtype == DataType::BFloat16 {
            atol += (n - 2) as f64 * 2f64.powi(-9) * n as f64;
        }
        let mut previous: Option<Vec<Vec<f32>>> = None;
        for _ in 0..3 {
            let r = ccl::all_reduce(&t, &CclArgs::default()).unwrap();
            let got = shards_f32(&r);
            for (i, g) in got.iter().enumerate() {
                assert_close(
                    &format!("{dtype} all_reduce chip index {i}"),
                    g,
                    &want,
                    rtol,
                    atol,
                );
            }
            if let Some(p) = &previous {
                for (a, b) in p.iter().zip(&got) {
                    assert_bits_eq(&format!("{dtype}: all_reduce differs run to run"), a, b);
                }
            }
            previous = Some(got);
            r.deallocate(true).unwrap();
        }
    }
    mesh.close().unwrap();
}

/// On a 2x4 T3K the line through all chips is the perimeter, not row-major order; results
/// still follow mesh order, so they compose with the mappers like TT-NN's do.
#[test]
fn t3k_2x4_results_follow_mesh_order() {
    for fabric in [FabricConfig::Fabric1D, FabricConfig::Fabric1DRing] {
        let mesh = open("t3k", fabric);
        // Exact data: 8x of it is exact whatever the summation order.
        let full = exact(&[1, 1, 64, 256], DataType::Float32, 3);
        let t = MeshTensor::from_host(
            &full,
            &mesh,
            &ShardTensorToMesh(3),
            Layout::Tile,
            MemoryConfig::DRAM,
            CqId(0),
        )
        .unwrap();
        let g = ccl::all_gather(&t, 3, &CclArgs::default()).unwrap();
        for s in shards_f32(&g) {
            assert_bits_eq(
                &format!("{fabric:?} all_gather"),
                &s,
                full.as_f32().unwrap(),
            );
        }
        // Replicated input: the reduce_scatter's chunks, concatenated in mesh order, are 8x it.
        let r = MeshTensor::from_host(
            &full,
            &mesh,
            &ReplicateTensorToMesh,
            Layout::Tile,
            MemoryConfig::DRAM,
            CqId(0),
        )
        .unwrap();
        let rs = ccl::reduce_scatter(&r, 3, &CclArgs::default()).unwrap();
        let composed = rs.to_host(&ConcatMeshToTensor(3), CqId(0)).unwrap();
        let want: Vec<f32> = full.as_f32().unwrap().iter().map(|v| v * 8.0).collect();
        assert_bits_eq(
            &format!("{fabric:?} reduce_scatter"),
            composed.as_f32().unwrap(),
            &want,
        );
        mesh.close().unwrap();
    }
}

#[test]
fn chunk_order_must_be_a_permutation() {
    let mesh = open("line-3", FabricConfig::Fabric1D);
    let parts: Vec<HostTensor> = (0..3)
        .map(|i| exact(&[1, 1, 32, 96], DataType::Float32, i))
        .collect();
    let t = per_chip(&mesh, &parts, Layout::Tile);
    let (line, _) = mesh.ccl_lines(None).unwrap().remove(0);
    let fabric = mesh.fabric().unwrap().clone();
    for bad in [vec![0, 0, 1], vec![0, 1], vec![0, 1, 3]] {
        let cfg = ttmesh_ccl::CclConfig {
            chunk_order: bad.clone(),
            ..Default::default()
        };
        let alloc = |ins: &[ttmesh_chip::tensor::Tensor], spec: &TensorSpec| {
            ins.iter()
                .map(|t| ttmesh_chip::tensor::Tensor::allocate(t.chip(), spec.clone()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.into())
        };
        let e = ttmesh_ccl::all_gather(t.shards(), 3, &line, &fabric, &cfg, None, &alloc)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a permutation of 0..3"), "{bad:?}: {e}");
    }
    mesh.synchronize_device().unwrap();
    mesh.close().unwrap();
}

/// The T3K as a ring and as a line, and the two-chip n300.
const T3K_AND_N300: &[(&str, FabricConfig)] = &[
    ("t3k", FabricConfig::Fabric1DRing),
    ("t3k", FabricConfig::Fabric1D),
    ("n300", FabricConfig::Fabric1D),
];

/// Runs `f` on each mesh (opened, then closed) for bf16 and f32.
fn each_mesh_and_dtype(meshes: &[(&str, FabricConfig)], f: impl Fn(&MeshDevice, DataType)) {
    for &(topo, fabric) in meshes {
        let mesh = open(topo, fabric);
        for dtype in [DataType::BFloat16, DataType::Float32] {
            f(&mesh, dtype);
        }
        mesh.close().unwrap();
    }
}

/// Large all_reduces move in pieces (several per chunk, chunks of unequal page counts), each
/// its own message and semaphore increment: every chip still gets the exact sum, twice alike.
/// On the T3K the line's inputs (14 MiB bf16) are large enough that input reads hint the
/// host's cache ahead; on the n300 (3.5 MiB) they do not: both read paths are checked.
#[test]
fn all_reduce_in_many_pieces() {
    each_mesh_and_dtype(T3K_AND_N300, |mesh, dtype| {
        // 864 tiles: 108 per chip of 8 (f32: two pieces of at most 64 pages; bf16: one),
        // 432 per chip of 2 (bf16: four pieces of 128 pages).
        let c = Case::new(Op::AllReduce, &[1, 1, 864, 1024], 3, dtype, None);
        check(mesh, &c, 11);
    });
}

/// An all_gather on the last dim with rows above it (as a prefill's activations are
/// gathered) sends each block through the slots, in messages of at most a channel's worth
/// (`steps::message_bytes`): here 128 KiB blocks of 8 tile rows, so each crosses a link as
/// four messages, only the last raising the semaphore. Every chip gets every block in place.
#[test]
fn all_gather_with_rows_above_in_many_messages() {
    each_mesh_and_dtype(T3K_AND_N300, |mesh, dtype| {
        let width = if dtype == DataType::BFloat16 {
            256
        } else {
            128
        };
        let c = Case::new(Op::AllGather, &[1, 1, 256, width], 3, dtype, None);
        check(mesh, &c, 13);
    });
}

/// Decode's all_reduce (32x576: 18 tiles) splits unevenly over 8 chips and leaves 14 of 32
/// chips without a tile of their own; every chip still gets the exact sum, the same bits twice.
#[test]
fn all_reduce_of_tiles_that_do_not_divide_over_the_line() {
    for (topo, fabric) in [
        ("t3k", FabricConfig::Fabric1DRing),
        ("t3k", FabricConfig::Fabric1D),
        ("galaxy", FabricConfig::Fabric1DRing),
    ] {
        let mesh = open(topo, fabric);
        for dtype in [DataType::BFloat16, DataType::Float32] {
            let c = Case::new(Op::AllReduce, &[1, 1, 32, 576], 3, dtype, None);
            check(&mesh, &c, 7);
        }
        mesh.close().unwrap();
    }
}

/// A reduce_scatter whose chunks are strided runs of pages (the scattered dim sits below a
/// batch dim) and whose pieces span several of the blocks a bf16 hop sums at a time
/// (`Endpoint::input_plus_slot`, 8192 elements): block edges fall inside runs and on their
/// ends, and every chip still gets its documented sum bit for bit, twice alike.
#[test]
fn reduce_scatter_of_strided_chunks_in_many_blocks() {
    let meshes = [
        ("t3k", FabricConfig::Fabric1DRing),
        ("n300", FabricConfig::Fabric1D),
    ];
    each_mesh_and_dtype(&meshes, |mesh, dtype| {
        // Per chip: 2 slices x one tile row x 24 tiles = runs of 24,576 elements.
        let n = mesh.num_devices();
        let c = Case::new(Op::ReduceScatter, &[2, 1, 32 * n, 768], 2, dtype, None);
        check(mesh, &c, 23);
    });
}
