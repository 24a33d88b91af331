//! The recorder: a [`ChipObserver`] attached to every chip of a run. It keeps, per submission,
//! the host's timestamp and the commands in it (programs with their declared work, tensor
//! writes and reads, events, trace replays with the trace's own commands read back from the
//! chip's DRAM). Nothing is modeled here: the timeline is computed afterwards.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use ttmesh_chip::command::Record;
use ttmesh_chip::observe::{ChipObserver, Commands, Interests, Submission};
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

/// One command as recorded on the dispatch path: small and copyable; programs and traces are
/// indexes, resolved when the recording is read ([`Recorder::events`]).
#[derive(Clone, Copy, Debug)]
enum Raw {
    Program {
        chip: u32,
        id: u32,
        cores: u32,
        launch_bytes: u32,
        first: bool,
    },
    Write(u64),
    Read(u64),
    RecordEvent(u64),
    WaitEvent(u8, u64),
    /// Index into `State::traces`.
    Replay(u32, bool),
}

#[derive(Clone, Copy, Debug)]
enum RawEvent {
    /// Commands `start..start + len` of `State::raw`.
    Submit {
        host_ns: f64,
        chip: u32,
        cq: u8,
        captured: bool,
        start: u32,
        len: u32,
    },
    Wait {
        host_ns: f64,
        chip: u32,
        cq: u8,
    },
}

/// A trace seen replayed: (chip, trace id, address) and its commands, read once from DRAM.
type SeenTrace = ((u32, u32, u64), Arc<Vec<Command>>);

#[derive(Default)]
struct State {
    events: Vec<RawEvent>,
    raw: Vec<Raw>,
    /// Programs by chip id, then program id.
    programs: Vec<Vec<Option<Arc<ProgramInfo>>>>,
    traces: Vec<SeenTrace>,
}

impl State {
    fn program(&self, chip: u32, id: u32) -> Option<&Arc<ProgramInfo>> {
        self.programs.get(chip as usize)?.get(id as usize)?.as_ref()
    }

    /// Looks program `id` of `chip` up the first time it is seen; true if it was new.
    fn learn_program(&mut self, chip: &Chip, id: u32) -> bool {
        if self.program(chip.id(), id).is_some() {
            return false;
        }
        let Some(p) = chip.program_cache().table().get(id as usize).cloned() else {
            return false;
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
        let c = chip.id() as usize;
        if self.programs.len() <= c {
            self.programs.resize(c + 1, Vec::new());
        }
        let table = &mut self.programs[c];
        if table.len() <= id as usize {
            table.resize(id as usize + 1, None);
        }
        table[id as usize] = Some(info);
        true
    }

    fn resolve(&self, raw: &[Raw]) -> Vec<Command> {
        raw.iter()
            .filter_map(|r| {
                Some(match *r {
                    Raw::Program {
                        chip,
                        id,
                        cores,
                        launch_bytes,
                        first,
                    } => Command::Program {
                        program: self.program(chip, id)?.clone(),
                        cores,
                        launch_bytes,
                        first,
                    },
                    Raw::Write(bytes) => Command::Write { bytes },
                    Raw::Read(bytes) => Command::Read { bytes },
                    Raw::RecordEvent(event) => Command::RecordEvent { event },
                    Raw::WaitEvent(cq, event) => Command::WaitEvent { cq, event },
                    Raw::Replay(i, lockstep) => {
                        let ((_, trace_id, _), commands) = self.traces.get(i as usize)?;
                        Command::Replay {
                            trace_id: *trace_id,
                            commands: commands.clone(),
                            lockstep,
                        }
                    }
                })
            })
            .collect()
    }

    /// Appends `commands` (decoded by the chip) to `raw`; a replayed trace is read back from
    /// the chip the first time it is seen.
    fn scan(&mut self, chip: &Chip, commands: Commands<'_>, in_trace: bool) {
        // A replay behind a host callback in the same submission is a mesh's lockstep replay
        // (the callback is its start barrier).
        let mut after_callback = false;
        // (program id, first seen, cores, bytes so far) of a launch awaiting its go signal.
        let mut launch: Option<(u32, bool, u32, usize)> = None;
        for (rec, size) in commands {
            // Records that change nothing in the model (stalls, go-signal resets, frees, a
            // host callback but for the replay it marks) fall through.
            after_callback |= matches!(rec, Record::HostCallback { .. });
            match rec {
                Record::LaunchProgram {
                    program_id, cores, ..
                } => {
                    let first = self.learn_program(chip, program_id);
                    launch = Some((program_id, first && !in_trace, cores, size));
                }
                Record::WritePacked { .. } => {
                    if let Some(l) = launch.as_mut() {
                        l.3 += size;
                    }
                }
                Record::GoSignal { .. } => {
                    if let Some((id, first, cores, n)) = launch.take() {
                        self.raw.push(Raw::Program {
                            chip: chip.id(),
                            id,
                            cores,
                            launch_bytes: (n + size) as u32,
                            first,
                        });
                    }
                }
                Record::WriteLinear { data, .. } | Record::WritePaged { data, .. } => {
                    self.raw.push(Raw::Write(data.len() as u64))
                }
                Record::ReadPaged {
                    page_size,
                    locations,
                    ..
                } => self
                    .raw
                    .push(Raw::Read(page_size as u64 * locations.len() as u64)),
                Record::RecordEvent { event } => self.raw.push(Raw::RecordEvent(event)),
                Record::WaitEvent { cq, event } => self.raw.push(Raw::WaitEvent(cq as u8, event)),
                Record::ExecBuf {
                    trace_id, address, ..
                } => {
                    let key = (chip.id(), trace_id, address as u64);
                    let i = match self.traces.iter().position(|(k, _)| *k == key) {
                        Some(i) => i,
                        None => {
                            let bytes = chip
                                .trace_info(TraceId(trace_id))
                                .and_then(|info| chip.read_trace_commands(&info).ok())
                                .unwrap_or_default();
                            // The trace's records, resolved at once into their own list.
                            let mark = self.raw.len();
                            self.scan(chip, Commands::new(&bytes), true);
                            let commands = self.resolve(&self.raw[mark..]);
                            self.raw.truncate(mark);
                            self.traces.push((key, Arc::new(commands)));
                            self.traces.len() - 1
                        }
                    };
                    self.raw.push(Raw::Replay(i as u32, after_callback));
                }
                _ => {}
            }
        }
    }
}

/// Records every chip's submissions; attach it to chips with [`Recorder::attach`]. On the
/// dispatch path it only timestamps, reads the decoded records and appends small copies;
/// programs and traces are looked up once each.
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

    /// Attaches this recorder to every chip in `chips`.
    pub fn attach(self: &Arc<Self>, chips: &[Arc<Chip>]) {
        let me: Arc<dyn ChipObserver> = self.clone();
        for c in chips {
            c.add_observer(me.clone());
        }
    }

    /// Detaches this recorder from every chip in `chips`.
    pub fn detach(self: &Arc<Self>, chips: &[Arc<Chip>]) {
        let me: Arc<dyn ChipObserver> = self.clone();
        for c in chips {
            c.remove_observer(&me);
        }
    }

    /// Everything recorded so far, in the host's order.
    pub fn events(&self) -> Vec<HostEvent> {
        let state = self.state.lock();
        state
            .events
            .iter()
            .filter_map(|e| match *e {
                RawEvent::Submit {
                    host_ns,
                    chip,
                    cq,
                    captured,
                    start,
                    len,
                } => {
                    let raw = &state.raw[start as usize..(start + len) as usize];
                    Some(HostEvent::Submit {
                        host_ns,
                        chip,
                        cq,
                        captured,
                        commands: state.resolve(raw),
                    })
                    .filter(
                        |e| !matches!(e, HostEvent::Submit { commands, .. } if commands.is_empty()),
                    )
                }
                RawEvent::Wait { host_ns, chip, cq } => Some(HostEvent::Wait { host_ns, chip, cq }),
            })
            .collect()
    }

    fn now(&self) -> f64 {
        self.start.elapsed().as_nanos() as f64
    }
}

impl ChipObserver for Recorder {
    fn interests(&self) -> Interests {
        Interests::SUBMISSIONS.and(Interests::HOST_WAITS)
    }
    fn submitted(&self, s: &Submission<'_>) {
        let (chip, cq, captured) = (s.chip, s.cq, s.captured);
        let host_ns = self.now();
        let mut state = self.state.lock();
        let start = state.raw.len();
        state.scan(chip, s.commands(), false);
        let len = state.raw.len() - start;
        if len == 0 {
            return;
        }
        state.events.push(RawEvent::Submit {
            host_ns,
            chip: chip.id(),
            cq: cq.0,
            captured,
            start: start as u32,
            len: len as u32,
        });
    }

    fn host_waits(&self, chip: u32, cq: CqId) {
        let host_ns = self.now();
        self.state.lock().events.push(RawEvent::Wait {
            host_ns,
            chip,
            cq: cq.0,
        });
    }
}
