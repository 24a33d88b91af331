//! The recorder: a [`CommandObserver`] set on every chip of a run. It keeps, per submission,
//! the host's timestamp and the commands in it (programs with their declared work, tensor
//! writes and reads, events, trace replays with the trace's own commands read back from the
//! chip's DRAM). Nothing is modeled here: the timeline is computed afterwards.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use ttmesh_chip::command::{decode, Record};
use ttmesh_chip::device::CommandObserver;
use ttmesh_chip::program::KernelCost;
use ttmesh_chip::{Chip, CqId, TensorSpec, TraceId};

/// One program as the recorder keeps it (looked up once per chip and program id).
#[derive(Debug)]
pub struct ProgramInfo {
    /// tt-metal-style op name ("Matmul", "AllGather", ...).
    pub name: String,
    pub cost: KernelCost,
    /// Each operand's tensor and whether the program writes it (inputs first, then outputs).
    pub operands: Vec<(TensorSpec, bool)>,
}

/// One device command.
#[derive(Clone, Debug)]
pub enum Command {
    /// A program launch: `launch_bytes` of records (launch, runtime args, go signal) on `cores`.
    Program {
        program: Arc<ProgramInfo>,
        cores: u32,
        launch_bytes: u32,
        /// First launch of this program on this chip (a program cache miss compiled it).
        first: bool,
    },
    Write {
        bytes: u64,
    },
    Read {
        bytes: u64,
    },
    RecordEvent {
        event: u64,
    },
    WaitEvent {
        cq: u8,
        event: u64,
    },
    /// A trace replay; `lockstep` when a mesh released it behind a start barrier with the
    /// other chips' replays.
    Replay {
        trace_id: u32,
        commands: Arc<Vec<Command>>,
        lockstep: bool,
    },
}

/// What the host did, in its order.
#[derive(Clone, Debug)]
pub enum HostEvent {
    Submit {
        /// Nanoseconds since the recorder started, measured.
        host_ns: f64,
        chip: u32,
        cq: u8,
        /// Into a trace capture: the commands do not run.
        captured: bool,
        commands: Vec<Command>,
    },
    /// The host blocked until `cq` of `chip` had run everything enqueued.
    Wait { host_ns: f64, chip: u32, cq: u8 },
}

#[derive(Default)]
struct State {
    events: Vec<HostEvent>,
    programs: HashMap<(u32, u32), Arc<ProgramInfo>>,
    traces: HashMap<(u32, u32, u64), Arc<Vec<Command>>>,
}

/// Records every chip's submissions; set it on chips with [`Recorder::attach`].
pub struct Recorder {
    start: Instant,
    state: Mutex<State>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            start: Instant::now(),
            state: Mutex::new(State::default()),
        }
    }
}

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        Arc::new(Recorder::default())
    }

    /// Sets this recorder as the observer of every chip in `chips`.
    pub fn attach(self: &Arc<Self>, chips: &[Arc<Chip>]) {
        for c in chips {
            c.set_command_observer(Some(self.clone()));
        }
    }

    /// Removes every chip's observer.
    pub fn detach(chips: &[Arc<Chip>]) {
        for c in chips {
            c.set_command_observer(None);
        }
    }

    /// Everything recorded so far, in the host's order.
    pub fn events(&self) -> Vec<HostEvent> {
        self.state.lock().events.clone()
    }

    fn now(&self) -> f64 {
        self.start.elapsed().as_nanos() as f64
    }

    fn program(state: &mut State, chip: &Chip, id: u32) -> (Option<Arc<ProgramInfo>>, bool) {
        if let Some(p) = state.programs.get(&(chip.id(), id)) {
            return (Some(p.clone()), false);
        }
        let Some(p) = chip.program_cache().table().get(id as usize).cloned() else {
            return (None, false);
        };
        let info = Arc::new(ProgramInfo {
            name: p.kernel.name().to_string(),
            cost: p.kernel.cost(),
            operands: p
                .operands
                .iter()
                .map(|o| {
                    (
                        o.spec.clone(),
                        o.access == ttmesh_chip::program::Access::Write,
                    )
                })
                .collect(),
        });
        state.programs.insert((chip.id(), id), info.clone());
        (Some(info), true)
    }

    /// The commands of `bytes`; a replay's trace is read back from the chip once per trace.
    fn commands(state: &mut State, chip: &Chip, bytes: &[u8], in_trace: bool) -> Vec<Command> {
        let mut out = Vec::new();
        let mut at = 0;
        // A replay behind a host callback in the same submission is a mesh's lockstep replay
        // (the callback is its start barrier).
        let mut after_callback = false;
        // (program, cores, bytes so far) of a launch whose go signal has not come yet.
        let mut launch: Option<(Option<Arc<ProgramInfo>>, bool, u32, usize)> = None;
        while at < bytes.len() {
            let Ok((rec, next)) = decode(bytes, at) else {
                break;
            };
            let size = next - at;
            at = next;
            after_callback |= matches!(rec, Record::HostCallback { .. });
            match rec {
                Record::LaunchProgram {
                    program_id, cores, ..
                } => {
                    let (p, first) = Self::program(state, chip, program_id);
                    launch = Some((p, first && !in_trace, cores, size));
                }
                Record::WritePacked { .. } => {
                    if let Some(l) = launch.as_mut() {
                        l.3 += size;
                    }
                }
                Record::GoSignal { .. } => {
                    if let Some((Some(program), first, cores, n)) = launch.take() {
                        out.push(Command::Program {
                            program,
                            cores,
                            launch_bytes: (n + size) as u32,
                            first,
                        });
                    }
                }
                Record::WriteLinear { data, .. } | Record::WritePaged { data, .. } => {
                    out.push(Command::Write {
                        bytes: data.len() as u64,
                    })
                }
                Record::ReadPaged {
                    page_size,
                    locations,
                    ..
                } => out.push(Command::Read {
                    bytes: page_size as u64 * locations.len() as u64,
                }),
                Record::RecordEvent { event } => out.push(Command::RecordEvent { event }),
                Record::WaitEvent { cq, event } => out.push(Command::WaitEvent {
                    cq: cq as u8,
                    event,
                }),
                Record::ExecBuf {
                    trace_id, address, ..
                } => {
                    let key = (chip.id(), trace_id, address as u64);
                    let commands = match state.traces.get(&key) {
                        Some(c) => c.clone(),
                        None => {
                            let bytes = chip
                                .trace_info(TraceId(trace_id))
                                .and_then(|info| chip.read_trace_commands(&info).ok())
                                .unwrap_or_default();
                            let c = Arc::new(Self::commands(state, chip, &bytes, true));
                            state.traces.insert(key, c.clone());
                            c
                        }
                    };
                    out.push(Command::Replay {
                        trace_id,
                        commands,
                        lockstep: after_callback,
                    });
                }
                _ => {}
            }
        }
        out
    }
}

impl CommandObserver for Recorder {
    fn submitted(&self, chip: &Chip, cq: CqId, bytes: &[u8], captured: bool) {
        let host_ns = self.now();
        let mut state = self.state.lock();
        let commands = Self::commands(&mut state, chip, bytes, false);
        if commands.is_empty() {
            return;
        }
        state.events.push(HostEvent::Submit {
            host_ns,
            chip: chip.id(),
            cq: cq.0,
            captured,
            commands,
        });
    }

    fn host_waits(&self, chip: u32, cq: CqId) {
        let host_ns = self.now();
        self.state.lock().events.push(HostEvent::Wait {
            host_ns,
            chip,
            cq: cq.0,
        });
    }
}
