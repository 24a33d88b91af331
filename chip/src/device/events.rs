//! Events between command queues (FACTS.md "Command queues and events").

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::{Chip, CqId};
use crate::command::{Encoder, Opcode};
use crate::error::{ChipError, Result};

/// An event of one chip. Recording it assigns the queue and the next event id of that queue;
/// it can be recorded again later (the seed's loops re-record the same event every iteration).
#[derive(Clone, Debug)]
pub struct Event {
    chip: u32,
    recorded: Arc<Mutex<Option<(CqId, u64)>>>,
}

impl Event {
    pub fn chip(&self) -> u32 {
        self.chip
    }
    /// The queue and id it was last recorded with.
    pub fn recorded(&self) -> Option<(CqId, u64)> {
        *self.recorded.lock()
    }
}

impl Chip {
    pub fn create_event(&self) -> Event {
        Event {
            chip: self.id(),
            recorded: Arc::new(Mutex::new(None)),
        }
    }

    fn own(&self, event: &Event) -> Result<()> {
        if event.chip != self.id() {
            return Err(ChipError::Queue(format!(
                "event of chip {} used on chip {}; create the event on the chip that records it",
                event.chip,
                self.id()
            )));
        }
        Ok(())
    }

    fn recorded_or_err(&self, event: &Event) -> Result<(CqId, u64)> {
        event.recorded().ok_or_else(|| {
            ChipError::Queue(format!(
                "event on chip {} was never recorded; call record_event before waiting on it",
                self.id()
            ))
        })
    }

    /// Enqueues the event on `cq`: it completes once everything enqueued before it has.
    pub fn record_event(&self, cq: CqId, event: &Event) -> Result<()> {
        self.own(event)?;
        self.forbid_capture(cq, "Events")?;
        let q = self.queue(cq)?;
        let id = q.allocate_event_id();
        let mut e = Encoder::with_capacity(16);
        e.simple(Opcode::RecordEvent, 0, id);
        *event.recorded.lock() = Some((cq, id));
        self.submit(cq, e.bytes, &[])
    }

    /// Makes `cq` stall on the device until the event completes; the host does not block.
    pub fn wait_for_event(&self, cq: CqId, event: &Event) -> Result<()> {
        self.own(event)?;
        self.forbid_capture(cq, "Events")?;
        self.queue(cq)?;
        let (src, id) = self.recorded_or_err(event)?;
        let mut e = Encoder::with_capacity(16);
        e.simple(Opcode::WaitEvent, src.0 as u16, id);
        self.submit(cq, e.bytes, &[])
    }

    /// Blocks the host until the event completes (with the operation timeout).
    pub fn event_synchronize(&self, event: &Event) -> Result<()> {
        self.own(event)?;
        self.forbid_capture(CqId(0), "Event Synchronization")?;
        let (cq, id) = self.recorded_or_err(event)?;
        let state = &self.shared.cq_states[cq.0 as usize];
        let timeout = self.operation_timeout();
        if state.wait_for(id, Instant::now() + timeout) {
            Ok(())
        } else {
            Err(ChipError::Timeout {
                what: format!(
                    "event_synchronize on chip {} waits for event {} of CQ {}",
                    self.id(),
                    id,
                    cq.0
                ),
                seconds: timeout.as_secs_f64(),
            })
        }
    }

    /// Non-blocking: has the event completed?
    pub fn event_query(&self, event: &Event) -> Result<bool> {
        self.own(event)?;
        let (cq, id) = self.recorded_or_err(event)?;
        Ok(self.shared.cq_states[cq.0 as usize].completed() >= id)
    }
}
