//! State shared by the routers, the senders and the `Fabric` handle: the lines and their
//! channels, link counters and faults, semaphore tables, and the record of lost packets that
//! lets a failing wait name the link that lost them.

mod losses;
use crate::channel::{Channel, DoneBatch, Slot, SlotCount, Tracker, Wake, SPIN_TRIES, YIELD_TRIES};
use crate::config::{FabricSpec, Fault};
use crate::memory::ChipMemory;
use crate::packet::{self, Header, Kind, VOID_HEADER};
use crate::route::{Path, Routing};
use crate::FabricError;
use crate::NocAddr;
pub(crate) use losses::LinkLoss;
use losses::{LossKey, Losses};
use parking_lot::{Condvar, Mutex, MutexGuard};
use rustc_hash::FxHashMap;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::*};
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// Spins a waiting sender makes before it helps the router it waits on.
const HELP_AFTER_SPINS: u32 = 16;

/// The channels from one chip to its neighbour along a line direction: one per parallel link
/// (index `link % links.len()`) and virtual channel (2 on rings: VC1 after the dateline).
pub(crate) struct Hop {
    /// Wakes the router at the far end (shared by all channels of the hop).
    pub wake: Arc<Wake>,
    pub links: Vec<usize>,
    pub chans: Vec<Vec<Arc<Channel>>>,
    /// The ring's wrap-around hop: packets crossing it move to VC1.
    pub dateline: bool,
}

impl Hop {
    /// The channel a packet on `vc` that asked for `link` takes on this hop.
    pub fn channel(&self, link: usize, vc: usize) -> &Arc<Channel> {
        let vc = if self.dateline { 1 } else { vc };
        &self.chans[link % self.chans.len()][vc]
    }
}

pub(crate) struct LineRt {
    pub chips: Vec<u32>,
    /// The wrap-around link is used (Fabric1DRing on a ring of 3 or more chips).
    pub ring: bool,
    pub fwd: Vec<Option<Arc<Hop>>>,
    pub bwd: Vec<Option<Arc<Hop>>>,
}

impl LineRt {
    /// Position `k` hops from `pos` in a direction, if the line has one there.
    pub fn step(&self, pos: usize, forward: bool, k: u32) -> Option<usize> {
        let n = self.chips.len();
        let k = k as usize;
        if self.ring {
            (k < n).then(|| {
                if forward {
                    (pos + k) % n
                } else {
                    (pos + n - k) % n
                }
            })
        } else if forward {
            (pos + k < n).then_some(pos + k)
        } else {
            pos.checked_sub(k)
        }
    }

    pub fn hop_from(&self, pos: usize, forward: bool) -> Option<&Arc<Hop>> {
        if forward {
            &self.fwd[pos]
        } else {
            &self.bwd[pos]
        }
        .as_ref()
    }

    /// Farthest distance a packet from `pos` may travel in a direction.
    pub fn max_hops(&self, pos: usize, forward: bool) -> u32 {
        let n = self.chips.len();
        if self.ring {
            (n - 1) as u32
        } else if forward {
            (n - 1 - pos) as u32
        } else {
            pos as u32
        }
    }
}

/// Where a packet is and what it still has to do, for stats and error messages.
pub(crate) struct Ctx<'a> {
    pub lines: &'a [LineRt],
    pub routing: &'a Routing,
    /// The line and direction of the link the packet is put on.
    pub line: usize,
    pub forward: bool,
    /// Position of the chip that puts the packet on the link.
    pub pos: usize,
    /// The route as the chip at the far end of the link will read it.
    pub route: u32,
    pub src: u32,
    pub seq: u16,
    pub sem: Option<u32>,
    /// Publish without waking the consumer: the sender will drive it (lent payloads).
    pub quiet: bool,
}

impl Ctx<'_> {
    /// The chips the packet would still write to, in route order.
    pub fn recipients(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let start = (self.line, self.pos, self.forward);
        self.routing
            .walk(self.lines, start, self.route, |_, _, _, chip, write| {
                if write {
                    out.push(chip);
                }
            });
        out
    }
    /// The farthest chip the packet writes to.
    pub fn dst(&self) -> u32 {
        let here = self.lines[self.line].chips[self.pos];
        self.recipients().last().copied().unwrap_or(here)
    }
}

#[repr(align(64))]
#[derive(Default)]
/// Rare events per link direction. Packets and bytes are counted per slot (`SlotCount`).
pub(crate) struct LinkCounters {
    pub credit_stalls: AtomicU64,
    pub dropped: AtomicU64,
    pub corrupted: AtomicU64,
    /// Packets and payload another process sent into a chip held here over this link
    /// direction (it counted them where it filled the slots, and told us).
    pub arrived_packets: AtomicU64,
    pub arrived_payload: AtomicU64,
}

/// A link's fault as two atomics (read per packet without a lock) and the count of packets
/// that crossed since the fault was set (for every n-th).
#[derive(Default)]
pub(crate) struct FaultState {
    kind: AtomicU8,
    param: AtomicU64,
    count: AtomicU64,
    /// Set once a Corrupt fault is injected; damaged packets may still be in flight after
    /// the fault is cleared, so receivers keep checking this link.
    corrupt_seen: AtomicBool,
}

impl FaultState {
    pub fn get(&self) -> Option<Fault> {
        let kind = self.kind.load(Acquire);
        let p = self.param.load(Acquire);
        match kind {
            1 => Some(Fault::Down),
            2 => Some(Fault::Slow {
                factor: f64::from_bits(p),
            }),
            3 => Some(Fault::Drop { every_nth: p }),
            4 => Some(Fault::Corrupt { every_nth: p }),
            _ => None,
        }
    }
    pub fn set(&self, f: Option<Fault>) {
        let (k, p) = match f {
            None => (0, 0),
            Some(Fault::Down) => (1, 0),
            Some(Fault::Slow { factor }) => (2, factor.to_bits()),
            Some(Fault::Drop { every_nth }) => (3, every_nth),
            Some(Fault::Corrupt { every_nth }) => (4, every_nth),
        };
        if k == 4 {
            self.corrupt_seen.store(true, Release);
        }
        self.kind.store(0, Release);
        self.count.store(0, Release);
        self.param.store(p, Release);
        self.kind.store(k, Release);
    }
    pub fn ever_corrupt(&self) -> bool {
        self.corrupt_seen.load(Acquire)
    }
    /// True for every n-th call.
    #[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87
    fn hit(&self, every_nth: u64) -> bool {
        (self.count.fetch_add(1, AcqRel) + 1) % every_nth.max(1) == 0
    }
}

#[derive(Default)]
pub(crate) struct SemTable {
    /// Fx-hashed: every increment and every check of a wait hashes its id (SipHash was ~1%
    /// of a small collective).
    pub vals: Mutex<FxHashMap<u32, u64>>,
    pub cv: Condvar,
}

pub(crate) struct Inner {
    pub spec: FabricSpec,
    pub mems: Vec<Arc<dyn ChipMemory>>,
    pub lines: Vec<LineRt>,
    /// Per chip: (line, position) of every line it is on.
    pub chip_lines: Vec<Vec<(usize, usize)>>,
    pub counters: Vec<[LinkCounters; 2]>,
    pub faults: Vec<FaultState>,
    pub sems: Vec<SemTable>,
    losses: Vec<Mutex<Losses>>,
    seqs: Vec<AtomicU32>,
    pub shutdown: AtomicBool,
    /// Set by `Fabric::abort`: waits and sends fail at once with `failure` until `recover`.
    pub aborted: AtomicBool,
    pub failure: Mutex<Option<FabricError>>,
    pub channels: Vec<Arc<Channel>>,
    /// Per link and direction (a-to-b first), every channel that crosses it.
    pub link_chans: Vec<[Vec<Arc<Channel>>; 2]>,
    pub router_threads: Mutex<Vec<Thread>>,
    /// How packets find their way over the lines (1D or 2D; see `route`).
    pub routing: Routing,
    /// Every (src, dst) route, found once (`Inner::path`): a small collective's steps
    /// each send, and searching the lines per send was ~2% of one on 32 chips.
    pub routes: Vec<Option<Path>>,
    /// Chips another process holds (a big mesh over MPI ranks): their semaphore increments
    /// go there (`remote.rs`). None in a fabric wholly in this process.
    pub remote: Option<std::sync::Arc<dyn crate::RemoteChips>>,
    /// Per chip: held by another process.
    pub held_elsewhere: Vec<bool>,
}

/// Meshes up to this many chips keep a table of their routes (n x n entries).
const ROUTE_TABLE_MAX_CHIPS: usize = 256;

pub(crate) fn dir_index(ch: &Channel) -> usize {
    if ch.a_to_b {
        0
    } else {
        1
    }
}

impl Inner {
    pub fn new(
        spec: FabricSpec,
        mems: Vec<Arc<dyn ChipMemory>>,
        lines: Vec<LineRt>,
        routing: Routing,
        channels: Vec<Arc<Channel>>,
        remote: Option<Arc<dyn crate::RemoteChips>>,
    ) -> Self {
        let n = spec.num_chips as usize;
        let held_elsewhere = (0..n as u32)
            .map(|c| remote.as_ref().is_some_and(|r| r.is_remote(c)))
            .collect();
        let mut chip_lines = vec![Vec::new(); n];
        for (li, l) in lines.iter().enumerate() {
            for (p, &c) in l.chips.iter().enumerate() {
                chip_lines[c as usize].push((li, p));
            }
        }
        let mut link_chans: Vec<[Vec<Arc<Channel>>; 2]> =
            (0..spec.links.len()).map(|_| Default::default()).collect();
        for ch in &channels {
            link_chans[ch.link][dir_index(ch)].push(ch.clone());
        }
        let mut inner = Self {
            routes: Vec::new(),
            remote,
            held_elsewhere,
            routing,
            link_chans,
            counters: (0..spec.links.len()).map(|_| Default::default()).collect(),
            faults: (0..spec.links.len()).map(|_| Default::default()).collect(),
            sems: (0..n).map(|_| Default::default()).collect(),
            losses: (0..n).map(|_| Default::default()).collect(),
            seqs: (0..n * n).map(|_| AtomicU32::new(0)).collect(),
            shutdown: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            failure: Mutex::new(None),
            router_threads: Mutex::new(Vec::new()),
            spec,
            mems,
            lines,
            chip_lines,
            channels,
        };
        if n <= ROUTE_TABLE_MAX_CHIPS {
            inner.routes = (0..n * n)
                .map(|i| {
                    let (src, dst) = ((i / n) as u32, (i % n) as u32);
                    (src != dst)
                        .then(|| inner.find_path(src, dst).ok())
                        .flatten()
                })
                .collect();
        }
        inner
    }

    /// The unicast route from `src` to `dst` (different chips, checked by the caller): from
    /// the table built at construction when the mesh has one.
    #[inline]
    pub fn path(&self, src: u32, dst: u32) -> Result<Path, FabricError> {
        let n = self.spec.num_chips as usize;
        let (s, d) = (src as usize, dst as usize);
        match self.routes.get(s * n + d).copied().flatten() {
            Some(p) if s < n && d < n => Ok(p),
            _ => self.find_path(src, dst),
        }
    }

    /// `path`, searched.
    pub fn find_path(&self, src: u32, dst: u32) -> Result<Path, FabricError> {
        self.routing.path(&self.lines, &self.chip_lines, src, dst)
    }

    pub fn link_name(&self, link: usize) -> String {
        self.spec.links[link].to_string()
    }

    /// The first of `count` consecutive sequence numbers of the (src, dst) stream.
    pub fn next_seqs(&self, src: u32, dst: u32, count: u64) -> u16 {
        let n = self.spec.num_chips as usize;
        self.seqs[src as usize * n + dst as usize].fetch_add(count as u32, Relaxed) as u16
    }

    /// Puts a packet on a link: applies the link's fault, fills the reserved slot, counts it
    /// and publishes it. `add` deliveries are added to the tracker before the consumer can
    /// see the packet. On loss the slot is published empty and the loss is recorded for
    /// every chip the packet would still have written to.
    #[allow(clippy::too_many_arguments)]
    pub fn transmit(
        &self,
        ch: &Channel,
        idx: u64,
        ctx: &Ctx<'_>,
        len: usize,
        tracker: Option<&Arc<Tracker>>,
        add: u64,
        fill: impl FnOnce(&mut Slot),
    ) -> Result<(), FabricError> {
        let slot = ch.slot(idx);
        let c = &self.counters[ch.link][dir_index(ch)];
        let fs = &self.faults[ch.link];
        let mut factor = 1.0;
        let mut corrupt = false;
        match fs.get() {
            Some(Fault::Down) => {
                c.dropped.fetch_add(1, Relaxed);
                return Err(self.lose_slot(slot, ch, ctx, LinkLoss::Down, ch.to));
            }
            Some(Fault::Drop { every_nth }) if fs.hit(every_nth) => {
                c.dropped.fetch_add(1, Relaxed);
                return Err(self.lose_slot(slot, ch, ctx, LinkLoss::Dropped, ch.to));
            }
            Some(Fault::Corrupt { every_nth }) => corrupt = fs.hit(every_nth),
            Some(Fault::Slow { factor: f }) => factor = f,
            _ => {}
        }
        let mut slot = slot;
        fill(&mut slot);
        if fs.ever_corrupt() && !packet::is_sealed(&slot.hdr) {
            slot.seal(len);
        }
        if corrupt {
            // Flip one bit the checksum covers: mid-payload, or the increment if no payload.
            // Never in the sender's own buffer: take a copy first.
            slot.own_payload();
            if len > 0 {
                slot.buf[len / 2] ^= 0x20;
            } else {
                slot.hdr[24] ^= 0x01;
            }
        }
        if let (Some(t), true) = (tracker, add > 0) {
            t.add(add);
        }
        // Slots keep their last tracker: a stream from one sender then costs no reference
        // count traffic between the sender's and the router's cores.
        let same = match (&slot.tracker, tracker) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            slot.tracker = tracker.cloned();
        }
        let sc = ch.count(idx);
        SlotCount::bump(&sc.packets, 1);
        SlotCount::bump(&sc.payload, len as u64);
        if self.held_elsewhere[ch.to as usize] {
            ch.count_unreported(1, len as u64);
        }
        if factor != 1.0 {
            let extra = self.spec.params.serial_ps(len) * (factor - 1.0);
            SlotCount::bump(&sc.slow_extra_ps, (extra + 0.5) as u64);
        }
        if ctx.quiet {
            ch.publish_quiet(slot);
        } else {
            ch.publish(slot);
        }
        Ok(())
    }

    fn lose_slot(
        &self,
        mut slot: MutexGuard<'_, Slot>,
        ch: &Channel,
        ctx: &Ctx<'_>,
        kind: LinkLoss,
        at: u32,
    ) -> FabricError {
        slot.hdr = VOID_HEADER;
        slot.ext = None;
        slot.tracker = None;
        ch.publish(slot);
        self.record_link_loss(ctx, ch.link, kind);
        self.loss_error(ctx, ch.link, kind, at)
    }

    /// Tells the process holding `ch`'s far chip about traffic counted here (nothing if
    /// that chip is held here).
    pub fn tell_arrivals(&self, ch: &Channel, packets: u64, payload: u64) {
        if let (Some(r), true) = (&self.remote, self.held_elsewhere[ch.to as usize]) {
            if packets > 0 {
                r.arrived(ch.to, ch.link, ch.a_to_b, packets, payload);
            }
        }
    }

    /// Returns the credits of `k` slots of `ch` its consumer took. Into a chip another
    /// process holds they return once that process confirms it took everything sent to it
    /// so far (the writes and increments of these packets among them), as a link's far end
    /// returns credits only for what it took; the sending process's own delivery is not
    /// the far end's.
    pub fn return_credits(&self, ch: &Channel, k: u64) {
        match (&self.remote, self.held_elsewhere[ch.to as usize]) {
            (Some(r), true) => {
                ch.advance_held(k, r.mark(ch.to));
                ch.release_confirmed(r.confirmed(ch.to));
            }
            _ => ch.advance(k),
        }
    }

    /// Returns `ch`'s held credits the far process has confirmed since (see
    /// [`Inner::return_credits`]).
    pub fn release_confirmed(&self, ch: &Channel) {
        // Every router pass asks, so a fabric wholly in this process stops at the first test.
        if let Some(r) = &self.remote {
            if ch.holds_credits() {
                ch.release_confirmed(r.confirmed(ch.to));
            }
        }
    }

    pub fn sem_add(&self, chip: u32, sem: u32, by: u64) {
        if let (Some(r), true) = (&self.remote, self.held_elsewhere[chip as usize]) {
            r.add_semaphore(chip, sem, by);
            return;
        }
        let t = &self.sems[chip as usize];
        let mut g = t.vals.lock();
        let v = g.entry(sem).or_insert(0);
        *v = v.saturating_add(by);
        drop(g);
        t.cv.notify_all();
    }

    /// Performs a packet's action on `chip`. Returns the write error, if any, after
    /// recording it; completes one delivery on the tracker either way.
    pub fn deliver(
        &self,
        chip: u32,
        h: &Header,
        payload: &[u8],
        tracker: Option<&Arc<Tracker>>,
        done: &mut DoneBatch,
    ) {
        let mem = &self.mems[chip as usize];
        let res = match h.kind {
            Kind::Write | Kind::WriteAtomicInc => mem.write(h.addr, payload),
            Kind::InlineWrite => mem.write(h.addr, &h.arg0.to_le_bytes()),
            Kind::AtomicInc => Ok(()),
            Kind::Void => return,
        };
        let sem = h.kind.carries_sem().then_some(h.arg0);
        match res {
            Ok(()) => {
                // A write may name its semaphore with nothing to add, so that its loss still
                // fails the waiter (one message of several, the last raising it).
                if let Some(s) = sem.filter(|_| h.arg1 > 0) {
                    self.sem_add(chip, s, h.arg1 as u64);
                }
                done.add(tracker);
            }
            Err(source) => {
                self.record_loss(
                    chip,
                    LossKey::Write {
                        reason: source.to_string(),
                    },
                    sem,
                );
                let err = FabricError::WriteFailed {
                    chip,
                    src: h.src as u32,
                    addr: h.addr.to_string(),
                    source,
                };
                if let Some(t) = tracker {
                    t.fail(err, 1);
                }
            }
        }
    }

    /// Does a whole message's work on `chip` at once (`FabricSender`'s direct path): `write`
    /// puts the payload into the chip's memory, then the semaphore increment is added. False,
    /// with nothing done, if the chip rejects the write: the caller then delivers the message
    /// packet by packet, so losses are recorded per packet exactly as a router records them.
    pub fn deliver_message(
        &self,
        chip: u32,
        write: impl FnOnce(&dyn ChipMemory) -> Result<(), crate::MemoryError>,
        sem: Option<(u32, u32)>,
    ) -> bool {
        if write(&*self.mems[chip as usize]).is_err() {
            return false;
        }
        if let Some((s, by)) = sem.filter(|&(_, by)| by > 0) {
            self.sem_add(chip, s, by as u64);
        }
        true
    }

    /// Writes the payloads of `packets` consecutive packets in one call (see the router's
    /// `Run`), completing them all, or failing them all with the write's error.
    #[allow(clippy::too_many_arguments)]
    pub fn deliver_run(
        &self,
        chip: u32,
        at: NocAddr,
        data: &[u8],
        src: u16,
        packets: u64,
        tracker: Option<&Arc<Tracker>>,
        done: &mut DoneBatch,
    ) {
        match self.mems[chip as usize].write(at, data) {
            Ok(()) => done.add_n(tracker, packets),
            Err(source) => {
                let reason = source.to_string();
                for _ in 0..packets {
                    self.record_loss(
                        chip,
                        LossKey::Write {
                            reason: reason.clone(),
                        },
                        None,
                    );
                }
                let err = FabricError::WriteFailed {
                    chip,
                    src: src as u32,
                    addr: at.to_string(),
                    source,
                };
                if let Some(t) = tracker {
                    t.fail(err, packets);
                }
            }
        }
    }

    /// Takes up to `max` credits on `ch` (first index, count), helping its consumer while
    /// none is free. `Err(true)` on shutdown, `Err(false)` after `timeout`.
    pub fn reserve(
        &self,
        ch: &Channel,
        timeout: Duration,
        me: u32,
        eager: bool,
        cached_head: &mut u64,
        max: u64,
    ) -> Result<(u64, u64), bool> {
        if let Some(r) = ch.try_reserve_many(cached_head, max) {
            return Ok(r);
        }
        self.counters[ch.link][dir_index(ch)]
            .credit_stalls
            .fetch_add(1, Relaxed);
        let mut got = (0, 0);
        self.wait_with_help(ch, timeout, me, eager, || {
            match ch.try_reserve_many(cached_head, max) {
                Some(r) => {
                    got = r;
                    true
                }
                None => false,
            }
        })?;
        Ok(got)
    }

    /// Publishes reserved slots that will not be filled as empty, so the consumer moves on.
    pub fn void_slots(&self, ch: &Channel, first: u64, count: u64) {
        for idx in first..first + count {
            let mut slot = ch.slot(idx);
            slot.hdr = VOID_HEADER;
            slot.ext = None;
            ch.publish(slot);
        }
    }

    /// Waits until `ready()` holds. Spins briefly, then runs passes of the router that
    /// drains `ch` (and of the routers it is blocked on) when they are not running, then
    /// parks until a slot of `ch` is freed. `Err(true)` on shutdown,
    /// `Err(false)` after `timeout`.
    pub fn wait_with_help(
        &self,
        ch: &Channel,
        timeout: Duration,
        me: u32,
        eager: bool,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), bool> {
        if ready() {
            return Ok(());
        }
        // Read the clock only when about to park: most waits end before.
        let mut deadline = None;
        let mut idle = 0u32;
        loop {
            if self.shutdown.load(SeqCst) {
                return Err(true);
            }
            idle = idle.saturating_add(1);
            // First give a running router the moment it needs to free a slot, so sender and
            // router work in parallel; only a router that does not answer gets helped.
            let spins = if eager { 0 } else { HELP_AFTER_SPINS };
            if idle <= spins {
                std::hint::spin_loop();
            } else if self.help_chain(ch, me) {
                idle = spins;
            } else if idle <= SPIN_TRIES + YIELD_TRIES {
                thread::yield_now();
            } else {
                ch.add_waiter();
                if ready() {
                    return Ok(());
                }
                let now = Instant::now();
                let deadline = *deadline.get_or_insert(now + timeout);
                if now >= deadline {
                    return Err(false);
                }
                thread::park_timeout((deadline - now).min(Duration::from_millis(50)));
            }
            if ready() {
                return Ok(());
            }
        }
    }

    /// Delivers what a sender just published quietly on `ch`: runs the routers down the line
    /// on the sender's thread (`help_chain`), and wakes any it cannot run, so every quiet
    /// packet is either moved here or seen by a router thread that was told to look.
    pub fn drive(&self, ch: &Channel, me: u32) {
        self.help_chain(ch, me);
    }

    /// Helps the consumer of `ch`, then, down the line, every router this help forwarded to
    /// or is blocked on. True if any packet moved. A helper's forwards are published
    /// without a wake, so a router it cannot run is woken instead. Routers of the helper's
    /// own chip (`me`) are left to their threads: a kernel may hold its chip's memory while
    /// it sends, and a write into that memory from the same thread could deadlock.
    fn help_chain(&self, ch: &Channel, me: u32) -> bool {
        let mut progress = false;
        let mut next = ch.router();
        for _ in 0..=packet::MAX_HOPS {
            let Some(r) = next.take() else { break };
            if r.chip == me {
                r.wake.wake();
                break;
            }
            let Some(pass) = r.try_help(self) else {
                // Its thread or another helper holds it; make sure someone looks again.
                r.wake.wake();
                break;
            };
            progress |= pass.progress;
            // The router this pass is blocked on (on a 2D fabric it may be the crossing
            // line's), else the next one down the line if the pass forwarded to it.
            // Next: the router down the line this pass forwarded to or is blocked on; on a
            // 2D fabric a router may be blocked on the crossing line's instead.
            if pass.forwarded || pass.blocked.is_some() {
                next = match &pass.blocked {
                    Some(out) if r.turn.is_some() => out.router(),
                    _ => r.next_router(),
                };
            }
        }
        if let Some(r) = next {
            r.wake.wake();
        }
        progress
    }

    /// The error every wait and send returns while the fabric is aborted.
    pub fn abort_error(&self) -> Option<FabricError> {
        if !self.aborted.load(SeqCst) {
            return None;
        }
        self.failure.lock().clone()
    }

    /// Wakes every thread that might be waiting, so shutdown is seen promptly.
    pub fn wake_all(&self) {
        for t in self.router_threads.lock().iter() {
            t.unpark();
        }
        for ch in &self.channels {
            ch.wake_waiters();
        }
        for s in &self.sems {
            let _g = s.vals.lock();
            s.cv.notify_all();
        }
    }
}
