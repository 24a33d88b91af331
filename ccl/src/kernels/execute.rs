//! The executor of the step vocabulary (`step`): what one chip's `Endpoint` does for each
//! `Step` of its list, on the buffers of its `Work` (`work.rs`): where its slots are, how it
//! sends to its neighbours, and the step itself; what it does with the partial sums in its
//! slots is `slots.rs`. Whichever runner carries the lists out
//! (`crate::schedule`: each chip's own thread, or one or two threads for the whole line),
//! every chip does the same arithmetic on the same operands in the same order, so results
//! are bitwise the same.

use std::time::Duration;

use ttmesh_chip::allocator::MemSpace;
use ttmesh_chip::tensor::TensorPages;
use ttmesh_fabric::{Fabric, FabricError, FabricSender, NocAddr};

use super::chip_io::{noc, read_input, write_output, BankRun, Local, StepError};
use super::elements::sum_le_bf16_to_f32;
use super::slots::SLOT_BLOCK;
use super::work::{sized, Span, Work};
use super::SEM_SLOT_BASE;

use super::onward::Onward;
pub(crate) use super::step::{Side, Step};

/// Bytes a step sends per message at most, when what it sends is computed or staged in
/// host memory a message at a time: 32 KiB (16 pages of a bf16 tile), so the staging stays
/// in the host's L1 cache, and never more than the fabric delivers on the sending thread
/// (`FabricSender::direct_message_bytes`, 34 KiB with 8 slots of 4,352 bytes), so a message
/// lands with one copy instead of as packets through the channel's slots and the router.
pub(crate) fn message_bytes(sender: &FabricSender) -> usize {
    const MESSAGE_BYTES: usize = 32 * 1024;
    // At least one bf16 element: callers cut messages into whole elements.
    MESSAGE_BYTES.min(sender.direct_message_bytes()).max(2)
}

/// One chip's place on the line: whom it sends to, where its slots are, its senders.
pub(crate) struct Endpoint {
    pub me: u32,
    pub left: Option<u32>,
    pub right: Option<u32>,
    pub slots: TensorPages,
    /// One sender per parallel link; slot `s` uses link `s % links`.
    pub senders: Vec<FabricSender>,
    /// Checks a wait makes before sleeping (`wait_spins`).
    pub spins: u32,
    /// Slots whose memory is shared, `regions` apart (slot `s` lands in slot `s % regions`'s
    /// memory; its semaphore stays its own). Only a runner that knows when a slot's pieces
    /// were read sets it (`schedule::one_thread::alias_slots`); a chip's own thread never does.
    pub regions: Option<usize>,
}

impl Endpoint {
    pub(crate) fn slot_addr(&self, slot: usize) -> NocAddr {
        let (bank, addr) = self.slot_location(slot);
        NocAddr::dram(bank, addr)
    }

    /// The bank and address of slot `slot`'s memory (shared with others under `regions`).
    pub(crate) fn slot_location(&self, slot: usize) -> (u32, u64) {
        let memory = self.regions.map_or(slot, |r| slot % r);
        self.slots.location(memory as u64)
    }

    pub(crate) fn neighbour(&self, side: Side) -> u32 {
        match side {
            Side::Left => self.left,
            Side::Right => self.right,
        }
        .expect("the steps send only to neighbours the line has")
    }

    /// Writes `data` at byte `offset` of the neighbour `to`'s slot and raises its semaphore.
    pub(crate) fn send(
        &self,
        to: u32,
        slot: usize,
        offset: usize,
        data: &[u8],
    ) -> Result<(), FabricError> {
        self.send_part(to, slot, offset, data, true)
    }

    /// `send` in messages of at most `message_bytes`, so each can land with one copy on
    /// the sending thread; only the last raises the semaphore.
    fn send_in_parts(
        &self,
        to: u32,
        slot: usize,
        offset: usize,
        data: &[u8],
    ) -> Result<(), FabricError> {
        let per_message = message_bytes(self.slot_sender(slot));
        let mut parts = data.chunks(per_message).peekable();
        if parts.peek().is_none() {
            return self.send(to, slot, offset, data);
        }
        let mut at = offset;
        while let Some(part) = parts.next() {
            self.send_part(to, slot, at, part, parts.peek().is_none())?;
            at += part.len();
        }
        Ok(())
    }

    /// `send`, raising the semaphore only if `last`: every part names it, so a lost part
    /// still fails the wait, and the last raises it once all have landed (a handle's
    /// messages to one chip arrive in order).
    fn send_part(
        &self,
        to: u32,
        slot: usize,
        offset: usize,
        data: &[u8],
        last: bool,
    ) -> Result<(), FabricError> {
        self.slot_sender(slot).write_and_inc(
            to,
            self.slot_addr(slot).offset(offset as u64),
            data,
            SEM_SLOT_BASE + slot as u32,
            u32::from(last),
        )
    }

    /// The sender slot `slot`'s writes go through (slot `s` uses link `s % links`).
    pub(crate) fn slot_sender(&self, slot: usize) -> &FabricSender {
        &self.senders[slot % self.senders.len()]
    }

    /// Has the fabric copy `runs` (bank, address, bytes) of this chip's memory in `space` to
    /// the same places in the neighbour's, in messages of at most `message_bytes`. Every
    /// message names slot `slot`'s semaphore, so a lost one fails the wait; only the last
    /// raises it, once all have landed (order holds per link).
    fn copy_runs(
        &self,
        to: Side,
        slot: usize,
        space: MemSpace,
        runs: &[BankRun],
        staged: &mut Vec<u8>,
    ) -> Result<(), StepError> {
        let (dest, sender) = (self.neighbour(to), self.slot_sender(slot));
        let per_message = message_bytes(sender);
        let messages = runs.iter().flat_map(|&(bank, addr, len)| {
            (0..len.max(1))
                .step_by(per_message)
                .map(move |o| (bank, addr + o as u64, per_message.min(len - o)))
        });
        let mut messages = messages.peekable();
        while let Some((bank, addr, len)) = messages.next() {
            let by = u32::from(messages.peek().is_none());
            let at = noc(self.me, space, bank, addr)?;
            let sem = (SEM_SLOT_BASE + slot as u32, by);
            sender
                .copy_and_inc(dest, at, (at, len), sem, staged)
                .map_err(StepError::Fabric)?;
        }
        Ok(())
    }

    /// Does one step; a receiving step first waits (bounded by `timeout`) for its slot.
    pub(crate) fn step(
        &self,
        s: Step,
        w: &mut Work,
        fabric: &Fabric,
        mem: Local,
        timeout: Duration,
    ) -> Result<(), StepError> {
        if let Some(slot) = s.receives() {
            fabric
                .wait_semaphore_spinning(
                    self.me,
                    SEM_SLOT_BASE + slot as u32,
                    1,
                    timeout,
                    self.spins,
                )
                .map_err(StepError::Fabric)?;
        }
        match s {
            Step::AddPartial { slot, chunk, piece } => {
                let Span { a, e, .. } = w.span(chunk, piece);
                let (io, b) = w.fused_parts();
                self.add_slot(mem, slot, a, io.partials_bf16(), &mut b.chunks[chunk][a..e])
            }
            Step::AddPartialOut { slot, chunk, piece } => {
                let Span { a, e, ba, .. } = w.span(chunk, piece);
                let (io, b) = w.fused_parts();
                let sums = (a, &b.chunks[chunk][a..e]);
                self.sums_plus_slot_to_output(io, mem, slot, sums, (chunk, ba), &mut b.slot_block)
            }
            Step::Reduce {
                from,
                chunk,
                piece,
                to,
            } => {
                let Span { a, e, .. } = w.span(chunk, piece);
                let (io, b) = w.fused_parts();
                let start = (chunk, a * io.in_elem);
                if let (Some(to), true) = (to, io.partials_bf16()) {
                    // A bf16 partial sum on its way: the input's bytes as they are, plus what
                    // arrived, rounded once, never widened to f32 in memory, and computed
                    // straight into the neighbour's slot (see `onward`).
                    let bufs = Onward {
                        to,
                        sums: &mut b.partials16,
                        slot_block: &mut b.slot_block,
                        packets: &mut b.staged,
                    };
                    return self.reduce_onward((io, mem), from, (chunk, a, e), bufs);
                }
                let sums: &mut [f32] = match to {
                    Some(_) => sized(&mut b.recv, e - a),
                    None => &mut b.chunks[chunk][a..e],
                };
                match from {
                    // A bf16 input joining bf16 partials in f32 sums (a line's middle
                    // position): one pass, not a decode and then an add over the sums.
                    Some(slot) if io.partials_bf16() => self.input_and_slot(
                        io,
                        mem,
                        slot,
                        (chunk, a),
                        sums,
                        &mut b.slot_block,
                        sum_le_bf16_to_f32,
                    )?,
                    Some(slot) => {
                        read_input(io, mem, self.me, start, sums)?;
                        self.add_slot(mem, slot, a, false, sums)?;
                    }
                    None => read_input(io, mem, self.me, start, sums)?,
                }
                match to {
                    Some((side, slot)) => self
                        .send_in_parts(
                            self.neighbour(side),
                            slot,
                            a * 4,
                            bytemuck::cast_slice(sums),
                        )
                        .map_err(StepError::Fabric),
                    None => Ok(()),
                }
            }
            Step::SendBlock {
                to,
                slot,
                block,
                piece,
            } => {
                let (a, e) = w.block_piece(block, piece);
                self.send_in_parts(self.neighbour(to), slot, a, &w.bufs.blocks[block][a..e])
                    .map_err(StepError::Fabric)
            }
            Step::PassSlot {
                to,
                slot,
                block,
                piece,
            } => {
                let (a, e) = w.block_piece(block, piece);
                let (bank, addr) = self.slot_location(slot);
                let run = [(bank, addr + a as u64, e - a)];
                self.copy_runs(to, slot, MemSpace::Dram, &run, &mut w.bufs.staged)
            }
            Step::PassOutput {
                to,
                slot,
                block,
                piece,
            } => {
                let (a, e) = w.block_piece(block, piece);
                let (io, b) = w.fused_parts();
                io.output_runs(block, a, e, &mut b.runs);
                let space = io.output_pages.0.map.space;
                self.copy_runs(to, slot, space, &b.runs, &mut b.staged)
            }
            // The piece is already in the output, stays in its slot (see `Step::TakeBlock`)
            // or is read by a later `JoinOut`: the wait was all.
            Step::AwaitOutput { .. } | Step::Hold { .. } | Step::TakeBlock { .. } => Ok(()),
            Step::JoinOut {
                left,
                right,
                chunk,
                piece,
            } => {
                let Span { a, e, ba, .. } = w.span(chunk, piece);
                let (io, b) = w.fused_parts();
                for first in (a..e).step_by(SLOT_BLOCK) {
                    let sums = sized(&mut b.recv, SLOT_BLOCK.min(e - first));
                    let at = (chunk, first);
                    self.input_and_slot(
                        io,
                        mem,
                        left,
                        at,
                        sums,
                        &mut b.slot_block,
                        sum_le_bf16_to_f32,
                    )?;
                    let out = (chunk, ba + (first - a) * 2);
                    self.sums_plus_slot_to_output(
                        io,
                        mem,
                        right,
                        (first, sums),
                        out,
                        &mut b.slot_block,
                    )?;
                }
                Ok(())
            }
            Step::ReduceInto {
                from,
                chunk,
                piece,
                to,
                slot,
            } => {
                let span = w.span(chunk, piece);
                let (io, b) = w.fused_parts();
                // At a line's end the sums are the input as it is: read beside the
                // neighbour's, page by page, not staged whole first.
                let own_input = match from {
                    Some(_) => {
                        let sums = sized(&mut b.partials16, span.e - span.a);
                        let at = (chunk, span.a);
                        self.input_plus_slot(io, mem, from, at, sums, &mut b.slot_block)?;
                        None
                    }
                    None => Some(mem),
                };
                let dest = (self.neighbour(to), slot);
                self.sums_into((fabric, own_input), dest, (chunk, span), (io, b))
            }
            Step::Encode { chunk, piece } => {
                let dtype = w
                    .out_dtype
                    .expect("an encoding collective sets its output format");
                let Span { a, e, ba, be } = w.span(chunk, piece);
                let (io, b) = w.fused_parts();
                let bytes = &mut b.blocks[chunk][ba..be];
                super::pages::encode(dtype, &b.chunks[chunk][a..e], bytes);
                write_output(io, mem, self.me, (chunk, ba), bytes)
            }
            Step::ReduceOut { from, chunk, piece } => {
                let Span { a, e, ba, .. } = w.span(chunk, piece);
                let (io, b) = w.fused_parts();
                let bufs = (&mut b.slot_block, &mut b.partials16);
                self.input_plus_slot_to_output(io, mem, from, (chunk, a, e - a), ba, bufs)
            }
        }
    }

    /// Waits until every packet this chip sent has landed (or reports the loss).
    pub(crate) fn flush(&self, timeout: Duration) -> Result<(), FabricError> {
        for s in &self.senders {
            s.flush_timeout(timeout)?;
        }
        Ok(())
    }
}
