//! One channel: a ring of equal slots (one packet each) carrying one virtual channel of one
//! link index of one hop, in one direction. Credits are free slots: a producer (a chip's
//! sender, or the upstream router forwarding) reserves one, fills it and publishes it; the
//! consumer (the router at the far end) takes slots in order and frees them, returning
//! the credit.
//!
//! Waking: the consumer thread is unparked on publish; when it is running that is a single
//! atomic, so a busy channel costs no thread wake per packet. Producers that find no credit
//! help the consumer (see `Inner::wait_with_help`), spin briefly, then register and park;
//! the consumer unparks them when it frees a slot.

use crate::packet::HEADER_BYTES;
use crate::router::Router;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::{self, Thread};

/// Completion tracking of one sender handle (emulator side band, not on the wire): the
/// number of deliveries still due and the errors met on the way.
pub(crate) struct Tracker {
    outstanding: AtomicU64,
    errors: Mutex<Vec<crate::FabricError>>,
    waiter: Mutex<Option<Thread>>,
    waiting: AtomicBool,
}

impl Tracker {
    pub fn new() -> Self {
        Self {
            outstanding: AtomicU64::new(0),
            errors: Mutex::new(Vec::new()),
            waiter: Mutex::new(None),
            waiting: AtomicBool::new(false),
        }
    }
    pub fn add(&self, n: u64) {
        self.outstanding.fetch_add(n, SeqCst);
    }
    pub fn done(&self, n: u64) {
        if n > 0 && self.outstanding.fetch_sub(n, SeqCst) == n {
            self.wake();
        }
    }
    pub fn fail(&self, err: crate::FabricError, n: u64) {
        let mut e = self.errors.lock();
        // The first errors explain a failure; an unflushed stream of them must not grow.
        if e.len() < 64 {
            e.push(err);
        }
        drop(e);
        self.done(n);
        self.wake();
    }
    pub fn outstanding(&self) -> u64 {
        self.outstanding.load(SeqCst)
    }
    pub fn take_errors(&self) -> Vec<crate::FabricError> {
        std::mem::take(&mut *self.errors.lock())
    }
    fn wake(&self) {
        if self.waiting.load(SeqCst) {
            if let Some(t) = self.waiter.lock().as_ref() {
                t.unpark();
            }
        }
    }
    pub fn set_waiter(&self, on: bool) {
        *self.waiter.lock() = on.then(thread::current);
        self.waiting.store(on, SeqCst);
    }
}

/// Deliveries completed during one router pass, reported to their tracker in one step
/// (one atomic per run of packets from the same sender instead of one per packet).
#[derive(Default)]
pub(crate) struct DoneBatch {
    tracker: Option<Arc<Tracker>>,
    n: u64,
}

impl DoneBatch {
    pub fn add(&mut self, t: Option<&Arc<Tracker>>) {
        self.add_n(t, 1);
    }
    pub fn add_n(&mut self, t: Option<&Arc<Tracker>>, n: u64) {
        let Some(t) = t else { return };
        match &self.tracker {
            Some(cur) if Arc::ptr_eq(cur, t) => self.n += n,
            _ => {
                self.flush();
                self.tracker = Some(t.clone());
                self.n = n;
            }
        }
    }
    pub fn flush(&mut self) {
        if let Some(t) = self.tracker.take() {
            t.done(self.n);
        }
        self.n = 0;
    }
}

/// A payload left in the sender's buffer instead of copied into the slot (large messages).
///
/// Safety contract: the sender keeps the bytes alive and unchanged until the channel's head
/// has passed the slot, or until it has voided every slot of its message still full (under
/// the slot's lock) and then waited for the consumer's running pass to end (see
/// `sender::RefGuard`). Readers read either under the slot's lock, or within the pass that
/// freed the slot and before that pass returns its credit (the router's write runs).
#[derive(Clone, Copy)]
pub(crate) struct ExtRef {
    ptr: *const u8,
    len: usize,
    /// Start of the whole message buffer this payload was cut from.
    pub msg: *const u8,
}

// SAFETY: the referent is plain bytes kept alive by the contract above.
unsafe impl Send for ExtRef {}

impl ExtRef {
    pub fn new(data: &[u8], msg: &[u8]) -> Self {
        Self {
            ptr: data.as_ptr(),
            len: data.len(),
            msg: msg.as_ptr(),
        }
    }
    /// True if the payload lies inside `range` (the sender's whole message).
    pub fn within(&self, range: &[u8]) -> bool {
        let lo = range.as_ptr() as usize;
        let p = self.ptr as usize;
        p >= lo && p + self.len <= lo + range.len()
    }
}

/// How producers wake a router: unpark its thread, but only when it said it sleeps, so a
/// busy router's wake line is only read, not bounced between cores per packet.
#[derive(Default)]
pub(crate) struct Wake {
    pub thread: OnceLock<Thread>,
    pub sleeping: AtomicBool,
}

impl Wake {
    pub fn wake(&self) {
        if self.sleeping.load(SeqCst) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }
}

/// Traffic through one slot. Only the holder of the slot's lock writes it, so a plain load
/// and store does (no locked instruction per packet); statistics read it without the lock.
#[repr(align(64))]
#[derive(Default)]
pub(crate) struct SlotCount {
    pub packets: AtomicU64,
    pub payload: AtomicU64,
    /// Modeled picoseconds added by `Fault::Slow` beyond the normal serialization time.
    pub slow_extra_ps: AtomicU64,
}

impl SlotCount {
    pub fn bump(a: &AtomicU64, by: u64) {
        a.store(a.load(Relaxed) + by, Relaxed);
    }
}

pub(crate) struct Slot {
    pub full: bool,
    pub hdr: [u8; HEADER_BYTES],
    pub buf: Box<[u8]>,
    pub ext: Option<ExtRef>,
    pub tracker: Option<Arc<Tracker>>,
}

impl Slot {
    /// The packet's payload of `len` bytes, wherever it lives.
    pub fn payload(&self, len: usize) -> &[u8] {
        match self.ext {
            // SAFETY: see `ExtRef`; we are behind the slot's lock (we have `&self` through
            // the guard) and the slot is full, so the sender still keeps the bytes alive.
            Some(e) => unsafe { std::slice::from_raw_parts(e.ptr, e.len.min(len)) },
            None => &self.buf[..len.min(self.buf.len())],
        }
    }

    /// Sets the header's checksum over the payload (see `packet`).
    pub fn seal(&mut self, len: usize) {
        let payload: &[u8] = match self.ext {
            // SAFETY: as in `payload`.
            Some(e) => unsafe { std::slice::from_raw_parts(e.ptr, e.len.min(len)) },
            None => &self.buf[..len.min(self.buf.len())],
        };
        crate::packet::seal(&mut self.hdr, payload);
    }

    /// Moves a by-reference payload into the slot's own buffer.
    pub fn own_payload(&mut self) {
        if let Some(e) = self.ext.take() {
            // SAFETY: as in `payload`.
            let src = unsafe { std::slice::from_raw_parts(e.ptr, e.len) };
            self.buf[..e.len].copy_from_slice(src);
        }
    }
}

pub(crate) struct Channel {
    slots: Box<[Mutex<Slot>]>,
    n: u64,
    /// Slots whose credits have returned (written by the consumer, or by whoever releases
    /// held credits, under `held`).
    head: AtomicU64,
    /// Slots the consumer has taken so far (its cursor). Equal to `head` once a pass ends,
    /// except into a chip another process holds: there each batch's credits are held until
    /// that process confirms it took what was sent to it (`held`).
    taken: AtomicU64,
    /// Held credits, oldest first: (the mark the far process must confirm, the `taken`
    /// index whose credits return then).
    held: Mutex<std::collections::VecDeque<(u64, u64)>>,
    n_held: AtomicUsize,
    /// Slots reserved so far (producers race with CAS).
    tail: AtomicU64,
    /// The draining router's wake, shared by all its inbound channels.
    pub consumer: Arc<Wake>,
    counts: Box<[SlotCount]>,
    /// Traffic delivered past the slots (`FabricSender`'s direct path), written only by the
    /// holder of the draining router's token.
    direct: SlotCount,
    /// Into a chip another process holds: packets and payload counted here and not yet told
    /// to that process (`RemoteChips::arrived`), so its statistics show them too.
    unreported: SlotCount,
    pub router: OnceLock<Weak<Router>>,
    waiters: Mutex<Vec<Thread>>,
    n_waiters: AtomicUsize,
    /// Index into the spec's links, and whether this channel runs from its `a` end to `b`.
    pub link: usize,
    pub a_to_b: bool,
    /// The chip at the far end (for error messages).
    pub to: u32,
}

/// Bounded spinning before parking: the producer or consumer on the other side usually
/// answers within microseconds while a transfer runs; idle threads still end up parked.
pub(crate) const SPIN_TRIES: u32 = 64;
pub(crate) const YIELD_TRIES: u32 = 16;

impl Channel {
    pub fn new(
        slots: usize,
        slot_bytes: usize,
        link: usize,
        a_to_b: bool,
        to: u32,
        consumer: Arc<Wake>,
    ) -> Self {
        let slots: Vec<Mutex<Slot>> = (0..slots)
            .map(|_| {
                Mutex::new(Slot {
                    full: false,
                    hdr: [0; HEADER_BYTES],
                    buf: vec![0u8; slot_bytes].into_boxed_slice(),
                    ext: None,
                    tracker: None,
                })
            })
            .collect();
        Self {
            counts: (0..slots.len()).map(|_| SlotCount::default()).collect(),
            direct: SlotCount::default(),
            unreported: SlotCount::default(),
            n: slots.len() as u64,
            slots: slots.into_boxed_slice(),
            head: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            held: Mutex::new(Default::default()),
            n_held: AtomicUsize::new(0),
            tail: AtomicU64::new(0),
            consumer,
            router: OnceLock::new(),
            waiters: Mutex::new(Vec::new()),
            n_waiters: AtomicUsize::new(0),
            link,
            a_to_b,
            to,
        }
    }

    /// Takes one credit if a slot is free; returns the slot's sequence index.
    /// Takes up to `max` credits at once for a producer that remembers the head it last
    /// saw: the head's cache line (written by the consumer per packet) is read only when the
    /// channel looks full. Returns the first slot index and the count taken.
    pub fn try_reserve_many(&self, cached_head: &mut u64, max: u64) -> Option<(u64, u64)> {
        loop {
            let mut t = self.tail.load(SeqCst);
            // A stale head only undercounts credits, so this is safe to trust.
            let mut free = self.n.saturating_sub(t.saturating_sub(*cached_head));
            if free == 0 {
                *cached_head = self.head.load(SeqCst);
                t = self.tail.load(SeqCst);
                free = self.n - (t - *cached_head);
                if free == 0 {
                    return None;
                }
            }
            let k = free.min(max.max(1));
            if self
                .tail
                .compare_exchange_weak(t, t + k, SeqCst, SeqCst)
                .is_ok()
            {
                return Some((t, k));
            }
        }
    }

    pub fn try_reserve(&self) -> Option<u64> {
        loop {
            // Head first: it only grows and never passes the tail read after it.
            let h = self.head.load(SeqCst);
            let t = self.tail.load(SeqCst);
            if t - h >= self.n {
                return None;
            }
            if self
                .tail
                .compare_exchange_weak(t, t + 1, SeqCst, SeqCst)
                .is_ok()
            {
                return Some(t);
            }
        }
    }

    /// Registers the calling thread to be unparked when a credit returns (once: a router
    /// retrying the same blocked packet must not grow the list).
    pub fn add_waiter(&self) {
        self.add_waiter_thread(thread::current());
    }

    pub fn add_waiter_thread(&self, me: Thread) {
        let mut w = self.waiters.lock();
        if !w.iter().any(|t| t.id() == me.id()) {
            w.push(me);
        }
        self.n_waiters.store(w.len(), SeqCst);
    }

    pub fn wake_waiters(&self) {
        if self.n_waiters.load(SeqCst) == 0 {
            return;
        }
        let list = {
            let mut w = self.waiters.lock();
            self.n_waiters.store(0, SeqCst);
            std::mem::take(&mut *w)
        };
        for t in list {
            t.unpark();
        }
    }

    /// The slot for a reserved index; only its reserver fills it.
    pub fn slot(&self, idx: u64) -> MutexGuard<'_, Slot> {
        self.slots[(idx % self.n) as usize].lock()
    }

    pub fn publish(&self, slot: MutexGuard<'_, Slot>) {
        self.publish_quiet(slot);
        self.consumer.wake();
    }

    /// Publishes without waking the consumer; the caller must make sure it gets drained.
    pub fn publish_quiet(&self, mut slot: MutexGuard<'_, Slot>) {
        slot.full = true;
    }

    /// The counters of a reserved slot; write them only while holding that slot's lock.
    pub fn count(&self, idx: u64) -> &SlotCount {
        &self.counts[(idx % self.n) as usize]
    }

    /// Counts `packets` carrying `payload` bytes that crossed without a slot. Call only while
    /// holding the token of the router that drains this channel (its single writer).
    pub fn count_direct(&self, packets: u64, payload: u64) {
        SlotCount::bump(&self.direct.packets, packets);
        SlotCount::bump(&self.direct.payload, payload);
    }

    /// Counts traffic for the process that holds this channel's far chip (see `unreported`).
    pub fn count_unreported(&self, packets: u64, payload: u64) {
        self.unreported.packets.fetch_add(packets, Relaxed);
        self.unreported.payload.fetch_add(payload, Relaxed);
    }

    /// (packets, payload bytes) counted since the last call, for the far chip's process.
    pub fn take_unreported(&self) -> (u64, u64) {
        if self.unreported.packets.load(Relaxed) == 0 {
            return (0, 0);
        }
        (
            self.unreported.packets.swap(0, Relaxed),
            self.unreported.payload.swap(0, Relaxed),
        )
    }

    /// (packets, payload bytes, slow extra ps) through this channel so far.
    pub fn totals(&self) -> (u64, u64, u64) {
        let counts = self.counts.iter().chain(std::iter::once(&self.direct));
        counts.fold((0, 0, 0), |(p, b, x), c| {
            (
                p + c.packets.load(Relaxed),
                b + c.payload.load(Relaxed),
                x + c.slow_extra_ps.load(Relaxed),
            )
        })
    }

    /// Slot `h` (the consumer's cursor, at or past the head) if it holds a packet.
    pub fn peek_at(&self, h: u64) -> Option<MutexGuard<'_, Slot>> {
        let s = self.slots[(h % self.n) as usize].lock();
        s.full.then_some(s)
    }

    /// Empties a slot taken with `peek_at`; its credit returns with `advance`.
    pub fn free(&self, mut slot: MutexGuard<'_, Slot>) {
        slot.full = false;
        slot.ext = None;
    }

    /// Returns the credits of `k` freed slots (one update per batch of packets).
    pub fn advance(&self, k: u64) {
        self.taken.fetch_add(k, SeqCst);
        self.head.fetch_add(k, SeqCst);
        self.wake_waiters();
    }

    /// Takes `k` freed slots whose credits return only once the far process has confirmed
    /// `mark` (see [`Channel::release_confirmed`]).
    pub fn advance_held(&self, k: u64, mark: u64) {
        let mut held = self.held.lock();
        let upto = self.taken.fetch_add(k, SeqCst) + k;
        match held.back_mut() {
            // Batches waiting for the same mark return together.
            Some(last) if last.0 == mark => last.1 = upto,
            _ => held.push_back((mark, upto)),
        }
        self.n_held.store(held.len(), SeqCst);
    }

    /// Returns the held credits whose mark is at most `confirmed`.
    pub fn release_confirmed(&self, confirmed: u64) {
        if self.n_held.load(SeqCst) == 0 {
            return;
        }
        let mut held = self.held.lock();
        let mut upto = None;
        while let Some(&(mark, idx)) = held.front() {
            if mark > confirmed {
                break;
            }
            upto = Some(idx);
            held.pop_front();
        }
        self.n_held.store(held.len(), SeqCst);
        drop(held);
        if let Some(upto) = upto {
            self.head.store(upto, SeqCst);
            self.wake_waiters();
        }
    }

    /// True while credits are held for the far process.
    pub fn holds_credits(&self) -> bool {
        self.n_held.load(SeqCst) > 0
    }

    /// Reserves exactly `k` credits, with nothing queued before them, for a message the
    /// holder of the consumer's token delivers without the slots (`FabricSender::send_direct`
    /// into a chip another process holds), which then takes them with
    /// [`Channel::advance_held`]; false, reserving nothing, if that cannot be.
    pub fn take_unfilled(&self, k: u64) -> bool {
        loop {
            let h = self.head.load(SeqCst);
            let t = self.tail.load(SeqCst);
            if t - h + k > self.n || t != self.taken.load(SeqCst) {
                return false;
            }
            if self
                .tail
                .compare_exchange_weak(t, t + k, SeqCst, SeqCst)
                .is_ok()
            {
                return true;
            }
        }
    }

    pub fn slots(&self) -> u64 {
        self.n
    }

    /// Index of the oldest slot the consumer has not taken (to tell one head-of-line packet
    /// from the next; past it, a lent payload is no longer read).
    pub fn cursor(&self) -> u64 {
        self.taken.load(SeqCst)
    }

    /// Slots reserved or filled, or taken with their credits held, right now.
    pub fn len(&self) -> u64 {
        let h = self.head.load(SeqCst);
        self.tail.load(SeqCst) - h
    }

    /// Slots reserved or filled and not yet taken by the consumer.
    pub fn queued(&self) -> u64 {
        let c = self.taken.load(SeqCst);
        self.tail.load(SeqCst).saturating_sub(c)
    }

    /// The router that drains this channel, for senders that help it.
    pub fn router(&self) -> Option<Arc<Router>> {
        self.router.get().and_then(Weak::upgrade)
    }
}
