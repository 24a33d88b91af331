//! The benchmarks as tests: quick mode runs in CI as a smoke test (it asserts only that every
//! figure was produced, never on speed); the full run is ignored by default.
//! Full: `cargo test -p ttmesh-benches --release --test chip -- --ignored --nocapture`

use ttmesh_benches::chip::{chip_bench, trace_bench};

#[test]
fn quick_benchmarks_produce_every_figure() {
    let a = chip_bench(true);
    println!("{a}");
    assert!(!a.contains("failed"), "{a}");
    assert!(a.contains("sgemm") && a.contains("pairs/s"), "{a}");
    let b = trace_bench(true);
    println!("{b}");
    assert!(!b.contains("failed"), "{b}");
    for tag in ["(a)", "(b)", "(c)", "sanitizer"] {
        assert!(b.contains(tag), "missing {tag}: {b}");
    }
}

#[test]
#[ignore = "benchmark: full sizes, prints figures"]
fn full_benchmarks() {
    println!("{}", chip_bench(false));
    println!("{}", trace_bench(false));
}
