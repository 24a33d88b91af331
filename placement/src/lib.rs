//! ttmesh-placement: where the emulator's own threads run. Every emulated chip has dispatcher
//! threads (one per command queue) and the fabric has router threads; on a host with many
//! cores, keeping a chip's threads on one core (and a line of chips on one NUMA node) keeps
//! the chip's memory in that core's caches. With the `pin` cargo feature (hwloc, the system
//! library libhwloc-dev), [`place_current_thread`] binds the calling thread to core
//! `chip % cores`, in hwloc's order (cores of one NUMA node are numbered together, so
//! neighbouring chips share a node); `TTMESH_PIN=0` turns it off at run time, for measuring
//! with and without in one build. Without the feature it does nothing.
//!
//! Owns: thread placement only. Must not touch: anything a thread does once placed; it knows
//! no chip, queue or fabric type (callers pass a chip id).

/// What kind of thread asks to be placed (for its name in diagnostics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadRole {
    Dispatcher,
    Router,
}

/// True when this build binds threads (the `pin` feature) and `TTMESH_PIN` is not `0`.
pub fn pinning_enabled() -> bool {
    cfg!(feature = "pin") && ttmesh_settings::settings().pin
}

/// Binds the calling thread to the core that chip `chip`'s threads share. Returns the core
/// index it was bound to, or None when pinning is off or the host refused (placement is an
/// optimisation: a refusal never stops a mesh).
pub fn place_current_thread(role: ThreadRole, chip: u32) -> Option<usize> {
    if !pinning_enabled() {
        return None;
    }
    let _ = role;
    imp::bind(chip as usize)
}

#[cfg(feature = "pin")]
mod imp {
    use std::sync::{Mutex, OnceLock};

    use hwloc2::{CpuBindFlags, ObjectType, Topology};

    /// hwloc's topology is built once per process (it reads /sys), then shared.
    fn topology() -> Option<&'static Mutex<Topology>> {
        static TOPOLOGY: OnceLock<Option<Mutex<Topology>>> = OnceLock::new();
        TOPOLOGY
            .get_or_init(|| Topology::new().map(Mutex::new))
            .as_ref()
    }

    pub(super) fn bind(index: usize) -> Option<usize> {
        let mut topo = topology()?.lock().ok()?;
        let cpusets: Vec<_> = topo
            .objects_with_type(&ObjectType::Core)
            .ok()?
            .iter()
            .filter_map(|core| core.cpuset())
            .collect();
        if cpusets.is_empty() {
            return None;
        }
        let core = index % cpusets.len();
        topo.set_cpubind(cpusets[core].clone(), CpuBindFlags::CPUBIND_THREAD)
            .ok()
            .map(|_| core)
    }
}

#[cfg(not(feature = "pin"))]
mod imp {
    pub(super) fn bind(_index: usize) -> Option<usize> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_only_when_the_feature_is_on() {
        // A thread of its own: binding it must not narrow the test harness's threads.
        std::thread::spawn(|| {
            let before = std::thread::available_parallelism().map_or(1, |n| n.get());
            let got = place_current_thread(ThreadRole::Dispatcher, 5);
            let after = std::thread::available_parallelism().map_or(1, |n| n.get());
            if cfg!(feature = "pin") && pinning_enabled() {
                let core = got.expect("hwloc bound the thread");
                assert!(core < before, "core {core} of {before}");
                // The thread may now run only on that core's hardware threads.
                assert!(
                    after <= before && (before == 1 || after < before),
                    "{before} -> {after}"
                );
            } else {
                assert_eq!((got, after), (None, before));
            }
        })
        .join()
        .unwrap();
    }
}
