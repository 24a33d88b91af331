//! `ttmesh monitor` watching `ttmesh run --hold` from another process, end to end: the numbers
//! the monitor reads from shared memory are the ones the run itself reports.
//!
//! Every segment is named after its process's pid, so parallel tests never share one; every
//! child is killed and every file this test creates is removed, also when an assertion fails.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{
    json_of, monitor, monitor_until, report_before_hold, wait_for_segment, Guard, STARTUP,
};
use serde_json::Value;

/// Held by the tests that run `ttmesh monitor --cleanup`, so one's cleanup never removes the
/// stale segment another is about to read. (Another program on the host may still clean up
/// /dev/shm at any moment; the tests say where they allow for that.)
fn cleanup_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn process_pids(v: &Value) -> Vec<u64> {
    v["processes"]
        .as_array()
        .expect("processes array")
        .iter()
        .map(|p| p["pid"].as_u64().expect("pid"))
        .collect()
}

#[test]
fn monitor_reads_the_running_mesh_and_forgets_it_after_exit() {
    let iters = 20;
    let mut g = Guard::spawn(&["run", "--hold", "10", "--json", "--iters", "20"]);
    let pid = g.pid();
    let segment = wait_for_segment(&mut g);
    assert_eq!(segment, format!("ttmesh-{pid}"));

    let mode = std::fs::metadata(format!("/dev/shm/{segment}"))
        .expect("segment file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "segment mode {:o}", mode & 0o777);

    // `run` prints its report, then holds with every tensor alive: read the report as soon as
    // it is out, then poll the monitor until it shows the same numbers (its counters refresh
    // every 100 ms), a condition rather than a quiet spell of some length.
    let run = report_before_hold(&mut g);
    let run_chips = run["chips"].as_array().expect("run chips").clone();
    let pid_arg = pid.to_string();
    let same = |live: &[Value]| {
        run_chips.iter().all(|rc| {
            live.iter().any(|mc| {
                mc["id"] == rc["id"]
                    && mc["trace"]["replays"] == iters
                    && mc["trace"]["allocated"] == rc["trace_allocated"]
                    && mc["dram"]["allocated"] == rc["dram_allocated"]
                    && mc["l1"]["allocated"] == rc["l1_allocated"]
                    && mc["l1_small"]["allocated"] == rc["l1_small_allocated"]
            })
        })
    };
    let live = monitor_until(pid, |p| {
        let chips = p["chips"].as_array().cloned().unwrap_or_default();
        if !same(&chips) {
            return false;
        }
        assert_eq!(p["pid"], pid as u64);
        assert_eq!(p["topology"], "t3k");
        assert_eq!(p["mesh_shape"], serde_json::json!([2, 4]));
        assert_eq!(p["fabric"], "FABRIC_1D");
        true
    });

    let out = g.wait(STARTUP);
    assert!(
        out.status.success(),
        "ttmesh run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_chips = run["chips"].as_array().expect("run chips");
    assert_eq!(live.len(), 8);
    assert_eq!(run_chips.len(), 8);
    for rc in run_chips {
        let id = &rc["id"];
        let mc = live
            .iter()
            .find(|c| &c["id"] == id)
            .unwrap_or_else(|| panic!("monitor has no chip {id}"));
        assert_eq!(mc["coord"], rc["coord"], "chip {id}");
        assert_eq!(
            mc["trace"]["allocated"], rc["trace_allocated"],
            "chip {id} TRACE"
        );
        assert!(rc["trace_allocated"].as_u64().unwrap() > 0, "chip {id}");
        // `run` prints its report and then holds with every tensor alive: the monitor sees
        // exactly the DRAM the report names.
        let run_dram = rc["dram_allocated"].as_u64().unwrap();
        assert!(run_dram > 0, "chip {id}");
        assert_eq!(
            mc["dram"]["allocated"].as_u64().unwrap(),
            run_dram,
            "chip {id} DRAM"
        );
        assert_eq!(mc["l1"]["allocated"], rc["l1_allocated"], "chip {id} L1");
        assert_eq!(
            mc["l1_small"]["allocated"], rc["l1_small_allocated"],
            "chip {id} L1_SMALL"
        );
        assert_eq!(mc["trace"]["traces"], 1, "chip {id}");
        assert_eq!(mc["trace"]["replays"], rc["trace_replays"], "chip {id}");
        // The trace region, rounded up to whole aligned pages in every DRAM bank.
        let cap = mc["trace"]["capacity"].as_u64().unwrap();
        assert!(
            cap >= rc["trace_region_size"].as_u64().unwrap(),
            "chip {id}: {cap}"
        );
        let dram = &mc["dram"];
        assert!(dram["capacity"].as_u64().unwrap() > dram["allocated"].as_u64().unwrap());
        assert!(dram["largest_free"].as_u64().unwrap() > 0, "chip {id}");
    }

    // The mesh closed: its segment is gone and the monitor no longer lists the process.
    assert!(!std::path::Path::new(&format!("/dev/shm/{segment}")).exists());
    let all = json_of(&monitor(&["--once", "--json"]));
    assert!(!process_pids(&all).contains(&(pid as u64)), "{all}");
    let one = monitor(&["--once", "--json", "--pid", &pid_arg]);
    assert!(!one.status.success());
    let err = String::from_utf8_lossy(&one.stderr);
    assert!(
        err.contains(&format!("no ttmesh process with pid {pid}")),
        "{err}"
    );
}

#[test]
fn killed_process_is_stale_then_cleaned_up() {
    let _cleanup = cleanup_lock();
    let mut g = Guard::spawn(&["run", "--hold", "120", "--iters", "1", "--no-trace"]);
    let pid = g.pid();
    let segment = wait_for_segment(&mut g);
    let path = PathBuf::from(format!("/dev/shm/{segment}"));
    g.files.push(path.clone());
    // SIGKILL: the mesh never closes, the segment stays behind.
    let mut child = g.child.take().expect("child");
    child.kill().expect("kill");
    child.wait().expect("wait");

    let out = monitor(&["--once", "--json", "--pid", &pid.to_string()]);
    // Only `ttmesh monitor --cleanup` run by another program on this host removes the segment
    // (then the pid is simply not found); while it exists it must read as stale.
    if path.exists() {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json_of(&out);
        assert_eq!(process_pids(&v), Vec::<u64>::new(), "{v}");
        let errors = v["errors"].as_array().expect("errors");
        assert!(
            errors.iter().any(|e| e["segment"] == segment.as_str()
                && e["error"].as_str().unwrap_or("").contains("stale")),
            "{v}"
        );
    }
    let all = json_of(&monitor(&["--once", "--json"]));
    assert!(!process_pids(&all).contains(&(pid as u64)), "{all}");
    let clean = monitor(&["--cleanup"]);
    assert!(clean.status.success());
    assert!(!path.exists(), "--cleanup left {segment}");
}

#[test]
fn garbage_segments_give_error_lines_not_crashes() {
    let _cleanup = cleanup_lock();
    // Named after this test process (alive), so nothing treats them as stale and removes them.
    let me = std::process::id();
    let garbage = PathBuf::from(format!("/dev/shm/ttmesh-{me}-901"));
    let short = PathBuf::from(format!("/dev/shm/ttmesh-{me}-902"));
    let g = Guard {
        child: None,
        files: vec![garbage.clone(), short.clone()],
    };
    std::fs::write(&garbage, vec![0xA5u8; 4096]).expect("write garbage segment");
    std::fs::write(&short, b"TTMESH").expect("write short segment");

    let out = monitor(&["--once", "--json", "--pid", &me.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_of(&out);
    let error_of = |name: &str| -> String {
        v["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .find(|e| e["segment"] == name)
            .and_then(|e| e["error"].as_str())
            .unwrap_or_else(|| panic!("no error for {name}: {v}"))
            .to_string()
    };
    assert_eq!(
        error_of(&format!("ttmesh-{me}-901")),
        format!("ttmesh-{me}-901: not a ttmesh monitor segment (magic 0xa5a5a5a5a5a5a5a5, expected 0x4e4d4853454d5454)")
    );
    assert_eq!(
        error_of(&format!("ttmesh-{me}-902")),
        format!("ttmesh-{me}-902: truncated (6 of 128 bytes)")
    );

    // The table form prints the same lines.
    let out = monitor(&["--once", "--pid", &me.to_string()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("ttmesh-{me}-901: not a ttmesh monitor segment")),
        "{text}"
    );
    assert!(text.contains("truncated (6 of 128 bytes)"), "{text}");
    // --cleanup leaves segments that are not ours alone.
    assert!(monitor(&["--cleanup"]).status.success());
    assert!(garbage.exists() && short.exists());
    drop(g);
}

#[test]
fn ttmesh_monitor_0_publishes_nothing() {
    let mut g = Guard::spawn_with(
        &["run", "--hold", "1", "--iters", "1", "--no-trace"],
        Some("0"),
    );
    let pid = g.pid();
    let deadline = Instant::now() + STARTUP;
    while g
        .child
        .as_mut()
        .expect("child")
        .try_wait()
        .expect("try_wait")
        .is_none()
    {
        let seen: Vec<String> = ttmesh_monitor::list_segments()
            .into_iter()
            .filter(|s| s.pid == Some(pid))
            .map(|s| s.name)
            .collect();
        assert!(seen.is_empty(), "TTMESH_MONITOR=0 but {seen:?} exists");
        assert!(Instant::now() < deadline, "ttmesh run did not finish");
        sleep(Duration::from_millis(20));
    }
    let out = g.wait(Duration::from_secs(1));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Off is not a failure: nothing is reported.
    assert!(!String::from_utf8_lossy(&out.stderr).contains("WARNING"));
}
