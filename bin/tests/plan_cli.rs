//! `ttmesh plan` names a trace_region_size for `run`'s block that suffices when `ttmesh run`
//! is given it, while half of it does not (both checked by running).

mod common;

use common::ttmesh;

#[test]
fn the_planned_trace_region_suffices_and_half_does_not() {
    let out = ttmesh(&["plan", "--mesh", "n300", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["fits"], true);
    let sizes: Vec<u64> = v["chips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["trace_region_size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes.len(), 2);
    let needed = sizes[0];
    assert!(needed > 0 && sizes.iter().all(|s| *s == needed));
    for c in v["chips"].as_array().unwrap() {
        assert_eq!(c["peak_bytes"]["trace"].as_u64().unwrap(), needed);
    }
    let run = |size: u64| {
        ttmesh(&[
            "run",
            "--mesh",
            "n300",
            "--iters",
            "2",
            "--json",
            "--trace-region-size",
            &size.to_string(),
        ])
    };
    let ok = run(needed);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let half = run(needed / 2);
    assert!(!half.status.success());
    let err = String::from_utf8_lossy(&half.stderr);
    assert!(
        err.contains(&format!("Creating trace buffers of size {needed}B")),
        "{err}"
    );
}
