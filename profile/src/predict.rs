//! Prediction from shapes: a step captured as a trace (under NO_DISPATCH nothing ran, but every
//! launch was encoded and the recorder saw it) modeled as the hardware would replay it, token
//! after token, with the same [`DeviceModel`] and timeline as `--profile`.
//!
//! The traced token is the steady state of back-to-back lockstep replays: the time from the
//! end of one replay to the end of the next on the slowest chip, EXEC_BUF included. Each op's
//! share is the time from the end of the op before it to its own end on that chip (dispatch,
//! any wait for the other chips of a collective, firmware and kernel), so the shares add up
//! to the token.

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::DeviceModel;
use crate::recorder::{Command, HostEvent, ProgramInfo};
use crate::timeline::{self, HostModel, Timeline};

/// Op kinds a summary lists by default.
pub const TOP_OPS: usize = 12;

/// One kind of op in the token (an op name with its input shapes).
#[derive(Clone, Debug, PartialEq)]
pub struct OpShare {
    /// `"Matmul [1,1,32,4096]x[1,1,4096,1536] BFLOAT8_B"`, `"AllGather [1,1,32,512]"`, ...
    pub op: String,
    /// Launches of it per token on the slowest chip.
    pub count: usize,
    /// Their time in the token, ns.
    pub ns: f64,
    /// Of those, the kernels' own modeled time (what tt-metal's DEVICE KERNEL DURATION says).
    pub kernel_ns: f64,
    /// `ns` over the token.
    pub share: f64,
    pub collective: bool,
}

/// The modeled traced token of a captured step.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenPrediction {
    /// Device time per token, replayed from a trace back to back, ns.
    pub token_ns: f64,
    /// Chips that run the step.
    pub chips: usize,
    /// Ops per token on each chip.
    pub ops_per_chip: usize,
    /// The chip whose replay ends last (the breakdown is its).
    pub critical_chip: u32,
    /// On that chip: the kernels' time, the firmware and dispatch overhead between them, and
    /// the wait at collectives for slower chips, ns (with EXEC_BUF, they add up to the token).
    pub kernel_ns: f64,
    pub overhead_ns: f64,
    pub collective_wait_ns: f64,
    pub exec_buf_ns: f64,
    /// Collectives' kernel time on that chip, ns.
    pub collective_ns: f64,
    /// The most DRAM time any chip spends per token at the model's DRAM rate, ns (the floor
    /// a weight-streaming decode cannot go below).
    pub dram_ns_per_chip: f64,
    /// Op kinds by time in the token, largest first.
    pub ops: Vec<OpShare>,
}

impl TokenPrediction {
    pub fn tokens_per_s_per_user(&self) -> f64 {
        1e9 / self.token_ns.max(1e-9)
    }

    /// The figures for a person: the token, its rate and the `top` op kinds by share.
    pub fn describe(&self, top: usize) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "predicted on the hardware (the captured trace replayed back to back, modeled as plan decode --predict does: each op also pays predict_op_extra_ns): {:.1} us per replay = {:.1} replays/s, {} ops per chip on {} chips; kernels {:.1} us, dispatch and firmware {:.1} us, waiting at collectives {:.1} us",
            self.token_ns / 1e3,
            self.tokens_per_s_per_user(),
            self.ops_per_chip,
            self.chips,
            self.kernel_ns / 1e3,
            self.overhead_ns / 1e3,
            self.collective_wait_ns / 1e3,
        );
        for o in self.ops.iter().take(top) {
            let _ = writeln!(
                s,
                "  {:>6.1}% {:>9.1} us  x{:<4} {}{}",
                o.share * 100.0,
                o.ns / 1e3,
                o.count,
                o.op,
                if o.collective { "  (collective)" } else { "" }
            );
        }
        s
    }

    pub fn to_json(&self, top: usize) -> serde_json::Value {
        serde_json::json!({
            "token_us": self.token_ns / 1e3,
            "chips": self.chips,
            "ops_per_chip": self.ops_per_chip,
            "critical_chip": self.critical_chip,
            "kernel_us": self.kernel_ns / 1e3,
            "overhead_us": self.overhead_ns / 1e3,
            "collective_wait_us": self.collective_wait_ns / 1e3,
            "collective_us": self.collective_ns / 1e3,
            "exec_buf_us": self.exec_buf_ns / 1e3,
            "dram_us_per_chip": self.dram_ns_per_chip / 1e3,
            "top_ops": self.ops.iter().take(top).map(|o| serde_json::json!({
                "op": o.op, "count": o.count, "us": o.ns / 1e3, "kernel_us": o.kernel_ns / 1e3,
                "share": o.share, "collective": o.collective,
            })).collect::<Vec<_>>(),
        })
    }
}

/// The trace a recording captured, per (chip, cq), in launch order.
pub fn captured_programs(events: &[HostEvent]) -> Vec<((u32, u8), Vec<Command>)> {
    let mut by_queue: Vec<((u32, u8), Vec<Command>)> = Vec::new();
    for e in events {
        let HostEvent::Submit {
            chip,
            cq,
            captured: true,
            commands,
            ..
        } = e
        else {
            continue;
        };
        let key = (*chip, *cq);
        let slot = match by_queue.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                by_queue.push((key, Vec::new()));
                by_queue.len() - 1
            }
        };
        by_queue[slot].1.extend(
            commands
                .iter()
                .filter(|c| matches!(c, Command::Program { .. }))
                .cloned(),
        );
    }
    by_queue.sort_by_key(|(k, _)| *k);
    by_queue
}

/// `model` as predictions use it: every op also pays `predict_op_extra_ns`, the per-op cost of
/// the published implementation's op set beyond ttmesh's.
fn predicting(model: &DeviceModel) -> DeviceModel {
    let mut m = model.clone();
    m.cal.kernel_fixed_ns += m.cal.predict_op_extra_ns;
    m
}

/// One queue's trace: (chip, cq) and its commands.
type QueueTrace = ((u32, u8), Arc<Vec<Command>>);

/// Host events that replay `trace` (per queue) `times` times in lockstep, then wait for it.
fn replays(trace: &[QueueTrace], times: usize) -> Vec<HostEvent> {
    let mut events = Vec::new();
    for _ in 0..times {
        for ((chip, cq), commands) in trace {
            events.push(HostEvent::Submit {
                host_ns: 0.0,
                chip: *chip,
                cq: *cq,
                captured: false,
                commands: vec![Command::Replay {
                    trace_id: 0,
                    commands: commands.clone(),
                    lockstep: true,
                }],
            });
        }
    }
    for ((chip, cq), _) in trace {
        events.push(HostEvent::Wait {
            host_ns: 0.0,
            chip: *chip,
            cq: *cq,
        });
    }
    events
}

/// "Matmul [1,1,32,4096]x[1,1,4096,1536] BFLOAT8_B": the op and what it reads.
fn op_kind(p: &ProgramInfo) -> String {
    let inputs: Vec<&ttmesh_chip::TensorSpec> = p
        .operands
        .iter()
        .filter(|(_, writes)| !writes)
        .map(|(s, _)| s)
        .collect();
    let shapes: Vec<String> = inputs
        .iter()
        .map(|s| {
            let dims: Vec<String> = s.shape.iter().map(|d| d.to_string()).collect();
            format!("[{}]", dims.join(","))
        })
        .collect();
    // The largest input's dtype decides a DRAM-bound op's time (a matmul's weight); a
    // collective's UINT32 scratch is not what it moves.
    let dtype = inputs
        .iter()
        .max_by_key(|s| (s.dtype.is_float(), s.volume()))
        .map_or("", |s| s.dtype.as_str());
    format!("{} {} {dtype}", p.name, shapes.join("x"))
}

/// The end of each queue's `replay`-th replay (0-based) of `per_queue` ops.
fn replay_end(t: &Timeline, per_queue: usize, replay: usize) -> HashMap<(u32, u8), f64> {
    let mut end = HashMap::new();
    for o in &t.ops {
        let n = o.call_count as usize;
        if n > replay * per_queue && n <= (replay + 1) * per_queue {
            let e = end.entry((o.chip, o.cq)).or_insert(0.0f64);
            *e = e.max(o.end_ns);
        }
    }
    end
}

/// Models `events`' captured trace replayed back to back; `None` when nothing was captured.
pub fn traced_token(events: &[HostEvent], model: &DeviceModel) -> Option<TokenPrediction> {
    traced(events, model).map(|(token, _)| token)
}

/// The steady-state token of a replayed timeline: its ops and device spans (EXEC_BUF) on every
/// chip after `warm`, host spans dropped (a prediction models no host).
fn steady_token(t: Timeline, per_queue: usize, warm: f64) -> Timeline {
    Timeline {
        ops: t
            .ops
            .into_iter()
            .filter(|o| o.call_count as usize > per_queue)
            .collect(),
        device: t
            .device
            .into_iter()
            .filter(|d| d.start_ns >= warm)
            .collect(),
        host: Vec::new(),
        queues: t.queues,
        host_model: None,
    }
}

/// [`traced_token`] with the modeled timeline of the steady-state token on every chip: what
/// `--profile` writes for a run, so a prediction gives the same ops report and trace.
pub fn traced(events: &[HostEvent], model: &DeviceModel) -> Option<(TokenPrediction, Timeline)> {
    let model = &predicting(model);
    let trace: Vec<QueueTrace> = captured_programs(events)
        .into_iter()
        .filter(|(_, c)| !c.is_empty())
        .map(|(k, c)| (k, Arc::new(c)))
        .collect();
    let per_queue = trace.first()?.1.len();
    if trace.iter().any(|(_, c)| c.len() != per_queue) {
        // Chips of a mesh run the same op sequence; a trace that differs is not a mesh step.
        return None;
    }
    let t = timeline::build(&replays(&trace, 2), model, HostModel::Cpp);
    let first = replay_end(&t, per_queue, 0);
    let second = replay_end(&t, per_queue, 1);
    let warm = first.values().copied().fold(0.0, f64::max);
    let (&critical, &last) = second
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(a.0)))?;
    let token_ns = last - warm;

    // The critical queue's second replay, op by op.
    let mut ops: Vec<_> = t
        .ops
        .iter()
        .filter(|o| (o.chip, o.cq) == critical && o.call_count as usize > per_queue)
        .collect();
    ops.sort_by_key(|o| o.call_count);
    let exec_buf_ns = model.exec_buf_ns();
    let mut prev_end = first.get(&critical).copied().unwrap_or(warm);
    // The replay starts when every chip has finished the one before (lockstep).
    let replay_start = warm;
    let mut shares: Vec<OpShare> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let (mut kernel_ns, mut overhead_ns, mut wait_ns, mut collective_ns) = (0.0, 0.0, 0.0, 0.0);
    for (i, o) in ops.iter().enumerate() {
        let since = if i == 0 {
            replay_start + exec_buf_ns
        } else {
            prev_end
        };
        let collective = o.program.cost.collective.is_some();
        // A collective's ready time is when the last chip of it arrived.
        let wait = if collective {
            (o.dispatch_ns - since).max(0.0)
        } else {
            0.0
        };
        let span = o.end_ns - since;
        kernel_ns += o.kernel_ns;
        wait_ns += wait;
        overhead_ns += span - wait - o.kernel_ns;
        if collective {
            collective_ns += o.kernel_ns;
        }
        let kind = op_kind(&o.program);
        let slot = *index.entry(kind.clone()).or_insert_with(|| {
            shares.push(OpShare {
                op: kind,
                count: 0,
                ns: 0.0,
                kernel_ns: 0.0,
                share: 0.0,
                collective,
            });
            shares.len() - 1
        });
        let s = &mut shares[slot];
        s.count += 1;
        s.ns += span;
        s.kernel_ns += o.kernel_ns;
        prev_end = o.end_ns;
    }
    for s in &mut shares {
        s.share = s.ns / token_ns.max(1e-9);
    }
    shares.sort_by(|a, b| b.ns.total_cmp(&a.ns).then(a.op.cmp(&b.op)));
    let dram_ns_per_chip = trace
        .iter()
        .map(|(_, cmds)| {
            cmds.iter()
                .map(|c| match c {
                    Command::Program { program, .. } => model.dram_ns(program.cost.dram_bytes),
                    _ => 0.0,
                })
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    let token = TokenPrediction {
        token_ns,
        chips: trace.len(),
        ops_per_chip: per_queue,
        critical_chip: critical.0,
        kernel_ns,
        overhead_ns,
        collective_wait_ns: wait_ns,
        exec_buf_ns,
        collective_ns,
        dram_ns_per_chip,
        ops: shares,
    };
    Some((token, steady_token(t, per_queue, warm)))
}

/// Time to first token for a prompt of `prompt_len` tokens, estimated from the decode step's
/// op set: each op re-costed for `ceil(prompt_len / 32)` tiles of rows instead of the decode's
/// one (matmul tiles, element work, collective bytes and activation traffic scale; a matmul's
/// DRAM traffic, which the weights dominate, is read once), replayed once. An estimate, not a
/// prefill program: tt-metal's prefill uses other kernels (and attention grows with the square
/// of the prompt, which this does not model).
pub fn prefill_ns(events: &[HostEvent], model: &DeviceModel, prompt_len: usize) -> Option<f64> {
    let model = &predicting(model);
    let rows = prompt_len.div_ceil(32).max(1) as f64;
    let trace: Vec<QueueTrace> = captured_programs(events)
        .into_iter()
        .filter(|(_, c)| !c.is_empty())
        .map(|(k, cmds)| {
            let scaled = cmds
                .into_iter()
                .map(|c| match c {
                    Command::Program {
                        program,
                        cores,
                        launch_bytes,
                        first,
                    } => {
                        let mut cost = program.cost;
                        let matmul = cost.matmul_tiles > 0.0;
                        cost.matmul_tiles *= rows;
                        cost.flops *= rows;
                        cost.l1_bytes *= rows;
                        cost.fabric_bytes *= rows;
                        if !matmul {
                            cost.dram_bytes *= rows;
                        }
                        Command::Program {
                            program: Arc::new(ProgramInfo {
                                name: program.name.clone(),
                                cost,
                                operands: program.operands.clone(),
                            }),
                            cores,
                            launch_bytes,
                            first,
                        }
                    }
                    other => other,
                })
                .collect();
            (k, Arc::new(scaled))
        })
        .collect();
    let per_queue = trace.first()?.1.len();
    let t = timeline::build(&replays(&trace, 1), model, HostModel::Cpp);
    let end = replay_end(&t, per_queue, 0)
        .values()
        .copied()
        .fold(0.0, f64::max);
    let start = t
        .device
        .iter()
        .filter(|d| d.name == "EXEC_BUF")
        .map(|d| d.start_ns)
        .fold(f64::INFINITY, f64::min);
    start.is_finite().then_some(end - start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibration::Calibration;
    use ttmesh_chip::program::{CollectiveCost, KernelCost};
    use ttmesh_chip::{ArchSpec, DataType, Layout, MathFidelity, MemoryConfig, TensorSpec};

    fn model() -> DeviceModel {
        DeviceModel::new(Calibration::for_arch(&ArchSpec::wormhole_b0()))
    }

    fn spec(shape: &[usize], dtype: DataType) -> TensorSpec {
        TensorSpec {
            shape: shape.to_vec(),
            dtype,
            layout: Layout::Tile,
            memory_config: MemoryConfig::DRAM,
        }
    }

    fn program(name: &str, cost: KernelCost, operands: Vec<(TensorSpec, bool)>) -> Command {
        Command::Program {
            program: Arc::new(ProgramInfo {
                name: name.into(),
                cost,
                operands,
            }),
            cores: 64,
            launch_bytes: 512,
            first: false,
        }
    }

    /// A decode-like matmul of [32, k] x [k, n] with the weight in `dtype`.
    fn matmul(k: usize, n: usize, dtype: DataType) -> Command {
        let weight = spec(&[1, 1, k, n], dtype);
        let tiles = (k / 32 * n / 32) as f64;
        program(
            "Matmul",
            KernelCost {
                flops: tiles * 65536.0,
                dram_bytes: weight.buffer_size() as f64 + (32 * k * 2 + 32 * n * 2) as f64,
                matmul_tiles: tiles,
                math_fidelity: MathFidelity::HiFi2,
                ..Default::default()
            },
            vec![
                (spec(&[1, 1, 32, k], DataType::BFloat16), false),
                (weight, false),
                (spec(&[1, 1, 32, n], DataType::BFloat16), true),
            ],
        )
    }

    fn all_gather(chips: u32, bytes: f64) -> Command {
        program(
            "AllGather",
            KernelCost {
                fabric_bytes: bytes,
                dram_bytes: bytes,
                collective: Some(CollectiveCost {
                    participants: (1u64 << chips) - 1,
                    chips,
                    steps: chips - 1,
                    links: 1,
                    phases: 1,
                }),
                ..Default::default()
            },
            vec![(spec(&[1, 1, 32, 512], DataType::BFloat16), false)],
        )
    }

    /// Captured submissions of `step` on `chips` chips, as the recorder reports a capture.
    fn captured(chips: u32, step: &[Command]) -> Vec<HostEvent> {
        let mut events = Vec::new();
        for cmd in step {
            for chip in 0..chips {
                events.push(HostEvent::Submit {
                    host_ns: 0.0,
                    chip,
                    cq: 0,
                    captured: true,
                    commands: vec![cmd.clone()],
                });
            }
        }
        events
    }

    #[test]
    fn token_is_the_ops_plus_their_gaps_and_shares_add_up() {
        let m = model();
        let step = [
            matmul(4096, 4096, DataType::BFloat8B),
            matmul(4096, 1024, DataType::BFloat8B),
        ];
        let p = traced_token(&captured(1, &step), &m).unwrap();
        assert_eq!((p.chips, p.ops_per_chip), (1, 2));
        // Independently: each op's kernel is its DRAM time (weights at 1088 B per 1024
        // elements), plus the fixed cost, the launch from the trace and the go signal; once
        // per token the EXEC_BUF.
        let bytes =
            |k: usize, n: usize| (k * n) as f64 * 1088.0 / 1024.0 + (32 * (k + n) * 2) as f64;
        let dram = |b: f64| b / (288e9 * 0.87) * 1e9;
        let launch = 512.0 / 20e9 * 1e9 + 512.0 / 10e9 * 1e9 + 300.0;
        // Predictions add predict_op_extra_ns (19,524 ns) to each op's 600 ns fixed cost.
        let expect = 1000.0
            + 2.0 * (launch + 600.0 + 19_524.0)
            + dram(bytes(4096, 4096))
            + dram(bytes(4096, 1024));
        assert!(
            (p.token_ns - expect).abs() < 1e-3 * expect,
            "{} vs {expect}",
            p.token_ns
        );
        let total: f64 = p.ops.iter().map(|o| o.share).sum::<f64>() + p.exec_buf_ns / p.token_ns;
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        assert!(p.ops[0]
            .op
            .starts_with("Matmul [1,1,32,4096]x[1,1,4096,4096] BFLOAT8_B"));
    }

    #[test]
    fn deterministic() {
        let m = model();
        let step = [matmul(2048, 8192, DataType::BFloat16), all_gather(8, 1e6)];
        let a = traced_token(&captured(8, &step), &m).unwrap();
        let b = traced_token(&captured(8, &step), &m).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            prefill_ns(&captured(8, &step), &m, 128),
            prefill_ns(&captured(8, &step), &m, 128)
        );
    }

    #[test]
    fn bfp8_never_slower_than_bf16_for_a_dram_bound_matmul() {
        let m = model();
        for (k, n) in [(4096, 4096), (8192, 28672 / 8), (2048, 512), (32, 32)] {
            let t = |d| {
                traced_token(&captured(1, &[matmul(k, n, d)]), &m)
                    .unwrap()
                    .token_ns
            };
            assert!(t(DataType::BFloat8B) <= t(DataType::BFloat16), "{k}x{n}");
        }
    }

    #[test]
    fn collectives_show_in_the_breakdown() {
        let m = model();
        let step = [
            matmul(4096, 512, DataType::BFloat8B),
            all_gather(8, 458_752.0),
        ];
        let p = traced_token(&captured(8, &step), &m).unwrap();
        assert_eq!(p.chips, 8);
        let ag = p.ops.iter().find(|o| o.collective).unwrap();
        assert!(ag.op.starts_with("AllGather"));
        assert!(p.collective_ns > 0.0 && (p.collective_ns - ag.kernel_ns).abs() < 1e-9);
        // Every chip is alike: nobody waits at the collective.
        assert!(p.collective_wait_ns < 1e-6, "{}", p.collective_wait_ns);
    }

    #[test]
    fn prefill_grows_with_the_prompt_and_is_at_least_a_token() {
        let m = model();
        let step = [
            matmul(4096, 4096, DataType::BFloat8B),
            all_gather(8, 65536.0),
        ];
        let ev = captured(8, &step);
        let token = traced_token(&ev, &m).unwrap().token_ns;
        let p32 = prefill_ns(&ev, &m, 32).unwrap();
        let p128 = prefill_ns(&ev, &m, 128).unwrap();
        let p4k = prefill_ns(&ev, &m, 4096).unwrap();
        assert!((p32 - token).abs() < 1e-6 * token, "{p32} vs {token}");
        assert!(p32 <= p128 && p128 < p4k, "{p32} {p128} {p4k}");
    }

    #[test]
    fn the_predicted_timeline_is_one_token_on_every_chip_in_the_profile_columns() {
        let m = model();
        let step = [
            matmul(4096, 512, DataType::BFloat8B),
            all_gather(8, 458_752.0),
        ];
        let (token, t) = traced(&captured(8, &step), &m).unwrap();
        assert_eq!(t.ops.len(), 8 * step.len());
        assert_eq!(t.device.iter().filter(|d| d.name == "EXEC_BUF").count(), 8);
        // The critical chip's ops end where the token does, after the warm-up replay.
        let last = t.ops.iter().map(|o| o.end_ns).fold(0.0, f64::max);
        let first = t
            .ops
            .iter()
            .map(|o| o.start_ns)
            .fold(f64::INFINITY, f64::min);
        assert!(
            last - first <= token.token_ns,
            "{} > {}",
            last - first,
            token.token_ns
        );
        let csv = crate::report::csv::ops_report(&t, "wormhole_b0", 1e9, 64);
        assert_eq!(csv.lines().count(), 1 + 8 * step.len());
        assert!(csv
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("Matmul,tt_dnn_device,3,"));
    }

    #[test]
    fn nothing_captured_is_none() {
        let m = model();
        assert!(traced_token(&[], &m).is_none());
        assert!(prefill_ns(&[], &m, 128).is_none());
    }
}
