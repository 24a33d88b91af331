//! The printed summary: per phase (untraced ops, replayed ops) the modeled device time per
//! iteration, how busy the devices are, the op-to-op gaps, and a verdict.

use std::fmt;

use crate::timeline::{OpSpan, Timeline};

/// The gap above which an op-to-op latency is one that trace removes (FACTS: about 6.5 us).
pub const HOST_GAP_NS: f64 = 6500.0;

/// Figures of one phase.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub name: &'static str,
    /// Ops per chip per iteration.
    pub ops_per_iter: f64,
    /// Modeled device span (first dispatch to last end, averaged over chips) per iteration.
    pub device_us_per_iter: f64,
    /// Sum of op durations per chip per iteration.
    pub busy_us_per_iter: f64,
    /// Busy time over the span, in percent.
    pub busy_percent: f64,
    pub median_gap_us: f64,
    pub max_gap_us: f64,
    /// Op-to-op gaps above [`HOST_GAP_NS`].
    pub gaps_over_host_threshold: usize,
    pub host_bound: bool,
}

impl Phase {
    fn of(name: &'static str, ops: &[&OpSpan], iterations: usize) -> Option<Phase> {
        if ops.is_empty() {
            return None;
        }
        let mut chips: Vec<(u32, u8)> = ops.iter().map(|o| (o.chip, o.cq)).collect();
        chips.sort_unstable();
        chips.dedup();
        let (mut span, mut busy, mut gaps) = (0.0, 0.0, Vec::new());
        for &(chip, cq) in &chips {
            let mine: Vec<&&OpSpan> = ops
                .iter()
                .filter(|o| (o.chip, o.cq) == (chip, cq))
                .collect();
            let first = mine.iter().map(|o| o.dispatch_ns).fold(f64::MAX, f64::min);
            let last = mine.iter().map(|o| o.end_ns).fold(0.0, f64::max);
            span += last - first;
            busy += mine.iter().map(|o| o.end_ns - o.start_ns).sum::<f64>();
            // Gaps inside the phase: the first op of the phase follows something else.
            gaps.extend(mine.iter().skip(1).map(|o| o.op_to_op_ns));
        }
        let n = chips.len() as f64;
        let iters = iterations.max(1) as f64;
        gaps.sort_by(f64::total_cmp);
        let busy_percent = if span > 0.0 {
            100.0 * busy / span
        } else {
            100.0
        };
        Some(Phase {
            name,
            ops_per_iter: ops.len() as f64 / n / iters,
            device_us_per_iter: span / n / iters / 1000.0,
            busy_us_per_iter: busy / n / iters / 1000.0,
            busy_percent,
            median_gap_us: gaps.get(gaps.len() / 2).copied().unwrap_or(0.0) / 1000.0,
            max_gap_us: gaps.last().copied().unwrap_or(0.0) / 1000.0,
            gaps_over_host_threshold: gaps.iter().filter(|&&g| g > HOST_GAP_NS).count(),
            host_bound: busy_percent < 50.0,
        })
    }
}

/// The summary of a timeline: untraced then traced.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub host_model: String,
    pub phases: Vec<Phase>,
}

impl Summary {
    /// The iterations of the traced phase are its replays (on the first queue that has any);
    /// those of the untraced phase are its ops over the ops of one replay when there was a
    /// trace, else `untraced_iterations`.
    pub fn of(t: &Timeline, untraced_iterations: usize) -> Summary {
        let untraced: Vec<&OpSpan> = t.ops.iter().filter(|o| o.trace_id.is_none()).collect();
        let traced: Vec<&OpSpan> = t.ops.iter().filter(|o| o.trace_id.is_some()).collect();
        let (mut replays, mut untraced_iters) = (0, untraced_iterations);
        if let Some(first) = traced.first().map(|o| (o.chip, o.cq)) {
            let on_first = |ops: &[&OpSpan]| ops.iter().filter(|o| (o.chip, o.cq) == first).count();
            replays = t
                .device
                .iter()
                .filter(|d| d.name == "EXEC_BUF" && (d.chip, d.cq) == first)
                .count()
                .max(1);
            let per_replay = on_first(&traced) as f64 / replays as f64;
            untraced_iters = (on_first(&untraced) as f64 / per_replay.max(1.0)).round() as usize;
        }
        Summary {
            host_model: t.host_model.map_or(String::new(), |m| m.to_string()),
            phases: [
                Phase::of("untraced", &untraced, untraced_iters),
                Phase::of("traced", &traced, replays),
            ]
            .into_iter()
            .flatten()
            .collect(),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        let phases: Vec<serde_json::Value> = self
            .phases
            .iter()
            .map(|p| {
                serde_json::json!({
                    "phase": p.name, "ops_per_iter": p.ops_per_iter,
                    "device_us_per_iter": p.device_us_per_iter, "busy_us_per_iter": p.busy_us_per_iter,
                    "busy_percent": p.busy_percent, "median_op_to_op_us": p.median_gap_us,
                    "max_op_to_op_us": p.max_gap_us, "gaps_over_6_5_us": p.gaps_over_host_threshold,
                    "verdict": if p.host_bound { "host-bound" } else { "device-bound" },
                })
            })
            .collect();
        serde_json::json!({"host": self.host_model, "phases": phases})
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "modeled device timeline (host time {}):",
            self.host_model
        )?;
        writeln!(
            f,
            "{:>9} {:>7} {:>14} {:>12} {:>7} {:>12} {:>10} {:>9}  verdict",
            "phase",
            "ops/it",
            "device us/it",
            "busy us/it",
            "busy %",
            "median gap",
            "max gap",
            ">6.5 us"
        )?;
        for p in &self.phases {
            writeln!(
                f,
                "{:>9} {:>7.1} {:>14.1} {:>12.1} {:>7.1} {:>9.2} us {:>7.2} us {:>9}  {}",
                p.name,
                p.ops_per_iter,
                p.device_us_per_iter,
                p.busy_us_per_iter,
                p.busy_percent,
                p.median_gap_us,
                p.max_gap_us,
                p.gaps_over_host_threshold,
                if p.host_bound {
                    "host-bound"
                } else {
                    "device-bound"
                }
            )?;
        }
        if let [u, t] = &self.phases[..] {
            if t.device_us_per_iter > 0.0 {
                writeln!(
                    f,
                    "trace: {:.1} -> {:.1} us of device time per iteration ({:.2}x)",
                    u.device_us_per_iter,
                    t.device_us_per_iter,
                    u.device_us_per_iter / t.device_us_per_iter
                )?;
            }
        }
        Ok(())
    }
}
