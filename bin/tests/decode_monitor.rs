//! `ttmesh decode --hold` watched by `ttmesh monitor --once --json` from another process: every
//! chip's TRACE (and DRAM) bytes the monitor reads equal the decode report's.

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{json_of, monitor, wait_for_segment, Guard, STARTUP};
use serde_json::Value;

#[test]
fn monitor_sees_each_chips_decode_trace_while_decode_holds() {
    let mut g = Guard::spawn(&["decode", "--hold", "4", "--json", "--max-new-tokens", "4"]);
    let pid = g.pid().to_string();
    wait_for_segment(&mut g);
    // The hold starts once the trace has been replayed for every step; wait until each chip's
    // counters have stayed the same for 500 ms (they refresh every 100 ms).
    let deadline = Instant::now() + STARTUP;
    let mut stable: Option<(Vec<Value>, Instant)> = None;
    let live = loop {
        let v = json_of(&monitor(&["--once", "--json", "--pid", &pid]));
        let chips = v["processes"][0]["chips"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if chips.len() == 8 && chips.iter().all(|c| c["trace"]["traces"] == 1) {
            match &stable {
                Some((prev, since)) if *prev == chips => {
                    if since.elapsed() >= Duration::from_millis(500) {
                        break chips;
                    }
                }
                _ => stable = Some((chips, Instant::now())),
            }
        }
        assert!(Instant::now() < deadline, "no decode trace seen: {v}");
        sleep(Duration::from_millis(50));
    };
    let out = g.wait(STARTUP);
    assert!(
        out.status.success(),
        "ttmesh decode failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json_of(&out);
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
    }
}
