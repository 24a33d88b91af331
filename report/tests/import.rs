//! `import` on a real capture (one `add` on a 2x4 mesh, as TT-NN's reference graph) read back
//! from db.sqlite, an error and a stack trace carried into their tables, and bad input: each
//! refused with a message naming the file or folder, nothing half-written.

use std::path::Path;

use rusqlite::Connection;
use serde_json::json;
use ttmesh::graph::{self, Node, Report, RunMode, REPORT_VERSION};
use ttmesh::ops::{self, MeshOpOptions};
use ttmesh::*;
use ttmesh_report::{import, ImportOptions, ReportError};

/// Captures are process-wide: the tests that capture take turns.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn tensor(mesh: &MeshDevice, mc: MemoryConfig, seed: u32) -> MeshTensor {
    let v = (0..32 * 64)
        .map(|i| ((i * 7 + seed) % 13) as f32 / 13.0)
        .collect();
    let h = HostTensor::from_f32(vec![1, 1, 32, 64], DataType::BFloat16, v).unwrap();
    MeshTensor::from_host(&h, mesh, &ReplicateTensorToMesh, Layout::Tile, mc, CqId(0)).unwrap()
}

fn count(db: &Connection, sql: &str) -> i64 {
    db.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Captures a(DRAM) + b(L1) on a T3K into `dir/report.json`; returns the graph too.
fn capture_add(dir: &Path) -> (graph::Graph, Vec<u32>) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mesh = MeshDevice::open(MeshConfig {
        topology: "t3k".into(),
        fabric_config: FabricConfig::Disabled,
        ..Default::default()
    })
    .unwrap();
    let a = tensor(&mesh, MemoryConfig::DRAM, 1);
    let b = tensor(&mesh, MemoryConfig::L1, 2);
    graph::begin_graph_capture(RunMode::Normal);
    let out = ops::add(&a, &b, &MeshOpOptions::default()).unwrap();
    let g = graph::end_graph_capture_to_file(dir.join("report.json"), &mesh).unwrap();
    let ids = mesh.chips().iter().map(|c| c.id()).collect();
    drop(out);
    mesh.close().unwrap();
    (g, ids)
}

#[test]
fn an_add_on_a_2x4_mesh_reads_back_from_the_database() {
    let tmp = tempfile::tempdir().unwrap();
    let (g, chip_ids) = capture_add(tmp.path());
    let out = tmp.path().join("visualizer");
    let options = ImportOptions {
        svg: true,
        replace: false,
    };
    let s = import(&tmp.path().join("report.json"), &out, options).unwrap();
    assert_eq!(
        s.files,
        [
            "db.sqlite",
            "config.json",
            "cluster_descriptor.yaml",
            "call_graph.svg"
        ]
    );
    let db = Connection::open(out.join("db.sqlite")).unwrap();
    // One operation: the add the user called, with its duration (seconds) from function_end.
    let level1: Vec<&Node> = g
        .nodes
        .iter()
        .filter(|n| n.node_type == "function_start" && n.stacking_level == 1)
        .collect();
    assert_eq!(level1.len(), 1);
    let (name, duration): (String, f64) = db
        .query_row(
            "SELECT name, duration FROM operations WHERE operation_id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(name, level1[0].param("name").unwrap());
    let end = g
        .nodes
        .iter()
        .rev()
        .find(|n| n.node_type == "function_end")
        .unwrap();
    assert_eq!(duration, end.duration_ns.unwrap() as f64 / 1e9);
    assert_eq!(count(&db, "SELECT count(*) FROM operations"), 1);
    // Two inputs, one output, every tensor of the graph once, and each on all 8 chips.
    assert_eq!(count(&db, "SELECT count(*) FROM input_tensors"), 2);
    assert_eq!(count(&db, "SELECT count(*) FROM output_tensors"), 1);
    let tensor_ids: std::collections::BTreeSet<u64> = g
        .nodes
        .iter()
        .filter(|n| n.node_type == "tensor")
        .filter_map(|n| n.param_u64("tensor_id"))
        .collect();
    assert_eq!(
        count(&db, "SELECT count(*) FROM tensors") as usize,
        tensor_ids.len()
    );
    let out_id = count(&db, "SELECT tensor_id FROM output_tensors");
    assert_eq!(
        count(
            &db,
            &format!(
                "SELECT count(DISTINCT device_id) FROM device_tensors WHERE tensor_id = {out_id}"
            )
        ),
        8
    );
    // The output tensor's address on each chip is the one the graph's buffer_allocate gave.
    let alloc = g
        .nodes
        .iter()
        .find(|n| n.node_type == "buffer_allocate")
        .unwrap();
    assert_eq!(
        count(
            &db,
            &format!("SELECT address FROM tensors WHERE tensor_id = {out_id}")
        ) as u64,
        alloc.param_u64("address").unwrap()
    );
    // Buffers alive after the add: at least the output on every chip.
    assert!(
        count(
            &db,
            "SELECT count(DISTINCT device_id) FROM buffers WHERE operation_id = 1"
        ) == 8
    );
    // Devices: one row per chip, with the chip's ids.
    let mut devices: Vec<u32> = db
        .prepare("SELECT device_id FROM devices ORDER BY device_id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut want = chip_ids.clone();
    want.sort_unstable();
    devices.sort_unstable();
    assert_eq!(devices, want);
    assert_eq!(count(&db, "SELECT count(*) FROM errors"), 0);
    // The cluster descriptor lists every chip; the SVG names the op.
    let yaml = std::fs::read_to_string(out.join("cluster_descriptor.yaml")).unwrap();
    for id in &chip_ids {
        assert!(yaml.contains(&format!("\n  {id}: wormhole_b0")), "{yaml}");
    }
    assert!(yaml.contains("ethernet_connections:"));
    let svg = std::fs::read_to_string(out.join("call_graph.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains(&name), "{svg}");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["report_name"], "report");
    // The folder's final path, not the temporary one it was built under.
    assert_eq!(config["report_path"], out.display().to_string());
}

fn node(counter: usize, node_type: &str, params: serde_json::Value, level: usize) -> Node {
    Node {
        arguments: vec![],
        connections: vec![],
        counter,
        input_tensors: vec![],
        node_type: node_type.into(),
        params,
        stacking_level: level,
        duration_ns: None,
        stack_trace: None,
    }
}

fn write(path: &Path, report: &Report) {
    std::fs::write(path, serde_json::to_string(report).unwrap()).unwrap();
}

/// An operation that failed (its function_start, the error, no function_end) and one error
/// outside any call: two rows in `errors`, with the stack trace the capture recorded.
#[test]
fn errors_and_stack_traces_reach_their_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let mut start = node(
        1,
        "function_start",
        json!({"name": "ttnn::all_reduce", "inputs": "1"}),
        1,
    );
    start.stack_trace = Some(vec!["decode_step".into(), "main".into()]);
    let fail = json!({"error_message": "timed out after 1s", "error_operation": "ttnn::all_reduce", "error_type": "exception"});
    let wait = json!({"error_message": "chip 1 stuck", "error_operation": "synchronize_device", "error_type": "exception"});
    let report = Report {
        version: REPORT_VERSION,
        graph: vec![
            node(0, "capture_start", json!(null), 0),
            start,
            node(2, "error", fail, 1),
            node(3, "error", wait, 1),
        ],
        devices: vec![],
        metadata: json!({}),
        cluster_descriptor: json!(null),
        buffer_pages: vec![],
        buffer_devices: Default::default(),
        scratch: vec![],
    };
    write(&tmp.path().join("r.json"), &report);
    let out = tmp.path().join("v");
    let s = import(&tmp.path().join("r.json"), &out, ImportOptions::default()).unwrap();
    assert_eq!(
        (s.operations, s.errors),
        (1, 1),
        "the open call holds both errors' last"
    );
    let db = Connection::open(out.join("db.sqlite")).unwrap();
    let (op, msg, trace): (String, String, String) = db
        .query_row(
            "SELECT operation_name, error_message, stack_trace FROM errors",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(op, "synchronize_device");
    assert_eq!(msg, "chip 1 stuck");
    assert_eq!(trace, "decode_step\nmain");
    assert_eq!(count(&db, "SELECT count(*) FROM stack_traces"), 1);
    // No cluster in the report: no cluster_descriptor.yaml rather than an empty one.
    assert!(!out.join("cluster_descriptor.yaml").exists());
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn bad_input_is_refused_and_nothing_is_half_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = dir.join("out");
    let msg = |r: Result<_, ReportError>| r.map(|_| ()).unwrap_err().to_string();

    std::fs::write(dir.join("corrupt.json"), "{\"version\": 1, \"graph\": [").unwrap();
    let e = msg(import(
        &dir.join("corrupt.json"),
        &out,
        ImportOptions::default(),
    ));
    assert!(
        e.contains("corrupt.json") && e.contains("not valid JSON"),
        "{e}"
    );

    std::fs::write(dir.join("v9.json"), "{\"version\": 9, \"graph\": []}").unwrap();
    let e = msg(import(&dir.join("v9.json"), &out, ImportOptions::default()));
    assert!(e.contains("v9.json") && e.contains("version 9"), "{e}");

    let e = msg(import(
        &dir.join("missing.json"),
        &out,
        ImportOptions::default(),
    ));
    assert!(e.contains("missing.json"), "{e}");
    assert_eq!(listing(dir), ["corrupt.json", "v9.json"], "nothing written");

    // A good report into a folder that holds something: refused, the folder untouched;
    // with --replace, replaced.
    let report = Report {
        version: REPORT_VERSION,
        graph: vec![node(0, "capture_start", json!(null), 0)],
        devices: vec![],
        metadata: json!({}),
        cluster_descriptor: json!(null),
        buffer_pages: vec![],
        buffer_devices: Default::default(),
        scratch: vec![],
    };
    write(&dir.join("good.json"), &report);
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("mine.txt"), "keep").unwrap();
    let e = msg(import(
        &dir.join("good.json"),
        &out,
        ImportOptions::default(),
    ));
    assert!(e.contains("not empty") && e.contains("--replace"), "{e}");
    assert_eq!(listing(&out), ["mine.txt"]);
    let replace = ImportOptions {
        svg: false,
        replace: true,
    };
    import(&dir.join("good.json"), &out, replace).unwrap();
    assert_eq!(listing(&out), ["config.json", "db.sqlite"]);

    // A folder under a file cannot be created: an error naming it, no staging left behind.
    std::fs::write(dir.join("afile"), "x").unwrap();
    let e = msg(import(
        &dir.join("good.json"),
        &dir.join("afile/out"),
        ImportOptions::default(),
    ));
    assert!(e.contains("afile"), "{e}");
    assert_eq!(
        listing(dir),
        ["afile", "corrupt.json", "good.json", "out", "v9.json"]
    );
}

/// end_graph_capture_to_file into a folder that does not exist: an error naming the path,
/// the capture ended all the same, and no temporary file left.
#[test]
fn a_report_path_that_cannot_be_written_is_an_error_and_the_capture_ends() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let mesh = MeshDevice::open(MeshConfig {
        topology: "n150".into(),
        ..Default::default()
    })
    .unwrap();
    graph::begin_graph_capture(RunMode::Normal);
    let _t = tensor(&mesh, MemoryConfig::DRAM, 3);
    let path = tmp.path().join("no-such-folder").join("report.json");
    let e = graph::end_graph_capture_to_file(&path, &mesh)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no-such-folder"), "{e}");
    assert!(graph::end_graph_capture().is_err(), "the capture ended");
    assert!(listing(tmp.path()).is_empty());
    mesh.close().unwrap();
}
