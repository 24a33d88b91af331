//! The Chrome / Perfetto trace (JSON trace-event format): the host as process 0, each chip as
//! a process with one track per command queue; ops as complete events with their figures as
//! arguments; flows join the chips of one collective.
//!
//! Written with serde_json rather than `tracing` spans through `tracing-chrome`: that layer
//! stamps each event with the wall clock when the span closes, and the timestamps here are
//! modeled ones, computed after the run.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::timeline::Timeline;

fn us(ns: f64) -> f64 {
    ns / 1000.0
}

/// Process id of a chip's tracks (the host is 0).
fn pid(chip: u32) -> u64 {
    chip as u64 + 1
}

/// Where one chip's part of a collective sits: chip, CQ, start.
type Place = (u32, u8, f64);

/// The trace as a JSON value.
pub fn trace(t: &Timeline) -> Value {
    let mut ev = Vec::new();
    let host_label = t
        .host_model
        .map_or("host".to_string(), |m| format!("host ({m})"));
    ev.push(json!({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": host_label}}));
    ev.push(
        json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "dispatch"}}),
    );
    let mut chips: Vec<u32> = t.queues.iter().map(|q| q.0).collect();
    chips.dedup();
    for &c in &chips {
        ev.push(json!({"ph": "M", "name": "process_name", "pid": pid(c), "args": {"name": format!("chip {c}")}}));
        ev.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid(c), "args": {"sort_index": pid(c)}}));
    }
    for &(c, cq) in &t.queues {
        ev.push(json!({"ph": "M", "name": "thread_name", "pid": pid(c), "tid": cq, "args": {"name": format!("CQ {cq}")}}));
    }
    for h in &t.host {
        ev.push(json!({
            "ph": "X", "cat": "host", "name": h.name, "pid": 0, "tid": 0,
            "ts": us(h.start_ns), "dur": us(h.end_ns - h.start_ns), "args": {"chip": h.chip},
        }));
    }
    for d in &t.device {
        ev.push(json!({
            "ph": "X", "cat": "device", "name": d.name, "pid": pid(d.chip), "tid": d.cq,
            "ts": us(d.start_ns), "dur": us(d.end_ns - d.start_ns), "args": {"bytes": d.bytes},
        }));
    }
    // The ops of one collective, by (participants, call count), to draw flows between chips.
    let mut collectives: HashMap<(u64, u64), Vec<Place>> = HashMap::new();
    for op in &t.ops {
        let p = &op.program;
        ev.push(json!({
            "ph": "X", "cat": "op", "name": p.name, "pid": pid(op.chip), "tid": op.cq,
            "ts": us(op.start_ns), "dur": us(op.end_ns - op.start_ns),
            "args": {
                "global_call_count": op.call_count,
                "device_kernel_ns": op.kernel_ns.round(),
                "op_to_op_latency_ns": op.op_to_op_ns.round(),
                "dispatch_ns": (op.start_ns - op.dispatch_ns).round(),
                "cores": op.cores,
                "metal_trace_id": op.trace_id,
                "program_cache_hit": op.cache_hit,
                "flops": p.cost.flops,
                "dram_bytes": p.cost.dram_bytes,
                "fabric_bytes": p.cost.fabric_bytes,
            },
        }));
        if let Some(c) = p.cost.collective {
            collectives
                .entry((c.participants, op.call_count))
                .or_default()
                .push((op.chip, op.cq, op.start_ns));
        }
    }
    let mut keys: Vec<_> = collectives.keys().copied().collect();
    keys.sort_unstable();
    for (id, key) in keys.iter().enumerate() {
        let mut parts = collectives[key].clone();
        parts.sort_by_key(|p| p.0);
        for (step, pair) in parts.windows(2).enumerate() {
            let flow = (id * 64 + step) as u64;
            let (a, b) = (pair[0], pair[1]);
            ev.push(
                json!({"ph": "s", "cat": "collective", "name": "collective step", "id": flow,
                "pid": pid(a.0), "tid": a.1, "ts": us(a.2)}),
            );
            ev.push(json!({"ph": "f", "bp": "e", "cat": "collective", "name": "collective step", "id": flow,
                "pid": pid(b.0), "tid": b.1, "ts": us(b.2)}));
        }
    }
    json!({"traceEvents": ev, "displayTimeUnit": "ns"})
}
