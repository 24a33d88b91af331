//! The ops report: one row per op per chip, with the columns of tt-metal's
//! `ops_perf_results_*.csv` that tt-perf-report reads.

use std::fmt::Write as _;

use ttmesh_chip::BufferType;

use crate::timeline::{OpSpan, Timeline};

/// The header, in tt-metal's order (the input and output columns after the timing ones).
pub const COLUMNS: &[&str] = &[
    "OP CODE",
    "OP TYPE",
    "GLOBAL CALL COUNT",
    "DEVICE ID",
    "ATTRIBUTES",
    "MATH FIDELITY",
    "CORE COUNT",
    "AVAILABLE WORKER CORE COUNT",
    "PARALLELIZATION STRATEGY",
    "HOST START TS",
    "HOST END TS",
    "HOST DURATION [ns]",
    "DEVICE FW START CYCLE",
    "DEVICE FW END CYCLE",
    "OP TO OP LATENCY [ns]",
    "DEVICE FW DURATION [ns]",
    "DEVICE KERNEL DURATION [ns]",
    "INPUT_0_MEMORY",
    "INPUT_1_MEMORY",
    "INPUT_2_MEMORY",
    "OUTPUT_0_MEMORY",
    "METAL TRACE ID",
    "PROGRAM CACHE HIT",
    "DEVICE ARCH",
];

fn memory(b: BufferType) -> &'static str {
    match b {
        BufferType::Dram => "DEV_0_DRAM_INTERLEAVED",
        BufferType::L1 => "DEV_0_L1_INTERLEAVED",
        BufferType::L1Small => "DEV_0_L1_SMALL",
        BufferType::Trace => "DEV_0_TRACE",
        BufferType::SystemMemory => "DEV_0_SYSTEM_MEMORY",
    }
}

fn row(out: &mut String, op: &OpSpan, arch: &str, clock_hz: f64, workers: u32) {
    let p = &op.program;
    let inputs: Vec<&'static str> = p
        .operands
        .iter()
        .filter(|(_, w)| !w)
        .map(|(b, _)| memory(*b))
        .collect();
    let output = p
        .operands
        .iter()
        .find(|(_, w)| *w)
        .map_or("", |(b, _)| memory(*b));
    let ns = |v: f64| v.round() as u64;
    let cycles = |v: f64| (v * clock_hz / 1e9).round() as u64;
    let fidelity = if p.cost.matmul_tiles > 0.0 {
        format!("{:?}", p.cost.math_fidelity)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{},tt_dnn_device,{},{},,{},{},{},,{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
        p.name,
        op.call_count,
        op.chip,
        fidelity,
        op.cores,
        workers,
        ns(op.host_start_ns),
        ns(op.host_end_ns),
        ns(op.host_end_ns - op.host_start_ns),
        cycles(op.start_ns),
        cycles(op.end_ns),
        ns(op.op_to_op_ns),
        ns(op.end_ns - op.start_ns),
        ns(op.kernel_ns),
        inputs.first().unwrap_or(&""),
        inputs.get(1).unwrap_or(&""),
        inputs.get(2).unwrap_or(&""),
        output,
        op.trace_id.map_or(String::new(), |t| t.to_string()),
        op.cache_hit,
        arch,
    );
}

/// The CSV text of every op of `t`, in modeled device order.
pub fn ops_report(t: &Timeline, arch: &str, clock_hz: f64, workers: u32) -> String {
    let mut out = COLUMNS.join(",");
    out.push('\n');
    let mut ops: Vec<&OpSpan> = t.ops.iter().collect();
    ops.sort_by(|a, b| a.start_ns.total_cmp(&b.start_ns).then(a.chip.cmp(&b.chip)));
    for op in ops {
        row(&mut out, op, arch, clock_hz, workers);
    }
    out
}
