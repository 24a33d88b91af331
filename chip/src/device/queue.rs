//! Command queues: a channel of encoded records from the host to one dispatcher thread per
//! queue, which decodes and executes them. The dispatcher blocks on the channel when idle (it
//! parks; nothing spins), so two host cores carry many chips.
//!
//! Waking a parked thread costs a context switch or two, and a collective over n chips would
//! pay n of them at launch and n more when the line is done. So a kernel may hand its work to
//! another thread and return (`Launched::Deferred`; the queue runs nothing after it until the
//! work is done), and a launch whose kernel only does that (`Kernel::hands_off`) runs on the
//! host's thread when the queue is idle. The dispatcher's state is behind a lock either thread
//! takes to run records, so a queue's order holds whoever runs them.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::ring::{HostRing, PendingKernel};
use super::trace::ReplayRefusal;
use super::validate::{
    allowed_in_trace, check_launch_shape, check_operands, check_pages, panic_message, Regions,
};
use super::ChipShared;
use crate::allocator::MemSpace;
use crate::command::{decode, packed_arg, Opcode, PageLocations, Record, HEADER_BYTES};
use crate::error::{ChipError, RecordFault, RecordSite, Result};
use crate::program::{KernelContext, Launched, Program};

/// Index of a command queue on a chip (0 or 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqId(pub u8);

/// Device-side state of a queue that the host and other queues observe.
pub(crate) struct CqState {
    /// Highest event id this queue's dispatcher has reached.
    completed: AtomicU64,
    lock: Mutex<()>,
    cv: Condvar,
    /// First error since the host last asked (a failed kernel, a timed-out wait).
    error: Mutex<Option<ChipError>>,
}

impl CqState {
    pub(crate) fn new() -> CqState {
        CqState {
            completed: AtomicU64::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            error: Mutex::new(None),
        }
    }

    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    fn complete(&self, event: u64) {
        let _g = self.lock.lock();
        if event > self.completed.load(Ordering::Relaxed) {
            self.completed.store(event, Ordering::Release);
        }
        self.cv.notify_all();
    }

    /// Blocks until `event` is reached or the deadline passes; true if reached.
    pub(crate) fn wait_for(&self, event: u64, deadline: Instant) -> bool {
        let mut g = self.lock.lock();
        while self.completed.load(Ordering::Acquire) < event {
            if self.cv.wait_until(&mut g, deadline).timed_out() {
                return self.completed.load(Ordering::Acquire) >= event;
            }
        }
        true
    }

    pub(crate) fn set_error(&self, e: ChipError) {
        let mut slot = self.error.lock();
        if slot.is_none() {
            *slot = Some(e);
        }
    }

    pub(crate) fn take_error(&self) -> Option<ChipError> {
        self.error.lock().take()
    }
}

/// The host's end of one queue.
pub(crate) struct QueueHandle {
    pub(crate) ring: Arc<HostRing>,
    /// The dispatcher's state: its thread runs records under this lock, and so does the host
    /// when it runs them itself (`HostRing::push_or_run`).
    pub(crate) dispatcher: Arc<Mutex<Dispatcher>>,
    /// Next event id to hand out on this queue (ids start at 1; 0 means "nothing yet").
    pub(crate) next_event: AtomicU64,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

impl QueueHandle {
    pub(crate) fn allocate_event_id(&self) -> u64 {
        self.next_event.fetch_add(1, Ordering::Relaxed)
    }
}

pub(crate) fn spawn_dispatcher(shared: Arc<ChipShared>, cq: CqId) -> Result<QueueHandle> {
    let ring = Arc::new(HostRing::new());
    let rx = ring.clone();
    let chip = shared.id;
    let name = format!("ttmesh-chip{chip}-cq{}", cq.0);
    let dispatcher = Arc::new(Mutex::new(Dispatcher::new(shared, cq, ring.clone())));
    let state = dispatcher.clone();
    let thread = std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            ttmesh_placement::place_current_thread(ttmesh_placement::ThreadRole::Dispatcher, chip);
            Dispatcher::run(&state, &rx)
        })
        .map_err(|e| ChipError::Queue(format!("cannot start the dispatcher thread: {e}")))?;
    Ok(QueueHandle {
        ring,
        dispatcher,
        next_event: AtomicU64::new(1),
        thread: Some(thread),
    })
}

struct PendingLaunch {
    /// The program's id, present in the dispatcher's table (an id, not an `Arc`: a replay
    /// runs thousands of launches, and each clone and drop of an `Arc` is a locked
    /// instruction).
    program: Option<u32>,
    addresses: Vec<u32>,
}

impl PendingLaunch {
    fn reset(&mut self) {
        self.program = None;
        self.addresses.clear();
    }
}

/// Why a record failed: refused by a check (the caller names the record's site), or an error of
/// its own (a kernel's, a timed-out wait, a record inside a trace that already names its site).
enum Failure {
    Refused(RecordFault),
    Error(ChipError),
}

impl From<RecordFault> for Failure {
    fn from(f: RecordFault) -> Failure {
        Failure::Refused(f)
    }
}

impl From<ChipError> for Failure {
    fn from(e: ChipError) -> Failure {
        Failure::Error(e)
    }
}

pub(crate) struct Dispatcher {
    shared: Arc<ChipShared>,
    cq: CqId,
    /// Reused buffer for trace replays: a replay allocates nothing once warmed up.
    trace_scratch: Vec<u8>,
    /// Which trace `trace_scratch` holds: (id, address, pages, size, TRACE-region epoch,
    /// checked against the digest). The same key means no byte of the region changed since
    /// it was read (and checked), so the read and the check are skipped.
    scratch_key: Option<(u32, u32, u32, u64, u64, bool)>,
    programs: Vec<Arc<Program>>,
    launch: PendingLaunch,
    /// The id of the program whose kernel runs now: named if it panics.
    running: Option<u32>,
    /// Buffer types' address ranges, what operand addresses are checked against.
    regions: Regions,
    /// Discards waiting to be done together (one round of locks for a run of frees).
    discards: Vec<(MemSpace, u64, u64)>,
    ring: Arc<HostRing>,
    /// A kernel of this queue deferred its work (the ring holds it until it is settled).
    deferred: bool,
    /// Launches run and their kernels' nanoseconds, not yet added to the chip's counters:
    /// added before anything the host may wait on (an event, a callback, a read) and at the
    /// end of every submission and replay, so two locked adds per launch become two per
    /// batch.
    unrecorded: (u64, u64),
}

pub(super) enum Flow {
    Continue,
    Stop,
}

impl Dispatcher {
    fn new(shared: Arc<ChipShared>, cq: CqId, ring: Arc<HostRing>) -> Dispatcher {
        let regions = Regions::of(&shared.allocator.lock());
        Dispatcher {
            shared,
            cq,
            trace_scratch: Vec::new(),
            scratch_key: None,
            programs: Vec::new(),
            launch: PendingLaunch {
                program: None,
                addresses: Vec::with_capacity(16),
            },
            running: None,
            regions,
            discards: Vec::new(),
            ring,
            deferred: false,
            unrecorded: (0, 0),
        }
    }

    fn record_launch(&mut self, elapsed: std::time::Duration) {
        self.unrecorded.0 += 1;
        self.unrecorded.1 += elapsed.as_nanos() as u64;
    }

    /// Adds the launches counted here to the chip's dispatch statistics.
    fn flush_launches(&mut self, shared: &ChipShared) {
        let (launches, ns) = std::mem::take(&mut self.unrecorded);
        if launches > 0 {
            shared.record_launches(launches, ns);
        }
    }

    /// Waits for this queue's deferred kernel, if one is still unsettled; its error.
    fn settle(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.deferred) {
            return Ok(());
        }
        match self.ring.take_pending() {
            Some(p) => p.settle(&self.shared),
            None => Ok(()), // the host settled it (finish on an idle queue)
        }
    }

    pub(super) fn flush_discards(&mut self) {
        if !self.discards.is_empty() {
            self.shared.discard_free_ranges(&self.discards);
            self.discards.clear();
        }
    }

    fn state(&self) -> &CqState {
        &self.shared.cq_states[self.cq.0 as usize]
    }

    fn site(&self, trace: Option<u32>, offset: usize, opcode: Option<Opcode>) -> RecordSite {
        RecordSite {
            chip: self.shared.id,
            cq: self.cq.0,
            trace,
            offset,
            opcode,
        }
    }

    /// A record that does not decode, named by its site (its opcode when the header is whole).
    fn corrupt(&self, trace: Option<u32>, bytes: &[u8], offset: usize, e: ChipError) -> ChipError {
        let reason = match e {
            ChipError::Decode { offset: at, reason } if at != offset => {
                format!("{reason} (at byte {at})")
            }
            ChipError::Decode { reason, .. } => reason,
            other => other.to_string(),
        };
        let opcode = bytes.get(offset).copied().and_then(Opcode::from_u8);
        ChipError::BadRecord {
            site: self.site(trace, offset, opcode),
            fault: RecordFault::Corrupt { reason },
        }
    }

    fn run(dispatcher: &Mutex<Dispatcher>, ring: &HostRing) {
        let mut batch = VecDeque::new();
        loop {
            ring.pop_all(&mut batch);
            let mut d = dispatcher.lock();
            while let Some(bytes) = batch.pop_front() {
                let flow = d.run_bytes(&bytes);
                crate::command::spare::give_back(bytes);
                if let Flow::Stop = flow {
                    return;
                }
            }
            d.flush_discards();
        }
    }

    pub(super) fn run_bytes(&mut self, bytes: &[u8]) -> Flow {
        let shared = Arc::clone(&self.shared);
        let mut offset = 0;
        while offset < bytes.len() {
            match decode(bytes, offset) {
                Ok((rec, next)) => {
                    match self.execute_at(&shared, rec, None, offset) {
                        Ok(Flow::Continue) => {}
                        Ok(Flow::Stop) => {
                            self.flush_launches(&shared);
                            return Flow::Stop;
                        }
                        Err(e) => {
                            if let ChipError::BadRecord { .. } = e {
                                self.shared.refused(&e);
                            }
                            self.state().set_error(e);
                        }
                    }
                    offset = next;
                }
                Err(e) => {
                    let e = self.corrupt(None, bytes, offset, e);
                    self.shared.refused(&e);
                    self.state().set_error(e);
                    break;
                }
            }
        }
        self.flush_launches(&shared);
        Flow::Continue
    }

    /// Runs one record at `offset` of a submission or of trace `trace`. A refusal, or a panic
    /// anywhere in it (a bug), becomes an error naming the record; the dispatcher goes on.
    /// `shared` is this dispatcher's own `ChipShared`, passed in so that a record does not
    /// clone the `Arc` (a locked instruction each way, a third of a no-op launch's replay).
    fn execute_at(
        &mut self,
        shared: &ChipShared,
        rec: Record<'_>,
        trace: Option<u32>,
        offset: usize,
    ) -> Result<Flow> {
        let opcode = rec.opcode();
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            self.execute(shared, rec, trace, offset)
        }))
        .unwrap_or_else(|payload| {
            self.launch.reset();
            let kernel = self
                .running
                .take()
                .and_then(|id| self.programs.get(id as usize))
                .map_or_else(|| "dispatcher".to_string(), |p| p.kernel.name().to_string());
            Err(Failure::Refused(RecordFault::Panicked {
                kernel,
                message: panic_message(payload.as_ref()),
            }))
        });
        result.map_err(|f| match f {
            Failure::Refused(fault) => ChipError::BadRecord {
                site: self.site(trace, offset, Some(opcode)),
                fault,
            },
            Failure::Error(e) => e,
        })
    }

    /// Program `id`, from the table (refreshed once if the id is newer than it).
    fn program(&mut self, id: u32) -> Result<&Arc<Program>, RecordFault> {
        if self.programs.get(id as usize).is_none() {
            self.programs = self.shared.programs.table();
        }
        self.programs
            .get(id as usize)
            .ok_or(RecordFault::UnknownProgram {
                program: id,
                compiled: self.programs.len(),
            })
    }

    fn execute(
        &mut self,
        shared: &ChipShared,
        rec: Record<'_>,
        trace: Option<u32>,
        offset: usize,
    ) -> Result<Flow, Failure> {
        if trace.is_some() && !allowed_in_trace(&rec) {
            return Err(RecordFault::NotInTrace.into());
        }
        // Nothing runs before the work of a deferred kernel is done. Its failure is the
        // failure of a trace it ran in (which then stops, as it would have at the kernel);
        // outside a trace it is reported like any record's and this record runs.
        if let Err(e) = self.settle() {
            if trace.is_some() {
                return Err(e.into());
            }
            self.state().set_error(e);
        }
        if !matches!(rec, Record::Discard { .. }) {
            self.flush_discards();
        }
        let memory = &shared.memory;
        match rec {
            Record::WriteLinear {
                space,
                bank,
                addr,
                data,
            } => {
                let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
                check_pages(memory, space, len, std::iter::once((bank, addr)), false)?;
                memory.write(space, bank, addr as u64, data)?;
                memory.share_written(space, len, std::iter::once((bank, addr as u64)));
            }
            Record::WritePaged {
                space,
                page_size,
                locations,
                data,
            } => {
                // The decoder checked that `data` holds exactly one page per location.
                check_pages(memory, space, page_size, locations.iter(), false)?;
                for (i, (bank, addr)) in locations.iter().enumerate() {
                    let page = &data[i * page_size as usize..(i + 1) * page_size as usize];
                    memory.write(space, bank, addr as u64, page)?;
                }
                let pages = locations.iter().map(|(bank, addr)| (bank, addr as u64));
                memory.share_written(space, page_size, pages);
            }
            Record::LaunchProgram {
                program_id,
                cores,
                config,
            } => {
                self.launch.reset();
                let p = self.program(program_id)?;
                check_launch_shape(
                    p,
                    [
                        ("cores", cores as u64),
                        ("config bytes", config.len() as u64),
                    ],
                    [p.split.cores as u64, p.config_image.len() as u64],
                )?;
                self.launch.program = Some(program_id);
            }
            Record::WritePacked {
                program_id,
                args_per_core,
                args,
            } => {
                let p = self
                    .launch
                    .program
                    .filter(|&id| id == program_id)
                    .and_then(|id| self.programs.get(id as usize))
                    .ok_or(RecordFault::NoLaunch {
                        program: program_id,
                        what: "runtime args",
                    })?;
                let per_core = p.split.args_per_core as u64;
                check_launch_shape(
                    p,
                    [
                        ("runtime args per core", args_per_core as u64),
                        ("runtime-arg bytes", args.len() as u64),
                    ],
                    [per_core, per_core * 4 * p.split.cores as u64],
                )?;
                // Core 0's first args are the operand addresses: what the kernel needs; the go
                // signal checks them.
                self.launch.addresses.clear();
                let given = (0..p.operands.len()).map_while(|i| packed_arg(args, i));
                self.launch.addresses.extend(given);
            }
            Record::GoSignal { program_id } => {
                let p = self
                    .launch
                    .program
                    .take()
                    .filter(|&id| id == program_id)
                    .and_then(|id| self.programs.get(id as usize))
                    .ok_or(RecordFault::NoLaunch {
                        program: program_id,
                        what: "go signal",
                    })?;
                check_operands(p, &self.launch.addresses, &self.regions)?;
                let ctx = KernelContext {
                    chip: shared.id,
                    arch: &shared.config.arch,
                    memory,
                    timeout: shared.config.operation_timeout,
                };
                let started = Instant::now();
                self.running = Some(program_id);
                let launched = p.kernel.launch(&ctx, &self.launch.addresses);
                self.running = None;
                match launched {
                    Ok(Launched::Deferred(deferred)) => {
                        self.ring.set_pending(PendingKernel::new(deferred, started));
                        self.deferred = true;
                    }
                    Ok(Launched::Done) => self.record_launch(started.elapsed()),
                    Err(e) => {
                        let site = self.site(trace, offset, Some(Opcode::GoSignal));
                        let e = e.written_by(|| {
                            format!(
                                "kernel {} (program {program_id}, launched by {site})",
                                p.kernel.name()
                            )
                        });
                        self.record_launch(started.elapsed());
                        return Err(e.into());
                    }
                }
            }
            Record::Stall => {}
            Record::ResetGo => self.launch.reset(),
            Record::ReadPaged {
                handle,
                space,
                page_size,
                locations,
            } => {
                // The bytes wait for the host in the read's slot, refusals included.
                let data = self.read_pages(space, page_size, locations).map_err(|f| {
                    let at = self.site(trace, offset, Some(Opcode::ReadPaged));
                    match f {
                        Failure::Refused(fault) => ChipError::BadRecord { site: at, fault },
                        Failure::Error(e) => e,
                    }
                });
                self.flush_launches(shared);
                shared.complete_read(handle, data);
            }
            Record::RecordEvent { event } => {
                self.flush_launches(shared);
                self.state().complete(event)
            }
            Record::WaitEvent { cq, event } => {
                let other = shared.cq_states.get(cq as usize).ok_or_else(|| {
                    ChipError::Queue(format!(
                        "wait for an event of CQ {cq}, which chip {} does not have",
                        shared.id
                    ))
                })?;
                let timeout = shared.config.operation_timeout;
                if !other.wait_for(event, Instant::now() + timeout) {
                    return Err(ChipError::Timeout {
                        what: format!(
                            "chip {} CQ {} waits for event {} of CQ {} (reached {})",
                            shared.id,
                            self.cq.0,
                            event,
                            cq,
                            other.completed()
                        ),
                        seconds: timeout.as_secs_f64(),
                    }
                    .into());
                }
            }
            Record::ExecBuf {
                trace_id,
                address,
                log2_page_size,
                num_pages,
                size,
            } => {
                let page_size = 1u64 << log2_page_size;
                let region = shared.config.trace_region_size;
                if page_size * num_pages as u64 > region || size > region {
                    return Err(RecordFault::TraceTooLarge {
                        trace: trace_id,
                        pages: num_pages,
                        page_size,
                        size,
                        region,
                    }
                    .into());
                }
                self.replay(shared, trace_id, address, page_size, num_pages, size)?;
            }
            Record::ExecBufEnd => {}
            Record::HostCallback { id } => {
                self.flush_launches(shared);
                shared.run_callback(id)?
            }
            Record::Discard {
                space,
                address,
                size,
            } => self.discards.push((space, address, size)),
            Record::Terminate => return Ok(Flow::Stop),
        }
        Ok(Flow::Continue)
    }

    /// The pages of a ReadPaged record, checked against the memory they name before the host
    /// buffer they fill is allocated.
    fn read_pages(
        &self,
        space: MemSpace,
        page_size: u32,
        locations: PageLocations<'_>,
    ) -> Result<Vec<u8>, Failure> {
        let memory = &self.shared.memory;
        check_pages(memory, space, page_size, locations.iter(), true)?;
        let page = page_size as usize;
        let bytes = locations.len() * page;
        let mut out = Vec::new();
        out.try_reserve_exact(bytes)
            .map_err(|_| RecordFault::HostAllocation {
                bytes: bytes as u64,
            })?;
        out.resize(bytes, 0);
        for (i, (bank, addr)) in locations.iter().enumerate() {
            memory.read(space, bank, addr as u64, &mut out[i * page..(i + 1) * page])?;
        }
        Ok(out)
    }

    /// Reads a trace's bytes from DRAM (interleaved pages), checks them against the capture's
    /// digest (`ChipConfig::trace_digest`) and executes them.
    fn replay(
        &mut self,
        shared: &ChipShared,
        trace_id: u32,
        address: u32,
        page_size: u64,
        num_pages: u32,
        size: u64,
    ) -> Result<(), Failure> {
        let banks = shared.config.arch.num_dram_banks as u64;
        let total = page_size as usize * num_pages as usize;
        if (size as usize) > total {
            return Err(ChipError::Trace(format!(
                "trace {trace_id}: {size} B do not fit in {num_pages} pages"
            ))
            .into());
        }
        let started = Instant::now();
        let mut bytes = std::mem::take(&mut self.trace_scratch);
        let checked = shared.trace_digest.load(Ordering::Relaxed);
        // The epoch is read before the pages: a write racing with the read changes it, and
        // the next replay reads again. Bytes kept from an unchecked replay are read and
        // checked again once checks are on.
        let key = (
            trace_id,
            address,
            num_pages,
            size,
            shared.memory.watched_epoch(),
            checked,
        );
        if self.scratch_key != Some(key) {
            self.scratch_key = None;
            bytes.resize(total, 0);
            for p in 0..num_pages as u64 {
                let bank = (p % banks) as u32;
                let addr = address as u64 + (p / banks) * page_size;
                let dst = &mut bytes[(p * page_size) as usize..((p + 1) * page_size) as usize];
                if let Err(e) = shared.memory.read(MemSpace::Dram, bank, addr, dst) {
                    self.trace_scratch = bytes;
                    return Err(e.into());
                }
            }
            // Kept bytes were checked when read: every write that could change them since
            // would have changed the epoch.
            if checked {
                let place = (address, page_size, num_pages);
                let verdict =
                    shared
                        .traces
                        .lock()
                        .check_replay(trace_id, place, &bytes[..size as usize]);
                if let Err(refusal) = verdict {
                    self.trace_scratch = bytes;
                    return Err(match refusal {
                        ReplayRefusal::NotCaptured(fault) => Failure::Refused(fault),
                        ReplayRefusal::Damaged {
                            record,
                            opcode,
                            fault,
                        } => ChipError::BadRecord {
                            site: self.site(Some(trace_id), record, opcode),
                            fault,
                        }
                        .into(),
                    });
                }
            }
            self.scratch_key = Some(key);
        }
        let trace = &bytes[..size as usize];
        // A capture ends every trace with one end marker, so one anywhere else (or none last)
        // is damage. The last is checked before anything runs; an early one is refused where
        // it stands rather than silently skipping the rest (on a mesh, a collective the other
        // chips would wait for).
        let end = trace.len().saturating_sub(HEADER_BYTES);
        let mut result = match decode(trace, end) {
            Ok((Record::ExecBufEnd, next)) if next == trace.len() => Ok(()),
            _ => Err(ChipError::BadRecord {
                site: self.site(
                    Some(trace_id),
                    end,
                    trace.get(end).copied().and_then(Opcode::from_u8),
                ),
                fault: RecordFault::NoEnd { end },
            }),
        };
        let mut offset = 0;
        let mut commands = 0u64;
        while result.is_ok() && offset < trace.len() {
            match decode(trace, offset) {
                Ok((Record::ExecBufEnd, _)) if offset == end => break,
                Ok((Record::ExecBufEnd, _)) => {
                    result = Err(ChipError::BadRecord {
                        site: self.site(Some(trace_id), offset, Some(Opcode::ExecBufEnd)),
                        fault: RecordFault::EarlyEnd { end },
                    });
                }
                Ok((rec, next)) => {
                    commands += 1;
                    // The next record's header, and a line two pages on, are asked for while
                    // this one runs: a launch's runtime args put over a KiB between headers,
                    // beyond the hardware prefetcher, and a long trace spans more pages than
                    // the TLB holds. No-op launches, 10,000 per trace (`replay_one`), medians
                    // of 5-9 alternated runs: 41.9 -> 38.3 ns per record for the header,
                    // 38.4 -> 34.1 for the page ahead.
                    for at in [next, next + PREFETCH_PAGE_AHEAD] {
                        crate::memory::prefetch_lines(trace.get(at..at + 1).unwrap_or_default());
                    }
                    if let Err(e) = self.execute_at(shared, rec, Some(trace_id), offset) {
                        result = Err(e);
                        break;
                    }
                    offset = next;
                }
                Err(e) => {
                    result = Err(self.corrupt(Some(trace_id), trace, offset, e));
                    break;
                }
            }
        }
        if result.is_err() {
            // A launch the trace left half-made must not meet the next command.
            self.launch.reset();
        }
        self.flush_launches(shared);
        shared.record_replay(trace_id, commands, started.elapsed());
        self.trace_scratch = bytes;
        result.map_err(Failure::from)
    }
}

/// How far ahead of the next record a replay touches the trace, so the TLB entry is there
/// when the records reach it (two 4 KiB pages).
const PREFETCH_PAGE_AHEAD: usize = 8192;

/// How long any wait may take (host waits, kernels' fabric waits, lockstep barriers) when a
/// chip or mesh config does not say: `TTMESH_OPERATION_TIMEOUT_SECONDS` as
/// [`ttmesh_settings`] read it, else 60 s. A mesh hands the same timeout to its fabric.
pub fn default_operation_timeout() -> Duration {
    ttmesh_settings::settings().operation_timeout()
}

pub(crate) fn terminate_bytes() -> Vec<u8> {
    let mut e = crate::command::Encoder::new();
    e.simple(Opcode::Terminate, 0, 0);
    e.bytes
}
