//! Host <-> device page transfers through a command queue: `enqueue_write_pages`, and
//! `enqueue_read_pages` with the [`PendingRead`] handle that waits (bounded by the operation
//! timeout) for the dispatcher to deliver the bytes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::{validate, Chip, ChipShared, CqId, ReadSlot};
use crate::allocator::MemSpace;
use crate::command::Encoder;
use crate::error::{ChipError, Result};

impl Chip {
    /// Writes pages (logical page data + their locations) through a queue.
    pub fn enqueue_write_pages(
        &self,
        cq: CqId,
        space: MemSpace,
        page_size: u32,
        locations: &[(u32, u32)],
        data: &[u8],
    ) -> Result<()> {
        self.forbid_capture(cq, "Writes")?;
        if self.sends_nothing() {
            return Ok(());
        }
        let mut e = Encoder::with_capacity(64 + locations.len() * 8 + data.len());
        e.write_paged(space, page_size, locations, data);
        self.submit(cq, e.bytes, &[])
    }

    /// Enqueues a read of pages; the returned handle yields the bytes once the queue gets there.
    pub fn enqueue_read_pages(
        &self,
        cq: CqId,
        space: MemSpace,
        page_size: u32,
        locations: &[(u32, u32)],
    ) -> Result<PendingRead> {
        self.forbid_capture(cq, "Reads")?;
        if self.sends_nothing() {
            return Err(ChipError::NoDispatch { what: "Reads" });
        }
        self.check_request(cq, "enqueue_read_pages", || {
            validate::check_pages(
                &self.shared.memory,
                space,
                page_size,
                locations.iter().copied(),
                true,
            )
        })?;
        let handle = self.shared.next_handle.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(ReadSlot {
            data: Mutex::new(None),
            cv: Condvar::new(),
        });
        self.shared.reads.lock().insert(handle, slot.clone());
        let mut e = Encoder::with_capacity(64 + locations.len() * 8);
        e.read_paged(handle, space, page_size, locations);
        if let Err(err) = self.submit(cq, e.bytes, &[]) {
            self.shared.reads.lock().remove(&handle);
            return Err(err);
        }
        Ok(PendingRead {
            shared: self.shared.clone(),
            handle,
            slot,
            cq,
        })
    }
}

/// A read in flight; `wait` returns the page bytes in the order requested.
pub struct PendingRead {
    shared: Arc<ChipShared>,
    handle: u64,
    slot: Arc<ReadSlot>,
    cq: CqId,
}

impl PendingRead {
    pub fn wait(self) -> Result<Vec<u8>> {
        self.shared
            .observers
            .each(crate::observe::Interests::HOST_WAITS, |o| {
                o.host_waits(self.shared.id, self.cq)
            });
        let timeout = self.shared.config.operation_timeout;
        let deadline = Instant::now() + timeout;
        let mut g = self.slot.data.lock();
        while g.is_none() {
            if self.slot.cv.wait_until(&mut g, deadline).timed_out() && g.is_none() {
                self.shared.reads.lock().remove(&self.handle);
                return Err(ChipError::Timeout {
                    what: format!(
                        "read {} on chip {} CQ {} did not complete",
                        self.handle, self.shared.id, self.cq.0
                    ),
                    seconds: timeout.as_secs_f64(),
                });
            }
        }
        let data = g
            .take()
            .unwrap_or_else(|| Err(ChipError::Queue("read slot emptied twice".into())));
        drop(g);
        data
    }

    pub fn is_ready(&self) -> bool {
        self.slot.data.lock().is_some()
    }
}

impl Drop for PendingRead {
    /// A read dropped unread (or read) leaves no slot behind, so its data is not kept forever.
    fn drop(&mut self) {
        self.shared.reads.lock().remove(&self.handle);
    }
}
