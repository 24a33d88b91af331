//! The publishing-cost benchmark runs and reports both sides. Speed itself is not asserted
//! (machines are noisy); `cargo test --release -p ttmesh-cli --test monitor_bench -- --ignored
//! --nocapture` prints the full-length figures.

#[test]
fn monitor_overhead_quick_reports_both_sides_and_the_ratio() {
    let s = ttmesh::monitor_bench::monitor_overhead(true);
    println!("{s}");
    assert!(s.contains("publishing off"), "{s}");
    assert!(s.contains("publishing on"), "{s}");
    assert!(s.contains("ratio"), "{s}");
    assert!(
        s.contains("SerialChipWriter") && s.contains("ChipPublisher"),
        "{s}"
    );
    // The publishing chip's slot saw exactly the 1,000 buffers left live during the timing.
    assert!(!s.contains("WARNING"), "{s}");
}

#[test]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
fn monitor_overhead_full() {
    println!("{}", ttmesh::monitor_bench::monitor_overhead(false));
}
