//! The seam to chips another process holds: a big mesh split over MPI ranks, where a link's
//! far chip lives on another rank.
//!
//! Every rank builds the whole fabric (every line, channel and router), so routes, credits,
//! statistics and faults are the same per-link machinery whether a chip is here or not; only
//! the last step differs. A packet's delivery into a chip held elsewhere goes to that chip's
//! `ChipMemory` here, which the transport (`ttmesh-transport-mpi`) gives the fabric and which
//! forwards the write to the rank that holds the chip; its semaphore increment goes through
//! [`RemoteChips::add_semaphore`], after the writes before it. The far rank delivers them
//! through its own chip's `ChipMemory` and [`crate::Fabric::add_semaphore`]. Kernels run only
//! on chips held here, so no packet starts on a chip held elsewhere.
//!
//! Credits into a chip held elsewhere return as that chip's end would return them, once it
//! took the packets: the router holds a batch's credits under [`RemoteChips::mark`] (taken
//! after the batch's deliveries) until [`RemoteChips::confirmed`] reaches it, and the
//! transport calls [`crate::Fabric::confirmations_arrived`] when it does.

use crate::FabricError;

/// The chips of a fabric that another process holds, and how to reach them.
pub trait RemoteChips: Send + Sync {
    /// True if `chip` is held by another process.
    fn is_remote(&self, chip: u32) -> bool;
    /// Adds `by` to semaphore `sem` of a chip held elsewhere, after every write this process
    /// delivered to that chip before it (so a receiver that sees the increment sees the data).
    fn add_semaphore(&self, chip: u32, sem: u32, by: u64);
    /// This fabric stopped (`Fabric::abort`) because of `cause` on `chip`: the other
    /// processes stop theirs, so their waits end now rather than at their timeouts.
    fn aborted(&self, chip: u32, cause: &FabricError);
    /// A thread of this process begins waiting for what another process may send (a
    /// semaphore increment); [`RemoteChips::wait_ends`] follows. Lets the transport look for
    /// incoming messages promptly while someone waits, and rarely otherwise.
    fn wait_begins(&self) {}
    fn wait_ends(&self) {}
    /// A mark after everything this process has sent so far to the process holding `chip`
    /// (writes, increments, statistics): the credits of packets just delivered there return
    /// once [`RemoteChips::confirmed`] reaches it. Marks only grow.
    fn mark(&self, chip: u32) -> u64 {
        let _ = chip;
        0
    }
    /// The highest mark the process holding `chip` has confirmed taking. The transport calls
    /// [`crate::Fabric::confirmations_arrived`] when it grows.
    fn confirmed(&self, chip: u32) -> u64 {
        let _ = chip;
        u64::MAX
    }
    /// `packets` carrying `payload` bytes crossed link `link` (from its `a` end if `a_to_b`)
    /// into `chip`, held elsewhere: counted here where their slots were filled, and told to
    /// the process holding `chip`, which adds them to its statistics
    /// ([`crate::Fabric::count_arrived`]), so a link's counts are whole where its receiving
    /// chip is held.
    fn arrived(&self, chip: u32, link: usize, a_to_b: bool, packets: u64, payload: u64) {
        let _ = (chip, link, a_to_b, packets, payload);
    }
}

/// A wait announced to the other processes' transport while it lasts.
pub(crate) struct RemoteWait<'a>(Option<&'a dyn RemoteChips>);

impl<'a> RemoteWait<'a> {
    pub fn begin(remote: Option<&'a dyn RemoteChips>) -> Self {
        if let Some(r) = remote {
            r.wait_begins();
        }
        RemoteWait(remote)
    }
}

impl Drop for RemoteWait<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.0 {
            r.wait_ends();
        }
    }
}
