//! The guard over live traces' bytes: every DRAM write passes [`DeviceMemory::admit`], one
//! compare against the TRACE region's base in the common case; a write into a live trace is
//! refused naming the trace, and any write reaching the region moves its epoch, so a replay
//! knows when the bytes it kept may have changed.

use super::*;

impl DeviceMemory {
    /// Counts every DRAM write or discard that reaches `from` or above (see `watched_epoch`).
    pub fn watch_dram_from(&self, from: u64) {
        self.watch_from.store(from, Ordering::Release);
        self.watched_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Changes whenever watched DRAM (the TRACE region) may have changed.
    pub fn watched_epoch(&self) -> u64 {
        self.watched_epoch.load(Ordering::Acquire)
    }

    /// Refuses from now on every write into [start, end) of each DRAM bank, the bytes of
    /// live trace `trace` (written before this is called), until `unguard_trace`.
    pub(crate) fn guard_trace(&self, trace: u32, start: u64, end: u64) {
        debug_assert!(start >= self.watch_from.load(Ordering::Relaxed));
        self.live_traces.write().push((trace, start, end));
    }

    /// Lets writes into trace `trace`'s bytes through again (it is being released).
    pub(crate) fn unguard_trace(&self, trace: u32) {
        self.live_traces.write().retain(|&(t, ..)| t != trace);
    }

    /// Whether [addr, end) of a bank of `space` reaches the TRACE region: one compare, false
    /// for every write but a trace's own (and strays), which go no further.
    pub(super) fn reaches_trace_region(&self, space: MemSpace, end: u64) -> bool {
        space == MemSpace::Dram && end > self.watch_from.load(Ordering::Relaxed)
    }

    /// The live trace whose bytes [addr, end) of a DRAM bank overlaps, if any: (id, its bytes).
    pub(super) fn live_trace_in(&self, addr: u64, end: u64) -> Option<(u32, u64, u64)> {
        let live = self.live_traces.read();
        live.iter().copied().find(|&(_, s, e)| addr < e && s < end)
    }

    /// An error if `len` bytes written at `addr` of a bank would land inside a live trace's
    /// bytes: a replay would run them. One compare for any write below the TRACE region.
    pub fn check_write(&self, space: MemSpace, bank: u32, addr: u64, len: u64) -> Result<()> {
        let end = addr.saturating_add(len);
        if !self.reaches_trace_region(space, end) {
            return Ok(());
        }
        match self.live_trace_in(addr, end) {
            None => Ok(()),
            Some((trace, start, end)) => Err(ChipError::IntoLiveTrace(LiveTraceWrite {
                by: "a write".into(),
                chip: self.chip,
                bank,
                address: addr,
                len,
                trace,
                trace_bytes: (start, end),
            })),
        }
    }

    /// What every write passes first: refused if it would land in a live trace's bytes
    /// (unless `guarded` is false), counted in the watched epoch if it reaches the TRACE
    /// region. One compare for the rest.
    pub(super) fn admit(
        &self,
        space: MemSpace,
        bank: u32,
        addr: u64,
        len: u64,
        guarded: bool,
    ) -> Result<()> {
        if !self.reaches_trace_region(space, addr + len) {
            return Ok(());
        }
        if guarded {
            self.check_write(space, bank, addr, len)?;
        }
        self.watched_epoch.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}
