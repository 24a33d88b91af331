//! Graph capture against TT-NN 0.81.1's own graphs of one `ttnn.add` on a 2x4 mesh
//! (tests/data/graph_add*.json, captured on a T3K), and the analysis helpers against the
//! allocator. Captures are process-wide, so these tests take turns.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use parking_lot::Mutex;
use serde_json::Value;
use ttmesh::graph::{self, Graph, RunMode};
use ttmesh::ops::{self, MeshOpOptions};
use ttmesh::*;

static TURN: Mutex<()> = parking_lot::const_mutex(());

fn reference(name: &str) -> Vec<graph::Node> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn tensor(mesh: &MeshDevice, mc: MemoryConfig, seed: u64) -> MeshTensor {
    let h = random(&[1, 1, 32, 64], DataType::BFloat16, seed);
    MeshTensor::from_host(&h, mesh, &ReplicateTensorToMesh, Layout::Tile, mc, CqId(0)).unwrap()
}

/// The reference program's state before its capture: `a` first in DRAM, a second DRAM
/// tensor, `b` in L1, and the add run once (so the program cache hits, as in the reference).
fn reference_setup(mesh: &MeshDevice) -> (MeshTensor, MeshTensor, MeshTensor) {
    let a = tensor(mesh, MemoryConfig::DRAM, 1);
    let b_dram = tensor(mesh, MemoryConfig::DRAM, 2);
    let b = ops::to_memory_config(&b_dram, &MemoryConfig::L1, &MeshOpOptions::default()).unwrap();
    let warm = ops::add(&a, &b, &MeshOpOptions::default()).unwrap();
    mesh.synchronize_device().unwrap();
    warm.deallocate(true).unwrap();
    (a, b, b_dram)
}

fn keys(n: &graph::Node) -> BTreeSet<String> {
    n.params
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Node types in order, params keys per node type, connections, input tensors and levels.
fn assert_same_structure(ours: &[graph::Node], theirs: &[graph::Node]) {
    let types = |g: &[graph::Node]| g.iter().map(|n| n.node_type.clone()).collect::<Vec<_>>();
    assert_eq!(types(ours), types(theirs), "node type sequence");
    let keys_by_type = |g: &[graph::Node]| {
        let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for n in g {
            m.entry(n.node_type.clone()).or_default().extend(keys(n));
        }
        m
    };
    assert_eq!(
        keys_by_type(ours),
        keys_by_type(theirs),
        "params keys per node type"
    );
    for (o, t) in ours.iter().zip(theirs) {
        assert_eq!(o.counter, t.counter);
        assert_eq!(
            o.connections, t.connections,
            "connections of node {}",
            t.counter
        );
        assert_eq!(
            o.input_tensors, t.input_tensors,
            "input_tensors of node {}",
            t.counter
        );
        assert_eq!(
            o.stacking_level, t.stacking_level,
            "level of node {}",
            t.counter
        );
    }
}

/// Addresses: the `address` params and each device's address in `device_tensors`.
fn assert_same_addresses(ours: &[graph::Node], theirs: &[graph::Node]) {
    let per_device = |n: &graph::Node| -> BTreeMap<u64, u64> {
        n.param("device_tensors")
            .map(|s| {
                let v: Vec<Value> = serde_json::from_str(&s).unwrap();
                v.iter()
                    .map(|d| {
                        (
                            d["device_id"].as_u64().unwrap(),
                            d["address"].as_u64().unwrap(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    for (o, t) in ours.iter().zip(theirs) {
        assert_eq!(
            o.param("address"),
            t.param("address"),
            "address of node {}",
            t.counter
        );
        assert_eq!(
            per_device(o),
            per_device(t),
            "device_tensors of node {}",
            t.counter
        );
    }
}

/// `create_device_tensor`'s arguments: shape, dtype, layout, device, memory config, as TT-NN
/// serialises them. The device is a pointer, which differs from run to run: only its form is
/// compared.
fn assert_same_creation_arguments(ours: &[graph::Node], theirs: &[graph::Node]) {
    let creations = |g: &[graph::Node]| -> Vec<Vec<String>> {
        g.iter()
            .filter(|n| {
                n.node_type == "function_start"
                    && n.param("name").as_deref() == Some("tt::tt_metal::create_device_tensor")
            })
            .map(|n| n.arguments.clone())
            .collect()
    };
    let (ours, theirs) = (creations(ours), creations(theirs));
    assert_eq!(ours.len(), theirs.len(), "create_device_tensor count");
    assert!(!theirs.is_empty());
    for (o, t) in ours.iter().zip(&theirs) {
        assert_eq!(o.len(), 5, "{o:?}");
        assert!(is_pointer(&o[3]) && is_pointer(&t[3]), "{o:?} {t:?}");
        let without_device = |a: &[String]| [&a[..3], &a[4..]].concat();
        assert_eq!(without_device(o), without_device(t));
    }
}

fn is_pointer(s: &str) -> bool {
    s.strip_prefix("0x")
        .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
}

fn t3k() -> MeshDevice {
    open_with(MeshConfig {
        topology: "t3k".into(),
        fabric_config: FabricConfig::Disabled,
        ..Default::default()
    })
}

#[test]
fn add_on_a_2x4_mesh_matches_ttnn_normal() {
    let _turn = TURN.lock();
    let mesh = t3k();
    let (a, b, _keep) = reference_setup(&mesh);
    graph::begin_graph_capture(RunMode::Normal);
    let out = ops::add(&a, &b, &MeshOpOptions::default());
    let g = graph::end_graph_capture().unwrap();
    let out = out.unwrap();
    let theirs = reference("graph_add_normal.json");
    assert_same_structure(&g.nodes, &theirs);
    assert_same_addresses(&g.nodes, &theirs);
    assert_same_creation_arguments(&g.nodes, &theirs);
    // The add ran: every chip's result is the host sum (bf16 inputs, one rounding).
    let want: Vec<f32> = a.to_host_shards(CqId(0)).unwrap()[0]
        .to_f32_vec()
        .iter()
        .zip(b.to_host_shards(CqId(0)).unwrap()[0].to_f32_vec())
        .map(|(x, y)| half::bf16::from_f32(x + y).to_f32())
        .collect();
    for s in out.to_host_shards(CqId(0)).unwrap() {
        assert_eq!(s.to_f32_vec(), want);
    }
    // Serialised as TT-NN's JSON array, it reads back equal.
    let text = serde_json::to_string(&g.to_json()).unwrap();
    let back: Vec<graph::Node> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, g.nodes);
}

#[test]
fn add_on_a_2x4_mesh_matches_ttnn_no_dispatch() {
    let _turn = TURN.lock();
    let mesh = t3k();
    let (a, b, _keep) = reference_setup(&mesh);
    let launches: Vec<u64> = mesh
        .chips()
        .iter()
        .map(|c| c.dispatch_stats().launches)
        .collect();
    graph::begin_graph_capture(RunMode::NoDispatch);
    let out = ops::add(&a, &b, &MeshOpOptions::default()).unwrap();
    // Nothing ran, so there is nothing to read.
    let read = out.to_host_shards(CqId(0));
    mesh.synchronize_device().unwrap();
    let g = graph::end_graph_capture().unwrap();
    assert!(read.unwrap_err().to_string().contains("NO_DISPATCH"));
    let after: Vec<u64> = mesh
        .chips()
        .iter()
        .map(|c| c.dispatch_stats().launches)
        .collect();
    assert_eq!(launches, after, "no kernel may run during NO_DISPATCH");
    let theirs = reference("graph_add.json");
    assert_same_structure(&g.nodes, &theirs);
    // Buffers made during the capture are at address 0, inputs at their real addresses.
    assert_same_addresses(&g.nodes, &theirs);
    assert_same_creation_arguments(&g.nodes, &theirs);
    // The allocator accounted the output: it really holds a buffer on every chip.
    assert!(out.buffer_address().unwrap() > 0);
}

#[test]
fn peak_memory_from_the_graph_equals_the_allocators_peak() {
    let _turn = TURN.lock();
    let mesh = open("n300", FabricConfig::Fabric1D);
    graph::begin_graph_capture(RunMode::Normal);
    let x = tensor(&mesh, MemoryConfig::DRAM, 3);
    let y = tensor(&mesh, MemoryConfig::L1, 4);
    let s = ops::add(&x, &y, &MeshOpOptions::default()).unwrap();
    let p = ops::mul(&s, &x, &MeshOpOptions::default()).unwrap();
    s.deallocate(true).unwrap();
    let args = ccl::CclArgs::default();
    let r = ccl::all_reduce(&p, &args).unwrap();
    let big = MeshTensor::allocate(
        &mesh,
        &TensorSpec::new(
            vec![1, 1, 256, 1024],
            DataType::Float32,
            Layout::Tile,
            MemoryConfig::DRAM,
        ),
    )
    .unwrap();
    big.deallocate(true).unwrap();
    mesh.synchronize_device().unwrap();
    let g = graph::end_graph_capture().unwrap();
    drop(r);
    let peaks = graph::peak_memory_per_chip(&g);
    assert_eq!(peaks.len(), 2);
    for chip in mesh.chips() {
        let p = peaks[&chip.id()];
        for t in [BufferType::Dram, BufferType::L1] {
            let want = chip.usage().snapshot(t).peak_per_bank;
            assert!(want > 0);
            assert_eq!(p.get(t), want, "chip {} {t} peak", chip.id());
        }
    }
    assert!(graph::peak_memory(&g) > 0);
    let names: Vec<String> = graph::op_durations(&g).into_iter().map(|d| d.0).collect();
    assert!(
        names.contains(&"AllReduceAsyncDeviceOperation".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"BinaryNgDeviceOperation".to_string()),
        "{names:?}"
    );
}

#[test]
fn levelized_graph_of_add_of_multiply() {
    let _turn = TURN.lock();
    let mesh = open("n300", FabricConfig::Disabled);
    let a = tensor(&mesh, MemoryConfig::DRAM, 5);
    let b = tensor(&mesh, MemoryConfig::DRAM, 6);
    let c = tensor(&mesh, MemoryConfig::DRAM, 7);
    graph::begin_graph_capture(RunMode::Normal);
    let m = ops::mul(&b, &c, &MeshOpOptions::default()).unwrap();
    let _s = ops::add(&a, &m, &MeshOpOptions::default()).unwrap();
    let g = graph::end_graph_capture().unwrap();
    let l1 = graph::extract_levelized_graph(&g, 1);
    let id = |t: &MeshTensor| format!("tensor[{}]", t.shards()[0].id());
    let names: Vec<&str> = l1.iter().map(|v| v.name.as_str()).collect();
    // multiply(b, c), then add(a, multiply): three input tensors, two ops.
    assert_eq!(l1.len(), 5, "{names:?}");
    let find = |n: &str| l1.iter().position(|v| v.name == n).unwrap();
    let (vb, vc, va) = (find(&id(&b)), find(&id(&c)), find(&id(&a)));
    let ops_: Vec<usize> = (0..l1.len())
        .filter(|&i| l1[i].name == "BinaryNgDeviceOperation")
        .collect();
    assert_eq!(ops_.len(), 2);
    let (vm, vs) = (ops_[0], ops_[1]);
    assert_eq!(l1[vm].in_edges, vec![vb, vc]);
    assert_eq!(l1[vs].in_edges, vec![va, vm]);
    assert_eq!(l1[vm].out_edges, vec![vs]);
    assert_eq!(
        l1[vm].output_shape,
        vec!["Shape([1, 1, 32, 64])".to_string()]
    );
    assert!(l1
        .iter()
        .all(|v| v.stacking_level == 1 && v.internals.is_empty()));
    // Level 2: each op's internals are its create_device_tensor.
    let l2 = graph::extract_levelized_graph(&g, 2);
    let ops2: Vec<&graph::LevelizedVertex> = l2
        .iter()
        .filter(|v| v.name == "BinaryNgDeviceOperation")
        .collect();
    assert_eq!(ops2.len(), 2);
    for op in ops2 {
        assert_eq!(op.internals.len(), 1);
        let inner = &l2[op.internals[0]];
        assert_eq!(inner.name, "tt::tt_metal::create_device_tensor");
        assert_eq!(inner.stacking_level, 2);
    }
}

#[test]
fn a_capture_ended_after_a_timeout_holds_the_error() {
    let _turn = TURN.lock();
    let mesh = open_with(MeshConfig {
        topology: "n300".into(),
        operation_timeout: Some(Duration::from_secs(1)),
        ..Default::default()
    });
    let x = tensor(&mesh, MemoryConfig::DRAM, 8);
    // Chip 1's queue is held up: chip 0's all_reduce waits for it past the timeout.
    let (release, held) = std::sync::mpsc::channel::<()>();
    mesh.chips()[1]
        .enqueue_host_callback(CqId(0), move || {
            let _ = held.recv_timeout(Duration::from_secs(4));
            Ok(())
        })
        .unwrap();
    graph::begin_graph_capture(RunMode::Normal);
    let r = ccl::all_reduce(&x, &ccl::CclArgs::default()).and_then(|_| mesh.synchronize_device());
    let g = graph::end_graph_capture().unwrap();
    drop(release);
    let err = r.unwrap_err().to_string();
    assert!(err.contains("after 1s"), "{err}");
    let errors: Vec<&graph::Node> = g.nodes.iter().filter(|n| n.node_type == "error").collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert_eq!(errors[0].param("error_message").unwrap(), err);
    assert_eq!(errors[0].param("error_type").unwrap(), "exception");
    assert!(g
        .nodes
        .iter()
        .any(|n| n.param("name").as_deref() == Some("AllReduceAsyncDeviceOperation")));
    assert_eq!(g.nodes.last().unwrap().node_type, "capture_end");
}

#[test]
fn an_allocation_outside_an_op_is_a_create_device_tensor_with_its_arguments() {
    let _turn = TURN.lock();
    let mesh = open("n300", FabricConfig::Disabled);
    let spec = TensorSpec::new(
        vec![2, 1, 64, 96],
        DataType::Float32,
        Layout::RowMajor,
        MemoryConfig::L1,
    );
    graph::begin_graph_capture(RunMode::Normal);
    let t = MeshTensor::allocate(&mesh, &spec).unwrap();
    let g = graph::end_graph_capture().unwrap();
    drop(t);
    let start = &g.nodes[1];
    assert_eq!(start.node_type, "function_start");
    assert_eq!(
        start.param("name").as_deref(),
        Some("tt::tt_metal::create_device_tensor")
    );
    assert_eq!(start.param("inputs").as_deref(), Some("5"));
    let a = &start.arguments;
    assert_eq!(a.len(), 5, "{a:?}");
    assert_eq!(a[0], "Shape([2, 1, 64, 96])");
    assert_eq!(a[1], "DataType::FLOAT32");
    assert_eq!(a[2], "Layout::ROW_MAJOR");
    assert!(is_pointer(&a[3]), "{a:?}");
    assert_eq!(
        a[4],
        "MemoryConfig(memory_layout=TensorMemoryLayout::INTERLEAVED,buffer_type=BufferType::L1,shard_spec=std::nullopt,nd_shard_spec=std::nullopt,created_with_nd_shard_spec=0,per_core_allocation=0,range_lockstep_allocation=0)"
    );
}

#[test]
fn end_without_begin_is_an_error() {
    let _turn = TURN.lock();
    let e = graph::end_graph_capture().unwrap_err().to_string();
    assert!(e.contains("without begin_graph_capture"), "{e}");
    assert!(!graph::is_capturing());
}

#[test]
fn no_dispatch_runs_nothing_and_spends_no_host_memory_on_data() {
    let _turn = TURN.lock();
    let mesh = open("n300", FabricConfig::Disabled);
    let spec = TensorSpec::new(
        vec![1, 1, 4096, 4096],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::DRAM,
    );
    graph::begin_graph_capture(RunMode::NoDispatch);
    let a = MeshTensor::allocate(&mesh, &spec).unwrap();
    let host = HostTensor::zeros(vec![1, 1, 4096, 4096], DataType::BFloat16);
    a.copy_from_host(&host, &ReplicateTensorToMesh, CqId(0))
        .unwrap();
    let y = ops::matmul(&a, &a, &ops::MeshMatmulConfig::default()).unwrap();
    mesh.synchronize_device().unwrap();
    let g: Graph = graph::end_graph_capture().unwrap();
    for c in mesh.chips() {
        assert_eq!(c.memory().resident_bytes(), 0, "chip {} wrote data", c.id());
        assert_eq!(c.dispatch_stats().launches, 0);
        assert_eq!(c.usage().snapshot(BufferType::Dram).live_buffers, 2);
    }
    assert!(y.buffer_address().unwrap() > 0);
    // Two 4096x4096 bf16 tensors: 16384 pages over 12 banks, 1366 pages of 2048 B per bank.
    let peaks = graph::peak_memory_per_chip(&g);
    for c in mesh.chips() {
        assert_eq!(peaks[&c.id()].dram, 2 * 1366 * 2048);
        assert_eq!(
            c.usage().snapshot(BufferType::Dram).peak_per_bank,
            2 * 1366 * 2048
        );
    }
}

/// The run block (column-parallel up + gelu, row-parallel down + all_reduce): compiled once,
/// then captured as a trace.
fn mlp_block(mesh: &MeshDevice) -> ttmesh::Result<()> {
    let mlp = ttmesh::models::TpMlp::new(mesh, 256, 512, 3)?;
    let spec = TensorSpec::new(
        vec![1, 1, 32, 256],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::DRAM,
    );
    let x = MeshTensor::allocate(mesh, &spec)?;
    drop(mlp.forward(&x)?);
    let tid = mesh.begin_trace_capture(CqId(0))?;
    let y = mlp.forward(&x);
    mesh.end_trace_capture(tid, CqId(0))?;
    y.map(drop)
}

#[test]
fn plan_names_a_trace_region_that_suffices_and_the_peaks_a_run_reaches() {
    let _turn = TURN.lock();
    let config = MeshConfig {
        topology: "n300".into(),
        ..Default::default()
    };
    let plan = graph::plan(&config, mlp_block).unwrap();
    assert!(plan.fits(), "{:?}", plan.error);
    let needed = plan.chips[0].trace_region_size;
    assert!(needed > 0);
    assert!(plan.chips.iter().all(|c| c.trace_region_size == needed));
    // Run for real with exactly that region: it suffices, and the peaks are the plan's.
    let mesh = open_with(MeshConfig {
        trace_region_size: needed,
        ..config.clone()
    });
    mlp_block(&mesh).unwrap();
    mesh.synchronize_device().unwrap();
    for (c, p) in mesh.chips().iter().zip(&plan.chips) {
        assert_eq!(
            c.usage().snapshot(BufferType::Dram).peak_per_bank,
            p.peak_per_bank.dram
        );
        assert_eq!(
            c.usage().snapshot(BufferType::L1).peak_per_bank,
            p.peak_per_bank.l1
        );
    }
    mesh.close().unwrap();
    // Half of it does not, with tt-metal's message naming the size the plan named.
    let mesh = open_with(MeshConfig {
        trace_region_size: needed / 2,
        ..config
    });
    let e = mlp_block(&mesh).unwrap_err().to_string();
    assert!(
        e.contains(&format!("Creating trace buffers of size {needed}B")),
        "{e}"
    );
}
