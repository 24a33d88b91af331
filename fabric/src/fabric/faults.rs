//! When something goes wrong: stopping the fabric after a failed collective (here and, over
//! MPI ranks, elsewhere), recovering it, and injecting link faults.

use std::sync::atomic::Ordering::SeqCst;
use std::thread;
use std::time::{Duration, Instant};

use super::{Fabric, Result};
use crate::config::*;
use crate::FabricError;

impl Fabric {
    /// Stops the fabric taking new work after a collective failed on `chip` with `cause`
    /// (the first cause is kept; later ones are its consequences). Every running and later
    /// `wait_semaphore` and send fails at once with [`FabricError::Aborted`] naming it, so
    /// the other chips of the collective end now instead of at their timeouts, and nothing
    /// runs on semaphores and slots the failed collective left half used. Packets already in
    /// flight are still delivered or lost as usual. [`Fabric::recover`] ends the state.
    pub fn abort(&self, chip: u32, cause: FabricError) {
        if let (true, Some(r)) = (self.stop(chip, cause.clone()), &self.inner.remote) {
            r.aborted(chip, &cause);
        }
    }

    /// [`Fabric::abort`] at another process's word (a rank whose collective failed): stops
    /// this fabric the same way without telling the others again.
    pub fn abort_from_elsewhere(&self, chip: u32, cause: FabricError) {
        self.stop(chip, cause);
    }

    /// Sets the failure if none is set; true if this call set it.
    fn stop(&self, chip: u32, cause: FabricError) -> bool {
        let inner = &self.inner;
        let mut first = false;
        {
            let mut f = inner.failure.lock();
            if f.is_none() {
                let cause = match cause {
                    FabricError::Aborted { .. } => return false,
                    c => Box::new(c),
                };
                *f = Some(FabricError::Aborted { chip, cause });
                first = true;
            }
            inner.aborted.store(true, SeqCst);
        }
        for s in &inner.sems {
            let _g = s.vals.lock();
            s.cv.notify_all();
        }
        first
    }

    /// The error the fabric answers with while aborted (see [`Fabric::abort`]).
    pub fn failure(&self) -> Option<FabricError> {
        self.inner.abort_error()
    }

    /// Brings an aborted fabric back to a defined state: waits (up to `timeout`) until no
    /// packet is in flight and no router pass runs, then zeroes every chip's semaphores,
    /// forgets recorded losses and lifts the abort. The caller must make sure no kernel uses
    /// the fabric meanwhile (the mesh calls it once every chip's queues are idle). If packets
    /// are still in flight at the timeout, the fabric stays aborted and the error says so.
    pub fn recover(&self, timeout: Duration) -> Result<()> {
        let inner = &self.inner;
        let deadline = Instant::now() + timeout;
        loop {
            let busy = inner.channels.iter().filter(|c| c.len() > 0).count();
            if busy == 0 {
                break;
            }
            if inner.shutdown.load(SeqCst) {
                return Err(FabricError::ShutDown);
            }
            if Instant::now() >= deadline {
                return Err(FabricError::ResetFailed {
                    what: format!(
                        "{busy} channels still held packets after {timeout:?}{}",
                        inner.fault_note()
                    ),
                });
            }
            inner.wake_all();
            thread::sleep(Duration::from_millis(1));
        }
        // A pass that took the last packet may still be delivering it.
        for ch in &inner.channels {
            if let Some(r) = ch.router() {
                r.quiesce();
            }
        }
        for chip in 0..inner.spec.num_chips as usize {
            inner.sems[chip].vals.lock().clear();
            inner.clear_losses(chip as u32);
        }
        let mut f = inner.failure.lock();
        inner.aborted.store(false, SeqCst);
        *f = None;
        Ok(())
    }

    fn check_link(&self, link_index: usize) -> Result<()> {
        let n = self.inner.spec.links.len();
        if link_index >= n {
            return Err(FabricError::InvalidArgument(format!(
                "link index {link_index} does not exist: the spec has {n} links (0..{n})"
            )));
        }
        Ok(())
    }

    /// Injects a fault on link `link_index` (index into `FabricSpec::links`), both directions.
    pub fn inject(&self, link_index: usize, fault: Fault) -> Result<()> {
        self.check_link(link_index)?;
        match fault {
            Fault::Slow { factor } if !(factor.is_finite() && factor >= 1.0) => {
                return Err(FabricError::InvalidArgument(format!(
                    "Fault::Slow factor {factor} must be a finite number >= 1"
                )))
            }
            Fault::Drop { every_nth: 0 } | Fault::Corrupt { every_nth: 0 } => {
                return Err(FabricError::InvalidArgument(
                    "every_nth is 0; use 1 to hit every packet".into(),
                ))
            }
            _ => {}
        }
        self.inner.faults[link_index].set(Some(fault));
        Ok(())
    }

    pub fn clear_fault(&self, link_index: usize) -> Result<()> {
        self.check_link(link_index)?;
        self.inner.faults[link_index].set(None);
        Ok(())
    }
}
