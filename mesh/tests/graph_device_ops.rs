//! Graphs of matmul and all_gather on a 2x4 mesh (FABRIC_1D), in both run modes, against what
//! TT-NN 0.81.1 records for them.
//!
//! No 0.81.1 capture of these two ops is at hand (only of `add`, which graph_capture.rs
//! compares node for node). What these tests hold ttmesh to is what issue 50's author saw in
//! 0.81.1's captures (matmul: `dataflow_buffer_allocate` with `borrows_memory`, on the cores it
//! uses, and the program factory it picked; all_gather: one `AllGatherDeviceOperation` frame
//! with program_cache_hit / program_factory_index / program_factory_type, no scratch tensors,
//! no `buffer_deallocate`, one circular-buffer deallocate/allocate pair per chip's program),
//! plus what tt-metal's sources say where the issue is silent: INFERRED FROM SOURCE, NOT FROM A
//! CAPTURE, are the node order of a per-chip workload (every program's circular-buffer nodes
//! before the executions), that dataflow buffers appear only under NO_DISPATCH, the factory
//! type names, and the params keys of `dataflow_buffer_allocate`.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use parking_lot::Mutex;
use ttmesh::graph::{self, Graph, RunMode};
use ttmesh::ops::{self, MeshMatmulConfig};
use ttmesh::*;

static TURN: Mutex<()> = parking_lot::const_mutex(());

fn t3k() -> MeshDevice {
    open("t3k", FabricConfig::Fabric1D)
}

fn tensor(mesh: &MeshDevice, shape: &[usize], seed: u64) -> MeshTensor {
    let h = random(shape, DataType::BFloat16, seed);
    MeshTensor::from_host(
        &h,
        mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .unwrap()
}

fn types(g: &Graph) -> Vec<&str> {
    g.nodes.iter().map(|n| n.node_type.as_str()).collect()
}

fn keys(n: &graph::Node) -> BTreeSet<String> {
    n.params
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

/// The level-1 frames, by name.
fn ops_at_level_1(g: &Graph) -> Vec<&graph::Node> {
    g.nodes
        .iter()
        .filter(|n| n.node_type == "function_start" && n.stacking_level == 1)
        .collect()
}

/// The one device-operation frame of a capture of one op, checked as TT-NN writes it: its
/// name, the two arguments (attributes, then the tensor arguments), `inputs` = "2", and the
/// program cache and factory params.
fn the_device_operation<'a>(
    g: &'a Graph,
    name: &str,
    attributes: &str,
    factory: &str,
) -> &'a graph::Node {
    let ops = ops_at_level_1(g);
    assert_eq!(ops.len(), 1, "{:?}", types(g));
    let op = ops[0];
    assert_eq!(op.param("name").as_deref(), Some(name));
    assert_eq!(
        keys(op),
        set(&[
            "inputs",
            "name",
            "program_cache_hit",
            "program_factory_index",
            "program_factory_type"
        ])
    );
    assert_eq!(op.param("inputs").as_deref(), Some("2"));
    assert!(op.params["program_cache_hit"].is_boolean());
    assert!(op.params["program_factory_index"].is_u64());
    assert_eq!(op.param("program_factory_type").as_deref(), Some(factory));
    assert_eq!(op.arguments.len(), 2, "{:?}", op.arguments);
    assert!(op.arguments[0].starts_with(&format!("{attributes}(")));
    assert!(op.arguments[1].starts_with("{Tensor(storage=DeviceStorage()"));
    op
}

/// Every create_device_tensor carries its five arguments.
fn creations_have_arguments(g: &Graph) {
    for n in &g.nodes {
        if n.param("name").as_deref() == Some("tt::tt_metal::create_device_tensor")
            && n.node_type == "function_start"
        {
            assert_eq!(n.arguments.len(), 5, "{:?}", n.arguments);
            assert!(n.arguments[0].starts_with("Shape(["), "{:?}", n.arguments);
            assert!(
                n.arguments[4].starts_with("MemoryConfig("),
                "{:?}",
                n.arguments
            );
        }
    }
}

/// The nodes a create_device_tensor of the op's output adds (at level 2), then the rest.
const CREATE_OUTPUT: [&str; 5] = [
    "function_start",
    "buffer",
    "buffer_allocate",
    "function_end",
    "tensor",
];

fn expected(op_inputs: usize, program_nodes: &[&str]) -> Vec<String> {
    let mut v = vec!["capture_start", "function_start"];
    for _ in 0..op_inputs {
        v.extend(["tensor", "buffer"]);
    }
    v.extend(CREATE_OUTPUT);
    v.extend(program_nodes);
    v.extend(["function_end", "tensor", "capture_end"]);
    v.into_iter().map(String::from).collect()
}

fn matmul_graph(mode: RunMode) -> (MeshDevice, Graph) {
    let mesh = t3k();
    let a = tensor(&mesh, &[1, 1, 64, 128], 1);
    let b = tensor(&mesh, &[1, 1, 128, 96], 2);
    let warm = ops::matmul(&a, &b, &MeshMatmulConfig::default()).unwrap();
    drop(warm);
    mesh.synchronize_device().unwrap();
    graph::begin_graph_capture(mode);
    let out = ops::matmul(&a, &b, &MeshMatmulConfig::default());
    mesh.synchronize_device().unwrap();
    let g = graph::end_graph_capture().unwrap();
    drop(out.unwrap());
    (mesh, g)
}

const MATMUL_2D: &str = "ttnn::prim::MatmulMeshWorkloadMultiCoreReuseMcast2DProgramFactory";

#[test]
fn matmul_on_a_2x4_mesh_has_ttnn_nodes_and_dataflow_buffers_under_no_dispatch() {
    let _turn = TURN.lock();
    let (_mesh, g) = matmul_graph(RunMode::NoDispatch);
    // One program over the mesh: one program scope, three dataflow buffers (a, b, output).
    let dfb = "dataflow_buffer_allocate";
    let want = expected(2, &["circular_buffer_deallocate_all", dfb, dfb, dfb]);
    assert_eq!(types(&g), want);
    // 64x96 output: 2x3 tiles, both ways more than one: 2D multicast.
    let op = the_device_operation(&g, "MatmulDeviceOperation", "MatmulParams", MATMUL_2D);
    assert_eq!(op.params["program_cache_hit"], true);
    assert_eq!(op.params["program_factory_index"], 3);
    assert_eq!(op.input_tensors.len(), 2);
    creations_have_arguments(&g);
    for n in g.nodes.iter().filter(|n| n.node_type == dfb) {
        assert_eq!(
            keys(n),
            set(&[
                "address",
                "borrows_memory",
                "core_range_set",
                "device_id",
                "size"
            ])
        );
        assert_eq!(n.param("borrows_memory").as_deref(), Some("0"));
        assert_eq!(n.params["address"], 0);
        // Six output tiles, one per core, on the first row of the grid: the cores it uses,
        // not the whole grid.
        assert_eq!(n.param("core_range_set").as_deref(), Some("{[0-0 - 5-0]}"));
    }
    // Two pages of each operand (bf16 tiles: 2048 B).
    let sizes: Vec<u64> = g
        .nodes
        .iter()
        .filter(|n| n.node_type == dfb)
        .map(|n| n.param_u64("size").unwrap())
        .collect();
    assert_eq!(sizes, [4096, 4096, 4096]);
    assert!(g.scratch.is_empty());
}

#[test]
fn matmul_on_a_2x4_mesh_has_ttnn_nodes_under_normal() {
    let _turn = TURN.lock();
    let (_mesh, g) = matmul_graph(RunMode::Normal);
    // A running program reports no dataflow buffers; its executions, one per chip.
    let mut program = vec!["circular_buffer_deallocate_all", "sub_device_manager"];
    program.extend(["program_execution"; 8]);
    assert_eq!(types(&g), expected(2, &program));
    the_device_operation(&g, "MatmulDeviceOperation", "MatmulParams", MATMUL_2D);
    creations_have_arguments(&g);
    let chips: BTreeSet<u64> = g
        .nodes
        .iter()
        .filter(|n| n.node_type == "program_execution")
        .map(|n| n.param_u64("physical_device_id").unwrap())
        .collect();
    assert_eq!(chips, (0..8).collect());
}

/// DRAM bytes per bank each chip holds, by chip id.
type PerChip = BTreeMap<u32, u64>;

/// all_gather of a replicated [1, 1, 32, 64] on dim 3 along the mesh rows (cluster_axis 1);
/// also what each chip held in DRAM when the capture began.
fn all_gather_graph(mode: RunMode) -> (MeshDevice, Graph, MeshTensor, PerChip) {
    let mesh = t3k();
    let x = tensor(&mesh, &[1, 1, 32, 64], 3);
    let args = ccl::CclArgs {
        cluster_axis: Some(1),
        ..Default::default()
    };
    drop(ccl::all_gather(&x, 3, &args).unwrap());
    mesh.synchronize_device().unwrap();
    let held = mesh
        .chips()
        .iter()
        .map(|c| {
            (
                c.id(),
                c.usage().snapshot(BufferType::Dram).allocated_per_bank,
            )
        })
        .collect();
    graph::begin_graph_capture(mode);
    let out = ccl::all_gather(&x, 3, &args);
    mesh.synchronize_device().unwrap();
    let g = graph::end_graph_capture().unwrap();
    (mesh, g, out.unwrap(), held)
}

const ALL_GATHER_FACTORY: &str = "ttnn::operations::ccl::AllGatherMulticastFactory";

#[test]
fn all_gather_on_a_2x4_mesh_is_one_device_operation_without_scratch_under_no_dispatch() {
    let _turn = TURN.lock();
    let (mesh, g, _out, held) = all_gather_graph(RunMode::NoDispatch);
    // One program per chip: each has its circular-buffer scope and its one packet buffer.
    let program: Vec<&str> = ["circular_buffer_deallocate_all", "circular_buffer_allocate"]
        .iter()
        .copied()
        .cycle()
        .take(16)
        .collect();
    assert_eq!(types(&g), expected(1, &program));
    let op = the_device_operation(
        &g,
        "AllGatherDeviceOperation",
        "AllGatherParams",
        ALL_GATHER_FACTORY,
    );
    assert_eq!(op.params["program_cache_hit"], true);
    assert_eq!(op.params["program_factory_index"], 0);
    creations_have_arguments(&g);
    // No scratch tensors in the nodes, and nothing deallocated: the one buffer allocated is
    // the output.
    let count = |t: &str| g.nodes.iter().filter(|n| n.node_type == t).count();
    assert_eq!(count("buffer_allocate"), 1);
    assert_eq!(count("buffer_deallocate"), 0);
    // The scratch ttmesh's collective used is kept beside the nodes, allocated and freed inside
    // the op, so the graph's peaks are still the allocators'.
    assert!(!g.scratch.is_empty());
    let start = g.nodes.iter().position(|n| n == op).unwrap();
    let end = g
        .nodes
        .iter()
        .position(|n| n.node_type == "function_end" && n.stacking_level == 1)
        .unwrap();
    let mut live: BTreeMap<(u8, u64), i64> = BTreeMap::new();
    for s in &g.scratch {
        assert!(start < s.at && s.at <= end, "{s:?}");
        assert_eq!(s.operation, "AllGatherDeviceOperation");
        *live.entry((s.buffer_type, s.size)).or_default() += if s.allocate { 1 } else { -1 };
    }
    assert!(live.values().all(|&v| v == 0), "{live:?}");
    // The warm-up run reached the same peak the captured one did.
    let peaks = graph::peak_memory_per_chip(&g);
    for chip in mesh.chips() {
        let want = chip.usage().snapshot(BufferType::Dram).peak_per_bank;
        assert_eq!(
            peaks[&chip.id()].dram + held[&chip.id()],
            want,
            "chip {}",
            chip.id()
        );
    }
    // The CB node: two pages of the input, on the collective's worker cores.
    for n in g
        .nodes
        .iter()
        .filter(|n| n.node_type == "circular_buffer_allocate")
    {
        assert_eq!(n.param_u64("size"), Some(4096));
        assert_eq!(n.param("globally_allocated").as_deref(), Some("0"));
        assert_eq!(n.param("core_range_set").as_deref(), Some("{[0-0 - 1-0]}"));
    }
}

#[test]
fn all_gather_on_a_2x4_mesh_is_one_device_operation_under_normal() {
    let _turn = TURN.lock();
    let (mesh, g, out, _) = all_gather_graph(RunMode::Normal);
    let mut program = vec!["circular_buffer_deallocate_all"; 8];
    program.push("sub_device_manager");
    program.extend(["program_execution"; 8]);
    assert_eq!(types(&g), expected(1, &program));
    let op = the_device_operation(
        &g,
        "AllGatherDeviceOperation",
        "AllGatherParams",
        ALL_GATHER_FACTORY,
    );
    assert_eq!(op.params["program_cache_hit"], true);
    creations_have_arguments(&g);
    assert!(!g.nodes.iter().any(|n| n.node_type == "buffer_deallocate"));
    // It ran: every chip holds the row's four copies side by side.
    let x = shards_f32(&out);
    assert_eq!(x.len(), 8);
    drop(mesh);
}

/// Every op we have is recorded as a TT-NN device operation with its factory: none falls back
/// to a made-up name. (The names are TT-NN 0.81.1's where a capture showed them, tt-metal's
/// sources' otherwise: see mesh/src/graph/ttnn_ops.rs.)
#[test]
fn every_op_is_a_named_device_operation_with_its_factory() {
    let _turn = TURN.lock();
    let mesh = open("n300", FabricConfig::Fabric1D);
    let o = ops::MeshOpOptions::default();
    let a = tensor(&mesh, &[1, 1, 64, 64], 4);
    let b = tensor(&mesh, &[1, 1, 64, 64], 5);
    let run = || -> ttmesh::Result<()> {
        ops::add(&a, &b, &o)?;
        ops::mul(&a, &b, &o)?;
        ops::matmul(&a, &b, &MeshMatmulConfig::default())?;
        ops::relu(&a, &o)?;
        ops::softmax(&a, &o)?;
        ops::rms_norm(&a, None, 1e-5, &o)?;
        ops::typecast(&a, DataType::Float32, &o)?;
        ops::to_memory_config(&a, &MemoryConfig::L1, &o)?;
        let rm = ops::to_layout(&a, Layout::RowMajor, &o)?;
        ops::to_layout(&rm, Layout::Tile, &o)?;
        ops::reshape(&a, &[1, 1, 32, 128], &o)?;
        ops::slice(&a, &[0, 0, 0, 0], &[1, 1, 32, 64], &o)?;
        ops::concat(&[&a, &b], 3, &o)?;
        ops::transpose(&a, 2, 3, &o)?;
        ops::permute(&a, &[0, 1, 3, 2], &o)?;
        ops::argmax(&rm, -1, &o)?;
        let args = ccl::CclArgs::default();
        ccl::all_gather(&a, 3, &args)?;
        ccl::reduce_scatter(&a, 3, &args)?;
        ccl::all_reduce(&a, &args)?;
        Ok(())
    };
    graph::begin_graph_capture(RunMode::NoDispatch);
    let r = run();
    let g = graph::end_graph_capture().unwrap();
    r.unwrap();
    let names: BTreeSet<String> = ops_at_level_1(&g)
        .into_iter()
        .filter_map(|n| n.param("name"))
        .collect();
    let want = [
        "BinaryNgDeviceOperation",
        "MatmulDeviceOperation",
        "UnaryDeviceOperation",
        "SoftmaxDeviceOperation",
        "LayerNormDeviceOperation",
        "TypecastDeviceOperation",
        "CopyDeviceOperation",
        "UntilizeDeviceOperation",
        "TilizeDeviceOperation",
        "ReshapeDeviceOperation",
        "SliceDeviceOperation",
        "ConcatDeviceOperation",
        "TransposeDeviceOperation",
        "PermuteDeviceOperation",
        "ArgMaxDeviceOperation",
        "AllGatherDeviceOperation",
        "ReduceScatterDeviceOperation",
        "AllReduceAsyncDeviceOperation",
    ];
    assert_eq!(names, want.iter().map(|s| s.to_string()).collect());
    for op in ops_at_level_1(&g) {
        assert_eq!(
            keys(op),
            set(&[
                "inputs",
                "name",
                "program_cache_hit",
                "program_factory_index",
                "program_factory_type"
            ]),
            "{op:?}"
        );
        assert!(op.param("program_factory_type").unwrap().contains("::"));
        assert_eq!(op.arguments.len(), 2);
    }
    creations_have_arguments(&g);
    // Only outputs are buffers with nodes: nothing is deallocated inside an op.
    assert!(!g
        .nodes
        .iter()
        .any(|n| n.node_type == "buffer_deallocate" && n.stacking_level > 1));
}

/// TT-NN keeps no program it builds under NO_DISPATCH (buffer addresses are 0 there), so an op
/// first built inside a NO_DISPATCH capture misses each time; under NORMAL the second run hits.
/// (From tt-metal's device-operation launch code, not from a capture.)
#[test]
fn a_program_built_under_no_dispatch_misses_every_time() {
    let _turn = TURN.lock();
    for (mode, second_hits) in [(RunMode::NoDispatch, false), (RunMode::Normal, true)] {
        let mesh = t3k();
        // A shape no other run of this mesh compiled.
        let a = tensor(&mesh, &[1, 1, 96, 64], 6);
        let b = tensor(&mesh, &[1, 1, 64, 160], 7);
        graph::begin_graph_capture(mode);
        let first = ops::matmul(&a, &b, &MeshMatmulConfig::default());
        let second = ops::matmul(&a, &b, &MeshMatmulConfig::default());
        mesh.synchronize_device().unwrap();
        let g = graph::end_graph_capture().unwrap();
        drop((first.unwrap(), second.unwrap()));
        let hits: Vec<bool> = ops_at_level_1(&g)
            .iter()
            .map(|n| n.params["program_cache_hit"].as_bool().unwrap())
            .collect();
        assert_eq!(hits, [false, second_hits], "{mode:?}");
    }
}

/// A sharded operand's circular buffer is its shard: TT-NN binds it to the tensor's L1
/// (`globally_allocated` "1", the shard's bytes per core), as 0.81.1's binary_ng does for a
/// height-sharded add. (From tt-metal's binary_ng factory and traces of it, not a 0.81.1
/// capture of this case.)
#[test]
fn a_sharded_operand_circular_buffer_is_its_shard() {
    let _turn = TURN.lock();
    let mesh = open("n300", FabricConfig::Disabled);
    let mc = MemoryConfig::sharded(
        TensorMemoryLayout::HeightSharded,
        BufferType::L1,
        ShardSpec::new(
            CoreRange {
                start: (0, 0),
                end: (3, 0),
            },
            [32, 64],
        ),
    );
    let shard = |seed| {
        let h = random(&[1, 1, 128, 64], DataType::BFloat16, seed);
        MeshTensor::from_host(
            &h,
            &mesh,
            &ReplicateTensorToMesh,
            Layout::Tile,
            mc.clone(),
            CqId(0),
        )
        .unwrap()
    };
    let (a, b) = (shard(8), shard(9));
    graph::begin_graph_capture(RunMode::NoDispatch);
    let sharded_out = ops::MeshOpOptions {
        memory_config: Some(mc.clone()),
        ..Default::default()
    };
    let out = ops::add(&a, &b, &sharded_out);
    let g = graph::end_graph_capture().unwrap();
    drop(out.unwrap());
    let cbs: Vec<(String, u64)> = g
        .nodes
        .iter()
        .filter(|n| n.node_type == "circular_buffer_allocate")
        .map(|n| {
            (
                n.param("globally_allocated").unwrap(),
                n.param_u64("size").unwrap(),
            )
        })
        .collect();
    // a, b and the output: each a [32, 64] bf16 shard, two tiles of 2048 B on its core.
    assert_eq!(cbs, vec![("1".to_string(), 4096); 3]);
}

/// The scratch kept beside the nodes goes into the report file and comes back, so a report's
/// peaks are the capture's.
#[test]
fn scratch_round_trips_through_the_report_file() {
    let _turn = TURN.lock();
    let (mesh, g, _out, _) = all_gather_graph(RunMode::NoDispatch);
    assert!(!g.scratch.is_empty());
    let path = std::env::temp_dir().join(format!("ttmesh-scratch-{}.json", std::process::id()));
    graph::write_report(&path, &g, Some(&mesh)).unwrap();
    let back = graph::read_report(&path).unwrap().graph();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(back.scratch, g.scratch);
    assert_eq!(back.nodes, g.nodes);
    assert_eq!(
        graph::peak_memory_per_chip(&back),
        graph::peak_memory_per_chip(&g)
    );
    // Without the scratch the peaks would be lower: it is what keeps them the allocators'.
    let without = Graph {
        scratch: Vec::new(),
        ..g.clone()
    };
    let (with, bare) = (
        graph::peak_memory_per_chip(&g),
        graph::peak_memory_per_chip(&without),
    );
    assert!(mesh
        .chips()
        .iter()
        .any(|c| with[&c.id()].dram > bare[&c.id()].dram));
}
