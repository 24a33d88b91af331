//! `FabricSender`: what a kernel on one chip uses to write to other chips. Messages are split
//! into packets of the payload size; the last packet of a message carries its semaphore
//! increment, so the increment lands after all the data on the same path.

use crate::channel::{Channel, DoneBatch, ExtRef, Tracker};
use crate::config::{Dir, FabricConfig, LineDir};
use crate::inner::{Ctx, Inner, LinkLoss};
use crate::memory::{self, ChipMemory, ComputedFill};
use crate::packet::{self, Header, Kind};
use crate::payload::{Computed, Copied, Payload, RefGuard};
use crate::route::Path;
use crate::FabricError;
use crate::NocAddr;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, FabricError>;

/// Addresses travel in 48 bits and banks in 16 (see `packet`).
const MAX_ADDR: u64 = 1 << 48;

#[derive(Clone, Copy)]
enum Msg {
    Data { sem: Option<(u32, u32)> },
    Inline(u32),
    Atomic(u32, u32),
}

/// A chip's handle to the fabric. Packets of one handle to one destination over one link
/// index arrive in the order sent. `flush` waits for this handle's packets only.
pub struct FabricSender {
    inner: Arc<Inner>,
    chip: u32,
    tracker: Arc<Tracker>,
    link: usize,
    payload: usize,
}

impl FabricSender {
    pub(crate) fn new(inner: Arc<Inner>, chip: u32) -> Self {
        let payload = inner.spec.params.default_payload_bytes;
        Self {
            inner,
            chip,
            tracker: Arc::new(Tracker::new()),
            link: 0,
            payload,
        }
    }

    pub fn chip(&self) -> u32 {
        self.chip
    }

    /// Link index used by `inline_write`, `atomic_inc`, `write_and_inc` and
    /// `multicast_write` (`unicast_write` takes its own). Each hop uses `link % links there`.
    pub fn with_link(mut self, link: usize) -> Self {
        self.link = link;
        self
    }

    /// Payload bytes per packet (default `LinkParams::default_payload_bytes`).
    pub fn with_payload_size(mut self, bytes: usize) -> Result<Self> {
        let max = self.inner.spec.params.max_payload_bytes;
        if bytes == 0 || bytes > max {
            return Err(FabricError::InvalidArgument(format!(
                "payload size {bytes} B is outside 1..={max} B (LinkParams::max_payload_bytes)"
            )));
        }
        self.payload = bytes;
        Ok(self)
    }

    pub fn payload_size(&self) -> usize {
        self.payload
    }

    /// The longest message this handle can deliver on the sending thread: a channel's worth
    /// of packets (see `send_direct`), when it goes one hop over a link without a fault to a
    /// router with nothing queued. Longer messages always travel as packets, which costs the
    /// slots, credits and router passes a direct delivery skips.
    pub fn direct_message_bytes(&self) -> usize {
        self.payload.saturating_mul(self.inner.spec.channel_slots)
    }

    /// Deliveries sent by this handle and not yet completed.
    pub fn outstanding(&self) -> u64 {
        self.tracker.outstanding()
    }

    /// Writes `data` at `addr` on `dest_chip`, over parallel link `link`.
    pub fn unicast_write(
        &self,
        dest_chip: u32,
        addr: NocAddr,
        data: &[u8],
        link: usize,
    ) -> Result<()> {
        self.send_to(
            dest_chip,
            Msg::Data { sem: None },
            addr,
            Payload::Bytes(data),
            link,
        )
    }

    /// Writes a 32-bit value carried in the header (no payload).
    pub fn inline_write(&self, dest_chip: u32, addr: NocAddr, value: u32) -> Result<()> {
        self.send_to(
            dest_chip,
            Msg::Inline(value),
            addr,
            Payload::Bytes(&[]),
            self.link,
        )
    }

    /// Adds `by` to semaphore `sem_id` on `dest_chip`.
    pub fn atomic_inc(&self, dest_chip: u32, sem_id: u32, by: u32) -> Result<()> {
        self.send_to(
            dest_chip,
            Msg::Atomic(sem_id, by),
            NocAddr::dram(0, 0),
            Payload::Bytes(&[]),
            self.link,
        )
    }

    /// Writes `data`, then adds `by` to `sem_id` once all of it has landed. With `by` 0 the
    /// write only names the semaphore: if it is lost, a wait on `sem_id` fails naming the link.
    pub fn write_and_inc(
        &self,
        dest_chip: u32,
        addr: NocAddr,
        data: &[u8],
        sem_id: u32,
        by: u32,
    ) -> Result<()> {
        self.send_to(
            dest_chip,
            Msg::Data {
                sem: Some((sem_id, by)),
            },
            addr,
            Payload::Bytes(data),
            self.link,
        )
    }

    /// `write_and_inc` of `len` bytes that `fill(offset, run, held)` computes where they
    /// land, run by run in order (it must overwrite every byte it is handed, and give the same
    /// bytes however the runs fall). A message the fabric delivers on this thread (see
    /// `send_direct`) is computed straight into the destination's memory, as the receiving
    /// core would write it there; any other (a fault on the link, a busy receiver, more than
    /// a channel's packets, several hops) is computed into `staging` and sent as packets, so
    /// its link statistics, order, faults and errors are exactly `write_and_inc`'s. `fill`
    /// runs on this thread. With `held` given the destination's bank is locked: `fill` may
    /// read that bank through `held`, may only *try* to read other chip memory
    /// (`Fabric::try_read_local_with`), and returns false if it cannot, to be handed the run
    /// again with `held` None and nothing locked (see `ChipMemory::write_trying`); it must
    /// not write chip memory.
    #[allow(clippy::too_many_arguments)]
    pub fn write_with_and_inc(
        &self,
        dest_chip: u32,
        addr: NocAddr,
        len: usize,
        (sem_id, by): (u32, u32),
        fill: &mut ComputedFill,
        staging: &mut Vec<u8>,
    ) -> Result<()> {
        let msg = Msg::Data {
            sem: Some((sem_id, by)),
        };
        let payload = Payload::Computed(Computed { len, fill, staging });
        self.send_to(dest_chip, msg, addr, payload, self.link)
    }

    /// `write_and_inc` of the `len` bytes of this chip's own memory at `from`. A message the
    /// fabric delivers on this thread (see `send_direct`) is copied from memory to memory in
    /// one pass, as the receiving core's write would land; any other is read into `staging`
    /// and sent as packets, so its link statistics, order, faults and errors are exactly
    /// `write_and_inc`'s.
    pub fn copy_and_inc(
        &self,
        dest_chip: u32,
        addr: NocAddr,
        (from, len): (NocAddr, usize),
        (sem_id, by): (u32, u32),
        staging: &mut Vec<u8>,
    ) -> Result<()> {
        let msg = Msg::Data {
            sem: Some((sem_id, by)),
        };
        let payload = Payload::Copied(Copied {
            mem: &*self.inner.mems[self.chip as usize],
            chip: self.chip,
            from,
            len,
            staging,
        });
        self.send_to(dest_chip, msg, addr, payload, self.link)
    }

    /// Writes `data` at `addr` on every chip `start_hops..start_hops + range` hops away along
    /// `line`, then (if given) increments the semaphore on each of them.
    pub fn multicast_write(
        &self,
        line: LineDir,
        start_hops: u32,
        range: u32,
        addr: NocAddr,
        data: &[u8],
        sem: Option<(u32, u32)>,
    ) -> Result<()> {
        self.check_live()?;
        let inner = &self.inner;
        let l = inner.lines.get(line.axis).ok_or_else(|| {
            FabricError::InvalidArgument(format!(
                "axis {} does not exist: the fabric has {} axis lines",
                line.axis,
                inner.lines.len()
            ))
        })?;
        let pos = inner.chip_lines[self.chip as usize]
            .iter()
            .find(|(li, _)| *li == line.axis)
            .map(|&(_, p)| p)
            .ok_or_else(|| {
                FabricError::InvalidArgument(format!(
                    "chip {} is not on axis {} (chips {:?}); multicast from a chip on that line",
                    self.chip, line.axis, l.chips
                ))
            })?;
        let forward = line.dir == Dir::Forward;
        let reach = match inner.spec.config {
            FabricConfig::Fabric1DNeighborExchange => 1,
            _ => packet::MAX_HOPS,
        };
        let max = l.max_hops(pos, forward).min(reach);
        if start_hops == 0 || range == 0 || start_hops + range - 1 > max {
            return Err(FabricError::InvalidArgument(format!(
                "multicast from chip {} to hops {start_hops}..{} {:?} along axis {} is out of \
                 reach: hops must lie in 1..={max} (the line's end, 16 for the 1D header, 1 under \
                 FABRIC_1D_NEIGHBOR_EXCHANGE)",
                self.chip,
                start_hops as u64 + range as u64,
                line.dir,
                line.axis
            )));
        }
        let route = packet::multicast_route(start_hops, range);
        let far = l.step(pos, forward, start_hops + range - 1);
        let path = Path {
            line: line.axis,
            forward,
            pos,
            route,
            dst: l.chips[far.expect("checked to lie on the line")],
            hops: start_hops + range - 1,
        };
        self.send_path(
            &path,
            Msg::Data { sem },
            addr,
            Payload::Bytes(data),
            self.link,
        )
    }

    /// Waits (operation timeout) until every packet of this handle is delivered or lost,
    /// then reports the first loss or write error since the last flush, if any.
    pub fn flush(&self) -> Result<()> {
        self.flush_timeout(self.inner.spec.timeout)
    }

    pub fn flush_timeout(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        self.tracker.set_waiter(true);
        let res = loop {
            let left = self.tracker.outstanding();
            if left == 0 {
                break match self.tracker.take_errors().into_iter().next() {
                    Some(e) => Err(e),
                    None => Ok(()),
                };
            }
            if self.inner.shutdown.load(SeqCst) {
                break Err(FabricError::ShutDown);
            }
            let now = Instant::now();
            if now >= deadline {
                // A loss already seen explains the wait better than the timeout does.
                if let Some(e) = self.tracker.take_errors().into_iter().next() {
                    break Err(e);
                }
                break Err(FabricError::FlushTimeout {
                    chip: self.chip,
                    outstanding: left,
                    waited: timeout,
                    cause: self.inner.fault_note(),
                });
            }
            thread::park_timeout((deadline - now).min(Duration::from_millis(50)));
        };
        self.tracker.set_waiter(false);
        res
    }

    fn check_live(&self) -> Result<()> {
        if self.inner.shutdown.load(SeqCst) {
            return Err(FabricError::ShutDown);
        }
        if let Some(e) = self.inner.abort_error() {
            return Err(e);
        }
        if self.inner.spec.config == FabricConfig::Disabled {
            return Err(FabricError::Disabled { chip: self.chip });
        }
        Ok(())
    }

    fn send_to(
        &self,
        dest: u32,
        msg: Msg,
        addr: NocAddr,
        mut payload: Payload<'_>,
        link: usize,
    ) -> Result<()> {
        let n = self.inner.spec.num_chips;
        if dest >= n {
            return Err(FabricError::NoSuchChip {
                chip: dest,
                num_chips: n,
            });
        }
        if dest == self.chip {
            return self.local(msg, addr, payload.bytes()?);
        }
        self.check_live()?;
        let path = self.path_to(dest)?;
        self.send_path(&path, msg, addr, payload, link)
    }

    /// The unicast path from this chip to `dest`.
    fn path_to(&self, dest: u32) -> Result<Path> {
        self.inner.path(self.chip, dest)
    }

    /// A chip writing to itself needs no link: do it now.
    fn local(&self, msg: Msg, addr: NocAddr, data: &[u8]) -> Result<()> {
        let mem = &self.inner.mems[self.chip as usize];
        let fail = |source| FabricError::WriteFailed {
            chip: self.chip,
            src: self.chip,
            addr: addr.to_string(),
            source,
        };
        match msg {
            Msg::Data { sem } => {
                if !data.is_empty() {
                    mem.write(addr, data).map_err(fail)?;
                }
                if let Some((s, by)) = sem.filter(|&(_, by)| by > 0) {
                    self.inner.sem_add(self.chip, s, by as u64);
                }
            }
            Msg::Inline(v) => mem.write(addr, &v.to_le_bytes()).map_err(fail)?,
            Msg::Atomic(s, by) => self.inner.sem_add(self.chip, s, by as u64),
        }
        Ok(())
    }

    fn send_path(
        &self,
        path: &Path,
        msg: Msg,
        addr: NocAddr,
        mut payload: Payload<'_>,
        link: usize,
    ) -> Result<()> {
        let inner = &*self.inner;
        let len = payload.len();
        if link > u8::MAX as usize {
            return Err(FabricError::InvalidArgument(format!(
                "link index {link} does not fit the header's 8 bits; pick a link below 256"
            )));
        }
        if addr.bank > u16::MAX as u32 || addr.addr.saturating_add(len as u64) > MAX_ADDR {
            return Err(FabricError::InvalidArgument(format!(
                "{addr} (+{len} B) does not fit the header's 16-bit bank and 48-bit address"
            )));
        }
        let sem = match msg {
            Msg::Data { sem } => sem,
            Msg::Atomic(s, by) => Some((s, by)),
            Msg::Inline(_) => None,
        };
        let line = &inner.lines[path.line];
        let mut ctx = Ctx {
            lines: &inner.lines,
            routing: &inner.routing,
            line: path.line,
            forward: path.forward,
            pos: path.pos,
            route: path.route,
            src: self.chip,
            seq: 0,
            sem: sem.map(|s| s.0),
            quiet: false,
        };
        let dst = path.dst;
        // The packets: how many, and packet i's (kind, offset, len), computed as they go (a
        // list of them cost an allocation per message, one per step of a small collective).
        let (count, single) = match msg {
            Msg::Inline(_) => (1, Some(Kind::InlineWrite)),
            Msg::Atomic(..) => (1, Some(Kind::AtomicInc)),
            Msg::Data { sem } if len == 0 => match sem {
                Some(_) => (1, Some(Kind::AtomicInc)),
                None => return Ok(()),
            },
            Msg::Data { .. } => (len.div_ceil(self.payload), None),
        };
        let packet = |i: usize| match single {
            Some(kind) => (kind, 0, 0),
            None => {
                let off = i * self.payload;
                let len = self.payload.min(len - off);
                let kind = match sem {
                    Some(_) if i + 1 == count => Kind::WriteAtomicInc,
                    _ => Kind::Write,
                };
                (kind, off, len)
            }
        };
        // A link known to be down fails the whole message before anything is sent.
        let mut down = None;
        let start = (path.line, path.pos, path.forward);
        inner
            .routing
            .walk(&inner.lines, start, path.route, |l, p, forward, _, _| {
                let hop = inner.lines[l]
                    .hop_from(p, forward)
                    .expect("route stays on the lines");
                let phys = hop.links[link % hop.links.len()];
                if down.is_none() && inner.faults[phys].get() == Some(crate::Fault::Down) {
                    down = Some(phys);
                }
            });
        if let Some(phys) = down {
            for _ in 0..count {
                inner.record_link_loss(&ctx, phys, LinkLoss::Down);
            }
            return Err(FabricError::LinkDown {
                link: inner.link_name(phys),
                src: self.chip,
                dst,
            });
        }
        let hop = line
            .hop_from(path.pos, path.forward)
            .expect("route has a first hop");
        let ch = hop.channel(link, 0);
        let writes = inner.routing.writes_in(path.route);
        let (arg0, arg1) = match msg {
            Msg::Inline(v) => (v, 0),
            _ => sem.unwrap_or((0, 0)),
        };
        let header = |seq: u16, (kind, off, len): (Kind, usize, usize)| Header {
            route: path.route,
            kind,
            link: link as u8,
            src: self.chip as u16,
            addr: addr.offset(off as u64),
            len: len as u16,
            seq,
            arg0,
            arg1,
        };
        // One hop on a link without a fault: if the receiving router is idle with nothing
        // queued, do its work for it now (see `send_direct`).
        let one_hop = path.route == packet::HOP_WRITE;
        if one_hop && count as u64 <= ch.slots() && inner.faults[ch.link].get().is_none() {
            match self.send_direct(ch, dst, msg, addr, &mut payload, count as u64) {
                Some(Direct::Done) => return Ok(()),
                Some(Direct::Rejected { seq0 }) => {
                    // Packet by packet, as the router would have: each records its own loss.
                    let data = payload.bytes()?;
                    self.tracker.add(count as u64);
                    let mut done = DoneBatch::default();
                    for (i, p) in (0..count).map(packet).enumerate() {
                        let h = header(seq0.wrapping_add(i as u16), p);
                        let payload = &data[p.1..p.1 + p.2];
                        inner.deliver(dst, &h, payload, Some(&self.tracker), &mut done);
                    }
                    done.flush();
                    return Ok(());
                }
                None => {}
            }
        }
        let data = payload.bytes()?;
        // Counted once for the message, so the sender does not share a cache line with the
        // delivering router per packet; unsent packets are taken back below.
        let total = count as u64;
        self.tracker.add(writes * total);
        // A message of several packets lends its payload to the first hop instead of copying
        // it into the slots, and waits for it to be taken. The sender drives that hop itself
        // below, so the wait is usually over by then; the copy let it return before delivery
        // at the cost of a second pass over every byte. A/B on a 2-core host, all_reduce
        // (medians of 5; lending only messages longer than the channel, as before / from two
        // packets / every payload): t3k 1 MiB 1.78 / 1.37 / 1.24 ms, line-2 16 MiB 7.0 / 6.7
        // / 6.3 ms, 1 MiB 320 / 298 / 295 us, t3k 36 KiB 139 / 139 / 138 us. A one-packet
        // message is copied, so it returns at once, as on hardware, where the sender's packet
        // waits in the ethernet core's buffer: a stalled receiver shows at `flush`. Unless it
        // goes one hop to a router that is free and has nothing queued before it (usually
        // taken by `send_direct` above; here when that router came free since): then the
        // sender's own pass delivers it at once, and lending it saves the copy and keeps the
        // channel's slot buffers out of the host's cache (medians of 7, copied / lent: t3k
        // 36 KiB all_reduce 203 / 174 us, galaxy 36 KiB 1389 / 1272, t3k 4 KiB even).
        let by_ref = count > 1;
        let one_hop = one_hop && count == 1 && !data.is_empty();
        // The sender drives the routers itself (lent packets: see `RefGuard`; copied ones:
        // `Inner::drive` below): waking their threads as well would only move every packet
        // between cores, and on a host with fewer cores than busy threads each wake is a
        // context switch on the collective's critical path.
        ctx.quiet = true;
        let mut lent = RefGuard {
            ch,
            data,
            first: None,
            last: 0,
            tracker: &self.tracker,
            inner,
            writes,
            src: self.chip,
        };
        let seq0 = inner.next_seqs(self.chip, dst, total);
        let mut cached_head = 0;
        // Credits are taken in batches (one CAS for several packets).
        let (mut next_idx, mut batch) = (0u64, 0u64);
        for (sent, (kind, off, len)) in (0..count).map(packet).enumerate() {
            let unsent = writes * (total - sent as u64);
            if batch == 0 {
                let want = total - sent as u64;
                (next_idx, batch) = inner
                    .reserve(
                        ch,
                        inner.spec.timeout,
                        self.chip,
                        by_ref,
                        &mut cached_head,
                        want,
                    )
                    .map_err(|shut| {
                        self.tracker.done(unsent);
                        if shut {
                            FabricError::ShutDown
                        } else {
                            FabricError::SendTimeout {
                                link: inner.link_name(ch.link),
                                src: self.chip,
                                dst,
                                waited: inner.spec.timeout,
                            }
                        }
                    })?;
            }
            let idx = next_idx;
            next_idx += 1;
            batch -= 1;
            ctx.seq = seq0.wrapping_add(sent as u16);
            let h = header(ctx.seq, (kind, off, len));
            let chunk = &data[off..off + len];
            let lend = by_ref
                || (one_hop && ch.cursor() == idx && ch.router().is_some_and(|r| r.is_free()));
            let res = inner.transmit(ch, idx, &ctx, len, Some(&self.tracker), 0, |slot| {
                if lend {
                    slot.ext = Some(ExtRef::new(chunk, data));
                } else {
                    slot.buf[..len].copy_from_slice(chunk);
                }
                slot.hdr = h.encode();
            });
            if lend {
                lent.first.get_or_insert(idx);
                lent.last = idx;
            }
            if let Err(e) = res {
                self.tracker.done(unsent);
                inner.void_slots(ch, next_idx, batch);
                inner.drive(ch, self.chip);
                return Err(e);
            }
        }
        if lent.first.is_none() {
            inner.drive(ch, self.chip);
        }
        lent.settle()
    }
}

impl FabricSender {
    /// Delivers a one-hop message on this thread, holding the receiving router's token, if
    /// that router is idle and its channel from here is empty; None otherwise (the caller
    /// sends packets). The router's pass would do the same work (write the payload, then
    /// add the increment) as soon as it ran, and the sender would drive that pass itself and
    /// wait for it (`RefGuard`); skipping the slots, the credits and the header saves most
    /// of a small collective's per-step cost. What stays the same: an empty channel would
    /// have taken the whole message without a credit stall (the caller checks it fits), so
    /// the link's statistics count the same packets and bytes; packets of this handle to
    /// `dst` keep their order, since none is queued before; a failed write is recorded as
    /// the router records it and shows at `flush`. Links with a fault take the packet path,
    /// so drops, corruption and slow links behave exactly as before.
    fn send_direct(
        &self,
        ch: &Channel,
        dst: u32,
        msg: Msg,
        addr: NocAddr,
        payload: &mut Payload<'_>,
        packets: u64,
    ) -> Option<Direct> {
        let inner = &*self.inner;
        let router = ch.router()?;
        router
            .run_exclusive(|| {
                // Into a chip another process holds, the message takes its credits as its
                // packets would, and they return when that process confirms taking it.
                let far = inner
                    .remote
                    .as_ref()
                    .filter(|_| inner.held_elsewhere[dst as usize]);
                if ch.len() != 0 || (far.is_some() && !ch.take_unfilled(packets)) {
                    return None;
                }
                // Sequence numbers stay those of the packet path (they name lost packets).
                let seq0 = inner.next_seqs(self.chip, dst, packets);
                ch.count_direct(packets, payload.len() as u64);
                inner.tell_arrivals(ch, packets, payload.len() as u64);
                let sem = match msg {
                    Msg::Data { sem } => sem,
                    Msg::Inline(_) => None,
                    Msg::Atomic(s, by) => Some((s, by)),
                };
                let write = |mem: &dyn ChipMemory| match (msg, &mut *payload) {
                    (Msg::Inline(v), _) => mem.write(addr, &v.to_le_bytes()),
                    (_, Payload::Bytes([])) => Ok(()),
                    (_, Payload::Bytes(b)) => mem.write(addr, b),
                    (_, Payload::Computed(c)) if c.len == 0 => Ok(()),
                    (_, Payload::Computed(c)) => mem.write_trying(addr, c.len, &mut *c.fill),
                    (_, Payload::Copied(c)) if c.len == 0 => Ok(()),
                    (_, Payload::Copied(c)) => {
                        memory::copy_between(mem, addr, (c.chip, c.mem), c.from, c.len)
                    }
                };
                let delivered = inner.deliver_message(dst, write, sem);
                if far.is_some() {
                    inner.return_credits(ch, packets);
                }
                Some(match delivered {
                    true => Direct::Done,
                    false => Direct::Rejected { seq0 },
                })
            })
            .flatten()
    }
}

/// What `send_direct` did.
enum Direct {
    Done,
    /// The receiving chip rejected the write; nothing was delivered. `seq0`: the message's
    /// first sequence number.
    Rejected {
        seq0: u16,
    },
}
