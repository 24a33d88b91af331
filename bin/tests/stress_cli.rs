//! `ttmesh stress` as a user runs it: a seeded matrix passes and its case list is the same on
//! every run; bad input is refused naming the value and the choices; one case reruns alone;
//! Ctrl-C stops between cases and prints the summary so far.

mod common;

use common::ttmesh;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn fifty_cases_of_seed_1_pass_and_list_the_same_cases_every_run() {
    let list = ttmesh(&["stress", "--cases", "50", "--seed", "1", "--list"]);
    assert!(list.status.success(), "{}", text(&list.stderr));
    let again = ttmesh(&["stress", "--cases", "50", "--seed", "1", "--list"]);
    assert_eq!(
        list.stdout, again.stdout,
        "the case list differs between runs"
    );
    let lines: Vec<String> = text(&list.stdout).lines().map(String::from).collect();
    assert_eq!(lines.len(), 50);

    let out = ttmesh(&[
        "stress",
        "--cases",
        "50",
        "--seed",
        "1",
        // 3 s, not 1: the watchdog (5 timeouts) must outlast a healthy case on a host whose
        // two cores are busy with other builds, or a slow case reads as a hang.
        "--timeout",
        "3",
        "--json",
    ]);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stress --cases 50 --seed 1 failed:\n{stdout}\n{}",
        text(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let ran: Vec<String> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["case"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ran, lines, "the cases run are not the cases listed");
    let s = &v["summary"];
    assert_eq!(s["cases"], 50);
    assert_eq!(
        (
            s["wrong"].as_u64(),
            s["hangs"].as_u64(),
            s["unexpected_errors"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{s}"
    );
    assert_eq!(
        s["passed"].as_u64().unwrap() + s["expected_errors"].as_u64().unwrap(),
        50
    );
    // Some cases were faulted and ended in their error.
    assert!(s["expected_errors"].as_u64().unwrap() > 0, "{s}");
}

#[test]
fn one_case_reruns_alone_with_a_report_and_junit() {
    let junit = std::env::temp_dir().join(format!("ttmesh-stress-{}.xml", std::process::id()));
    let out = ttmesh(&[
        "stress",
        "--seed",
        "3",
        "--only",
        "4",
        "--topology",
        "n300,t3k-ring",
        "--timeout",
        "1",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let list = ttmesh(&[
        "stress",
        "--seed",
        "3",
        "--cases",
        "5",
        "--topology",
        "n300,t3k-ring",
        "--list",
    ]);
    let case4 = text(&list.stdout).lines().nth(4).unwrap().to_string();
    assert!(
        stdout.contains(&case4),
        "the rerun is not case 4 ({case4}):\n{stdout}"
    );
    for col in [
        "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong",
    ] {
        assert!(stdout.contains(col), "no column {col}:\n{stdout}");
    }
    assert!(stdout.contains("# cases 1  passed"), "{stdout}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let _ = std::fs::remove_file(&junit);
    assert!(
        xml.starts_with("<?xml") && xml.contains("<testsuites") && xml.contains("<testcase"),
        "{xml}"
    );
}

#[test]
fn bad_input_names_the_value_and_the_choices() {
    for (args, needles) in [
        (
            vec!["--topology", "t5k"],
            vec!["topology 't5k'", "t3k-ring", "galaxy-2d"],
        ),
        (
            vec!["--ops", "all_to_all"],
            vec!["op 'all_to_all'", "reduce_scatter"],
        ),
        (
            vec!["--faults", "flaky"],
            vec!["fault 'flaky'", "corrupt", "stall"],
        ),
        (vec!["--dtypes", "f16"], vec!["dtype 'f16'", "bfloat8_b"]),
        (vec!["--duration", "0"], vec!["--duration 0", "positive"]),
        (vec!["--duration", "soon"], vec!["--duration soon"]),
        (vec!["--cases", "0"], vec!["--cases 0"]),
        (vec!["--topology", "ring-2"], vec!["ring-2", "3 to 64"]),
        (
            vec![
                "--topology",
                "galaxy-2d",
                "--ops",
                "reduce_scatter",
                "--dtypes",
                "f32",
                "--max-size",
                "8K",
            ],
            vec!["--max-size 8192", "reduce_scatter on galaxy-2d", "32 tiles"],
        ),
        (vec!["--max-size", "1T"], vec!["--max-size 1T"]),
    ] {
        let mut a = vec!["stress"];
        a.extend(&args);
        let out = ttmesh(&a);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        for n in needles {
            assert!(
                err.contains(n),
                "{args:?}: the error does not say '{n}': {err}"
            );
        }
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn ctrl_c_stops_between_cases_and_prints_the_summary_so_far() {
    let child = Command::new(env!("CARGO_BIN_EXE_ttmesh"))
        .args([
            "stress",
            "--duration",
            "10m",
            "--topology",
            "n300",
            "--faults",
            "none",
            "--timeout",
            "1",
        ])
        .env("TTMESH_MONITOR", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once its Ctrl-C handler is in place (before that, SIGINT would just end it):
    // Linux lists the signals a process catches in /proc/<pid>/status.
    let catches_sigint = || {
        std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            .ok()
            .and_then(|s| {
                let mask = s.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
                u64::from_str_radix(mask.trim(), 16).ok()
            })
            .is_some_and(|mask| mask & (1 << (2 - 1)) != 0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !catches_sigint() {
        assert!(
            Instant::now() < deadline,
            "ttmesh stress never installed its Ctrl-C handler"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let t = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "stopping took {:?}",
        t.elapsed()
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("# cases ") && stdout.contains("interrupted"),
        "{stdout}"
    );
}
