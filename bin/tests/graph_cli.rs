//! `ttmesh run --graph DIR`: the run's graph lands in DIR/report.json, in TT-NN's report shape,
//! and a directory that cannot be created is a clear error before anything runs.

mod common;

use common::ttmesh;

#[test]
fn run_with_graph_writes_a_report_of_every_op() {
    let dir = std::env::temp_dir().join(format!("ttmesh-graph-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = ttmesh(&[
        "run",
        "--mesh",
        "n300",
        "--iters",
        "1",
        "--graph",
        dir.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let graph = report["graph"].as_array().unwrap();
    assert_eq!(graph.first().unwrap()["node_type"], "capture_start");
    assert_eq!(graph.last().unwrap()["node_type"], "capture_end");
    let count = |t: &str| graph.iter().filter(|n| n["node_type"] == t).count();
    assert!(count("function_start") > 0);
    assert_eq!(count("function_start"), count("function_end"));
    assert_eq!(
        report["devices"].as_array().unwrap().len(),
        2,
        "one device per chip"
    );
    // The block's all_reduce is one level-1 op; its steps' launches are nested in it.
    let ops: Vec<&str> = graph
        .iter()
        .filter(|n| n["node_type"] == "function_start" && n["stacking_level"] == 1)
        .filter_map(|n| n["params"]["name"].as_str())
        .collect();
    assert!(ops.contains(&"AllReduceAsyncDeviceOperation"), "{ops:?}");
    assert!(ops.contains(&"MatmulDeviceOperation"), "{ops:?}");
    std::fs::remove_dir_all(&dir).unwrap();

    let blocked =
        std::env::temp_dir().join(format!("ttmesh-graph-cli-file-{}", std::process::id()));
    std::fs::write(&blocked, b"a file, not a directory").unwrap();
    let out = ttmesh(&[
        "run",
        "--mesh",
        "n300",
        "--iters",
        "1",
        "--graph",
        blocked.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--graph") && stderr.contains("writable directory"),
        "{stderr}"
    );
    std::fs::remove_file(&blocked).unwrap();
}
