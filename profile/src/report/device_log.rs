//! The device log: `profile_log_device.csv`, the per-core zone log tt-metal's device profiler
//! writes beside the ops report. ttnn-visualizer opens a performance report only when both are
//! in the folder, and joins them on the op's global call count ("run host ID").
//!
//! The model has one time per op, not per core or RISC, so each op gets the zones of one
//! worker core's BRISC: the firmware zone over the op's device time and the kernel zone inside
//! it, in cycles of the modeled clock (the same cycles as the ops report's FW START / END).

use std::fmt::Write as _;

use crate::timeline::{OpSpan, Timeline};

/// The columns after the metadata line, in tt-metal's order; every name after the first
/// carries a leading space, as tt-metal writes them (readers strip it). Rows have none.
const COLUMNS: &[&str] = &[
    "PCIe slot",
    "core_x",
    "core_y",
    "RISC processor type",
    "timer_id",
    "time[cycles since reset]",
    "data",
    "run host ID",
    "zone name",
    "type",
    "source line",
    "source file",
    "meta data",
];

/// The core whose zones stand for the op's (the first worker core in NoC coordinates).
const CORE: (u32, u32) = (1, 1);

/// (timer id, zone name) of the two zones per op.
const FW_ZONE: (u32, &str) = (1, "BRISC-FW");
const KERNEL_ZONE: (u32, &str) = (2, "BRISC-KERNEL");

fn zone(out: &mut String, op: &OpSpan, (timer, name): (u32, &str), kind: &str, cycle: u64) {
    let _ = writeln!(
        out,
        "{},{},{},BRISC,{timer},{cycle},0,{},{name},{kind},0,ttmesh-profile,",
        op.chip, CORE.0, CORE.1, op.call_count
    );
}

/// The log of every op of `t`, in modeled device order per chip.
pub fn device_log(t: &Timeline, arch: &str, clock_hz: f64, workers: u32) -> String {
    let mut out = format!(
        "ARCH: {arch}, CHIP_FREQ[MHz]: {}, Max Compute Cores: {workers}\n",
        (clock_hz / 1e6).round() as u64
    );
    out.push_str(&COLUMNS.join(", "));
    out.push('\n');
    let cycles = |ns: f64| (ns * clock_hz / 1e9).round() as u64;
    let mut ops: Vec<&OpSpan> = t.ops.iter().collect();
    ops.sort_by(|a, b| a.chip.cmp(&b.chip).then(a.start_ns.total_cmp(&b.start_ns)));
    for op in ops {
        // The kernel sits in the middle of the firmware's span (start-up before, teardown
        // after): the model splits the fixed cost evenly.
        let fw = (op.end_ns - op.start_ns).max(0.0);
        let kernel = op.kernel_ns.min(fw);
        let kernel_start = op.start_ns + (fw - kernel) / 2.0;
        zone(&mut out, op, FW_ZONE, "ZONE_START", cycles(op.start_ns));
        zone(
            &mut out,
            op,
            KERNEL_ZONE,
            "ZONE_START",
            cycles(kernel_start),
        );
        zone(
            &mut out,
            op,
            KERNEL_ZONE,
            "ZONE_END",
            cycles(kernel_start + kernel),
        );
        zone(&mut out, op, FW_ZONE, "ZONE_END", cycles(op.end_ns));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::ProgramInfo;
    use std::sync::Arc;

    fn op(chip: u32, call_count: u64, start_ns: f64, end_ns: f64, kernel_ns: f64) -> OpSpan {
        OpSpan {
            chip,
            cq: 0,
            program: Arc::new(ProgramInfo {
                name: "Matmul".into(),
                cost: Default::default(),
                operands: Vec::new(),
            }),
            call_count,
            host_start_ns: 0.0,
            host_end_ns: 0.0,
            dispatch_ns: start_ns,
            start_ns,
            end_ns,
            kernel_ns,
            op_to_op_ns: 0.0,
            trace_id: Some(0),
            cache_hit: true,
            cores: 64,
        }
    }

    #[test]
    fn four_zones_per_op_joined_by_call_count_in_cycles() {
        let t = Timeline {
            ops: vec![
                op(1, 7, 2000.0, 3000.0, 600.0),
                op(0, 7, 1000.0, 1500.0, 100.0),
            ],
            ..Default::default()
        };
        let log = device_log(&t, "blackhole", 1.35e9, 120);
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(
            lines[0],
            "ARCH: blackhole, CHIP_FREQ[MHz]: 1350, Max Compute Cores: 120"
        );
        let header: Vec<&str> = lines[1].split(", ").collect();
        assert_eq!(header.len(), COLUMNS.len());
        assert_eq!(lines.len(), 2 + 8);
        // Chip 0 first; its firmware zone opens at 1000 ns = 1350 cycles.
        let first: Vec<&str> = lines[2].split(',').collect();
        assert_eq!(first.len(), COLUMNS.len());
        assert_eq!((first[0], first[5], first[7]), ("0", "1350", "7"));
        assert_eq!((first[8], first[9]), ("BRISC-FW", "ZONE_START"));
        // Chip 1's kernel: 600 ns centred in 1000 ns, from 2200 to 2800 ns.
        let kernel: Vec<Vec<&str>> = lines[6..10]
            .iter()
            .map(|l| l.split(',').collect())
            .filter(|f: &Vec<&str>| f[8] == "BRISC-KERNEL")
            .collect();
        assert_eq!(kernel[0][5], "2970");
        assert_eq!(kernel[1][5], "3780");
    }
}
