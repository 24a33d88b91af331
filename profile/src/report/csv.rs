//! The ops report: one row per op per chip, with the columns of tt-metal's
//! `ops_perf_results_*.csv` that tt-perf-report reads.

use std::fmt::Write as _;

use ttmesh_chip::tensor::TensorMemoryLayout;
use ttmesh_chip::{BufferType, Layout, TensorSpec};

use crate::timeline::{OpSpan, Timeline};

/// The columns before the tensors', in tt-metal's order.
const TIMING: &[&str] = &[
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
];

/// Tensors described per op, each with [`TENSOR_FIELDS`].
const TENSORS: &[&str] = &["INPUT_0", "INPUT_1", "INPUT_2", "OUTPUT_0"];
const TENSOR_FIELDS: &[&str] = &[
    "W_PAD[LOGICAL]",
    "Z_PAD[LOGICAL]",
    "Y_PAD[LOGICAL]",
    "X_PAD[LOGICAL]",
    "LAYOUT",
    "DATATYPE",
    "MEMORY",
];

const TRAILER: &[&str] = &["METAL TRACE ID", "PROGRAM CACHE HIT", "DEVICE ARCH"];

/// The header line.
pub fn header() -> String {
    let mut cols: Vec<String> = TIMING.iter().map(|s| s.to_string()).collect();
    for t in TENSORS {
        cols.extend(TENSOR_FIELDS.iter().map(|f| format!("{t}_{f}")));
    }
    cols.extend(TRAILER.iter().map(|s| s.to_string()));
    cols.join(",")
}

/// tt-metal's memory string: device 0 (as the reports write it), buffer type and layout.
fn memory(spec: &TensorSpec) -> String {
    let buffer = match spec.memory_config.buffer_type {
        BufferType::Dram => "DRAM",
        BufferType::L1 => "L1",
        BufferType::L1Small => "L1_SMALL",
        BufferType::Trace => "TRACE",
        BufferType::SystemMemory => "SYSTEM_MEMORY",
    };
    let layout = match spec.memory_config.memory_layout {
        TensorMemoryLayout::Interleaved => "INTERLEAVED",
        TensorMemoryLayout::HeightSharded => "HEIGHT_SHARDED",
        TensorMemoryLayout::WidthSharded => "WIDTH_SHARDED",
        TensorMemoryLayout::BlockSharded => "BLOCK_SHARDED",
    };
    format!("DEV_0_{buffer}_{layout}")
}

/// The seven tensor fields of `spec` (empty when the op has no such tensor).
fn tensor_fields(out: &mut String, spec: Option<&TensorSpec>) {
    let Some(spec) = spec else {
        out.push_str(&",".repeat(TENSOR_FIELDS.len()));
        return;
    };
    let mut dims = [1usize; 4];
    let rank = spec.shape.len().min(4);
    dims[4 - rank..].copy_from_slice(&spec.shape[spec.shape.len() - rank..]);
    for (i, d) in dims.iter().enumerate() {
        let tiled = spec.layout == Layout::Tile && i >= 2;
        let padded = if tiled { d.div_ceil(32) * 32 } else { *d };
        let _ = write!(out, ",{padded}[{d}]");
    }
    let layout = if spec.layout == Layout::Tile {
        "TILE"
    } else {
        "ROW_MAJOR"
    };
    let _ = write!(out, ",{layout},{},{}", spec.dtype.as_str(), memory(spec));
}

/// The OP CODE tt-metal writes for a ttmesh kernel: its device operation's name. They agree but
/// for all_reduce, which TT-NN runs as AllReduceAsync (tt-perf-report files that name, and not
/// "AllReduce", under its CCL category).
fn op_code(kernel: &str) -> &str {
    match kernel {
        "AllReduce" => "AllReduceAsync",
        other => other,
    }
}

fn row(out: &mut String, op: &OpSpan, arch: &str, clock_hz: f64, workers: u32) {
    let p = &op.program;
    let inputs: Vec<&TensorSpec> = p
        .operands
        .iter()
        .filter(|(_, w)| !w)
        .map(|(s, _)| s)
        .collect();
    let output = p.operands.iter().find(|(_, w)| *w).map(|(s, _)| s);
    let ns = |v: f64| v.round() as u64;
    let cycles = |v: f64| (v * clock_hz / 1e9).round() as u64;
    let fidelity = if p.cost.matmul_tiles > 0.0 {
        format!("{:?}", p.cost.math_fidelity)
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "{},tt_dnn_device,{},{},,{},{},{},,{},{},{},{},{},{},{},{}",
        op_code(&p.name),
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
    );
    for i in 0..3 {
        tensor_fields(out, inputs.get(i).copied());
    }
    tensor_fields(out, output);
    let _ = writeln!(
        out,
        ",{},{},{}",
        op.trace_id.map_or(String::new(), |t| t.to_string()),
        op.cache_hit,
        arch,
    );
}

/// The CSV text of every op of `t`, in modeled device order.
pub fn ops_report(t: &Timeline, arch: &str, clock_hz: f64, workers: u32) -> String {
    let mut out = header();
    out.push('\n');
    let mut ops: Vec<&OpSpan> = t.ops.iter().collect();
    ops.sort_by(|a, b| a.start_ns.total_cmp(&b.start_ns).then(a.chip.cmp(&b.chip)));
    for op in ops {
        row(&mut out, op, arch, clock_hz, workers);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::op_code;

    #[test]
    fn op_codes_are_tt_metals() {
        assert_eq!(op_code("AllReduce"), "AllReduceAsync");
        assert_eq!(op_code("Matmul"), "Matmul");
        assert_eq!(op_code("AllGather"), "AllGather");
    }
}
