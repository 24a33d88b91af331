//! Runs the CCL benchmark (prints; asserts only that every case ran) and the monitor's publish-cost smoke test:
//! `cargo test -p ttmesh-benches --release --test mesh_and_monitor -- --ignored --nocapture`
//! (TTMESH_BENCH_QUICK=1 for the quick variant). `ttmesh bench ccl` calls the same function.

#[test]
#[ignore = "benchmark: run explicitly with --ignored --nocapture"]
fn ccl_bench() {
    let quick = ttmesh_settings::settings().bench_quick;
    let report = ttmesh_benches::ccl::run(quick);
    println!("{report}");
    assert!(!report.contains("failed"), "{report}");
}

#[test]
fn bench_runs_and_prints_side_by_side() {
    let s = ttmesh_benches::monitor::publish_cost(true);
    for needle in [
        "on_allocate",
        "baseline Mutex<HashMap>",
        "ratio:",
        "read_segment",
    ] {
        assert!(s.contains(needle), "{needle} missing from:\n{s}");
    }
    eprintln!("{s}");
}
