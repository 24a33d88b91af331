//! Mesh trace (one trace per chip, replayed in lockstep) and mesh events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use ttmesh_chip::device::TraceInfo;
use ttmesh_chip::{ChipError, CqId, Event, TraceId};

use crate::device::MeshDevice;
use crate::error::{on_chip, MeshError, Result};
use crate::lockstep::{self, Place};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MeshTraceId(pub u32);

/// Per-chip replay time of the last lockstep replay, and the skew between chips.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayReport {
    /// From the start barrier's release to the chip's last replayed command.
    pub per_chip_us: Vec<f64>,
    /// Latest finish minus earliest finish.
    pub skew_us: f64,
}

/// A start barrier every chip's dispatcher waits on before its EXEC_BUF, with a timeout and an
/// abort (so a chip that could not enqueue never leaves the others hanging).
pub(crate) struct StartBarrier {
    state: Mutex<(usize, bool, Option<Instant>)>,
    cv: Condvar,
    parties: usize,
}

impl StartBarrier {
    fn new(parties: usize) -> StartBarrier {
        StartBarrier {
            state: Mutex::new((0, false, None)),
            cv: Condvar::new(),
            parties,
        }
    }

    fn wait(&self, chip: u32, timeout: Duration) -> std::result::Result<Instant, ChipError> {
        let deadline = Instant::now() + timeout;
        let mut s = self.state.lock();
        s.0 += 1;
        if s.0 == self.parties {
            let now = Instant::now();
            s.2 = Some(now);
            self.cv.notify_all();
        }
        loop {
            if s.1 {
                return Err(ChipError::Trace(format!(
                    "lockstep replay aborted: another chip could not start; chip {chip} skips it"
                )));
            }
            if let Some(t) = s.2 {
                return Ok(t);
            }
            if self.cv.wait_until(&mut s, deadline).timed_out() && s.2.is_none() {
                return Err(ChipError::Timeout {
                    what: format!(
                        "chip {chip} waits at the lockstep replay barrier ({} of {} chips arrived)",
                        s.0, self.parties
                    ),
                    seconds: timeout.as_secs_f64(),
                });
            }
        }
    }

    fn abort(&self) {
        self.state.lock().1 = true;
        self.cv.notify_all();
    }
}

/// A thread that wakes every chip's dispatcher after a lockstep replay was queued: the host
/// thread pays one wake-up per replay instead of one per chip (on two host cores, 32 wake-ups
/// on the host thread cost more than the replay's whole host work). A request holds its
/// chips until woken, so closing the mesh stops and joins the thread ([`LockstepWaker::stop`]):
/// a closed mesh's chips are free when `close` returns.
#[derive(Default)]
pub(crate) struct LockstepWaker {
    tx: Mutex<Option<crossbeam_channel::Sender<WakeRequest>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The chips whose dispatchers a replay wakes, and the queue it went to.
type WakeRequest = (Vec<Arc<ttmesh_chip::Chip>>, CqId);

impl LockstepWaker {
    fn wake(&self, chips: &[Arc<ttmesh_chip::Chip>], cq: CqId) {
        let mut tx = self.tx.lock();
        if tx.is_none() {
            let (s, r) = crossbeam_channel::unbounded::<WakeRequest>();
            let spawned = std::thread::Builder::new()
                .name("ttmesh-lockstep-waker".into())
                .spawn(move || {
                    // Ends when the mesh drops its sender.
                    while let Ok((chips, cq)) = r.recv() {
                        for c in &chips {
                            c.wake(cq);
                        }
                    }
                });
            if let Ok(handle) = spawned {
                *tx = Some(s);
                *self.thread.lock() = Some(handle);
            }
        }
        let sent = tx
            .as_ref()
            .map(|s| s.send((chips.to_vec(), cq)).is_ok())
            .unwrap_or(false);
        if !sent {
            // No waker thread: wake them here.
            for c in chips {
                c.wake(cq);
            }
        }
    }

    /// Ends the thread once it has woken what was queued, and waits for it. Idempotent; a
    /// replay after it wakes its chips on the calling thread's next `wake` (a new thread).
    pub(crate) fn stop(&self) {
        drop(self.tx.lock().take());
        if let Some(t) = self.thread.lock().take() {
            // It only wakes chips, which never blocks: this returns at once.
            let _ = t.join();
        }
    }
}

/// Start and finish times of one lockstep replay.
pub(crate) struct ReplayTimes {
    start: Mutex<Option<Instant>>,
    finish: Mutex<Vec<Option<Instant>>>,
}

impl ReplayTimes {
    pub(crate) fn report(&self) -> Option<ReplayReport> {
        let start = (*self.start.lock())?;
        let finish = self.finish.lock();
        let f: Vec<Instant> = finish.iter().copied().collect::<Option<_>>()?;
        let per_chip_us = f
            .iter()
            .map(|t| t.duration_since(start).as_secs_f64() * 1e6)
            .collect();
        let max = f.iter().max()?;
        let min = f.iter().min()?;
        Some(ReplayReport {
            per_chip_us,
            skew_us: max.duration_since(*min).as_secs_f64() * 1e6,
        })
    }
}

impl MeshDevice {
    /// Starts capturing on every chip; every chip gets the same trace id.
    pub fn begin_trace_capture(&self, cq: CqId) -> Result<MeshTraceId> {
        let mut places = Vec::with_capacity(self.chips().len());
        for c in self.chips() {
            let t = c.begin_trace_capture(cq).map_err(on_chip(c.id()))?;
            places.push(Place {
                chip: c.id(),
                id: Some(t.0),
                address: None,
            });
        }
        lockstep::check(&"begin_trace_capture", &places)?;
        Ok(MeshTraceId(places.first().and_then(|p| p.id).unwrap_or(0)))
    }

    /// Ends the capture on every chip: sizes and writes each chip's trace; all land at one address.
    pub fn end_trace_capture(&self, tid: MeshTraceId, cq: CqId) -> Result<()> {
        // A trace region too small fails here: an open graph capture keeps it as an error node.
        crate::graph::record_error(
            "end_trace_capture",
            self.end_trace_capture_on_chips(tid, cq),
        )
    }

    fn end_trace_capture_on_chips(&self, tid: MeshTraceId, cq: CqId) -> Result<()> {
        let mut first_err = None;
        for c in self.chips() {
            if let Err(e) = c.end_trace_capture(TraceId(tid.0), cq) {
                first_err.get_or_insert(MeshError::Chip {
                    chip: c.id(),
                    source: e,
                });
            }
        }
        if first_err.is_some() {
            // All or nothing: a trace kept on some chips only would make their TRACE regions
            // (and every later trace's address) differ from the others'.
            self.release_partial(tid);
        }
        let places = self.trace_places(tid);
        let here = match first_err {
            Some(e) => Err(e),
            None => lockstep::check(&"end_trace_capture", &places),
        };
        // On a mesh over MPI ranks: the same address on every rank's chips too. Every rank
        // meets there even when its own chips failed, and a failure on any rank releases the
        // trace on every rank: all or nothing across ranks as well.
        let failed = here.as_ref().err().map(ToString::to_string);
        let across =
            lockstep::check_across_ranks(self, &"end_trace_capture", &places, failed.as_deref());
        match (here, across) {
            (Err(e), _) => Err(e),
            (Ok(()), Err(e)) => {
                self.release_partial(tid);
                Err(e)
            }
            (Ok(()), Ok(())) => Ok(()),
        }
    }

    /// Each chip's view of trace `tid` (its address, size, replays), in mesh order; `None` on
    /// a chip that does not hold it.
    pub fn trace_info(&self, tid: MeshTraceId) -> Vec<Option<TraceInfo>> {
        self.chips()
            .iter()
            .map(|c| c.trace_info(TraceId(tid.0)))
            .collect()
    }

    /// Where every chip holds trace `tid` (one lookup per chip).
    fn trace_places(&self, tid: MeshTraceId) -> Vec<Place> {
        self.chips()
            .iter()
            .map(|c| Place {
                chip: c.id(),
                id: Some(tid.0),
                address: c.trace_info(TraceId(tid.0)).map(|i| i.address),
            })
            .collect()
    }

    /// Over MPI ranks: notes a replay or release for the next barrier, which checks that
    /// every rank made the same calls (no exchange here: a replay costs one lock more).
    fn note_trace_call(&self, released: bool, tid: MeshTraceId, places: &[Place]) {
        if self.ranks().is_none() {
            return;
        }
        let Some(p) = places.iter().find(|p| self.holds_chip(p.chip)) else {
            return;
        };
        let (chip, address) = (p.chip, p.address);
        self.inner.trace_calls.lock().record(lockstep::TraceEvent {
            released,
            chip,
            trace: tid.0,
            address,
        });
    }

    /// Releases the trace on the chips that have it (after a capture failed on others).
    fn release_partial(&self, tid: MeshTraceId) {
        for c in self.chips() {
            if c.trace_info(TraceId(tid.0)).is_some() {
                let _ = c.release_trace(TraceId(tid.0));
            }
        }
    }

    /// Replays the trace on every chip in lockstep: all chips start behind one barrier.
    /// `Blocking::Yes` waits until every chip has finished.
    pub fn execute_trace(
        &self,
        tid: MeshTraceId,
        cq: CqId,
        blocking: impl Into<ttmesh_chip::tensor::Blocking>,
    ) -> Result<()> {
        let chips = self.chips();
        // Checked before anything is queued, so no chip starts a replay the others cannot
        // join. A trace no chip holds passes; the first chip's enqueue names it.
        let places = self.trace_places(tid);
        lockstep::check(&"execute_trace", &places)?;
        self.note_trace_call(false, tid, &places);
        // On a mesh over MPI ranks each rank replays its own chips; the others' replays start
        // behind their own barriers, and the fabric's semaphores keep the collectives in step.
        let held = chips.iter().filter(|c| !c.held_elsewhere()).count();
        let barrier = Arc::new(StartBarrier::new(held));
        let times = Arc::new(ReplayTimes {
            start: Mutex::new(None),
            finish: Mutex::new(vec![None; chips.len()]),
        });
        for (i, c) in chips.iter().enumerate() {
            if c.held_elsewhere() {
                continue;
            }
            let (b, t) = (barrier.clone(), times.clone());
            let id = c.id();
            let timeout = c.operation_timeout();
            let t2 = times.clone();
            // Queued without waking: one wake of the waker thread replaces one per chip.
            let enqueue = c.enqueue_trace_with_callbacks(
                TraceId(tid.0),
                cq,
                Some(Box::new(move || {
                    let start = b.wait(id, timeout)?;
                    t.start.lock().get_or_insert(start);
                    Ok(())
                })),
                Some(Box::new(move || {
                    t2.finish.lock()[i] = Some(Instant::now());
                    Ok(())
                })),
                false,
            );
            if let Err(e) = enqueue {
                barrier.abort();
                self.inner.waker.wake(chips, cq);
                return Err(MeshError::Chip {
                    chip: id,
                    source: e,
                });
            }
        }
        self.inner.waker.wake(chips, cq);
        *self.inner.last_replay.lock() = Some(times);
        if blocking.into() == ttmesh_chip::tensor::Blocking::Yes {
            self.finish(cq)?;
        }
        Ok(())
    }

    pub fn release_trace(&self, tid: MeshTraceId) -> Result<()> {
        self.note_trace_call(true, tid, &self.trace_places(tid));
        for c in self.chips() {
            c.release_trace(TraceId(tid.0)).map_err(on_chip(c.id()))?;
        }
        Ok(())
    }

    pub fn set_replay_sanitizer(&self, on: bool) {
        for c in self.chips() {
            c.set_replay_sanitizer(on);
        }
    }

    /// Turns every chip's check of its trace bytes against their digest on or off
    /// (`MeshConfig::trace_digest`).
    pub fn set_trace_digest(&self, on: bool) {
        for c in self.chips() {
            c.set_trace_digest(on);
        }
    }

    pub fn create_event(&self) -> MeshEvent {
        MeshEvent {
            events: self.chips().iter().map(|c| c.create_event()).collect(),
        }
    }

    pub fn record_event(&self, cq: CqId, event: &MeshEvent) -> Result<()> {
        for (c, e) in self.chips().iter().zip(&event.events) {
            c.record_event(cq, e).map_err(on_chip(c.id()))?;
        }
        Ok(())
    }

    pub fn wait_for_event(&self, cq: CqId, event: &MeshEvent) -> Result<()> {
        for (c, e) in self.chips().iter().zip(&event.events) {
            c.wait_for_event(cq, e).map_err(on_chip(c.id()))?;
        }
        Ok(())
    }

    pub fn event_synchronize(&self, event: &MeshEvent) -> Result<()> {
        for (c, e) in self.chips().iter().zip(&event.events) {
            c.event_synchronize(e).map_err(on_chip(c.id()))?;
        }
        Ok(())
    }
}

/// One event per chip, recorded and waited on together.
#[derive(Clone, Debug)]
pub struct MeshEvent {
    pub events: Vec<Event>,
}
