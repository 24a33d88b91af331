//! The profiler's overhead benchmark runs and prints both phases side by side.

#[test]
fn profile_bench_prints_off_and_on_side_by_side() {
    let s = ttmesh_benches::profile::run(true);
    for needle in [
        "profiler off",
        "profiler on",
        "untraced",
        "traced",
        "x\n",
        "op spans",
    ] {
        assert!(s.contains(needle), "{needle} missing from:\n{s}");
    }
    eprintln!("{s}");
}
