//! Metal Trace on one chip: capture to a host buffer, size and store in the TRACE region, replay
//! with one EXEC_BUF, release; plus the replay sanitizer, which hardware does not have.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use super::{Chip, CqId};
use crate::allocator::{Allocation, AllocationRequest, BufferType, MemSpace, Placement};
use crate::command::{Encoder, Opcode, HEADER_BYTES};
use crate::error::{ChipError, RecordFault, Result};
use crate::program::Access;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId(pub u32);

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A buffer a captured launch touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct BufferRef {
    pub buffer_type: BufferType,
    pub address: u64,
    pub size: u64,
    pub buffer_id: u64,
    pub access: Access,
}

pub(crate) struct Capture {
    pub trace_id: u32,
    pub bytes: Vec<u8>,
    pub refs: BTreeSet<(BufferType, u64, u64, bool)>,
    pub commands: u64,
}

impl Capture {
    pub(crate) fn append(&mut self, bytes: &[u8], refs: &[BufferRef]) {
        self.bytes.extend_from_slice(bytes);
        self.commands += 1;
        for r in refs {
            self.refs
                .insert((r.buffer_type, r.address, r.size, r.access != Access::Read));
        }
    }
}

/// A live buffer the trace uses that existed when capture ended: it must still be that buffer.
#[derive(Clone, Debug)]
struct Guard {
    buffer_type: BufferType,
    address: u64,
    size: u64,
    buffer_id: u64,
}

/// A range the trace writes whose buffer was freed during capture (an intermediate): nothing
/// allocated after capture may overlap it.
#[derive(Clone, Debug)]
struct PrivateRange {
    buffer_type: BufferType,
    address: u64,
    size: u64,
}

pub(crate) struct TraceRecord {
    cq: CqId,
    alloc: Allocation,
    /// Command bytes including the EXEC_BUF_END record.
    size: u64,
    page_size: u64,
    num_pages: u64,
    commands: u64,
    guards: Vec<Guard>,
    private: Vec<PrivateRange>,
    /// Buffers with an id above this were allocated after capture ended.
    watermark: u64,
    checked_generation: Option<u64>,
    replays: u64,
    last_replay: Duration,
    replayed_commands: u64,
    /// Captured during a NO_DISPATCH graph capture: its commands were encoded (so its size is
    /// exact) but never written to the TRACE region, so it can replay only under NO_DISPATCH.
    captured_without_dispatch: bool,
    /// `trace_digest` of the command bytes as captured: a replay that reads them back from
    /// DRAM checks it before any record runs.
    digest: u64,
    /// The command bytes as captured, compared only when the digest differs, to name the
    /// first damaged byte.
    captured: Vec<u8>,
}

/// The digest a replay checks a trace's command bytes against. xxh3 (64-bit) for speed: it
/// hashes at memory bandwidth, so a check costs about what reading the bytes from DRAM
/// did; 64 bits make a damaged trace that keeps its digest a 2^-64 chance.
pub fn trace_digest(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Why bytes read back for an EXEC_BUF may not run: the record is not a live trace's
/// (refused at the EXEC_BUF), or the trace's bytes were damaged (refused at the record
/// holding the first damaged byte, whose offset and opcode in the capture are given).
pub(crate) enum ReplayRefusal {
    NotCaptured(RecordFault),
    Damaged {
        record: usize,
        opcode: Option<Opcode>,
        fault: RecordFault,
    },
}

#[derive(Default)]
pub(crate) struct TraceTable {
    next_id: u32,
    capturing: HashMap<u32, CqId>,
    traces: HashMap<u32, TraceRecord>,
}

impl TraceTable {
    pub(crate) fn has_live_traces(&self) -> bool {
        !self.traces.is_empty()
    }
    pub(crate) fn record_replay(&mut self, id: u32, commands: u64, elapsed: Duration) {
        if let Some(t) = self.traces.get_mut(&id) {
            t.last_replay = elapsed;
            t.replayed_commands = commands;
        }
    }
    /// Checks an EXEC_BUF and the command bytes it read from DRAM against the capture of
    /// its trace: the same place and size, and the same bytes by digest.
    pub(crate) fn check_replay(
        &self,
        trace_id: u32,
        (address, page_size, num_pages): (u32, u64, u32),
        bytes: &[u8],
    ) -> Result<(), ReplayRefusal> {
        let not_captured = |captured: String| {
            ReplayRefusal::NotCaptured(RecordFault::NotCaptured {
                trace: trace_id,
                address,
                pages: num_pages,
                page_size,
                size: bytes.len() as u64,
                captured,
            })
        };
        let Some(t) = self.traces.get(&trace_id) else {
            return Err(not_captured(format!(
                "this chip has no live trace {trace_id}"
            )));
        };
        let placed = (t.alloc.address, t.page_size, t.num_pages, t.size);
        if placed
            != (
                address as u64,
                page_size,
                num_pages as u64,
                bytes.len() as u64,
            )
        {
            return Err(not_captured(format!(
                "trace {trace_id} was captured as {} pages of {} B at {:#x} holding {} B",
                t.num_pages, t.page_size, t.alloc.address, t.size
            )));
        }
        if trace_digest(bytes) == t.digest {
            return Ok(());
        }
        // Same length (checked above), different digest: some byte differs.
        let offset = bytes
            .iter()
            .zip(&t.captured)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        // The capture's own bytes always decode.
        let record = crate::command::record_offsets(&t.captured)
            .unwrap_or_default()
            .into_iter()
            .take_while(|&at| at <= offset)
            .last()
            .unwrap_or(0);
        Err(ReplayRefusal::Damaged {
            record,
            opcode: t.captured.get(record).copied().and_then(Opcode::from_u8),
            fault: RecordFault::Damaged {
                offset,
                captured: t.captured[offset],
                found: bytes[offset],
            },
        })
    }
    fn total_size(&self) -> u64 {
        self.traces.values().map(|t| t.alloc.size()).sum()
    }
    /// Ranges in `space` that live traces write although no buffer owns them (intermediates
    /// freed during capture): their host memory must survive frees of neighbouring buffers.
    pub(crate) fn private_ranges(&self, space: MemSpace) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.traces
            .values()
            .flat_map(|t| t.private.iter())
            .filter(move |p| p.buffer_type.space() == space)
            .map(|p| (p.address, p.address + p.size))
    }
}

/// What a user can learn about one trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceInfo {
    pub id: TraceId,
    pub cq: CqId,
    pub address: u64,
    /// Command bytes (with EXEC_BUF_END) and the buffer size after padding.
    pub command_bytes: u64,
    pub buffer_size: u64,
    pub page_size: u64,
    pub num_pages: u64,
    pub commands: u64,
    pub replays: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceStats {
    pub live_traces: u64,
    /// tt-metal's trace_buffers_size: the running total of live trace buffers on this chip.
    pub trace_buffers_size: u64,
    pub replays: u64,
}

/// tt-metal's page choice for a trace buffer: the power of two in [1024, 4096] that wastes least
/// when the size is padded to `banks * page`; ties go to the larger page.
pub fn trace_page_size(size: u64, banks: u64) -> (u64, u64) {
    let mut best = (u64::MAX, 0u64, 0u64);
    for page in [1024u64, 2048, 4096] {
        let padded = size.div_ceil(banks * page) * banks * page;
        let waste = padded - size;
        if waste <= best.0 {
            best = (waste, page, padded);
        }
    }
    (best.1, best.2)
}

/// A captured trace's command bytes in device DRAM, for tools that inspect or damage them
/// (fault injection, fuzzing the replay's checks): pages interleaved over the DRAM banks from
/// the trace's address, as the capture stored them.
impl Chip {
    fn trace_page(&self, info: &TraceInfo, p: u64) -> (u32, u64) {
        let banks = self.arch().num_dram_banks as u64;
        (
            (p % banks) as u32,
            info.address + (p / banks) * info.page_size,
        )
    }

    /// The command bytes of a live trace (its EXEC_BUF_END included, padding left out).
    pub fn read_trace_commands(&self, info: &TraceInfo) -> Result<Vec<u8>> {
        let mut bytes = vec![0u8; (info.page_size * info.num_pages) as usize];
        for (p, page) in bytes.chunks_mut(info.page_size as usize).enumerate() {
            let (bank, addr) = self.trace_page(info, p as u64);
            self.memory().read(MemSpace::Dram, bank, addr, page)?;
        }
        bytes.truncate(info.command_bytes as usize);
        Ok(bytes)
    }

    /// Writes `bytes` over a live trace's commands from its start: fault injection, standing
    /// for damage the emulator cannot see (a DRAM fault), so it passes the refusal of writes
    /// into live traces (`DeviceMemory::check_write`). A replay's digest check catches it
    /// unless `set_trace_digest(false)`.
    pub fn write_trace_commands(&self, info: &TraceInfo, bytes: &[u8]) -> Result<()> {
        for (p, page) in bytes.chunks(info.page_size as usize).enumerate() {
            let (bank, addr) = self.trace_page(info, p as u64);
            self.memory()
                .write_past_trace_guard(MemSpace::Dram, bank, addr, page)?;
        }
        Ok(())
    }
}

impl Chip {
    pub fn begin_trace_capture(&self, cq: CqId) -> Result<TraceId> {
        self.queue(cq)?;
        let mut table = self.shared.traces.lock();
        let mut cap = self.captures[cq.0 as usize].lock();
        if let Some(c) = cap.as_ref() {
            return Err(ChipError::Trace(format!(
                "CQ {} is already being used for tracing tid {}. End that capture first (end_trace_capture)",
                cq.0, c.trace_id
            )));
        }
        let id = table.next_id;
        table.next_id += 1;
        table.capturing.insert(id, cq);
        *cap = Some(Capture {
            trace_id: id,
            bytes: Vec::new(),
            refs: BTreeSet::new(),
            commands: 0,
        });
        Ok(TraceId(id))
    }

    pub fn end_trace_capture(&self, tid: TraceId, cq: CqId) -> Result<()> {
        self.queue(cq)?;
        let capture = {
            let mut cap = self.captures[cq.0 as usize].lock();
            match cap.as_ref() {
                Some(c) if c.trace_id == tid.0 => cap.take().unwrap(),
                _ => {
                    return Err(ChipError::Trace(format!(
                        "CQ {} is not being used for tracing tid {}. Call begin_trace_capture on this CQ first",
                        cq.0, tid.0
                    )))
                }
            }
        };
        self.shared.traces.lock().capturing.remove(&tid.0);
        let mut bytes = capture.bytes;
        let mut end = Encoder::with_capacity(HEADER_BYTES);
        end.simple(Opcode::ExecBufEnd, 0, 0);
        bytes.extend_from_slice(&end.bytes);
        let size = bytes.len() as u64;
        let digest = trace_digest(&bytes);
        let captured = bytes.clone();
        let banks = self.arch().num_dram_banks as u64;
        let (page_size, padded) = trace_page_size(size, banks);
        let num_pages = padded / page_size;
        let region = self.config().trace_region_size;
        let existing = self.shared.traces.lock().total_size();
        if existing + padded > region {
            return Err(self.trace_region_error(existing + padded));
        }
        let req = AllocationRequest {
            buffer_type: BufferType::Trace,
            page_size,
            num_pages,
            placement: Placement::Interleaved,
        };
        let alloc = match self.allocate(&req) {
            Ok(a) => a,
            Err(ChipError::OutOfMemory { .. }) => {
                // Fragmented region: name a size that fits the live traces plus this one end to end.
                let top = self.with_allocator(|a| {
                    let m = a.manager(BufferType::Trace);
                    m.allocated_blocks()
                        .map(|(addr, b)| addr + b.size - m.base())
                        .max()
                        .unwrap_or(0)
                });
                return Err(self.trace_region_error(top * banks + padded));
            }
            Err(e) => return Err(e),
        };
        bytes.resize(padded as usize, 0);
        let without_dispatch = self.sends_nothing();
        let pages = if without_dispatch { 0 } else { num_pages };
        for p in 0..pages {
            let (bank, addr) = alloc.page_map().location(p);
            let page = &bytes[(p * page_size) as usize..((p + 1) * page_size) as usize];
            self.memory().write(MemSpace::Dram, bank, addr, page)?;
        }
        if !without_dispatch {
            // From here on, writes into these bytes are refused: a replay runs them.
            self.memory()
                .guard_trace(tid.0, alloc.address, alloc.address + alloc.per_bank_size);
        }
        let (guards, private, watermark) = self.with_allocator(|a| {
            let mut guards = Vec::new();
            let mut private = Vec::new();
            for &(t, address, size, writes) in &capture.refs {
                let live = a.overlapping(t, address, size);
                match live.iter().find(|(addr, _)| *addr == address) {
                    Some((_, b)) => guards.push(Guard {
                        buffer_type: t,
                        address,
                        size,
                        buffer_id: b.buffer_id,
                    }),
                    None if writes => private.push(PrivateRange {
                        buffer_type: t,
                        address,
                        size,
                    }),
                    None => {}
                }
            }
            // Every id handed out so far, including this trace's own buffer.
            (guards, private, alloc.id)
        });
        self.shared.traces.lock().traces.insert(
            tid.0,
            TraceRecord {
                cq,
                alloc,
                size,
                page_size,
                num_pages,
                commands: capture.commands,
                guards,
                private,
                watermark,
                checked_generation: None,
                replays: 0,
                last_replay: Duration::ZERO,
                replayed_commands: 0,
                captured_without_dispatch: without_dispatch,
                digest,
                captured,
            },
        );
        Ok(())
    }

    fn trace_region_error(&self, needed: u64) -> ChipError {
        ChipError::Trace(format!(
            "Creating trace buffers of size {}B on device {}, but only {}B is allocated for trace region. Open the device with trace_region_size of at least {}",
            needed,
            self.id(),
            self.config().trace_region_size,
            needed
        ))
    }

    /// Replays a trace with one EXEC_BUF command; `Blocking::Yes` waits for it to finish.
    pub fn execute_trace(
        &self,
        tid: TraceId,
        cq: CqId,
        blocking: impl Into<crate::tensor::Blocking>,
    ) -> Result<()> {
        self.enqueue_trace(tid, cq)?;
        if blocking.into() == crate::tensor::Blocking::Yes {
            self.finish(cq)?;
        }
        Ok(())
    }

    /// Checks the trace (sanitizer) and enqueues its replay; the mesh calls this per chip.
    pub fn enqueue_trace(&self, tid: TraceId, cq: CqId) -> Result<()> {
        self.enqueue_trace_with_callbacks(tid, cq, None, None, true)
    }

    /// Like `enqueue_trace`, with host callbacks run by the dispatcher right before and right
    /// after the replay, all in one submission (the mesh's lockstep barrier and finish stamp).
    /// With `wake = false` a sleeping dispatcher stays asleep until [`Chip::wake`].
    pub fn enqueue_trace_with_callbacks(
        &self,
        tid: TraceId,
        cq: CqId,
        before: Option<super::Callback>,
        after: Option<super::Callback>,
        wake: bool,
    ) -> Result<()> {
        self.queue(cq)?;
        if self.is_capturing(cq) {
            return Err(ChipError::Trace(format!(
                "execute_trace of tid {} while CQ {} is capturing; end the capture first",
                tid.0, cq.0
            )));
        }
        let mut e = Encoder::with_capacity(96);
        {
            let mut table = self.shared.traces.lock();
            // `unknown_trace` reads the table we hold: pass it rather than locking again.
            let t = match table.traces.get_mut(&tid.0) {
                Some(t) => t,
                None => return Err(self.unknown_trace(&table, tid, "execute")),
            };
            if t.captured_without_dispatch && !self.sends_nothing() {
                return Err(ChipError::Trace(format!(
                    "cannot execute trace tid {} on device {}: it was captured during a NO_DISPATCH graph capture, so its commands were never written to the device; release_trace and capture it again outside NO_DISPATCH",
                    tid.0,
                    self.id()
                )));
            }
            if self
                .shared
                .sanitizer
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                self.sanitize(tid, t)?;
            }
            t.replays += 1;
            if let Some(f) = before {
                e.simple(Opcode::HostCallback, 0, self.shared.register_callback(f));
            }
            e.simple(Opcode::ResetGo, 0, 0);
            e.simple(Opcode::Stall, 0, 0);
            e.exec_buf(
                tid.0,
                t.alloc.address as u32,
                t.page_size.trailing_zeros() as u16,
                t.num_pages as u32,
                t.size,
            );
            if let Some(f) = after {
                e.simple(Opcode::HostCallback, 0, self.shared.register_callback(f));
            }
        }
        self.submit_with_wake(cq, e.bytes, &[], wake)
    }

    fn unknown_trace(&self, table: &TraceTable, tid: TraceId, what: &str) -> ChipError {
        let mut known: Vec<u32> = table.traces.keys().copied().collect();
        known.sort_unstable();
        ChipError::Trace(format!(
            "cannot {what} trace tid {} on device {}: no such trace (live traces: {:?}); it was never captured or was released",
            tid.0,
            self.id(),
            known
        ))
    }

    fn sanitize(&self, tid: TraceId, t: &mut TraceRecord) -> Result<()> {
        let chip = self.id();
        self.with_allocator(|a| {
            if t.checked_generation == Some(a.generation()) {
                return Ok(());
            }
            for g in &t.guards {
                if a.is_live(g.buffer_type, g.address, g.buffer_id) {
                    continue;
                }
                let now = a.overlapping(g.buffer_type, g.address, g.size);
                let what = match now.first() {
                    None => "was freed after capture".to_string(),
                    Some((addr, b)) => format!(
                        "was freed after capture and buffer #{} ({} B per bank at {:#x}) now sits there",
                        b.buffer_id, b.size, addr
                    ),
                };
                return Err(ChipError::Trace(format!(
                    "trace {} on chip {chip}: captured {} buffer #{} at {:#x} ({} B per bank) {what}; replaying would use memory that no longer belongs to it. Keep the tensor alive while the trace exists, or release_trace and capture again",
                    tid.0, g.buffer_type, g.buffer_id, g.address, g.size
                )));
            }
            for p in &t.private {
                if let Some((addr, b)) =
                    a.overlapping(p.buffer_type, p.address, p.size).into_iter().find(|(_, b)| b.buffer_id > t.watermark)
                {
                    return Err(ChipError::Trace(format!(
                        "trace {} on chip {chip} writes {} [{:#x}, {:#x}) (a buffer freed during capture), but buffer #{} allocated after capture at {:#x} ({} B per bank) overlaps it and would be corrupted. Allocate persistent tensors before capture, or release_trace first",
                        tid.0,
                        p.buffer_type,
                        p.address,
                        p.address + p.size,
                        b.buffer_id,
                        addr,
                        b.size
                    )));
                }
            }
            t.checked_generation = Some(a.generation());
            Ok(())
        })
    }

    pub fn release_trace(&self, tid: TraceId) -> Result<()> {
        let record = {
            let mut table = self.shared.traces.lock();
            let r = table.traces.remove(&tid.0);
            r.ok_or_else(|| self.unknown_trace(&table, tid, "release"))?
        };
        self.memory().unguard_trace(tid.0);
        self.deallocate(&record.alloc)
    }

    pub fn trace_info(&self, tid: TraceId) -> Option<TraceInfo> {
        let table = self.shared.traces.lock();
        table.traces.get(&tid.0).map(|t| TraceInfo {
            id: tid,
            cq: t.cq,
            address: t.alloc.address,
            command_bytes: t.size,
            buffer_size: t.alloc.size(),
            page_size: t.page_size,
            num_pages: t.num_pages,
            commands: t.commands,
            replays: t.replays,
        })
    }

    /// Commands decoded and wall time of the last replay of a trace (kernels included).
    pub fn last_replay(&self, tid: TraceId) -> Option<(u64, Duration)> {
        let table = self.shared.traces.lock();
        table
            .traces
            .get(&tid.0)
            .map(|t| (t.replayed_commands, t.last_replay))
    }

    pub fn trace_stats(&self) -> TraceStats {
        let table = self.shared.traces.lock();
        TraceStats {
            live_traces: table.traces.len() as u64,
            trace_buffers_size: table.total_size(),
            replays: table.traces.values().map(|t| t.replays).sum(),
        }
    }

    /// Turns the check of a trace's bytes against its capture's digest on or off (it starts
    /// as `ChipConfig::trace_digest`). Off, a damaged trace runs whatever it now says.
    pub fn set_trace_digest(&self, on: bool) {
        self.shared
            .trace_digest
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Turns the replay sanitizer on or off (it starts as `ChipConfig::replay_sanitizer`).
    pub fn set_replay_sanitizer(&self, on: bool) {
        self.shared
            .sanitizer
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::ArchSpec;
    use crate::device::ChipConfig;
    use crate::tensor::{DataType, HostTensor, Layout, MemoryConfig, Tensor};

    /// An EXEC_BUF the host did not make from a live trace (its command bytes damaged on the
    /// way: another trace id, place or size) is refused at the EXEC_BUF, naming what was
    /// captured, rather than running whatever bytes it points at.
    #[test]
    fn an_exec_buf_that_names_no_captured_trace_is_refused() {
        let mut cfg = ChipConfig::new(0, ArchSpec::wormhole_b0());
        cfg.trace_region_size = 1 << 20;
        let chip = Chip::open(cfg).unwrap();
        let cq = CqId(0);
        let host = HostTensor::from_f32(vec![32, 32], DataType::BFloat16, vec![1.0; 1024]).unwrap();
        let x = Tensor::from_host(&host, &chip, Layout::Tile, MemoryConfig::L1, cq).unwrap();
        let opts = crate::ops::OpOptions::default();
        let y = crate::ops::relu(&x, &opts).unwrap();
        let tid = chip.begin_trace_capture(cq).unwrap();
        crate::ops::relu(&x, &crate::ops::OpOptions::into_output(&y)).unwrap();
        chip.end_trace_capture(tid, cq).unwrap();
        let t = chip.trace_info(tid).unwrap();
        let log2 = t.page_size.trailing_zeros() as u16;
        let (address, pages) = (t.address as u32, t.num_pages as u32);
        for (id, size, why) in [
            (tid.0 + 7, t.command_bytes, "this chip has no live trace 7"),
            (tid.0, t.command_bytes - 16, "trace 0 was captured as"),
        ] {
            let mut e = Encoder::new();
            e.exec_buf(id, address, log2, pages, size);
            chip.submit(cq, e.bytes, &[]).unwrap();
            let err = chip.finish(cq).unwrap_err();
            assert!(
                matches!(
                    &err,
                    ChipError::BadRecord {
                        fault: RecordFault::NotCaptured { .. },
                        ..
                    }
                ),
                "{err}"
            );
            assert!(err.to_string().contains(why), "{err}");
        }
        chip.execute_trace(tid, cq, true).unwrap();
    }
}
