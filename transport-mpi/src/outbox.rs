//! What this process has for each other rank, gathered until its progress thread next sends
//! (one MPI message per rank and pass: see `wire.rs`), and what the progress thread needs to
//! know to sleep without making anyone wait: whether anything is queued, and whether a
//! thread here waits for something another rank sends.
//!
//! It also keeps each link's flow control whole across ranks: every fabric message queued
//! for a rank is counted (`queued`), the rank answers with how many it has taken
//! (`Message::Taken`, queued like any other but not counted), and the fabric returns the
//! credits of packets delivered there only once their mark is confirmed (`confirmed`).
//!
//! Incoming MPI messages wake nobody (MPI progresses only inside calls), so the progress
//! thread polls while someone here waits for another rank and sleeps otherwise; a wait that
//! begins, or bytes queued while it sleeps, ring its bell (one channel message per sleep).

use crossbeam_channel::Sender;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};

use crate::progress::Cmd;
use crate::wire::Message;

pub(crate) struct Outboxes {
    /// Per rank: messages not yet handed to MPI, back to back.
    boxes: Vec<Mutex<Vec<u8>>>,
    /// Per rank: fabric messages queued for it so far (not counting confirmations).
    queued: Vec<AtomicU64>,
    /// Per rank: how many of those it has confirmed taking.
    confirmed: Vec<AtomicU64>,
    /// Something was queued since the progress thread last looked.
    pending: AtomicBool,
    /// The progress thread is about to sleep, or sleeps: the next queue or wait rings.
    sleeping: AtomicBool,
    /// Threads of this process now waiting for something another rank sends.
    waiting: AtomicUsize,
    /// Waits begun so far: a new one makes the progress thread poll hot again.
    waits_begun: AtomicU64,
    bell: Sender<Cmd>,
}

impl Outboxes {
    pub fn new(ranks: u32, bell: Sender<Cmd>) -> Self {
        Outboxes {
            boxes: (0..ranks).map(|_| Mutex::new(Vec::new())).collect(),
            queued: (0..ranks).map(|_| AtomicU64::new(0)).collect(),
            confirmed: (0..ranks).map(|_| AtomicU64::new(0)).collect(),
            pending: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            waits_begun: AtomicU64::new(0),
            bell,
        }
    }

    /// Queues fabric message `m` for rank `to`, after everything queued for it before.
    pub fn push(&self, to: u32, m: &Message<'_>) {
        if let Some(b) = self.boxes.get(to as usize) {
            let mut b = b.lock();
            m.encode_into(&mut b);
            self.queued[to as usize].fetch_add(1, SeqCst);
            drop(b);
            self.pending.store(true, SeqCst);
            self.ring();
        }
    }

    /// Tells rank `to` that the first `upto` fabric messages it sent here were taken.
    pub fn push_taken(&self, to: u32, upto: u64) {
        if let Some(b) = self.boxes.get(to as usize) {
            Message::Taken { upto }.encode_into(&mut b.lock());
            self.pending.store(true, SeqCst);
        }
    }

    /// A mark after every fabric message queued for rank `to` so far.
    pub fn mark(&self, to: u32) -> u64 {
        self.queued.get(to as usize).map_or(0, |q| q.load(SeqCst))
    }

    /// The highest mark rank `to` has confirmed.
    pub fn confirmed(&self, to: u32) -> u64 {
        self.confirmed
            .get(to as usize)
            .map_or(u64::MAX, |c| c.load(SeqCst))
    }

    /// Rank `from` confirmed taking `upto` messages.
    pub fn confirm(&self, from: u32, upto: u64) {
        if let Some(c) = self.confirmed.get(from as usize) {
            c.fetch_max(upto, SeqCst);
        }
    }

    /// True while some rank has not confirmed everything queued for it.
    pub fn unconfirmed(&self) -> bool {
        self.queued
            .iter()
            .zip(&self.confirmed)
            .any(|(q, c)| q.load(SeqCst) > c.load(SeqCst))
    }

    /// Wakes the progress thread if it sleeps.
    pub fn ring(&self) {
        if self.sleeping.swap(false, SeqCst) {
            // The thread goes away only at finalize, after every mesh closed.
            let _ = self.bell.send(Cmd::Wake);
        }
    }

    pub fn wait_begins(&self) {
        self.waiting.fetch_add(1, SeqCst);
        self.waits_begun.fetch_add(1, SeqCst);
        self.ring();
    }

    pub fn wait_ends(&self) {
        self.waiting.fetch_sub(1, SeqCst);
    }

    // The progress thread's side.

    /// True (once) if something was queued since the last call.
    pub fn take_pending(&self) -> bool {
        self.pending.swap(false, SeqCst)
    }

    /// What is queued for rank `to`, leaving `spare` (empty) in its place; None if nothing.
    pub fn take(&self, to: u32, spare: &mut Vec<u8>) -> Option<Vec<u8>> {
        let mut b = self.boxes[to as usize].lock();
        if b.is_empty() {
            return None;
        }
        spare.clear();
        Some(std::mem::replace(&mut *b, std::mem::take(spare)))
    }

    pub fn someone_waits(&self) -> bool {
        self.waiting.load(SeqCst) > 0
    }

    pub fn waits_begun(&self) -> u64 {
        self.waits_begun.load(SeqCst)
    }

    /// Announces a sleep; false (and no sleep) if work came meanwhile. Then [`Self::awake`].
    pub fn may_sleep(&self) -> bool {
        self.sleeping.store(true, SeqCst);
        if self.pending.load(SeqCst) || self.someone_waits() {
            self.sleeping.store(false, SeqCst);
            return false;
        }
        true
    }

    pub fn awake(&self) {
        self.sleeping.store(false, SeqCst);
    }
}
