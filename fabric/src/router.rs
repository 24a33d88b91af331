//! One router: the thread that drains the inbound channels of one chip along one line
//! direction (every parallel link and virtual channel of the hop that arrives there),
//! checks each packet's checksum, writes it locally and/or forwards it one hop on.
//!
//! The router never blocks on one channel: if a packet cannot be forwarded for want of a
//! credit, it registers for that credit and serves its other channels. Each virtual channel
//! therefore progresses on its own, which the ring's dateline needs.

use crate::channel::{Channel, SPIN_TRIES, YIELD_TRIES};
use crate::inner::{dir_index, Ctx, Hop, Inner, LinkLoss};
use crate::packet::{self, Header, Kind, HOP_FORWARD, HOP_WRITE};
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Packets taken from one channel before looking at the next (fairness between links/VCs).
const BUDGET: usize = 16;
/// Longest park while idle; the router is unparked on every publish, so this only bounds
/// how often an idle router looks at the shutdown flag.
const IDLE_PARK: Duration = Duration::from_millis(250);

pub(crate) struct Router {
    pub chip: u32,
    pub line: usize,
    pub forward: bool,
    pub pos: usize,
    /// Inbound channels and their virtual channel number.
    pub inbound: Vec<(Arc<Channel>, usize)>,
    pub outbound: Option<Arc<Hop>>,
}

impl Router {
    pub fn run(self, inner: Arc<Inner>) {
        let line = &inner.lines[self.line];
        // The chip that puts packets on our inbound links.
        let prev = line
            .step(self.pos, !self.forward, 1)
            .expect("a router exists only where an inbound hop does");
        // Head index at which a credit stall was last counted, per inbound channel.
        let mut stalled_at = vec![u64::MAX; self.inbound.len()];
        let mut idle = 0u32;
        while !inner.shutdown.load(Relaxed) {
            let mut progress = false;
            for (i, (ch, vc)) in self.inbound.iter().enumerate() {
                for _ in 0..BUDGET {
                    if !self.step(&inner, prev, ch, *vc, &mut stalled_at[i]) {
                        break;
                    }
                    progress = true;
                }
            }
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
                thread::park_timeout(IDLE_PARK);
            }
        }
    }

    /// Handles the oldest packet of `ch`. False if there is none or it must wait for a credit.
    fn step(
        &self,
        inner: &Inner,
        prev: usize,
        ch: &Channel,
        vc: usize,
        stalled_at: &mut u64,
    ) -> bool {
        let Some(mut slot) = ch.peek() else {
            return false;
        };
        let hdr = slot.hdr;
        let decoded = Header::decode(&hdr);
        if let Some(Header {
            kind: Kind::Void, ..
        }) = decoded
        {
            ch.release(slot);
            return true;
        }
        let line = &inner.lines[self.line];
        let (route, src, seq, sem) = match &decoded {
            Some(h) => (
                h.route,
                h.src as u32,
                h.seq,
                h.kind.carries_sem().then_some(h.arg0),
            ),
            None => (0, 0, 0, None),
        };
        let ctx = Ctx {
            line,
            forward: self.forward,
            pos: prev,
            route,
            src,
            seq,
            sem,
        };
        let code = route & 0b11;
        let len = decoded.map_or(0, |h| h.len as usize);
        let intact = decoded.is_some()
            && code != 0
            && len <= slot.buf.len()
            && packet::verify(&hdr, slot.payload(len))
            && (code & HOP_FORWARD == 0 || self.outbound.is_some());
        let Some(h) = decoded.filter(|_| intact) else {
            // The link damaged it: count it on the link it arrived by and tell the sender.
            inner.counters[ch.link][dir_index(ch)]
                .corrupted
                .fetch_add(1, Relaxed);
            inner.record_link_loss(&ctx, ch.link, LinkLoss::Corrupted);
            let err = inner.loss_error(&ctx, ch.link, LinkLoss::Corrupted, self.chip);
            if let Some(t) = slot.tracker.take() {
                t.fail(err, packet::writes_in(route));
            }
            ch.release(slot);
            return true;
        };
        let write = code & HOP_WRITE != 0;
        if code & HOP_FORWARD != 0 {
            let hop = self.outbound.as_ref().expect("checked above");
            let out = hop.channel(h.link as usize, vc);
            let idx = match out.try_reserve() {
                Some(i) => i,
                None => {
                    out.add_waiter();
                    match out.try_reserve() {
                        Some(i) => i,
                        None => {
                            if *stalled_at != ch.head() {
                                *stalled_at = ch.head();
                                inner.counters[out.link][dir_index(out)]
                                    .credit_stalls
                                    .fetch_add(1, Relaxed);
                            }
                            return false;
                        }
                    }
                }
            };
            if write {
                inner.deliver(self.chip, &h, slot.payload(len), slot.tracker.as_ref());
            }
            let rest = route >> 2;
            let next = Ctx {
                pos: self.pos,
                route: rest,
                ..ctx
            };
            let tracker = slot.tracker.take();
            let res = inner.transmit(out, idx, &next, len, tracker.clone(), 0, |o| {
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
            if let (Err(e), Some(t)) = (res, tracker) {
                t.fail(e, packet::writes_in(rest));
            }
        } else if write {
            inner.deliver(self.chip, &h, slot.payload(len), slot.tracker.as_ref());
        }
        ch.release(slot);
        true
    }
}
