//! `ttmesh run`, as a user runs it: the built binary, its exit code and its JSON.

mod common;

use common::ttmesh;

use std::process::Command;

fn run_json(args: &[&str]) -> serde_json::Value {
    let out = ttmesh(args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "ttmesh {args:?} exited with {}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("ttmesh {args:?}: not one JSON object ({e}): {stdout}"))
}

fn check_report(v: &serde_json::Value, topology: &str, shape: [u64; 2], iters: u64) {
    assert_eq!(v["correct"], serde_json::json!(true), "{v:#}");
    assert_eq!(v["mesh"]["topology"], topology);
    assert_eq!(v["mesh"]["shape"], serde_json::json!(shape));
    assert_eq!(v["mesh"]["arch"], "wormhole_b0");
    assert_eq!(v["iterations"], iters);
    let err = v["max_abs_error"].as_f64().unwrap();
    assert!(
        err.is_finite() && err <= v["tolerance"].as_f64().unwrap(),
        "{v:#}"
    );
    let chips = v["chips"].as_array().unwrap();
    assert_eq!(chips.len() as u64, shape[0] * shape[1]);
    let ids: std::collections::BTreeSet<u64> =
        chips.iter().map(|c| c["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), chips.len(), "chip ids repeat");
    for c in chips {
        // Every chip holds its shards, and a trace of the same size at the same place.
        assert!(c["dram_allocated"].as_u64().unwrap() > 0, "{c}");
        assert!(c["trace_allocated"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(c["trace_bytes"], chips[0]["trace_bytes"], "{c}");
        assert_eq!(c["trace_region_size"], 10_000_000, "{c}");
        assert_eq!(c["coord"].as_array().unwrap().len(), 2);
    }
    let host = &v["host_us_per_iter"];
    assert!(host["untraced"].as_f64().unwrap() > 0.0, "{v:#}");
    assert!(host["traced"].as_f64().unwrap() > 0.0, "{v:#}");
    assert!(v["replay"]["skew_us"].as_f64().unwrap() >= 0.0, "{v:#}");
}

#[test]
fn run_json_on_t3k() {
    let v = run_json(&["run", "--json", "--iters", "5"]);
    check_report(&v, "t3k", [2, 4], 5);
    assert_eq!(v["mesh"]["fabric"], "FABRIC_1D");
}

#[test]
fn run_json_on_t3k_ring() {
    let v = run_json(&["run", "--json", "--iters", "3", "--fabric", "1d-ring"]);
    check_report(&v, "t3k", [2, 4], 3);
    assert_eq!(v["mesh"]["fabric"], "FABRIC_1D_RING");
}

#[test]
fn run_json_on_galaxy() {
    let v = run_json(&["run", "--json", "--mesh", "galaxy", "--iters", "3"]);
    check_report(&v, "galaxy", [4, 8], 3);
}

/// A tt-metal mesh graph descriptor opens the grid it describes, with the fabric its
/// dim types imply when `--fabric` is not given.
#[test]
fn run_json_on_a_mesh_graph_descriptor() {
    let path = format!(
        "{}/../topologies/tests/data/galaxy_torus_xy.textproto",
        env!("CARGO_MANIFEST_DIR")
    );
    let v = run_json(&["run", "--json", "--mesh", &path, "--iters", "2"]);
    check_report(&v, "galaxy_torus_xy", [8, 4], 2);
    assert_eq!(v["mesh"]["fabric"], "FABRIC_2D_TORUS_XY");
}

#[test]
fn run_without_trace_is_still_checked() {
    let out = ttmesh(&["run", "--mesh", "n300", "--no-trace", "--iters", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("correct"), "{stdout}");
}

#[test]
fn trace_region_too_small_exits_with_the_size_needed() {
    let out = ttmesh(&["run", "--trace-region-size", "4096", "--iters", "1"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Creating trace buffers of size ")
            && stderr.contains(", but only 4096B is allocated for trace region."),
        "{stderr}"
    );
    // The size it names works.
    let at = stderr.find("of size ").unwrap() + "of size ".len();
    let needed: u64 = stderr[at..at + stderr[at..].find('B').unwrap()]
        .parse()
        .unwrap();
    let needed = needed.to_string();
    let v = run_json(&[
        "run",
        "--json",
        "--iters",
        "2",
        "--trace-region-size",
        &needed,
    ]);
    assert_eq!(v["correct"], serde_json::json!(true));
}

#[test]
fn bad_flags_fail_with_a_message() {
    for (args, expect) in [
        (vec!["run", "--fabric", "3d"], "--fabric"),
        (vec!["run", "--mesh", "line-99"], "line-99"),
        (
            vec!["run", "--mesh", "/nonexistent/cluster.toml"],
            "cluster.toml",
        ),
        (vec!["run", "--ffn", "100"], "--ffn"),
        (vec!["run", "--iters", "many"], "many"),
    ] {
        let out = ttmesh(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
}

/// `ttmesh run` with `args` is refused with exit code 1 or 2 (never a panic's 101 or an
/// abort's 134) and a message holding every one of `words`.
fn refused(args: &[&str], words: &[&str]) {
    let mut full = vec!["run"];
    full.extend_from_slice(args);
    let out = ttmesh(&full);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    assert!(
        matches!(code, Some(1) | Some(2)),
        "ttmesh {full:?} exited with {:?}: {stderr}",
        out.status
    );
    for w in words {
        assert!(stderr.contains(w), "ttmesh {full:?}: no '{w}' in: {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn sizes_that_cannot_fit_are_refused_with_the_memory_they_need() {
    refused(
        &["--hidden", "100000", "--ffn", "409600"],
        // Which of the two is blamed depends on the host's free memory.
        &[
            "--hidden 100000 --ffn 409600",
            "of DRAM per chip (a chip has",
            "of host memory",
            "is too large",
            "at most --",
        ],
    );
    for (flag, value) in [
        ("--tokens", "18446744073709551615"),
        ("--tokens", "1099511627776"),
        ("--ffn", "1099511627776"),
        ("--hidden", "18446744073709551584"),
    ] {
        refused(
            &[flag, value],
            &[&format!("{flag} {value} is too large"), "at most"],
        );
    }
    refused(
        &["--hidden", "18446744073709551615"],
        &["--hidden 18446744073709551615", "multiple of 32"],
    );
}

#[test]
fn counts_and_durations_out_of_range_are_refused_naming_the_flag() {
    refused(&["--tokens", "0"], &["--tokens 0", "at least 1 token"]);
    refused(&["--iters", "0"], &["--iters 0", "1 to 1000000"]);
    refused(
        &["--iters", "18446744073709551615"],
        &["--iters 18446744073709551615", "1 to 1000000"],
    );
    for hold in ["inf", "1e20", "NaN"] {
        refused(&["--hold", hold], &["--hold", "0 to 86400"]);
    }
    refused(&["--ffn", "0"], &["--ffn 0", "multiple of 256"]);
    refused(&["--hidden", "0"], &["--hidden 0", "multiple of 32"]);
}

#[test]
fn negative_values_are_bad_values_of_their_flag_not_unknown_arguments() {
    for (flag, value, takes) in [
        (
            "--iters",
            "-1",
            "a whole number of iterations, 1 to 1000000",
        ),
        (
            "--trace-region-size",
            "-5",
            "a number of bytes per chip, 0 or more",
        ),
        ("--tokens", "-32", "a whole number of tokens"),
        ("--hidden", "-512", "a positive multiple of 32"),
    ] {
        refused(
            &[flag, value],
            &[
                &format!("invalid value '{value}' for '{flag}"),
                "negative; it takes",
                takes,
            ],
        );
    }
    refused(&["--hold", "-1"], &["--hold -1", "0 to 86400"]);
    for (args, words) in [
        (
            vec!["decode", "--hold", "-1"],
            vec!["--hold -1", "0 to 86400"],
        ),
        (
            vec!["decode", "--max-new-tokens", "-3"],
            vec!["'-3' for '--max-new-tokens", "negative"],
        ),
        (
            vec!["decode", "--trace-region-size", "-5"],
            vec!["'-5' for '--trace-region-size", "negative"],
        ),
    ] {
        let out = ttmesh(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(1) | Some(2)),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("unexpected argument"),
            "{args:?}: {stderr}"
        );
        for w in words {
            assert!(stderr.contains(w), "{args:?}: no '{w}' in {stderr}");
        }
    }
}

#[test]
fn a_mesh_path_that_is_no_descriptor_says_what_it_is() {
    refused(
        &["--mesh", "/dev/null"],
        &[
            "/dev/null exists but is not a cluster descriptor",
            "character device",
        ],
    );
}

#[test]
fn a_ring_fabric_on_a_mesh_without_a_ring_is_refused_with_what_works() {
    refused(
        &["--mesh", "n150", "--fabric", "1d-ring"],
        &[
            "--mesh n150 --fabric 1d-ring",
            "no line of this topology closes into a ring",
            "FABRIC_1D",
        ],
    );
    refused(
        &["--mesh", "line-4", "--fabric", "1d-ring"],
        &[
            "--mesh line-4 --fabric 1d-ring",
            "closes into a ring",
            "FABRIC_1D",
        ],
    );
    let out = ttmesh(&["decode", "--mesh", "n150", "--fabric", "1d-ring"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("closes into a ring"), "{stderr}");
}

/// A reader that stops early (`ttmesh ... | head`) ends the command quietly, as SIGPIPE ends
/// other tools, never with a panic message. The pipe's reader (`true`) is gone before ttmesh
/// starts writing, so the first write fails with EPIPE.
#[test]
fn output_into_a_closed_pipe_is_not_a_panic() {
    for args in ["topo t3k", "topo galaxy --json", "plan"] {
        let script = format!("{{ sleep 0.3; exec \"$0\" {args}; }} | true");
        let out = Command::new("sh")
            .args(["-c", &script, env!("CARGO_BIN_EXE_ttmesh")])
            .env("TTMESH_MONITOR", "0")
            .output()
            .expect("sh runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && stderr.is_empty(),
            "ttmesh {args} into a closed pipe: {stderr}"
        );
    }
}
