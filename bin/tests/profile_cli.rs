//! `ttmesh run --profile DIR`: the files it writes, and its refusals before anything runs.

mod common;

use common::ttmesh;

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ttmesh-profile-cli-{}-{name}", std::process::id()))
}

#[test]
fn run_profile_writes_the_reports_and_the_summary() {
    let dir = temp("ok");
    let out = ttmesh(&[
        "run",
        "--mesh",
        "n300",
        "--iters",
        "3",
        "--json",
        "--profile",
        dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let phases = v["profile"]["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 2, "{v:#}");
    assert_eq!(phases[0]["phase"], "untraced");
    assert_eq!(phases[0]["verdict"], "host-bound");
    assert!(v["profile"]["host"].as_str().unwrap().contains("C++"));
    let csv = std::fs::read_to_string(dir.join("ops_perf_results.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    for col in [
        "OP CODE",
        "GLOBAL CALL COUNT",
        "DEVICE ID",
        "DEVICE KERNEL DURATION [ns]",
        "OP TO OP LATENCY [ns]",
        "METAL TRACE ID",
        "INPUT_0_DATATYPE",
    ] {
        assert!(
            header.split(',').any(|c| c == col),
            "{col} missing from {header}"
        );
    }
    assert!(csv.lines().skip(1).any(|l| l.starts_with("Matmul,")));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap()).unwrap();
    assert!(json["traceEvents"].as_array().unwrap().len() > 10);
    assert!(std::fs::read_to_string(dir.join("timeline.svg"))
        .unwrap()
        .starts_with("<svg"));
    // The calibration written back is a valid calibration file.
    let again = temp("again");
    let cal = dir.join("calibration.toml");
    let out = ttmesh(&[
        "run",
        "--mesh",
        "n150",
        "--iters",
        "2",
        "--profile",
        again.to_str().unwrap(),
        "--calibration",
        cal.to_str().unwrap(),
        "--host-model",
        "python",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("Python") && stdout.contains("verdict"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(again);
}

#[test]
fn bad_profile_inputs_are_refused_before_the_run() {
    // A folder under a regular file cannot be created.
    let file = temp("file");
    std::fs::write(&file, b"x").unwrap();
    let bad = file.join("profile");
    let out = ttmesh(&["run", "--profile", bad.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("not writable") && stderr.contains("profile"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "the run started: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_file(&file);

    let dir = temp("badcal");
    let cal = temp("cal.toml");
    for (text, key) in [
        ("eth_bytes_per_s = 0\n", "eth_bytes_per_s"),
        ("dram_bandwith = 1e9\n", "dram_bandwith"),
    ] {
        std::fs::write(&cal, text).unwrap();
        let out = ttmesh(&[
            "run",
            "--mesh",
            "n150",
            "--profile",
            dir.to_str().unwrap(),
            "--calibration",
            cal.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains(&format!("`{key}`")), "{stderr}");
        assert!(out.stdout.is_empty());
    }
    let out = ttmesh(&[
        "run",
        "--profile",
        dir.to_str().unwrap(),
        "--host-model",
        "rust",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown host model `rust`"));
    let _ = std::fs::remove_file(cal);
    let _ = std::fs::remove_dir_all(dir);
}
