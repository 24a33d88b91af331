//! What a running case is doing, read by the watchdog when it reports a hang, and the wait
//! for every chip's queue that marks each chip done as it ends.

use std::thread;

use parking_lot::Mutex;
use ttmesh::{CqId, MeshDevice};
use ttmesh_chip::ChipError;

use super::SEND_SEMAPHORE;

/// What a running case is doing, read by the watchdog when it reports a hang.
#[derive(Default)]
pub struct Probe {
    pub stage: Mutex<String>,
    /// Per mesh index: its queue has reached the end of the case.
    pub done: Mutex<Vec<bool>>,
    pub mesh: Mutex<Option<MeshDevice>>,
    /// Over MPI ranks: why the ranks can no longer run cases together (they stopped making
    /// the same calls); the run stops.
    pub fatal: Mutex<Option<String>>,
}

impl Probe {
    pub(super) fn stage(&self, s: &str) {
        *self.stage.lock() = s.to_string();
    }
    /// Chips still waiting and semaphores holding counts, for a hang report.
    pub fn describe(&self) -> String {
        let mut out = format!("stuck while {}", self.stage.lock());
        let Some(mesh) = self.mesh.lock().clone() else {
            return out;
        };
        let done = self.done.lock().clone();
        let waiting: Vec<String> = mesh
            .chips()
            .iter()
            .enumerate()
            .filter(|(i, _)| !done.get(*i).copied().unwrap_or(false))
            .map(|(_, c)| format!("chip {} CQ 0", c.id()))
            .collect();
        if !waiting.is_empty() {
            out += &format!("; queues not finished: {}", waiting.join(", "));
        }
        if let Some(f) = mesh.fabric() {
            let mut sems = Vec::new();
            for c in mesh.chips() {
                let ids = (0..ttmesh_ccl::SEM_SLOT_BASE + 128).chain([SEND_SEMAPHORE]);
                for s in ids {
                    if let Ok(v) = f.semaphore_value(c.id(), s) {
                        if v > 0 {
                            sems.push(format!("chip {} semaphore {s} = {v}", c.id()));
                        }
                    }
                }
            }
            if !sems.is_empty() {
                out += &format!("; semaphores holding counts: {}", sems.join(", "));
            }
            if let Some(e) = f.failure() {
                out += &format!("; fabric stopped: {e}");
            }
        }
        out
    }
}

/// Waits for every chip's queue at once; each result is its own.
pub(super) fn finish_all(mesh: &MeshDevice, probe: &Probe) -> Vec<Result<(), ChipError>> {
    *probe.done.lock() = vec![false; mesh.num_devices()];
    thread::scope(|s| {
        let hs: Vec<_> = mesh
            .chips()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                s.spawn(move || {
                    let r = c.finish(CqId(0));
                    probe.done.lock()[i] = true;
                    r
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ChipError::Closed(u32::MAX)))
            })
            .collect()
    })
}
