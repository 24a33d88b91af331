//! One router: the thread that drains the inbound channels of one chip along one line
//! direction (every parallel link and virtual channel of the hop that arrives there),
//! checks the checksum where the inbound link may corrupt, writes the packet locally and/or
//! forwards it one hop on. Its passes may also run on a waiting sender's thread (`try_help`).
//!
//! The router never blocks on one channel: if a packet cannot be forwarded for want of a
//! credit, it registers for that credit and serves its other channels. Each virtual channel
//! therefore progresses on its own, which the ring's dateline needs.

use crate::channel::{Channel, DoneBatch, Tracker, Wake, SPIN_TRIES, YIELD_TRIES};
use crate::inner::{dir_index, Ctx, Hop, Inner, LinkLoss};
use crate::packet::{self, Header, Kind};
use crate::route::{self, Next};
use crate::NocAddr;
use parking_lot::Mutex;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Packets taken from one channel before looking at the next (fairness between links/VCs).
const BUDGET: usize = 16;
/// Most packets handled before their credits are returned (and a write run is flushed).
const CREDIT_BATCH: u64 = 8;
/// Longest park while idle. Publishers, returned credits and shutdown unpark the router, so
/// this only bounds the cost of a wake-up that went missing (none seen in 2000 property
/// cases run with a 60 s park) and how often an idle router wakes (twice a second).
const IDLE_PARK: Duration = Duration::from_millis(500);

/// Where a 2D route that turns at this router's chip goes on: the crossing line, this
/// chip's position on it, and its hops from here (backward, forward).
pub(crate) struct Turn {
    pub line: usize,
    pub pos: usize,
    pub hops: [Option<Arc<Hop>>; 2],
}

pub(crate) struct Router {
    pub chip: u32,
    pub line: usize,
    pub forward: bool,
    pub pos: usize,
    /// Position of the chip that puts packets on our inbound links.
    pub prev: usize,
    /// Inbound channels and their virtual channel number.
    pub inbound: Vec<(Arc<Channel>, usize)>,
    pub outbound: Option<Arc<Hop>>,
    /// The crossing line's hops, on a 2D fabric.
    pub turn: Option<Box<Turn>>,
    /// The right to run this router's passes (its thread, or a helper), and per inbound
    /// channel the head index at which a credit stall was last counted.
    token: Mutex<Vec<u64>>,
    pub wake: Arc<Wake>,
}

/// What one pass over the inbound channels did.
pub(crate) struct Pass {
    pub progress: bool,
    /// Packets were forwarded (a helper's forwards are published without a wake).
    pub forwarded: bool,
    /// An outbound channel a packet is waiting on for a credit.
    pub blocked: Option<Arc<Channel>>,
}

impl Router {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        chip: u32,
        line: usize,
        forward: bool,
        pos: usize,
        prev: usize,
        inbound: Vec<(Arc<Channel>, usize)>,
        outbound: Option<Arc<Hop>>,
        turn: Option<Box<Turn>>,
        wake: Arc<Wake>,
    ) -> Self {
        let token = Mutex::new(vec![u64::MAX; inbound.len()]);
        Self {
            chip,
            line,
            forward,
            pos,
            prev,
            inbound,
            outbound,
            turn,
            token,
            wake,
        }
    }

    pub fn run(self: Arc<Self>, inner: Arc<Inner>) {
        let mut idle = 0u32;
        while !inner.shutdown.load(Relaxed) {
            // A helper holding the token is doing this router's work: count it as idle.
            let progress = match self.token.try_lock() {
                Some(mut stalled) => self.pass(&inner, &mut stalled, false).progress,
                None => false,
            };
            if progress {
                idle = 0;
                continue;
            }
            idle = idle.saturating_add(1);
            if idle <= SPIN_TRIES {
                std::hint::spin_loop();
            } else if idle <= SPIN_TRIES + YIELD_TRIES {
                thread::yield_now();
            } else {
                // Announce the sleep, then look once more: a producer either sees the flag
                // or its reservation is seen here (both sides use SeqCst). A helper holding
                // the token checks for leftover work after it lets go, and wakes us.
                self.wake.sleeping.store(true, SeqCst);
                // A token held elsewhere counts as work: its holder may have checked for
                // leftovers before a quiet publish that then failed to take the token.
                let work = self.token.try_lock().is_none_or(|st| self.has_work(&st));
                if !work {
                    thread::park_timeout(IDLE_PARK);
                }
                self.wake.sleeping.store(false, SeqCst);
            }
        }
    }

    /// True if no pass of this router is running at this moment.
    pub fn is_free(&self) -> bool {
        self.token.try_lock().is_some()
    }

    /// Runs `f` holding this router's token if no pass is running, so no packet of its
    /// inbound channels moves meanwhile; None if the token is taken. Like a helper's pass,
    /// it wakes the router's thread afterwards if packets arrived that nobody drove.
    pub fn run_exclusive<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        self.with_token(|_| f())
    }

    /// Runs `f` with the token's state (per inbound channel, where a credit stall was last
    /// counted) if no pass is running; then wakes the router's thread if packets arrived
    /// that nobody drove.
    fn with_token<R>(&self, f: impl FnOnce(&mut [u64]) -> R) -> Option<R> {
        let mut stalled = self.token.try_lock()?;
        let r = f(&mut stalled);
        let left = self.has_work(&stalled);
        drop(stalled);
        if left {
            self.wake.wake();
        }
        Some(r)
    }

    /// Returns once no pass of this router is running (the token is free).
    pub fn quiesce(&self) {
        drop(self.token.lock());
    }

    /// The router at the far end of this router's outbound hop.
    pub fn next_router(&self) -> Option<Arc<Router>> {
        self.outbound
            .as_ref()
            .and_then(|hop| hop.chans[0][0].router())
    }

    /// True if an inbound channel holds a packet (or a reservation about to become one) that
    /// is not the head already known to wait for an outbound credit: the credit's return
    /// unparks us directly.
    fn has_work(&self, stalled_at: &[u64]) -> bool {
        self.inbound
            .iter()
            .zip(stalled_at)
            .any(|((c, _), &blocked)| c.queued() > 0 && c.cursor() != blocked)
    }

    /// Runs one pass on the caller's thread if the router is not running one already: a
    /// sender waiting for a credit does the work it waits for instead of spinning, which
    /// keeps the fabric moving when the host has fewer cores than busy routers.
    pub fn try_help(&self, inner: &Inner) -> Option<Pass> {
        self.with_token(|stalled| self.pass(inner, stalled, true))
    }

    /// One round over the inbound channels. A `helper` pass publishes its forwards without
    /// waking the next router: the helper drives that router next (`Inner::help_chain`).
    fn pass(&self, inner: &Inner, stalled_at: &mut [u64], helper: bool) -> Pass {
        let mut pass = Pass {
            progress: false,
            forwarded: false,
            blocked: None,
        };
        let mut done = DoneBatch::default();
        for (i, (ch, vc)) in self.inbound.iter().enumerate() {
            inner.release_confirmed(ch);
            let start = ch.cursor();
            let mut h = start;
            let mut run = None;
            let mut returned = start;
            for _ in 0..BUDGET {
                let st = self.step(
                    inner,
                    ch,
                    h,
                    *vc,
                    &mut stalled_at[i],
                    &mut run,
                    &mut done,
                    helper,
                );
                match st {
                    Step::Done => h += 1,
                    Step::Forwarded => {
                        h += 1;
                        pass.forwarded = true;
                    }
                    Step::Empty => break,
                    Step::Blocked(out) => {
                        pass.blocked = Some(out);
                        break;
                    }
                }
                // Credits go back every half channel, so a producer on another core keeps
                // filling while this batch is written.
                if h - returned >= CREDIT_BATCH.min(ch.slots() / 2).max(1) {
                    self.flush_run(inner, &mut run, &mut done);
                    inner.return_credits(ch, h - returned);
                    returned = h;
                }
            }
            // Before the credits return: the run may still point into a sender's buffer.
            self.flush_run(inner, &mut run, &mut done);
            if h > returned {
                inner.return_credits(ch, h - returned);
            }
            if h > start {
                pass.progress = true;
                if inner.held_elsewhere[self.chip as usize] {
                    let (packets, payload) = ch.take_unreported();
                    inner.tell_arrivals(ch, packets, payload);
                }
            }
        }
        done.flush();
        pass
    }

    fn flush_run(&self, inner: &Inner, run: &mut Option<Run>, done: &mut DoneBatch) {
        if let Some(r) = run.take() {
            // SAFETY: the run covers packets lent from one message buffer (same `msg`),
            // back to back, whose slots have not returned their credits yet, so the sender
            // still keeps that buffer alive and unchanged (see `ExtRef`).
            let data = unsafe { std::slice::from_raw_parts(r.ptr, r.len) };
            inner.deliver_run(
                self.chip,
                r.at,
                data,
                r.src,
                r.packets,
                r.tracker.as_ref(),
                done,
            );
        }
    }

    /// Handles packet `h` (the oldest not yet freed) of `ch`.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        inner: &Inner,
        ch: &Channel,
        h: u64,
        vc: usize,
        stalled_at: &mut u64,
        run: &mut Option<Run>,
        done: &mut DoneBatch,
        helper: bool,
    ) -> Step {
        let prev = self.prev;
        let Some(mut slot) = ch.peek_at(h) else {
            return Step::Empty;
        };
        let hdr = slot.hdr;
        let decoded = Header::decode(&hdr);
        if let Some(Header {
            kind: Kind::Void, ..
        }) = decoded
        {
            ch.free(slot);
            return Step::Done;
        }
        let route = decoded.map_or(0, |h| h.route);
        // Where the packet is, for statistics and errors: built only where one is needed.
        let ctx = |line, pos, forward, route, quiet| {
            let (src, seq, sem) = decoded.map_or((0, 0, None), |h| {
                (h.src as u32, h.seq, h.kind.carries_sem().then_some(h.arg0))
            });
            Ctx {
                lines: &inner.lines,
                routing: &inner.routing,
                line,
                forward,
                pos,
                route,
                src,
                seq,
                sem,
                quiet,
            }
        };
        // What the route says this chip does, and the hop it names, if any.
        // A router with no crossing line reads line codes only (a turn cannot happen here).
        let step = match self.turn {
            None => route::line::step(route),
            Some(_) => inner.routing.step(route),
        };
        let out_hop = match step.map(|s| s.next) {
            Some(Next::Continue) => self.outbound.as_ref(),
            Some(Next::Turn { forward }) => self
                .turn
                .as_ref()
                .and_then(|t| t.hops[forward as usize].as_ref()),
            _ => None,
        };
        let len = decoded.map_or(0, |h| h.len as usize);
        // Link-level check (see `packet`): sealed by the sending end of a link that can
        // corrupt, verified here.
        let check = packet::is_sealed(&hdr) && inner.faults[ch.link].ever_corrupt();
        let intact = decoded.is_some()
            && len <= slot.buf.len()
            && (!check || packet::verify(&hdr, slot.payload(len)))
            && step.is_some_and(|s| s.next == Next::Stop || out_hop.is_some());
        let (Some(hd), Some(step)) = (decoded.filter(|_| intact), step) else {
            // The link damaged it: count it on the link it arrived by and tell the sender.
            let ctx = ctx(self.line, prev, self.forward, route, false);
            inner.counters[ch.link][dir_index(ch)]
                .corrupted
                .fetch_add(1, Relaxed);
            inner.record_link_loss(&ctx, ch.link, LinkLoss::Corrupted);
            let err = inner.loss_error(&ctx, ch.link, LinkLoss::Corrupted, self.chip);
            if let Some(t) = slot.tracker.as_ref() {
                t.fail(err, inner.routing.writes_in(route));
            }
            ch.free(slot);
            return Step::Done;
        };
        let write = step.write;
        // Lent packets of one message that land back to back are written with one call.
        if let (true, Next::Stop, Kind::Write, Some(ext)) = (write, step.next, hd.kind, slot.ext) {
            let p = slot.payload(len);
            let t = slot.tracker.as_ref();
            match run {
                Some(r) if r.extends(&hd, p, ext.msg, t) => {
                    r.len += len;
                    r.packets += 1;
                }
                _ => {
                    self.flush_run(inner, run, done);
                    *run = Some(Run {
                        at: hd.addr,
                        ptr: p.as_ptr(),
                        len,
                        msg: ext.msg,
                        packets: 1,
                        src: hd.src,
                        tracker: t.cloned(),
                    });
                }
            }
            ch.free(slot);
            return Step::Done;
        }
        // Anything else lands after the run.
        self.flush_run(inner, run, done);
        if let Some(hop) = out_hop {
            // Going on along this line keeps the virtual channel (the hop moves it to VC1
            // past a dateline); a turn starts the crossing line on VC0, and is published with
            // a wake: a helper drives only the routers down its own line.
            let (line, pos, forward, out_vc, turned) = match (step.next, &self.turn) {
                (Next::Turn { forward }, Some(t)) => (t.line, t.pos, forward, 0, true),
                _ => (self.line, self.pos, self.forward, vc, false),
            };
            let out = hop.channel(hd.link as usize, out_vc);
            let idx = match out.try_reserve() {
                Some(i) => i,
                None => {
                    // The router's own thread waits for the credit, even when a helper
                    // runs this pass: the helper may be gone by the time it returns.
                    match self.wake.thread.get() {
                        Some(t) => out.add_waiter_thread(t.clone()),
                        None => out.add_waiter(),
                    }
                    match out.try_reserve() {
                        Some(i) => i,
                        None => {
                            if *stalled_at != h {
                                *stalled_at = h;
                                inner.counters[out.link][dir_index(out)]
                                    .credit_stalls
                                    .fetch_add(1, Relaxed);
                            }
                            return Step::Blocked(out.clone());
                        }
                    }
                }
            };
            if write {
                inner.deliver(
                    self.chip,
                    &hd,
                    slot.payload(len),
                    slot.tracker.as_ref(),
                    done,
                );
            }
            let rest = step.rest;
            let next = ctx(line, pos, forward, rest, helper && !turned);
            // Moved out for the call (the closure borrows the slot), moved back after.
            let tracker = slot.tracker.take();
            let res = inner.transmit(out, idx, &next, len, tracker.as_ref(), 0, |o| {
                if slot.ext.is_some() {
                    // The sender's buffer is only lent to the first hop: copy it here.
                    o.buf[..len].copy_from_slice(slot.payload(len));
                } else {
                    // Hand the buffer on instead of copying it: every slot has the same size.
                    std::mem::swap(&mut o.buf, &mut slot.buf);
                }
                o.hdr = hdr;
                packet::set_route(&mut o.hdr, rest);
            });
            if let (Err(e), Some(t)) = (&res, &tracker) {
                t.fail(e.clone(), inner.routing.writes_in(rest));
            }
            slot.tracker = tracker;
            if res.is_ok() {
                ch.free(slot);
                // A turn's consumer was woken; only forwards along the line are driven on.
                return if turned { Step::Done } else { Step::Forwarded };
            }
        } else if write {
            inner.deliver(
                self.chip,
                &hd,
                slot.payload(len),
                slot.tracker.as_ref(),
                done,
            );
        }
        ch.free(slot);
        Step::Done
    }
}

/// Consecutive lent packets of one message, bound for consecutive addresses here: one
/// `ChipMemory::write` for all of them, issued before their credits return.
struct Run {
    at: NocAddr,
    ptr: *const u8,
    len: usize,
    msg: *const u8,
    packets: u64,
    src: u16,
    tracker: Option<Arc<Tracker>>,
}

impl Run {
    fn extends(&self, h: &Header, p: &[u8], msg: *const u8, t: Option<&Arc<Tracker>>) -> bool {
        let same_tracker = match (&self.tracker, t) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        same_tracker
            && msg == self.msg
            && h.src == self.src
            && h.addr.space == self.at.space
            && h.addr.bank == self.at.bank
            && h.addr.addr == self.at.addr + self.len as u64
            && p.as_ptr() as usize == self.ptr as usize + self.len
    }
}

enum Step {
    Done,
    Forwarded,
    Empty,
    Blocked(Arc<Channel>),
}
