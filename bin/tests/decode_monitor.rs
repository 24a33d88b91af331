//! `ttmesh decode --hold` watched by `ttmesh monitor --once --json` from another process: every
//! chip's TRACE (and DRAM) bytes the monitor reads equal the decode report's, and so do the
//! weights and KV-cache bytes the model labels.

mod common;

use common::{monitor_until, report_before_hold, wait_for_segment, Guard, STARTUP};

#[test]
fn monitor_sees_each_chips_decode_trace_while_decode_holds() {
    let mut g = Guard::spawn(&["decode", "--hold", "4", "--json", "--max-new-tokens", "4"]);
    let pid = g.pid();
    wait_for_segment(&mut g);
    // decode prints its report, then holds with the trace and every tensor alive: read the
    // report as soon as it is out and poll the monitor until it shows the same numbers.
    let report = report_before_hold(&mut g);
    let want = report["per_chip"].as_array().expect("per_chip").clone();
    let live = monitor_until(pid, |p| {
        let chips = p["chips"].as_array().cloned().unwrap_or_default();
        chips.len() == 8
            && want.iter().all(|rc| {
                chips.iter().any(|mc| {
                    mc["id"] == rc["id"]
                        && mc["trace"]["allocated"] == rc["trace_allocated"]
                        && mc["trace"]["replays"] == rc["trace_replays"]
                        && mc["dram"]["allocated"] == rc["dram_allocated"]
                        && mc["weights_bytes"] == report["weights_bytes_per_chip"]
                        && mc["kv_cache_bytes"] == report["kv_cache_bytes_per_chip"]
                })
            })
    });
    let out = g.wait(STARTUP);
    assert!(
        out.status.success(),
        "ttmesh decode failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let chips = report["per_chip"].as_array().expect("per_chip");
    assert_eq!(chips.len(), 8);
    for rc in chips {
        let id = &rc["id"];
        let mc = live
            .iter()
            .find(|c| &c["id"] == id)
            .unwrap_or_else(|| panic!("monitor has no chip {id}"));
        let trace = rc["trace_allocated"].as_u64().unwrap();
        assert!(trace > 0, "chip {id}");
        assert_eq!(
            mc["trace"]["allocated"].as_u64(),
            Some(trace),
            "chip {id} TRACE"
        );
        assert_eq!(mc["trace"]["replays"], rc["trace_replays"], "chip {id}");
        assert_eq!(
            mc["dram"]["allocated"], rc["dram_allocated"],
            "chip {id} DRAM"
        );
        let weights = report["weights_bytes_per_chip"].as_u64().unwrap();
        assert!(weights > 0);
        assert_eq!(mc["weights_bytes"].as_u64(), Some(weights), "chip {id}");
        assert_eq!(
            mc["kv_cache_bytes"], report["kv_cache_bytes_per_chip"],
            "chip {id}"
        );
    }
}
