//! A chip's semaphores: waiting for (and consuming) a count, reading, adding and zeroing it.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::{Duration, Instant};

use super::{Fabric, Result};
use crate::FabricError;

/// Checks a semaphore wait makes before sleeping; every `SEM_YIELD_EVERY`-th yields the core.
fn sem_spin() -> u32 {
    ttmesh_settings::settings().sem_spin
}
const SEM_YIELD_EVERY: u32 = 16;

impl Fabric {
    /// Waits until semaphore `sem` on `chip` reaches `at_least`, then subtracts `at_least`
    /// (so the same semaphore serves every replay of a trace). Fails early, naming the link,
    /// if an increment of this semaphore was lost on the way.
    pub fn wait_semaphore(
        &self,
        chip: u32,
        sem: u32,
        at_least: u64,
        timeout: Duration,
    ) -> Result<()> {
        self.wait_semaphore_spinning(chip, sem, at_least, timeout, sem_spin())
    }

    /// Checks a semaphore wait makes before it sleeps, unless the caller knows better
    /// (`TTMESH_SEM_SPIN` sets it; 256 by default).
    pub fn default_semaphore_spins() -> u32 {
        sem_spin()
    }

    /// `wait_semaphore`, checking up to `spins` times (yielding the core every 16th) before
    /// sleeping: a caller whose peers each have a core of their own may spin longer.
    pub fn wait_semaphore_spinning(
        &self,
        chip: u32,
        sem: u32,
        at_least: u64,
        timeout: Duration,
        spins: u32,
    ) -> Result<()> {
        self.check_chip(chip)?;
        let inner = &self.inner;
        let t = &inner.sems[chip as usize];
        let _announced = crate::remote::RemoteWait::begin(inner.remote.as_deref());
        // Spin (then yield) before sleeping on the condvar: a collective's increment usually
        // comes from a peer running on the other core within microseconds, and a sleep costs
        // a futex wake and a context switch on the critical path.
        for i in 0..spins {
            {
                let mut g = t.vals.lock();
                if let Some(v) = g.get_mut(&sem).filter(|v| **v >= at_least) {
                    *v -= at_least;
                    return Ok(());
                }
            }
            if inner.aborted.load(Relaxed) || inner.shutdown.load(Relaxed) {
                break;
            }
            if i % SEM_YIELD_EVERY == SEM_YIELD_EVERY - 1 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // The clock is read only once the spin found nothing (most waits end in it: no read).
        let start = Instant::now();
        let deadline = start + timeout;
        let mut g = t.vals.lock();
        loop {
            let v = g.get(&sem).copied().unwrap_or(0);
            if v >= at_least {
                if at_least > 0 {
                    g.insert(sem, v - at_least);
                }
                return Ok(());
            }
            let fail = |waited| FabricError::SemaphoreWait {
                sem,
                chip,
                wanted: at_least,
                saw: v,
                waited,
                cause: inner.loss_cause(chip),
            };
            if inner.shutdown.load(SeqCst) {
                return Err(FabricError::ShutDown);
            }
            if let Some(e) = inner.abort_error() {
                return Err(e);
            }
            if inner.take_lost_sem(chip, sem) {
                let ms = Duration::from_millis(start.elapsed().as_millis() as u64);
                return Err(fail(ms));
            }
            if Instant::now() >= deadline {
                return Err(fail(timeout));
            }
            t.cv.wait_until(&mut g, deadline);
        }
    }

    pub fn semaphore_value(&self, chip: u32, sem: u32) -> Result<u64> {
        self.check_chip(chip)?;
        Ok(self.inner.sems[chip as usize]
            .vals
            .lock()
            .get(&sem)
            .copied()
            .unwrap_or(0))
    }

    /// Zeroes every semaphore on `chip` and forgets packets lost on the way to it.
    pub fn reset_semaphores(&self, chip: u32) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.sems[chip as usize].vals.lock().clear();
        self.inner.clear_losses(chip);
        Ok(())
    }

    /// Adds `by` to semaphore `sem` of `chip`, as a delivered increment does: what the
    /// transport calls for an increment another process sent to a chip held here.
    pub fn add_semaphore(&self, chip: u32, sem: u32, by: u64) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.sem_add(chip, sem, by);
        Ok(())
    }
}
