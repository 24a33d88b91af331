//! `ttmesh decode --graph DIR`: the decode's graph (placement and every step) lands in
//! DIR/report.json, also when the decode fails, where it ends in the failure's error node.

mod common;

use common::ttmesh;

use std::process::Output;

fn decode_with_graph(dir: &std::path::Path, trace_region_size: &str) -> Output {
    let _ = std::fs::remove_dir_all(dir);
    ttmesh(&[
        "decode",
        "--mesh",
        "n300",
        "--max-new-tokens",
        "2",
        "--json",
        "--trace-region-size",
        trace_region_size,
        "--graph",
        dir.to_str().unwrap(),
    ])
}

fn graph_of(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("report.json")).expect("report.json written");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["devices"].as_array().unwrap().len(), 2);
    report["graph"].as_array().unwrap().clone()
}

#[test]
fn decode_with_graph_writes_every_op_and_keeps_a_failure() {
    let dir = std::env::temp_dir().join(format!("ttmesh-decode-graph-{}", std::process::id()));
    let out = decode_with_graph(&dir, "1048576");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("report.json"), "{stderr}");
    let graph = graph_of(&dir);
    assert_eq!(graph.first().unwrap()["node_type"], "capture_start");
    assert_eq!(graph.last().unwrap()["node_type"], "capture_end");
    let count = |t: &str| graph.iter().filter(|n| n["node_type"] == t).count();
    assert_eq!(count("function_start"), count("function_end"));
    assert_eq!(count("error"), 0);
    // The placement's tensors and the step's ops, at level 1.
    let ops: Vec<&str> = graph
        .iter()
        .filter(|n| n["node_type"] == "function_start" && n["stacking_level"] == 1)
        .filter_map(|n| n["params"]["name"].as_str())
        .collect();
    for op in [
        "tt::tt_metal::create_device_tensor",
        "EmbeddingsDeviceOperation",
        "SdpaDecodeDeviceOperation",
        "AllReduceAsyncDeviceOperation",
        "AllGatherDeviceOperation",
        "ArgMaxDeviceOperation",
    ] {
        assert!(ops.contains(&op), "{op} missing from {ops:?}");
    }

    // A trace region too small: the decode fails, the report is still written and ends in
    // the error node naming the size that fits.
    let out = decode_with_graph(&dir, "4096");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("trace_region_size of at least"), "{stderr}");
    let graph = graph_of(&dir);
    let errors: Vec<_> = graph.iter().filter(|n| n["node_type"] == "error").collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["params"]["error_operation"], "end_trace_capture");
    assert!(errors[0]["params"]["error_message"]
        .as_str()
        .unwrap()
        .contains("Open the device with trace_region_size of at least"));
    assert_eq!(graph.last().unwrap()["node_type"], "capture_end");
    std::fs::remove_dir_all(&dir).unwrap();

    // A --graph path that cannot be a directory is refused before the decode.
    let blocked =
        std::env::temp_dir().join(format!("ttmesh-decode-graph-file-{}", std::process::id()));
    std::fs::write(&blocked, b"a file").unwrap();
    let out = decode_with_graph(&blocked, "1048576");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--graph") && stderr.contains("writable directory"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing decoded");
    std::fs::remove_file(&blocked).unwrap();
}
