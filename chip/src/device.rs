//! One emulated chip: its allocator, backing memory, program cache, command queues with their
//! dispatcher threads, events and traces.

mod discards;
mod events;
mod queue;
mod ring;
mod trace;
mod transfer;
mod validate;

pub use events::Event;
pub use queue::{default_operation_timeout, CqId};
pub use trace::{trace_digest, trace_page_size, TraceId, TraceInfo, TraceStats};
pub use transfer::PendingRead;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::allocator::{
    Allocation, AllocationRequest, Allocator, AllocatorConfig, BufferType, Statistics,
    UsageCounters,
};
use crate::arch::ArchSpec;
use crate::command::{space_code, Encoder, Opcode};
use crate::error::{ChipError, RecordFault, Result};
use crate::memory::DeviceMemory;
use crate::program::{Program, ProgramCache};
use discards::PendingDiscards;
use queue::{CqState, QueueHandle};
use trace::{Capture, TraceTable};

/// Chips open in this process (each has its own dispatcher threads).
static OPEN_CHIPS: AtomicUsize = AtomicUsize::new(0);

/// Whether a kernel should split its own work over the host's thread pool: only while this
/// process has fewer open chips than host cores. On a mesh the chips' dispatchers already
/// keep every core busy, and a kernel's pool tasks only add waits: the pool's idle threads
/// spin and yield for work, taking turns from the other chips (decode steps, SmolLM2-135M
/// bf16, with and without pool tasks in the streaming matmul: t3k 50-52 vs 41-42 ms, galaxy
/// 218-248 vs 197-202 ms; on one chip batch 32 the pool wins, 176-190 vs 222-235 ms).
/// Results do not depend on it: the kernels that ask sum in a fixed order either way.
pub(crate) fn kernels_may_fan_out() -> bool {
    OPEN_CHIPS.load(Ordering::Relaxed) < host_cores()
}

/// The host's cores (as the process may use them), read once: what the chips' threads share.
pub fn host_cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Everything a user chooses when opening a chip.
#[derive(Clone, Debug)]
pub struct ChipConfig {
    pub id: u32,
    pub arch: ArchSpec,
    pub trace_region_size: u64,
    pub l1_small_size: u64,
    pub worker_l1_size: Option<u64>,
    pub num_command_queues: u8,
    pub operation_timeout: Duration,
    /// Refuse to replay a trace whose captured buffers moved (on by default).
    pub replay_sanitizer: bool,
    /// Check a trace's command bytes against the digest taken at capture whenever a replay
    /// reads them from DRAM, so damage is an error naming the first damaged byte rather than
    /// a wrong result (on by default; `Chip::set_trace_digest` changes it).
    pub trace_digest: bool,
    /// Another process runs this chip (a big mesh over MPI ranks, where another rank holds
    /// it). The chip keeps its allocator, so a mesh buffer or trace still sits at one address
    /// on every chip of the mesh, but does nothing else, as under NO_DISPATCH: submissions and
    /// writes are dropped, reads refused, and its memory is never touched.
    pub elsewhere: bool,
}

impl ChipConfig {
    pub fn new(id: u32, arch: ArchSpec) -> ChipConfig {
        ChipConfig {
            id,
            arch,
            trace_region_size: 0,
            l1_small_size: 0,
            worker_l1_size: None,
            num_command_queues: 1,
            operation_timeout: default_operation_timeout(),
            replay_sanitizer: true,
            trace_digest: true,
            elsewhere: false,
        }
    }
}

/// Counters of work the dispatchers did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchStats {
    pub launches: u64,
    pub kernel_ns: u64,
}

pub(crate) struct ReadSlot {
    data: Mutex<Option<Result<Vec<u8>>>>,
    cv: Condvar,
}

/// A host function a dispatcher runs at its place in the queue (never traced).
pub type Callback = Box<dyn FnOnce() -> Result<()> + Send>;

/// How a submission reaches its queue.
#[derive(Clone, Copy)]
enum Submit {
    /// Queued; a sleeping dispatcher wakes.
    Wake,
    /// Queued without a wake (it runs with the next command that wakes).
    Quiet,
    /// Run on the submitting thread if the queue is idle, else queued with a wake.
    RunIfIdle,
}

/// State shared by the host API and the dispatcher threads.
pub(crate) struct ChipShared {
    pub(crate) id: u32,
    pub(crate) config: ChipConfig,
    pub(crate) allocator: Mutex<Allocator>,
    pub(crate) memory: DeviceMemory,
    pub(crate) programs: ProgramCache,
    pub(crate) cq_states: Vec<CqState>,
    reads: Mutex<HashMap<u64, Arc<ReadSlot>>>,
    callbacks: Mutex<HashMap<u64, Callback>>,
    next_handle: AtomicU64,
    pub(crate) traces: Mutex<TraceTable>,
    /// Ranges freed on the host whose Discard has not run yet: queued work may still use them.
    /// Key (space code, address, per-bank size) -> how many such frees are queued.
    pending_discards: Mutex<PendingDiscards>,
    launches: AtomicU64,
    kernel_ns: AtomicU64,
    pub(crate) sanitizer: AtomicBool,
    /// Whether replays check their trace's digest (`ChipConfig::trace_digest`).
    pub(crate) trace_digest: AtomicBool,
    /// This chip's observers (`observe.rs`: `Chip::add_observer`).
    pub(crate) observers: crate::observe::Observers,
}

impl ChipShared {
    /// Tells the observers that a dispatcher refused a record (its error names it).
    pub(crate) fn refused(&self, e: &ChipError) {
        self.observers
            .each(crate::observe::Interests::REFUSALS, |o| {
                o.record_refused(self.id, e)
            });
    }

    pub(crate) fn record_launch(&self, elapsed: Duration) {
        self.record_launches(1, elapsed.as_nanos() as u64);
    }

    /// Counts `launches` kernel launches that ran for `kernel_ns` in all.
    pub(crate) fn record_launches(&self, launches: u64, kernel_ns: u64) {
        self.launches.fetch_add(launches, Ordering::Relaxed);
        self.kernel_ns.fetch_add(kernel_ns, Ordering::Relaxed);
    }

    pub(crate) fn record_replay(&self, trace_id: u32, commands: u64, elapsed: Duration) {
        self.traces
            .lock()
            .record_replay(trace_id, commands, elapsed);
    }

    pub(crate) fn complete_read(&self, handle: u64, data: Result<Vec<u8>>) {
        let slot = self.reads.lock().get(&handle).cloned();
        if let Some(slot) = slot {
            *slot.data.lock() = Some(data);
            slot.cv.notify_all();
        }
    }

    pub(crate) fn register_callback(&self, f: Callback) -> u64 {
        let id = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.callbacks.lock().insert(id, f);
        id
    }

    pub(crate) fn run_callback(&self, id: u64) -> Result<()> {
        let cb = self.callbacks.lock().remove(&id);
        match cb {
            Some(f) => f(),
            None => Err(ChipError::Queue(format!(
                "host callback {id} is not registered on chip {}",
                self.id
            ))),
        }
    }
}

/// One emulated chip. Open with [`Chip::open`]; share as `Arc<Chip>` (tensors hold one).
pub struct Chip {
    pub(crate) shared: Arc<ChipShared>,
    queues: Vec<QueueHandle>,
    captures: Vec<Mutex<Option<Capture>>>,
    closed: AtomicBool,
    usage: Arc<UsageCounters>,
    /// Launches enqueued through `ops::launch` (traced ones included, replays not).
    enqueued_launches: AtomicU64,
}

thread_local! {
    static WARNED_ACTIVE_TRACE: Cell<bool> = const { Cell::new(false) };
}

/// tt-metal's warning when allocating while a trace exists.
pub const ACTIVE_TRACE_ALLOCATION_WARNING: &str = "Allocating device buffers is unsafe due to the existence of an active trace. These buffers may be corrupted once a trace is executed.";

impl Chip {
    pub fn open(config: ChipConfig) -> Result<Arc<Chip>> {
        if !(1..=2).contains(&config.num_command_queues) {
            return Err(ChipError::InvalidConfig(format!(
                "num hw cqs must be between 1 and 2 (got {}); pass num_command_queues 1 or 2",
                config.num_command_queues
            )));
        }
        let arch = &config.arch;
        let mut alloc_cfg = AllocatorConfig::new(arch.clone());
        alloc_cfg.trace_region_size = config.trace_region_size;
        alloc_cfg.l1_small_size = config.l1_small_size;
        alloc_cfg.worker_l1_size = config.worker_l1_size;
        let mut allocator = Allocator::new(config.id, alloc_cfg.clone())?;
        let usage = Arc::new(UsageCounters::default());
        allocator.add_observer(usage.clone());
        let memory = DeviceMemory::new(
            config.id,
            arch.num_dram_banks,
            arch.dram_bank_size,
            arch.num_l1_banks(),
            arch.l1_size_per_core,
            alloc_cfg.system_memory_size,
        );
        memory.watch_dram_from(arch.dram_bank_size - alloc_cfg.trace_region_per_bank());
        let shared = Arc::new(ChipShared {
            id: config.id,
            cq_states: (0..config.num_command_queues)
                .map(|_| CqState::new())
                .collect(),
            config: config.clone(),
            allocator: Mutex::new(allocator),
            memory,
            programs: ProgramCache::default(),
            reads: Mutex::new(HashMap::new()),
            callbacks: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            traces: Mutex::new(TraceTable::default()),
            pending_discards: Mutex::new(PendingDiscards::default()),
            launches: AtomicU64::new(0),
            kernel_ns: AtomicU64::new(0),
            sanitizer: AtomicBool::new(config.replay_sanitizer),
            trace_digest: AtomicBool::new(config.trace_digest),
            observers: Default::default(),
        });
        let mut queues = Vec::new();
        for cq in 0..config.num_command_queues {
            queues.push(queue::spawn_dispatcher(shared.clone(), CqId(cq))?);
        }
        let captures = (0..config.num_command_queues)
            .map(|_| Mutex::new(None))
            .collect();
        OPEN_CHIPS.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(Chip {
            shared,
            queues,
            captures,
            closed: AtomicBool::new(false),
            usage,
            enqueued_launches: AtomicU64::new(0),
        }))
    }

    pub fn id(&self) -> u32 {
        self.shared.id
    }

    pub fn arch(&self) -> &ArchSpec {
        &self.shared.config.arch
    }
    /// True if another process runs this chip (`ChipConfig::elsewhere`).
    pub fn held_elsewhere(&self) -> bool {
        self.shared.config.elsewhere
    }

    /// True if submissions go nowhere: under a NO_DISPATCH graph capture, or on a chip
    /// another process runs.
    pub(crate) fn sends_nothing(&self) -> bool {
        crate::observe::no_dispatch() || self.shared.config.elsewhere
    }

    pub fn config(&self) -> &ChipConfig {
        &self.shared.config
    }
    pub fn num_command_queues(&self) -> u8 {
        self.queues.len() as u8
    }
    pub fn memory(&self) -> &DeviceMemory {
        &self.shared.memory
    }
    pub fn program_cache(&self) -> &ProgramCache {
        &self.shared.programs
    }
    pub fn operation_timeout(&self) -> Duration {
        self.shared.config.operation_timeout
    }
    pub fn usage(&self) -> &UsageCounters {
        &self.usage
    }

    pub fn dispatch_stats(&self) -> DispatchStats {
        DispatchStats {
            launches: self.shared.launches.load(Ordering::Relaxed),
            kernel_ns: self.shared.kernel_ns.load(Ordering::Relaxed),
        }
    }

    /// Program launches enqueued on this chip (through `ops::launch`, the one way an op reaches
    /// a queue), counted on the host; a trace replay adds none.
    pub fn enqueued_launches(&self) -> u64 {
        self.enqueued_launches.load(Ordering::Relaxed)
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(ChipError::Closed(self.shared.id))
        } else {
            Ok(())
        }
    }

    pub(crate) fn queue(&self, cq: CqId) -> Result<&QueueHandle> {
        self.check_open()?;
        self.queues.get(cq.0 as usize).ok_or_else(|| {
            ChipError::InvalidConfig(format!(
                "CQ {} does not exist on chip {}: it was opened with {} command queue(s); open it with num_command_queues 2",
                cq.0,
                self.shared.id,
                self.queues.len()
            ))
        })
    }

    // ---- allocation ----

    pub fn allocate(&self, req: &AllocationRequest) -> Result<Allocation> {
        self.check_open()?;
        let alloc = self.shared.allocator.lock().allocate(req)?;
        // Once per thread: the thread-local is checked first, so after the warning an
        // allocation does not touch the trace table's lock.
        if req.buffer_type != BufferType::Trace
            && !WARNED_ACTIVE_TRACE.with(|w| w.get())
            && self.shared.traces.lock().has_live_traces()
        {
            WARNED_ACTIVE_TRACE.with(|w| w.set(true));
            tracing::warn!("{}", ACTIVE_TRACE_ALLOCATION_WARNING);
            eprintln!("ttmesh | WARNING | {ACTIVE_TRACE_ALLOCATION_WARNING}");
        }
        Ok(alloc)
    }

    pub fn deallocate(&self, alloc: &Allocation) -> Result<()> {
        let open = !self.closed.load(Ordering::Acquire);
        // Every queue idle: nothing queued can read the range, so its host memory goes here
        // and now, with no record for the dispatchers to run (`bench chip`'s churn of 1,000
        // live buffers: 0.79-1.01 -> 1.66-1.96 M pairs/s). Checked before the allocator's
        // lock is taken, so the two locks never nest.
        let idle = open && self.queues.iter().all(|q| q.ring.drained());
        {
            let mut a = self.shared.allocator.lock();
            a.deallocate(alloc)?;
            if idle {
                drop(a);
                let space = alloc.buffer_type.space();
                self.shared
                    .discard_now(space, alloc.address, alloc.per_bank_size);
                return Ok(());
            }
            // Marked pending under the allocator lock: no discard may see the range free
            // before it is marked (see discard_free_ranges).
            if open {
                let key = (
                    space_code(alloc.buffer_type.space()),
                    alloc.address,
                    alloc.per_bank_size,
                );
                // One count per queue: the range stays pending (kept) until every queue has
                // passed its Discard, so work queued earlier on any queue still reads its data.
                self.shared
                    .pending_discards
                    .lock()
                    .add(key, self.queues.len() as u32);
            }
        }
        // Host memory of the range is returned in queue order, after work that may still read it.
        if open {
            let mut e = Encoder::with_capacity(32);
            e.discard(
                alloc.buffer_type.space(),
                alloc.address,
                alloc.per_bank_size,
            );
            // Housekeeping: no wake-up of its own; it runs with the next command that wakes.
            if let Some((last, others)) = self.queues.split_last() {
                for q in others {
                    q.ring.push(e.bytes.clone(), false);
                }
                last.ring.push(e.bytes, false);
            }
        }
        Ok(())
    }

    pub fn statistics(&self, t: BufferType) -> Statistics {
        self.shared.allocator.lock().statistics(t)
    }

    pub fn memory_view(&self, t: BufferType) -> Vec<crate::allocator::BlockRow> {
        self.shared.allocator.lock().memory_view(t)
    }

    pub fn with_allocator<R>(&self, f: impl FnOnce(&Allocator) -> R) -> R {
        f(&self.shared.allocator.lock())
    }

    // ---- commands ----

    pub fn is_capturing(&self, cq: CqId) -> bool {
        self.captures
            .get(cq.0 as usize)
            .is_some_and(|c| c.lock().is_some())
    }

    /// Sends encoded records to a queue, or into the trace being captured on it.
    pub(crate) fn submit(&self, cq: CqId, bytes: Vec<u8>, refs: &[trace::BufferRef]) -> Result<()> {
        self.submit_with_wake(cq, bytes, refs, true)
    }

    fn submit_with_wake(
        &self,
        cq: CqId,
        bytes: Vec<u8>,
        refs: &[trace::BufferRef],
        wake: bool,
    ) -> Result<()> {
        let how = if wake { Submit::Wake } else { Submit::Quiet };
        self.submit_recorded(cq, bytes, how, || refs.to_vec())
    }

    /// Like `submit`; the buffer references a capture records are built only when capturing.
    fn submit_recorded(
        &self,
        cq: CqId,
        bytes: Vec<u8>,
        how: Submit,
        refs: impl FnOnce() -> Vec<trace::BufferRef>,
    ) -> Result<()> {
        let q = self.queue(cq)?;
        {
            let mut cap = self.captures[cq.0 as usize].lock();
            if let Some(c) = cap.as_mut() {
                c.append(&bytes, &refs());
                drop(cap);
                self.observe_submission(cq, &bytes, true);
                crate::command::spare::give_back(bytes);
                return Ok(());
            }
        }
        if self.sends_nothing() {
            return Ok(());
        }
        self.observe_submission(cq, &bytes, false);
        match how {
            Submit::Wake => q.ring.push(bytes, true),
            Submit::Quiet => q.ring.push(bytes, false),
            Submit::RunIfIdle => q.ring.push_or_run(bytes, &q.dispatcher),
        }
        Ok(())
    }

    /// Wakes `cq`'s dispatcher if it sleeps with work queued (after submissions made with
    /// `wake = false`, e.g. a mesh's lockstep replay).
    pub fn wake(&self, cq: CqId) {
        if let Some(q) = self.queues.get(cq.0 as usize) {
            q.ring.wake();
        }
    }

    /// Enqueues a program launch; ops reach it only through `ops::launch`.
    pub(crate) fn enqueue_program(
        &self,
        cq: CqId,
        program: &Program,
        addresses: &[u32],
        buffer_ids: &[u64],
    ) -> Result<()> {
        // The runtime args are staged in a buffer kept per thread: a fresh vector per launch
        // was an allocation and a free on every untraced dispatch.
        thread_local! {
            static ARGS: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let e = ARGS.with_borrow_mut(|args| {
            program.runtime_args(addresses, args);
            let mut e = Encoder::with_capacity(64 + program.config_image.len() + args.len() * 4);
            e.launch(
                program.id,
                program.split.cores,
                &program.config_image,
                program.split.args_per_core,
                args,
            );
            e
        });
        let refs = || {
            program
                .operands
                .iter()
                .zip(addresses)
                .zip(buffer_ids)
                .map(|((o, &a), &id)| trace::BufferRef {
                    buffer_type: o.buffer_type,
                    address: a as u64,
                    size: o.per_bank_size,
                    buffer_id: id,
                    access: o.access,
                })
                .collect()
        };
        let how = if program.kernel.hands_off() {
            Submit::RunIfIdle
        } else {
            Submit::Wake
        };
        self.submit_recorded(cq, e.bytes, how, refs)?;
        self.enqueued_launches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn forbid_capture(&self, cq: CqId, what: &str) -> Result<()> {
        for (i, c) in self.captures.iter().enumerate() {
            if c.lock().is_some() && (i == cq.0 as usize || what == "Event Synchronization") {
                return Err(ChipError::Trace(match what {
                    "Writes" => "Writes are not supported during trace capture. Copy inputs before begin_trace_capture or after end_trace_capture".into(),
                    "Reads" => "Reads are not supported during trace capture. Read outputs after end_trace_capture (or after execute_trace)".into(),
                    "Events" => "Events are not supported during trace capture. Record and wait for events outside the capture; the seed's 2-CQ pattern keeps them outside".into(),
                    _ => "Event Synchronization is not supported during trace capture. Synchronize after end_trace_capture".into(),
                }));
            }
        }
        Ok(())
    }

    /// A request's fields checked as the dispatcher would check its record, but refused here,
    /// at the call, before anything is encoded or allocated.
    fn check_request(
        &self,
        cq: CqId,
        request: &'static str,
        check: impl FnOnce() -> std::result::Result<(), RecordFault>,
    ) -> Result<()> {
        check().map_err(|fault| ChipError::BadRequest {
            chip: self.shared.id,
            cq: cq.0,
            request,
            fault,
        })
    }

    /// Enqueues a host callback (not traceable): used by the mesh for barriers and mesh events.
    pub fn enqueue_host_callback(
        &self,
        cq: CqId,
        f: impl FnOnce() -> Result<()> + Send + 'static,
    ) -> Result<()> {
        self.forbid_capture(cq, "Events")?;
        if self.sends_nothing() {
            // Nothing queued before it will run either: its turn is now.
            return f();
        }
        let id = self.shared.register_callback(Box::new(f));
        let mut e = Encoder::with_capacity(16);
        e.simple(Opcode::HostCallback, 0, id);
        self.submit(cq, e.bytes, &[])
    }

    /// True if everything enqueued on `cq` so far has run and its thread sleeps (a launch the
    /// host may run itself then runs on the host's thread: see `Kernel::hands_off`).
    pub fn queue_idle(&self, cq: CqId) -> bool {
        self.queues
            .get(cq.0 as usize)
            .is_some_and(|q| q.ring.drained())
    }

    /// Blocks until everything enqueued on `cq` so far has run; returns the first error the
    /// queue met since the last finish.
    pub fn finish(&self, cq: CqId) -> Result<()> {
        self.forbid_capture(cq, "Event Synchronization")?;
        let q = self.queue(cq)?;
        self.shared
            .observers
            .each(crate::observe::Interests::HOST_WAITS, |o| {
                o.host_waits(self.shared.id, cq)
            });
        let state = &self.shared.cq_states[cq.0 as usize];
        // An idle queue has run everything: no event round trip (two thread wake-ups, which
        // a mesh would pay chip after chip). Frees queued on a sleeping dispatcher (they never
        // wake it) are run here, and a deferred kernel that is done is settled here.
        if q.ring.drained() || q.ring.run_idle_discards(&q.dispatcher) {
            if let Some(p) = q.ring.take_done_pending() {
                if let Err(e) = p.settle(&self.shared) {
                    state.set_error(e);
                }
            }
            return state.take_error().map_or(Ok(()), Err);
        }
        let id = q.allocate_event_id();
        let mut e = Encoder::with_capacity(16);
        e.simple(Opcode::RecordEvent, 0, id);
        q.ring.push(e.bytes, true);
        let timeout = self.shared.config.operation_timeout;
        // A kernel's own waits (events, fabric semaphores) time out after the operation timeout
        // with an error that names what they waited on; wait a little longer so that error, not
        // a bare "finish timed out", is what the host sees.
        let grace = timeout + timeout / 4 + Duration::from_millis(500);
        if !state.wait_for(id, Instant::now() + grace) {
            return Err(ChipError::Timeout {
                what: format!(
                    "finish on chip {} CQ {}: the queue reached event {} of {}",
                    self.shared.id,
                    cq.0,
                    state.completed(),
                    id
                ),
                seconds: grace.as_secs_f64(),
            });
        }
        match state.take_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// finish() on every queue.
    pub fn synchronize(&self) -> Result<()> {
        let mut first = None;
        for cq in 0..self.queues.len() as u8 {
            if let Err(e) = self.finish(CqId(cq)) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Stops the dispatchers (after the work already queued) and refuses further work.
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        OPEN_CHIPS.fetch_sub(1, Ordering::Relaxed);
        for q in &self.queues {
            q.ring.push(queue::terminate_bytes(), true);
        }
        Ok(())
    }
}

impl Drop for Chip {
    fn drop(&mut self) {
        let _ = self.close();
        for q in &mut self.queues {
            if let Some(t) = q.thread.take() {
                let _ = t.join();
            }
        }
    }
}
