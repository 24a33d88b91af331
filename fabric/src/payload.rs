//! A message's payload on its way out of a `FabricSender`: given bytes, bytes computed where
//! they land, or bytes copied from the sending chip's memory (`Payload`), and the guard that
//! keeps bytes lent to the first hop alive until it has taken them (`RefGuard`). Sends
//! nothing itself: `sender` decides which path a message takes.

use crate::channel::{Channel, Tracker};
use crate::inner::Inner;
use crate::memory::{ChipMemory, ComputedFill};
use crate::packet;
use crate::FabricError;
use crate::NocAddr;
use std::sync::Arc;

type Result<T> = std::result::Result<T, FabricError>;

/// A data message's bytes: given, computed where they land (`write_with_and_inc`), or
/// copied from the sending chip's memory (`copy_and_inc`).
pub(crate) enum Payload<'a> {
    Bytes(&'a [u8]),
    Computed(Computed<'a>),
    Copied(Copied<'a>),
}

/// `len` bytes of the sending chip's memory at `from`; `staging` holds them when they must
/// travel as packets.
pub(crate) struct Copied<'a> {
    pub mem: &'a dyn ChipMemory,
    pub chip: u32,
    pub from: NocAddr,
    pub len: usize,
    pub staging: &'a mut Vec<u8>,
}

/// `len` bytes that `fill(offset, run, held)` writes in place, run by run in order
/// (`ChipMemory::write_trying`); `staging` holds them when they must travel as packets
/// instead.
pub(crate) struct Computed<'a> {
    pub len: usize,
    pub fill: &'a mut ComputedFill<'a>,
    pub staging: &'a mut Vec<u8>,
}

impl Payload<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Payload::Bytes(b) => b.len(),
            Payload::Computed(c) => c.len,
            Payload::Copied(c) => c.len,
        }
    }

    /// The bytes, computed or read into the staging buffer first if they are not given.
    pub(crate) fn bytes(&mut self) -> Result<&[u8]> {
        Ok(match self {
            Payload::Bytes(b) => b,
            Payload::Computed(c) => {
                c.staging.clear();
                c.staging.resize(c.len, 0);
                // Nothing is locked here, so the fill may wait for what it reads.
                (c.fill)(0, &mut c.staging[..], None);
                &c.staging[..]
            }
            Payload::Copied(c) => {
                c.staging.clear();
                c.staging.resize(c.len, 0);
                c.mem
                    .read(c.from, &mut c.staging[..])
                    .map_err(FabricError::read_failed(c.chip, c.from))?;
                &c.staging[..]
            }
        })
    }
}

/// Keeps a message's lent payloads alive: `settle` (or drop, on an error path) waits until
/// the first hop has taken every lent packet, and voids under the slot lock any it has not
/// taken by the timeout or shutdown, so no slot outlives the sender's buffer.
pub(crate) struct RefGuard<'a> {
    pub ch: &'a Channel,
    pub data: &'a [u8],
    pub first: Option<u64>,
    pub last: u64,
    pub tracker: &'a Arc<Tracker>,
    pub inner: &'a Inner,
    pub writes: u64,
    pub src: u32,
}

impl RefGuard<'_> {
    pub(crate) fn settle(&mut self) -> Result<()> {
        let Some(first) = self.first.take() else {
            return Ok(());
        };
        let timeout = self.inner.spec.timeout;
        let last = self.last;
        match self
            .inner
            .wait_with_help(self.ch, timeout, self.src, true, || self.ch.cursor() > last)
        {
            Ok(()) => Ok(()),
            Err(shut) => {
                self.revoke(first);
                Err(if shut {
                    FabricError::ShutDown
                } else {
                    FabricError::SendTimeout {
                        link: self.inner.link_name(self.ch.link),
                        src: self.src,
                        dst: self.ch.to,
                        waited: timeout,
                    }
                })
            }
        }
    }

    fn revoke(&self, first: u64) {
        for idx in first..=self.last {
            if self.ch.cursor() > idx {
                continue;
            }
            let mut s = self.ch.slot(idx);
            let ours = s.full
                && s.ext.is_some_and(|e| e.within(self.data))
                && s.tracker
                    .as_ref()
                    .is_some_and(|t| Arc::ptr_eq(t, self.tracker));
            if ours {
                s.hdr = packet::VOID_HEADER;
                s.ext = None;
                s.tracker = None;
                self.tracker.done(self.writes);
            }
        }
        // A pass may have taken lent packets into a write run that it has not issued yet
        // (their slots are free but the credits not returned): wait for that pass to end.
        if let Some(r) = self.ch.router() {
            r.quiesce();
        }
    }
}

impl Drop for RefGuard<'_> {
    fn drop(&mut self) {
        let _ = self.settle();
    }
}
