//! Runs the CCL benchmark (prints; asserts only that every case ran):
//! `cargo test -p ttmesh --release --test bench -- --ignored --nocapture`
//! (TTMESH_BENCH_QUICK=1 for the quick variant). `ttmesh bench ccl` calls the same function.

#[test]
#[ignore = "benchmark: run explicitly with --ignored --nocapture"]
fn ccl_bench() {
    let quick = std::env::var("TTMESH_BENCH_QUICK").is_ok_and(|v| v == "1");
    let report = ttmesh::bench::run(quick);
    println!("{report}");
    assert!(!report.contains("failed"), "{report}");
}
