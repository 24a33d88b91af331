//! The modeled timeline: a clock per chip and command queue, fed by the host's submissions in
//! the host's order. A command starts at max(device free, host enqueue + command latency) and
//! lasts its modeled time; a collective starts on every chip it joins once all of them are
//! there; a lockstep replay starts on every chip at once; a wait for an event waits for the
//! other queue's modeled time of that event. The host's clock is either measured or modeled
//! from tt-metal's per-op dispatch cost ([`HostModel`]); a host that waits on the device
//! (finish, synchronize, a blocking read) resumes when the modeled device is done.
//! `event_synchronize` is not observed: the modeled host does not wait there.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use crate::error::ProfileError;
use crate::model::DeviceModel;
use crate::recorder::{Command, HostEvent, ProgramInfo};

/// Where the host side of the timeline comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostModel {
    /// tt-metal's C++ dispatch cost per op (`host_op_cpp_ns`).
    Cpp,
    /// TT-NN's Python dispatch cost per op (`host_op_python_ns`).
    Python,
    /// This host's own measured timestamps (ttmesh dispatches far faster than tt-metal, and
    /// its waits include the emulated kernels' host time).
    Measured,
}

impl HostModel {
    pub fn parse(s: &str) -> Result<HostModel, ProfileError> {
        match s {
            "cpp" | "c++" => Ok(HostModel::Cpp),
            "python" | "py" => Ok(HostModel::Python),
            "measured" => Ok(HostModel::Measured),
            _ => Err(ProfileError::UnknownHostModel(s.to_string())),
        }
    }
}

impl fmt::Display for HostModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostModel::Cpp => "modeled: tt-metal C++ dispatch per op",
            HostModel::Python => "modeled: TT-NN Python dispatch per op",
            HostModel::Measured => "measured on this host",
        })
    }
}

/// One op on one chip's queue.
#[derive(Clone, Debug)]
pub struct OpSpan {
    pub chip: u32,
    pub cq: u8,
    pub program: Arc<ProgramInfo>,
    /// 1-based ordinal of the op on its chip: the same op of a mesh has the same count on
    /// every chip (chips of a mesh run the same op sequence).
    pub call_count: u64,
    /// The host's dispatch of the op (for a replayed op: of its execute_trace).
    pub host_start_ns: f64,
    pub host_end_ns: f64,
    /// The dispatcher starts writing the launch.
    pub dispatch_ns: f64,
    /// Firmware start (the kernel starts `fw - kernel` later is not modeled separately).
    pub start_ns: f64,
    pub end_ns: f64,
    pub kernel_ns: f64,
    /// End of the previous op on the same chip and queue to this op's start (0 for the first).
    pub op_to_op_ns: f64,
    pub trace_id: Option<u32>,
    pub cache_hit: bool,
    pub cores: u32,
}

/// Something other than an op on a device queue (tensor writes and reads, replay starts).
#[derive(Clone, Debug)]
pub struct DeviceSpan {
    pub chip: u32,
    pub cq: u8,
    pub name: &'static str,
    pub start_ns: f64,
    pub end_ns: f64,
    pub bytes: u64,
}

/// The host's side: one span per dispatch or wait.
#[derive(Clone, Debug)]
pub struct HostSpan {
    pub name: String,
    pub chip: u32,
    pub start_ns: f64,
    pub end_ns: f64,
}

/// The modeled timeline of a whole recording.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub ops: Vec<OpSpan>,
    pub device: Vec<DeviceSpan>,
    pub host: Vec<HostSpan>,
    /// Every (chip, cq) that ran something, sorted.
    pub queues: Vec<(u32, u8)>,
    pub host_model: Option<HostModel>,
}

/// One queued command with its host enqueue time.
struct Item {
    enqueued_ns: f64,
    host_start_ns: f64,
    cmd: Command,
    trace: Option<u32>,
}

/// A queue's modeled state.
#[derive(Default)]
struct Queue {
    pending: VecDeque<Item>,
    free_ns: f64,
    last_op_end: Option<f64>,
    events: HashMap<u64, f64>,
    /// Collectives started, per participant set (the k-th collective of a set joins the
    /// k-th on every other chip of it).
    collectives: HashMap<u64, u64>,
    replays: HashMap<u32, u64>,
    ops: u64,
}

/// Arrivals at a join (a collective or a lockstep replay): chip and cq -> ready time.
type Join = HashMap<(u32, u8), f64>;

struct Sim<'a> {
    model: &'a DeviceModel,
    queues: HashMap<(u32, u8), Queue>,
    chips: Vec<u32>,
    joins: HashMap<(u8, u64, u64), Join>,
    out: Timeline,
}

impl<'a> Sim<'a> {
    fn arrival(&self, item: &Item) -> f64 {
        if item.trace.is_some() {
            item.enqueued_ns
        } else {
            item.enqueued_ns + self.model.cal.command_latency_ns
        }
    }

    /// Runs every queue as far as it can; with `force`, a join still missing parties starts
    /// with those that arrived (a recording that ends mid-collective).
    fn run(&mut self, force: bool) {
        loop {
            let mut progress = false;
            let keys: Vec<(u32, u8)> = self.queues.keys().copied().collect();
            for k in keys {
                while self.step(k) {
                    progress = true;
                }
            }
            if progress {
                continue;
            }
            if !force || !self.force_one_join() {
                break;
            }
        }
    }

    /// Join key and parties of a queue head that needs one.
    fn join_of(&self, k: (u32, u8), item: &Item) -> Option<((u8, u64, u64), Vec<u32>)> {
        let q = &self.queues[&k];
        match &item.cmd {
            Command::Program { program, .. } => program.cost.collective.map(|c| {
                let n = q.collectives.get(&c.participants).copied().unwrap_or(0);
                let parties = (0..64).filter(|b| c.participants >> b & 1 == 1).collect();
                ((0, c.participants, n), parties)
            }),
            Command::Replay {
                trace_id,
                lockstep: true,
                ..
            } => {
                let n = q.replays.get(trace_id).copied().unwrap_or(0);
                Some(((1, *trace_id as u64, n), self.chips.clone()))
            }
            _ => None,
        }
    }

    /// Processes the head of queue `k` if it can start; false if empty or blocked.
    fn step(&mut self, k: (u32, u8)) -> bool {
        let Some(item) = self.queues.get(&k).and_then(|q| q.pending.front()) else {
            return false;
        };
        let ready = self.queues[&k].free_ns.max(self.arrival(item));
        if let Command::WaitEvent { cq, event } = item.cmd {
            let other = (k.0, cq);
            let Some(&t) = self.queues.get(&other).and_then(|q| q.events.get(&event)) else {
                return false;
            };
            let q = self.queues.get_mut(&k).expect("queue");
            q.pending.pop_front();
            q.free_ns = ready.max(t);
            return true;
        }
        if let Some((key, parties)) = self.join_of(k, item) {
            let join = self.joins.entry(key).or_default();
            join.insert(k, ready);
            let complete = parties
                .iter()
                .all(|c| join.keys().any(|(chip, _)| chip == c));
            if complete {
                self.start_join(key);
                return true;
            }
            return false;
        }
        let item = self
            .queues
            .get_mut(&k)
            .and_then(|q| q.pending.pop_front())
            .expect("head");
        self.execute(k, item, ready);
        true
    }

    fn force_one_join(&mut self) -> bool {
        let Some(&key) = self.joins.keys().min() else {
            return false;
        };
        self.start_join(key);
        true
    }

    /// Starts every party of a join at the latest arrival.
    fn start_join(&mut self, key: (u8, u64, u64)) {
        let Some(join) = self.joins.remove(&key) else {
            return;
        };
        let start = join.values().copied().fold(0.0, f64::max);
        for (&k, _) in join.iter() {
            let Some(q) = self.queues.get_mut(&k) else {
                continue;
            };
            let Some(item) = q.pending.pop_front() else {
                continue;
            };
            match &item.cmd {
                Command::Program { program, .. } => {
                    if let Some(c) = program.cost.collective {
                        *q.collectives.entry(c.participants).or_default() += 1;
                    }
                }
                Command::Replay { trace_id, .. } => *q.replays.entry(*trace_id).or_default() += 1,
                _ => {}
            }
            self.execute(k, item, start);
        }
    }

    /// Runs one command of queue `k` from `ready`.
    fn execute(&mut self, k: (u32, u8), item: Item, ready: f64) {
        let model = self.model;
        let q = self.queues.get_mut(&k).expect("queue");
        match item.cmd {
            Command::Program {
                program,
                cores,
                launch_bytes,
                first,
            } => {
                let dispatch = model.launch_dispatch_ns(launch_bytes as f64, item.trace.is_some());
                let t = model.kernel_time(&program.cost, cores);
                let start = ready + dispatch;
                let end = start + t.fw_ns;
                q.ops += 1;
                let op_to_op = q.last_op_end.map_or(0.0, |e| (start - e).max(0.0));
                q.last_op_end = Some(end);
                q.free_ns = end;
                self.out.ops.push(OpSpan {
                    chip: k.0,
                    cq: k.1,
                    program,
                    call_count: q.ops,
                    host_start_ns: item.host_start_ns,
                    host_end_ns: item.enqueued_ns,
                    dispatch_ns: ready,
                    start_ns: start,
                    end_ns: end,
                    kernel_ns: t.kernel_ns,
                    op_to_op_ns: op_to_op,
                    trace_id: item.trace,
                    cache_hit: !first,
                    cores,
                });
            }
            Command::Write { bytes } | Command::Read { bytes } => {
                let name = if matches!(item.cmd, Command::Write { .. }) {
                    "write"
                } else {
                    "read"
                };
                let end = ready + model.pcie_ns(bytes as f64);
                q.free_ns = end;
                self.out.device.push(DeviceSpan {
                    chip: k.0,
                    cq: k.1,
                    name,
                    start_ns: ready,
                    end_ns: end,
                    bytes,
                });
            }
            Command::RecordEvent { event } => {
                q.free_ns = ready;
                q.events.insert(event, ready);
            }
            Command::WaitEvent { .. } => q.free_ns = ready,
            Command::Replay {
                trace_id, commands, ..
            } => {
                let start = ready + model.exec_buf_ns();
                q.free_ns = start;
                self.out.device.push(DeviceSpan {
                    chip: k.0,
                    cq: k.1,
                    name: "EXEC_BUF",
                    start_ns: ready,
                    end_ns: start,
                    bytes: 0,
                });
                // The trace's commands run next, ahead of anything queued after the replay.
                // They have no host dispatch of their own: each takes its replay's host start
                // plus its position in ns, so an ops report ordered by host start (as
                // tt-perf-report orders it) keeps the replay's order.
                for (i, cmd) in commands.iter().enumerate().rev() {
                    q.pending.push_front(Item {
                        enqueued_ns: start,
                        host_start_ns: item.host_start_ns + i as f64,
                        cmd: cmd.clone(),
                        trace: Some(trace_id),
                    });
                }
            }
        }
    }

    /// When queue `k` has run everything enqueued so far.
    fn done(&mut self, k: (u32, u8)) -> f64 {
        self.run(false);
        if self.queues.get(&k).is_some_and(|q| !q.pending.is_empty()) {
            self.run(true);
        }
        self.queues.get(&k).map_or(0.0, |q| q.free_ns)
    }
}

/// Host cost of one submission in a modeled host mode; `same_op` when it repeats the previous
/// submission's op on another chip of a mesh.
fn host_cost(model: &DeviceModel, mode: HostModel, commands: &[Command], same_op: bool) -> f64 {
    let cal = &model.cal;
    if same_op {
        let bytes: u64 = commands
            .iter()
            .map(|c| match c {
                Command::Write { bytes } | Command::Read { bytes } => *bytes,
                _ => 0,
            })
            .sum();
        return cal.host_op_extra_chip_ns + model.pcie_ns(bytes as f64);
    }
    let op = match mode {
        HostModel::Python => cal.host_op_python_ns,
        _ => cal.host_op_cpp_ns,
    };
    commands
        .iter()
        .map(|c| match c {
            Command::Program { .. } => op,
            Command::Write { bytes } | Command::Read { bytes } => {
                cal.host_io_fixed_ns + model.pcie_ns(*bytes as f64)
            }
            Command::Replay { .. } => cal.host_execute_trace_ns,
            Command::RecordEvent { .. } | Command::WaitEvent { .. } => cal.host_op_extra_chip_ns,
        })
        .sum()
}

/// What kind of host call a submission is, to tell a mesh op's per-chip repeats apart from
/// the next op.
fn op_key(commands: &[Command]) -> String {
    match commands.first() {
        Some(Command::Program { program, .. }) => format!("op:{}", program.name),
        Some(Command::Replay { trace_id, .. }) => format!("replay:{trace_id}"),
        Some(Command::Write { .. }) => "write".into(),
        Some(Command::Read { .. }) => "read".into(),
        _ => "event".into(),
    }
}

fn span_name(commands: &[Command]) -> String {
    match commands.first() {
        Some(Command::Program { program, .. }) => program.name.clone(),
        Some(Command::Replay { trace_id, .. }) => format!("execute_trace {trace_id}"),
        Some(Command::Write { .. }) => "copy_host_to_device".into(),
        Some(Command::Read { .. }) => "read".into(),
        _ => "event".into(),
    }
}

/// Models the timeline of `events` (a [`crate::Recorder`]'s recording).
pub fn build(events: &[HostEvent], model: &DeviceModel, mode: HostModel) -> Timeline {
    let mut chips: Vec<u32> = events
        .iter()
        .map(|e| match e {
            HostEvent::Submit { chip, .. } | HostEvent::Wait { chip, .. } => *chip,
        })
        .collect();
    chips.sort_unstable();
    chips.dedup();
    let mut sim = Sim {
        model,
        queues: HashMap::new(),
        chips,
        joins: HashMap::new(),
        out: Timeline {
            host_model: Some(mode),
            ..Default::default()
        },
    };
    let mut host_ns = 0.0;
    // The current mesh op: its kind and the chips it has reached.
    let mut group: (String, Vec<u32>) = (String::new(), Vec::new());
    for e in events {
        match e {
            HostEvent::Submit {
                host_ns: measured,
                chip,
                cq,
                captured,
                commands,
            } => {
                let key = op_key(commands);
                let same_op = key == group.0 && !group.1.contains(chip);
                if same_op {
                    group.1.push(*chip);
                } else {
                    group = (key, vec![*chip]);
                }
                let start = if mode == HostModel::Measured {
                    *measured
                } else {
                    host_ns
                };
                let end = if mode == HostModel::Measured {
                    *measured
                } else {
                    host_ns + host_cost(model, mode, commands, same_op)
                };
                host_ns = end;
                sim.out.host.push(HostSpan {
                    name: if *captured {
                        format!("{} (captured)", span_name(commands))
                    } else {
                        span_name(commands)
                    },
                    chip: *chip,
                    start_ns: start,
                    end_ns: end,
                });
                if *captured {
                    continue;
                }
                let q = sim.queues.entry((*chip, *cq)).or_default();
                for cmd in commands {
                    q.pending.push_back(Item {
                        enqueued_ns: end,
                        host_start_ns: start,
                        cmd: cmd.clone(),
                        trace: None,
                    });
                }
            }
            HostEvent::Wait {
                host_ns: measured,
                chip,
                cq,
            } => {
                group = (String::new(), Vec::new());
                if mode == HostModel::Measured {
                    host_ns = *measured;
                    continue;
                }
                let done = sim.done((*chip, *cq));
                if done > host_ns {
                    sim.out.host.push(HostSpan {
                        name: "wait for device".into(),
                        chip: *chip,
                        start_ns: host_ns,
                        end_ns: done,
                    });
                    host_ns = done;
                }
            }
        }
    }
    sim.run(true);
    let mut out = sim.out;
    out.queues = sim.queues.keys().copied().collect();
    out.queues.sort_unstable();
    out.ops.sort_by_key(|o| (o.chip, o.cq, o.call_count));
    out
}
