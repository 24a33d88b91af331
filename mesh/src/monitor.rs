//! Publishing a mesh's statistics for `ttmesh monitor` (ttmesh-monitor's shared-memory segment).
//!
//! Each chip slot has one writer, a [`SerialChipWriter`] (plain stores, no atomic
//! read-modify-write), and every write to it happens under that chip's allocator lock, which
//! serialises them:
//! - the chip's allocator listener: allocated bytes, live buffers and peak per buffer type, on
//!   every allocate and free (the allocator calls listeners with its lock held);
//! - one background thread, every [`REFRESH`], inside `Chip::with_allocator`: largest free
//!   block per type (recomputed only when the allocator's generation moved, so an idle mesh
//!   costs nothing), live traces, trace bytes and replays (read from `Chip::trace_stats`
//!   just before), and the bytes the program labelled as weights / KV cache
//!   ([`crate::MeshDevice::label_memory`]). The same thread copies the fabric's link counters
//!   into the link slots.
//!
//! A monitor therefore sees allocations at once, and the rest at most one period late.
//! Bytes are per-bank figures times the type's bank count, as `MeshDevice::reports` and the
//! allocator's statistics count them: a sharded buffer on a few banks reserves its address
//! range in every bank of the type, and allocated stays comparable with capacity.

use parking_lot::{Condvar, Mutex};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ttmesh_chip::allocator::{AllocationRequest, AllocatorEvent, AllocatorEventKind, Placement};
use ttmesh_chip::inspect::MemoryView;
use ttmesh_chip::observe::{ChipObserver, Interests};
use ttmesh_chip::{ArchSpec, BufferType, Chip, ChipConfig};
use ttmesh_fabric::Fabric;

use crate::labels::{MemoryLabels, MemoryRole};
use ttmesh_monitor::{
    ChipPublisher, LinkCounters, LinkPublisher, MemoryCounters, MemoryKind, ProcessInfo, Publisher,
    SerialChipWriter,
};

/// How often the background thread refreshes what the event stream does not carry.
pub(crate) const REFRESH: Duration = Duration::from_millis(100);

/// The monitor's name for a buffer type; None for host (system) memory, which it does not show.
fn kind_of(t: BufferType) -> Option<MemoryKind> {
    match t {
        BufferType::Dram => Some(MemoryKind::Dram),
        BufferType::L1 => Some(MemoryKind::L1),
        BufferType::L1Small => Some(MemoryKind::L1Small),
        BufferType::Trace => Some(MemoryKind::Trace),
        BufferType::SystemMemory => None,
    }
}

/// Bank count of every buffer type, indexed by `BufferType as usize`.
fn bank_counts(chip: &Chip) -> [u64; 5] {
    chip.with_allocator(|a| BufferType::ALL.map(|t| a.num_banks(t) as u64))
}

/// The hot-path writes of a chip slot (two handle kinds, so the benchmark can compare them).
trait SlotWrite: Send + Sync + 'static {
    fn on_allocate(&self, kind: MemoryKind, bytes: u64);
    fn on_deallocate(&self, kind: MemoryKind, bytes: u64);
}

impl SlotWrite for SerialChipWriter {
    #[inline]
    fn on_allocate(&self, kind: MemoryKind, bytes: u64) {
        SerialChipWriter::on_allocate(self, kind, bytes)
    }
    #[inline]
    fn on_deallocate(&self, kind: MemoryKind, bytes: u64) {
        SerialChipWriter::on_deallocate(self, kind, bytes)
    }
}

impl SlotWrite for ChipPublisher {
    #[inline]
    fn on_allocate(&self, kind: MemoryKind, bytes: u64) {
        ChipPublisher::on_allocate(self, kind, bytes)
    }
    #[inline]
    fn on_deallocate(&self, kind: MemoryKind, bytes: u64) {
        ChipPublisher::on_deallocate(self, kind, bytes)
    }
}

/// Feeds one chip slot from that chip's allocator events.
struct SlotListener<W> {
    slot: W,
    banks: [u64; 5],
}

impl<W: SlotWrite> ChipObserver for SlotListener<W> {
    fn interests(&self) -> Interests {
        Interests::ALLOCATOR
    }
    #[inline]
    fn allocator_event(&self, e: &AllocatorEvent) {
        let Some(kind) = kind_of(e.buffer_type) else {
            return;
        };
        let bytes = e.per_bank_size * self.banks[e.buffer_type as usize];
        match e.kind {
            AllocatorEventKind::Allocate => self.slot.on_allocate(kind, bytes),
            AllocatorEventKind::Deallocate => self.slot.on_deallocate(kind, bytes),
        }
    }
}

/// Sets a chip slot's identity, capacities and current usage (under the allocator's lock),
/// then subscribes it to the chip's allocator. Call before anyone else can allocate on the
/// chip: a buffer allocated between the two steps would be missed.
fn attach_chip<W: SlotWrite>(
    chip: &Chip,
    slot: W,
    coord: (u32, u32),
    identity: impl FnOnce(&W, u32, (u32, u32)),
    set_memory: impl Fn(&W, MemoryKind, &MemoryCounters),
) -> Arc<SlotListener<W>> {
    let banks = bank_counts(chip);
    chip.with_allocator(|a| {
        identity(&slot, chip.id(), coord);
        for t in BufferType::ALL {
            let Some(kind) = kind_of(t) else { continue };
            let usage = chip.usage().snapshot(t);
            // TT-NN's memory view, the figures `get_memory_view` gives a user.
            let view = MemoryView::of(a, t);
            let n = view.num_banks;
            let m = MemoryCounters {
                allocated: view.total_bytes_allocated_per_bank * n,
                capacity: view.total_bytes_per_bank * n,
                live_buffers: usage.live_buffers,
                peak: usage.peak_per_bank * n,
                largest_free: view.largest_contiguous_bytes_free_per_bank * n,
            };
            set_memory(&slot, kind, &m);
        }
    });
    let listener = Arc::new(SlotListener { slot, banks });
    chip.add_observer(listener.clone());
    listener
}

/// What the background thread last published for one chip, to skip unchanged writes.
#[derive(Default)]
struct ChipSeen {
    generation: Option<u64>,
    traces: Option<(u64, u64, u64)>,
    labels: Option<(u64, u64)>,
    host_bytes: Option<u64>,
}

/// The slow path, once per period: reads the chips and the fabric, writes what changed.
struct Refresher {
    chips: Vec<(Arc<Chip>, Arc<SlotListener<SerialChipWriter>>)>,
    seen: Vec<ChipSeen>,
    fabric: Option<Arc<Fabric>>,
    /// Which of the fabric's link directions the link slots hold, in slot order.
    sent_here: Vec<usize>,
    links: Vec<LinkPublisher>,
    link_seen: Vec<LinkCounters>,
    labels: Arc<MemoryLabels>,
    /// Refreshes so far: host bytes are read every `HOST_BYTES_EVERY`th.
    refreshes: u64,
}

/// Refreshes between two readings of each chip's host bytes (a second): reading them walks
/// every chunk of every bank under its lock, which on a Galaxy decoding SmolLM2 in f32 at
/// every refresh took its step from about 490 ms to 540-570 ms.
const HOST_BYTES_EVERY: u64 = 10;

impl Refresher {
    fn refresh(&mut self) {
        let host_bytes_due = self.refreshes % HOST_BYTES_EVERY == 0;
        self.refreshes += 1;
        for ((chip, listener), seen) in self.chips.iter().zip(&mut self.seen) {
            // Read before taking the allocator's lock: never hold two chip locks at once.
            let ts = chip.trace_stats();
            let traces = (ts.live_traces, ts.trace_buffers_size, ts.replays);
            let labels = (
                self.labels.get(MemoryRole::Weights),
                self.labels.get(MemoryRole::KvCache),
            );
            let host_bytes = match host_bytes_due {
                true => Some(chip.memory().host_bytes()),
                false => seen.host_bytes,
            };
            let slot = &listener.slot;
            // Under the allocator's lock, so these writes never overlap the listener's.
            chip.with_allocator(|a| {
                let g = a.generation();
                if seen.generation != Some(g) {
                    seen.generation = Some(g);
                    for t in BufferType::ALL {
                        if let Some(kind) = kind_of(t) {
                            // The view's largest contiguous free block, without its table.
                            let free = a.statistics(t).largest_free_block_bytes;
                            slot.set_largest_free(kind, free * listener.banks[t as usize]);
                        }
                    }
                }
                if seen.traces != Some(traces) {
                    seen.traces = Some(traces);
                    slot.update(|c| {
                        c.traces = traces.0;
                        c.trace_bytes = traces.1;
                        c.replays = traces.2;
                    });
                }
                if seen.labels != Some(labels) {
                    seen.labels = Some(labels);
                    slot.update(|c| {
                        c.weights_bytes = labels.0;
                        c.kv_cache_bytes = labels.1;
                    });
                }
                if let Some(bytes) = host_bytes.filter(|&b| seen.host_bytes != Some(b)) {
                    seen.host_bytes = Some(bytes);
                    slot.update(|c| c.host_bytes = bytes);
                }
            });
        }
        let Some(fabric) = &self.fabric else { return };
        let stats = fabric.link_stats();
        for ((s, link), seen) in self
            .sent_here
            .iter()
            .filter_map(|&k| stats.get(k))
            .zip(&self.links)
            .zip(&mut self.link_seen)
        {
            let now = LinkCounters {
                packets: s.packets,
                bytes: s.bytes,
                stalls: s.credit_stalls,
                errors: s.dropped + s.corrupted,
            };
            if *seen != now {
                *seen = now;
                link.update(|c| *c = now);
            }
        }
    }
}

/// Tells the background thread to stop; it waits on the condvar between refreshes.
#[derive(Default)]
struct StopSignal {
    stop: Mutex<bool>,
    cv: Condvar,
}

/// One mesh's publishing: the segment, its listeners (in the chips) and the refresh thread.
/// [`MeshMonitor::stop`] (or drop) ends the thread and removes the segment.
pub(crate) struct MeshMonitor {
    publisher: Option<Publisher>,
    signal: Arc<StopSignal>,
    thread: Option<JoinHandle<()>>,
}

static WARNED: AtomicBool = AtomicBool::new(false);

/// Meshes this process has opened, for [`mesh_id`].
static OPENED: AtomicU64 = AtomicU64::new(0);

/// A name for this opening of a mesh, the same on every rank of a split mesh: rank 0's pid,
/// how many meshes it had opened before, and when (so another host's rank 0 with the same pid
/// names another mesh). `ttmesh monitor` shows the ranks' segments that share it as one mesh.
/// Every rank calls it once per opening, whether or not it publishes, as the exchange needs.
pub(crate) fn mesh_id(
    ranks: Option<&crate::ranks::MeshRanks>,
    timeout: Duration,
) -> crate::Result<String> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let n = OPENED.fetch_add(1, Ordering::Relaxed);
    let own = format!("{}.{n}.{ms}", std::process::id());
    let Some(r) = ranks else { return Ok(own) };
    let all = r.exchange(
        "naming the mesh for ttmesh monitor",
        own.into_bytes(),
        timeout,
    )?;
    let first = all.first().map(|b| String::from_utf8_lossy(b).into_owned());
    // Opaque to the monitor, which prints it escaped; kept short and printable here.
    Ok(first
        .filter(|id| id.len() <= 64 && id.chars().all(|c| c.is_ascii_graphic()))
        .unwrap_or_else(|| "unnamed".to_string()))
}

/// Publishing must never stop a mesh from opening: problems are reported once per process.
fn warn_once(what: &str) {
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "ttmesh | WARNING | {what}; the mesh runs without publishing statistics (set TTMESH_MONITOR=0 to turn publishing off)"
        );
    }
}

impl MeshMonitor {
    /// Creates the segment and starts publishing, unless `TTMESH_MONITOR=0` (or a failure,
    /// which is reported once and leaves the mesh unpublished): then None.
    /// `chips` are the whole mesh's, in row-major order with `cols` columns; only those this
    /// process `holds` are published (one rank's part of a split mesh, see
    /// [`ProcessInfo::for_rank`]), under their global ids and coordinates, with the links
    /// they send on.
    pub(crate) fn start(
        info: &ProcessInfo,
        chips: &[Arc<Chip>],
        cols: usize,
        fabric: Option<&Arc<Fabric>>,
        labels: &Arc<MemoryLabels>,
        holds: impl Fn(u32) -> bool,
    ) -> Option<MeshMonitor> {
        let cols = cols.max(1);
        // (index in the mesh, chip) of the chips published here.
        let held: Vec<(usize, &Arc<Chip>)> = chips
            .iter()
            .enumerate()
            .filter(|(_, c)| holds(c.id()))
            .collect();
        // Each direction of a link is counted by the rank that sends on it.
        let sent_here: Vec<usize> = fabric.map_or_else(Vec::new, |f| {
            let stats = f.link_stats();
            (0..stats.len())
                .filter(|&j| holds(stats[j].from_chip))
                .take(ttmesh_monitor::MAX_LINKS)
                .collect()
        });
        let num_links = sent_here.len();
        let publisher = match Publisher::create_from_env(info, held.len(), num_links) {
            Ok(Some(p)) => p,
            Ok(None) => return None,
            Err(e) => {
                warn_once(&e.to_string());
                return None;
            }
        };
        let mut chip_slots = Vec::with_capacity(held.len());
        for (slot_index, &(i, chip)) in held.iter().enumerate() {
            let slot = match publisher.chip_writer(slot_index) {
                Ok(w) => w.into_serial(),
                Err(e) => {
                    warn_once(&e.to_string());
                    return None;
                }
            };
            let listener = attach_chip(
                chip,
                slot,
                ((i / cols) as u32, (i % cols) as u32),
                |w, id, c| w.set_identity(id, c),
                |w, k, m| w.set_memory(k, m),
            );
            chip_slots.push((Arc::clone(chip), listener));
        }
        let mut links = Vec::with_capacity(num_links);
        if let Some(f) = fabric {
            let stats = f.link_stats();
            for (j, s) in sent_here.iter().filter_map(|&k| stats.get(k)).enumerate() {
                let Ok(l) = publisher.link(j) else { break };
                // One slot per direction: sender first.
                let (from, to) = match s.direction {
                    ttmesh_fabric::LinkDirection::AToB => (s.link.a, s.link.b),
                    ttmesh_fabric::LinkDirection::BToA => (s.link.b, s.link.a),
                };
                l.set_endpoints(from.0, from.1, to.0, to.1);
                links.push(l);
            }
        }
        let mut refresher = Refresher {
            seen: chip_slots.iter().map(|_| ChipSeen::default()).collect(),
            chips: chip_slots,
            fabric: fabric.cloned(),
            sent_here,
            link_seen: vec![LinkCounters::default(); links.len()],
            links,
            labels: Arc::clone(labels),
            refreshes: 0,
        };
        refresher.refresh();
        let signal = Arc::new(StopSignal::default());
        let thread_signal = Arc::clone(&signal);
        let thread = std::thread::Builder::new()
            .name("ttmesh-monitor".into())
            .spawn(move || {
                // Segments of processes that died without closing their mesh: the next mesh
                // removes them (only ours, only when the owner is gone).
                let _ = ttmesh_monitor::cleanup_stale();
                let mut stop = thread_signal.stop.lock();
                while !*stop {
                    thread_signal.cv.wait_for(&mut stop, REFRESH);
                    if !*stop {
                        refresher.refresh();
                    }
                }
            });
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                // Allocations are still published by the listeners; traces and links are not.
                warn_once(&format!("monitor: cannot start its refresh thread: {e}"));
                None
            }
        };
        Some(MeshMonitor {
            publisher: Some(publisher),
            signal,
            thread,
        })
    }

    /// The segment's name, e.g. "ttmesh-1234".
    pub(crate) fn segment(&self) -> Option<&str> {
        self.publisher.as_ref().map(Publisher::name)
    }

    /// Ends the refresh thread and removes the segment. Idempotent.
    pub(crate) fn stop(&mut self) {
        *self.signal.stop.lock() = true;
        self.signal.cv.notify_all();
        if let Some(t) = self.thread.take() {
            // The thread only refreshes and waits, so this returns within one refresh.
            let _ = t.join();
        }
        self.publisher = None;
    }
}

impl Drop for MeshMonitor {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---- benchmark ----

fn small_dram() -> AllocationRequest {
    AllocationRequest {
        buffer_type: BufferType::Dram,
        page_size: 2048,
        num_pages: 1,
        placement: Placement::Interleaved,
    }
}

/// Nanoseconds per allocate+free pair over `n` pairs.
fn pair_ns(chip: &Chip, n: u64) -> Result<f64, String> {
    let req = small_dram();
    let t = Instant::now();
    for _ in 0..n {
        let a = chip.allocate(black_box(&req)).map_err(|e| e.to_string())?;
        chip.deallocate(black_box(&a)).map_err(|e| e.to_string())?;
    }
    Ok(t.elapsed().as_nanos() as f64 / n as f64)
}

/// The cost publishing adds to `Chip::allocate` + `Chip::deallocate` of a small DRAM buffer
/// on a Wormhole chip holding 1,000 live buffers. Three such chips, measured in alternating
/// rounds (best round of each, least noise): one not publishing, one publishing as a mesh does
/// (a [`SerialChipWriter`] listener: plain stores), and one through a shared
/// [`ChipPublisher`] (one compare-and-swap per update) for comparison. Prints the figures and
/// the ratios; asserts nothing (the goal is at most 10% more than off).
pub fn monitor_overhead(quick: bool) -> String {
    match overhead(quick) {
        Ok(s) => s,
        Err(e) => format!("monitor_overhead: {e}\n"),
    }
}

fn overhead(quick: bool) -> Result<String, String> {
    let (rounds, per_round) = if quick { (6, 2_000) } else { (200, 4_000) };
    let e = |e: ttmesh_chip::ChipError| e.to_string();
    let open = || Chip::open(ChipConfig::new(0, ArchSpec::wormhole_b0())).map_err(e);
    let chips = [open()?, open()?, open()?];
    let info = ProcessInfo::for_current_process("bench", (1, 2), "wormhole_b0", "DISABLED");
    let publisher = Publisher::create(&info, 2, 0).map_err(|e| e.to_string())?;
    let serial = publisher
        .chip_writer(0)
        .map_err(|e| e.to_string())?
        .into_serial();
    let shared = publisher.chip(1).map_err(|e| e.to_string())?;
    let serial = attach_chip(
        &chips[1],
        serial,
        (0, 0),
        |w, id, c| w.set_identity(id, c),
        |w, k, m| w.set_memory(k, m),
    );
    let shared = attach_chip(
        &chips[2],
        shared,
        (0, 1),
        |w, id, c| w.set_identity(id, c),
        |w, k, m| w.set_memory(k, m),
    );
    let mut live = Vec::with_capacity(3_000);
    for chip in &chips {
        for _ in 0..1_000 {
            live.push((chip, chip.allocate(&small_dram()).map_err(e)?));
        }
    }
    let mut best = [f64::MAX; 3];
    for round in 0..=rounds {
        // Rotate the order so none always runs first (on a warmer or colder cache).
        for k in 0..3 {
            let c = (round + k) % 3;
            let ns = pair_ns(&chips[c], per_round)?;
            // Round 0 warms up.
            if round > 0 {
                best[c] = best[c].min(ns);
            }
        }
    }
    let seen =
        [serial.slot.snapshot(), shared.slot.snapshot()].map(|s| s.map(|s| s.dram.live_buffers));
    for (chip, a) in &live {
        chip.deallocate(a).map_err(e)?;
    }
    for chip in &chips {
        chip.close().map_err(e)?;
    }
    let [off, on, cas] = best;
    let mut s = format!(
        "monitor_overhead: Chip::allocate + Chip::deallocate of a 2 KiB DRAM buffer, 1,000 live buffers, best of {rounds} rounds x {per_round} pairs\n"
    );
    s.push_str(&format!(
        "  publishing off                           {off:8.1} ns per pair\n"
    ));
    s.push_str(&format!(
        "  publishing on (SerialChipWriter, mesh)   {on:8.1} ns per pair   ratio {:.3} ({:+.1}%; goal at most +10%)\n",
        on / off,
        (on / off - 1.0) * 100.0
    ));
    s.push_str(&format!(
        "  publishing on (ChipPublisher, CAS)       {cas:8.1} ns per pair   ratio {:.3} ({:+.1}%)\n",
        cas / off,
        (cas / off - 1.0) * 100.0
    ));
    if seen != [Some(1_000), Some(1_000)] {
        s.push_str(&format!(
            "  WARNING: the segment showed {seen:?} live DRAM buffers, expected 1000 on each\n"
        ));
    }
    Ok(s)
}

#[cfg(test)]
mod tests;
