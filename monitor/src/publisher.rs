//! The writing side: one segment per mesh, cheap lock-free-for-readers counter updates.

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::{fchmod, Mode};

use crate::data::{ChipCounters, ChipSnapshot, LinkCounters, LinkSnapshot, MemoryCounters};
use crate::data::{MemoryKind, ProcessInfo};
use crate::error::MonitorError;
use crate::layout::*;
use crate::seqlock::{read_slot, write_lock};
use crate::shm::{fd_stat, now_unix_ms, own_start_time, staleness, Mapping};

/// How many meshes one process may publish at once (`/ttmesh-<pid>`, `-1`, ... `-15`).
const MAX_SEGMENTS_PER_PROCESS: usize = 16;

struct Shared {
    map: Mapping,
    /// Without the leading slash.
    name: String,
}

/// Owns one segment; removes it (shm_unlink) when dropped. Chip and link handles keep the
/// memory mapped after that, so late updates from a chip thread are harmless.
pub struct Publisher {
    shared: Arc<Shared>,
    num_chips: usize,
    num_links: usize,
}

impl Publisher {
    /// Create `/ttmesh-<pid>` (or the next free `/ttmesh-<pid>-<n>`) with room for the given
    /// chips and links. Chip `i` starts as id `i` at its row-major coordinate in
    /// `info.mesh_shape`; links start with zero endpoints until [`LinkPublisher::set_endpoints`].
    pub fn create(
        info: &ProcessInfo,
        num_chips: usize,
        num_links: usize,
    ) -> Result<Publisher, MonitorError> {
        Self::create_as(
            info,
            num_chips,
            num_links,
            std::process::id(),
            own_start_time(),
            None,
        )
    }

    /// Like [`Publisher::create`], but returns Ok(None) when `TTMESH_MONITOR` is `0`, `off`,
    /// `false` or `no`: publishing is then off and costs nothing.
    pub fn create_from_env(
        info: &ProcessInfo,
        num_chips: usize,
        num_links: usize,
    ) -> Result<Option<Publisher>, MonitorError> {
        if monitor_disabled(std::env::var("TTMESH_MONITOR").ok().as_deref()) {
            return Ok(None);
        }
        Self::create(info, num_chips, num_links).map(Some)
    }

    /// `pid` and `start_time` are written into the header as given, and `base` (when given)
    /// replaces `ttmesh-<pid>`: tests use this to fake a segment of a dead process.
    pub(crate) fn create_as(
        info: &ProcessInfo,
        num_chips: usize,
        num_links: usize,
        pid: u32,
        start_time: u64,
        base: Option<&str>,
    ) -> Result<Publisher, MonitorError> {
        if num_chips > MAX_CHIPS {
            return Err(MonitorError::TooMany {
                what: "number of chips",
                requested: num_chips,
                max: MAX_CHIPS,
            });
        }
        if num_links > MAX_LINKS {
            return Err(MonitorError::TooMany {
                what: "number of links",
                requested: num_links,
                max: MAX_LINKS,
            });
        }
        let mut info = info.clone();
        info.pid = pid;
        let info_json = serde_json::to_vec(&info)?;
        if info_json.len() > INFO_CAPACITY {
            return Err(MonitorError::InfoTooLarge {
                len: info_json.len(),
                max: INFO_CAPACITY,
            });
        }
        let base = base.map_or_else(|| format!("ttmesh-{pid}"), str::to_string);
        for n in 0..MAX_SEGMENTS_PER_PROCESS {
            let name = if n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            };
            // A leftover of an earlier process that had our pid is removed and the name
            // reused; a live segment (another mesh of ours) moves us to the next suffix.
            for _ in 0..2 {
                match open_exclusive(&name)? {
                    Some(fd) => {
                        let map = init_segment(&name, fd, &info_json, &info, num_chips, num_links)
                            .inspect_err(|_| {
                                let _ = shm_unlink(format!("/{name}").as_str());
                            })?;
                        write_header(&map, pid, start_time, num_chips, num_links, &info_json);
                        return Ok(Publisher {
                            shared: Arc::new(Shared { map, name }),
                            num_chips,
                            num_links,
                        });
                    }
                    None if existing_is_stale(&name) => {
                        let _ = shm_unlink(format!("/{name}").as_str());
                    }
                    None => break,
                }
            }
        }
        Err(MonitorError::TooManySegments {
            count: MAX_SEGMENTS_PER_PROCESS,
        })
    }

    /// The segment's name without the leading slash, e.g. "ttmesh-1234".
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn num_chips(&self) -> usize {
        self.num_chips
    }

    pub fn num_links(&self) -> usize {
        self.num_links
    }

    /// A handle for chip slot `i`, to keep in the chip's threads (cheap to clone).
    pub fn chip(&self, i: usize) -> Result<ChipPublisher, MonitorError> {
        if i >= self.num_chips {
            return Err(MonitorError::IndexOutOfRange {
                what: "chip",
                index: i,
                count: self.num_chips,
            });
        }
        Ok(ChipPublisher {
            slot: Slot::new(&self.shared, chip_offset(i)),
        })
    }

    /// A handle for link slot `j`.
    pub fn link(&self, j: usize) -> Result<LinkPublisher, MonitorError> {
        if j >= self.num_links {
            return Err(MonitorError::IndexOutOfRange {
                what: "link",
                index: j,
                count: self.num_links,
            });
        }
        Ok(LinkPublisher {
            slot: Slot::new(&self.shared, link_offset(self.num_chips, j)),
        })
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = shm_unlink(format!("/{}", self.shared.name).as_str());
    }
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("name", &self.shared.name)
            .field("num_chips", &self.num_chips)
            .field("num_links", &self.num_links)
            .finish()
    }
}

pub(crate) fn monitor_disabled(value: Option<&str>) -> bool {
    matches!(
        value.map(|v| v.trim().to_ascii_lowercase()).as_deref(),
        Some("0" | "off" | "false" | "no")
    )
}

/// Some(fd) when we created the name, None when it already exists.
fn open_exclusive(name: &str) -> Result<Option<OwnedFd>, MonitorError> {
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR;
    match shm_open(
        format!("/{name}").as_str(),
        flags,
        Mode::S_IRUSR | Mode::S_IWUSR,
    ) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::EEXIST) => Ok(None),
        Err(e) => Err(MonitorError::os("create", name, e)),
    }
}

/// True only for a valid segment of ours whose owner is gone.
fn existing_is_stale(name: &str) -> bool {
    crate::reader::probe_owner(name).is_some_and(|(pid, start)| staleness(pid, start).is_some())
}

fn init_segment(
    name: &str,
    fd: OwnedFd,
    info_json: &[u8],
    info: &ProcessInfo,
    num_chips: usize,
    num_links: usize,
) -> Result<Mapping, MonitorError> {
    let total = total_size(num_chips, num_links);
    // The umask may have removed bits from 0600 (or a permissive mount added some): set the
    // mode explicitly, then check it.
    fchmod(fd.as_raw_fd(), Mode::S_IRUSR | Mode::S_IWUSR)
        .map_err(|e| MonitorError::os("set the mode of", name, e))?;
    let (_, mode) = fd_stat(&fd).map_err(|e| MonitorError::os("stat", name, e))?;
    if mode & 0o777 != 0o600 {
        return Err(MonitorError::BadMode {
            name: name.to_string(),
            mode,
        });
    }
    nix::unistd::ftruncate(&fd, total as i64).map_err(|e| MonitorError::os("size", name, e))?;
    // Reserve the pages now: on a full tmpfs a later first write would be SIGBUS, not an error.
    match nix::fcntl::posix_fallocate(fd.as_raw_fd(), 0, total as i64) {
        Ok(()) | Err(Errno::EINVAL) | Err(Errno::EOPNOTSUPP) => {}
        Err(e) => return Err(MonitorError::os("reserve memory for", name, e)),
    }
    let map = Mapping::map(&fd, total, true).map_err(|e| MonitorError::os("map", name, e))?;
    map.write_bytes(INFO_OFFSET, info_json);
    let cols = info.mesh_shape.1.max(1) as u64;
    for i in 0..num_chips {
        let base = chip_offset(i);
        map.store_u64(base + 8 * C_ID, i as u64);
        map.store_u64(base + 8 * C_ROW, i as u64 / cols);
        map.store_u64(base + 8 * C_COL, i as u64 % cols);
    }
    Ok(map)
}

/// Everything but the magic, then the magic with release: a reader that sees the magic sees a
/// complete segment.
fn write_header(
    map: &Mapping,
    pid: u32,
    start_time: u64,
    num_chips: usize,
    num_links: usize,
    info_json: &[u8],
) {
    map.store_u32(H_VERSION, LAYOUT_VERSION);
    map.store_u32(H_HEADER_SIZE, HEADER_SIZE as u32);
    map.store_u64(H_TOTAL_SIZE, total_size(num_chips, num_links) as u64);
    map.store_u32(H_PID, pid);
    map.store_u64(H_START_TIME, start_time);
    map.store_u32(H_NUM_CHIPS, num_chips as u32);
    map.store_u32(H_NUM_LINKS, num_links as u32);
    map.store_u32(H_CHIP_SLOT, CHIP_SLOT_SIZE as u32);
    map.store_u32(H_LINK_SLOT, LINK_SLOT_SIZE as u32);
    map.store_u32(H_INFO_OFFSET, INFO_OFFSET as u32);
    map.store_u32(H_INFO_LEN, info_json.len() as u32);
    map.store_u32(H_CHIPS_OFFSET, CHIPS_OFFSET as u32);
    map.store_u32(H_LINKS_OFFSET, links_offset(num_chips) as u32);
    map.store_u64(H_CREATED_MS, now_unix_ms());
    map.word(H_MAGIC)
        .expect("layout bug")
        .store(MAGIC, Ordering::Release);
}

/// A slot's words plus the mapping that keeps them alive.
#[derive(Clone)]
struct Slot {
    _shared: Arc<Shared>,
    base: NonNull<AtomicU64>,
}

// SAFETY: the pointer targets the mapping `_shared` keeps alive; all access is atomic.
unsafe impl Send for Slot {}
unsafe impl Sync for Slot {}

impl Slot {
    fn new(shared: &Arc<Shared>, offset: usize) -> Slot {
        let word = shared
            .map
            .word(offset)
            .expect("layout bug: slot outside segment");
        Slot {
            _shared: Arc::clone(shared),
            base: NonNull::from(word),
        }
    }

    #[inline]
    fn w(&self, i: usize) -> &AtomicU64 {
        // SAFETY: callers pass word indices inside the slot (layout constants).
        unsafe { &*self.base.as_ptr().add(i) }
    }

    #[inline]
    fn get(&self, i: usize) -> u64 {
        self.w(i).load(Ordering::Relaxed)
    }

    #[inline]
    fn set(&self, i: usize, v: u64) {
        self.w(i).store(v, Ordering::Relaxed)
    }
}

/// Chip slot handle: Clone + Send + Sync; every method is one short sequence-locked write.
#[derive(Clone)]
pub struct ChipPublisher {
    slot: Slot,
}

impl ChipPublisher {
    #[inline]
    fn mem(kind: MemoryKind, field: usize) -> usize {
        C_MEM + MEM_WORDS * kind.index() + field
    }

    /// Chip id and (row, col) as the mesh numbers them.
    pub fn set_identity(&self, id: u32, coord: (u32, u32)) {
        let _g = write_lock(self.slot.w(C_SEQ));
        self.slot.set(C_ID, id as u64);
        self.slot.set(C_ROW, coord.0 as u64);
        self.slot.set(C_COL, coord.1 as u64);
    }

    /// Replace one allocator's statistics (five stores).
    #[inline]
    pub fn set_memory(&self, kind: MemoryKind, m: &MemoryCounters) {
        let _g = write_lock(self.slot.w(C_SEQ));
        self.slot.set(Self::mem(kind, M_ALLOCATED), m.allocated);
        self.slot.set(Self::mem(kind, M_CAPACITY), m.capacity);
        self.slot.set(Self::mem(kind, M_LIVE), m.live_buffers);
        self.slot.set(Self::mem(kind, M_PEAK), m.peak);
        self.slot
            .set(Self::mem(kind, M_LARGEST_FREE), m.largest_free);
    }

    /// One buffer of `bytes` allocated: allocated, live buffers and peak follow.
    #[inline]
    pub fn on_allocate(&self, kind: MemoryKind, bytes: u64) {
        let _g = write_lock(self.slot.w(C_SEQ));
        let a = self
            .slot
            .get(Self::mem(kind, M_ALLOCATED))
            .saturating_add(bytes);
        self.slot.set(Self::mem(kind, M_ALLOCATED), a);
        let live = self.slot.get(Self::mem(kind, M_LIVE));
        self.slot
            .set(Self::mem(kind, M_LIVE), live.saturating_add(1));
        if a > self.slot.get(Self::mem(kind, M_PEAK)) {
            self.slot.set(Self::mem(kind, M_PEAK), a);
        }
    }

    /// One buffer of `bytes` freed.
    #[inline]
    pub fn on_deallocate(&self, kind: MemoryKind, bytes: u64) {
        let _g = write_lock(self.slot.w(C_SEQ));
        let a = self
            .slot
            .get(Self::mem(kind, M_ALLOCATED))
            .saturating_sub(bytes);
        self.slot.set(Self::mem(kind, M_ALLOCATED), a);
        let live = self.slot.get(Self::mem(kind, M_LIVE));
        self.slot
            .set(Self::mem(kind, M_LIVE), live.saturating_sub(1));
    }

    pub fn set_capacity(&self, kind: MemoryKind, bytes: u64) {
        let _g = write_lock(self.slot.w(C_SEQ));
        self.slot.set(Self::mem(kind, M_CAPACITY), bytes);
    }

    pub fn set_largest_free(&self, kind: MemoryKind, bytes: u64) {
        let _g = write_lock(self.slot.w(C_SEQ));
        self.slot.set(Self::mem(kind, M_LARGEST_FREE), bytes);
    }

    /// Live traces and their command bytes (after end_trace_capture / release_trace).
    pub fn set_traces(&self, traces: u64, trace_bytes: u64) {
        let _g = write_lock(self.slot.w(C_SEQ));
        self.slot.set(C_TRACES, traces);
        self.slot.set(C_TRACE_BYTES, trace_bytes);
    }

    pub fn add_replays(&self, n: u64) {
        let _g = write_lock(self.slot.w(C_SEQ));
        let r = self.slot.get(C_REPLAYS).saturating_add(n);
        self.slot.set(C_REPLAYS, r);
    }

    /// Read-modify-write of all counters at once (readers see all or nothing of it). `f` runs
    /// while the slot is held: keep it short.
    pub fn update(&self, f: impl FnOnce(&mut ChipCounters)) {
        let _g = write_lock(self.slot.w(C_SEQ));
        let mut c = self.counters_unlocked();
        f(&mut c);
        for kind in MemoryKind::ALL {
            let m = c.memory(kind);
            self.slot.set(Self::mem(kind, M_ALLOCATED), m.allocated);
            self.slot.set(Self::mem(kind, M_CAPACITY), m.capacity);
            self.slot.set(Self::mem(kind, M_LIVE), m.live_buffers);
            self.slot.set(Self::mem(kind, M_PEAK), m.peak);
            self.slot
                .set(Self::mem(kind, M_LARGEST_FREE), m.largest_free);
        }
        self.slot.set(C_TRACES, c.traces);
        self.slot.set(C_TRACE_BYTES, c.trace_bytes);
        self.slot.set(C_REPLAYS, c.replays);
    }

    /// The sequence word, for tests that simulate a writer dying mid-update.
    #[cfg(test)]
    pub(crate) fn seq_word(&self) -> &AtomicU64 {
        self.slot.w(C_SEQ)
    }

    fn counters_unlocked(&self) -> ChipCounters {
        let mut c = ChipCounters::default();
        for kind in MemoryKind::ALL {
            *c.memory_mut(kind) = MemoryCounters {
                allocated: self.slot.get(Self::mem(kind, M_ALLOCATED)),
                capacity: self.slot.get(Self::mem(kind, M_CAPACITY)),
                live_buffers: self.slot.get(Self::mem(kind, M_LIVE)),
                peak: self.slot.get(Self::mem(kind, M_PEAK)),
                largest_free: self.slot.get(Self::mem(kind, M_LARGEST_FREE)),
            };
        }
        c.traces = self.slot.get(C_TRACES);
        c.trace_bytes = self.slot.get(C_TRACE_BYTES);
        c.replays = self.slot.get(C_REPLAYS);
        c
    }

    /// What a reader would see now (None only if another writer of this chip never lets go).
    pub fn snapshot(&self) -> Option<ChipSnapshot> {
        read_slot::<CHIP_USED_WORDS>(|i| self.slot.w(i))
            .ok()
            .map(|w| chip_from_words(&w))
    }
}

/// Link slot handle: Clone + Send + Sync.
#[derive(Clone)]
pub struct LinkPublisher {
    slot: Slot,
}

impl LinkPublisher {
    pub fn set_endpoints(&self, a_chip: u32, a_port: u32, b_chip: u32, b_port: u32) {
        let _g = write_lock(self.slot.w(L_SEQ));
        self.slot.set(L_A_CHIP, a_chip as u64);
        self.slot.set(L_A_PORT, a_port as u64);
        self.slot.set(L_B_CHIP, b_chip as u64);
        self.slot.set(L_B_PORT, b_port as u64);
    }

    /// `packets` packets carrying `bytes` bytes crossed the link.
    #[inline]
    pub fn add_traffic(&self, packets: u64, bytes: u64) {
        let _g = write_lock(self.slot.w(L_SEQ));
        let p = self.slot.get(L_PACKETS).saturating_add(packets);
        self.slot.set(L_PACKETS, p);
        let b = self.slot.get(L_BYTES).saturating_add(bytes);
        self.slot.set(L_BYTES, b);
    }

    pub fn add_stalls(&self, n: u64) {
        let _g = write_lock(self.slot.w(L_SEQ));
        let s = self.slot.get(L_STALLS).saturating_add(n);
        self.slot.set(L_STALLS, s);
    }

    pub fn add_errors(&self, n: u64) {
        let _g = write_lock(self.slot.w(L_SEQ));
        let e = self.slot.get(L_ERRORS).saturating_add(n);
        self.slot.set(L_ERRORS, e);
    }

    pub fn update(&self, f: impl FnOnce(&mut LinkCounters)) {
        let _g = write_lock(self.slot.w(L_SEQ));
        let mut c = LinkCounters {
            packets: self.slot.get(L_PACKETS),
            bytes: self.slot.get(L_BYTES),
            stalls: self.slot.get(L_STALLS),
            errors: self.slot.get(L_ERRORS),
        };
        f(&mut c);
        self.slot.set(L_PACKETS, c.packets);
        self.slot.set(L_BYTES, c.bytes);
        self.slot.set(L_STALLS, c.stalls);
        self.slot.set(L_ERRORS, c.errors);
    }

    pub fn snapshot(&self) -> Option<LinkSnapshot> {
        read_slot::<LINK_USED_WORDS>(|i| self.slot.w(i))
            .ok()
            .map(|w| link_from_words(&w))
    }
}

pub(crate) fn chip_from_words(w: &[u64; CHIP_USED_WORDS]) -> ChipSnapshot {
    let mem = |kind: MemoryKind| {
        let b = C_MEM + MEM_WORDS * kind.index();
        MemoryCounters {
            allocated: w[b + M_ALLOCATED],
            capacity: w[b + M_CAPACITY],
            live_buffers: w[b + M_LIVE],
            peak: w[b + M_PEAK],
            largest_free: w[b + M_LARGEST_FREE],
        }
    };
    ChipSnapshot {
        id: w[C_ID] as u32,
        coord: (w[C_ROW] as u32, w[C_COL] as u32),
        dram: mem(MemoryKind::Dram),
        l1: mem(MemoryKind::L1),
        l1_small: mem(MemoryKind::L1Small),
        trace: mem(MemoryKind::Trace),
        traces: w[C_TRACES],
        trace_bytes: w[C_TRACE_BYTES],
        replays: w[C_REPLAYS],
    }
}

pub(crate) fn link_from_words(w: &[u64; LINK_USED_WORDS]) -> LinkSnapshot {
    LinkSnapshot {
        a_chip: w[L_A_CHIP] as u32,
        a_port: w[L_A_PORT] as u32,
        b_chip: w[L_B_CHIP] as u32,
        b_port: w[L_B_PORT] as u32,
        packets: w[L_PACKETS],
        bytes: w[L_BYTES],
        stalls: w[L_STALLS],
        errors: w[L_ERRORS],
    }
}
