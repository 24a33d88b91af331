//! A bf16 partial sum computed where it lands (`Step::Reduce` passing bf16 partials on).
//! The sums of this chip's input and the partial sums in its slot used to be staged: the
//! slot copied into an L1 block, the sums written into a buffer, and the buffer copied into
//! the neighbour's slot, so every wire byte crossed host memory three times besides the
//! input's read. Here the fabric hands the neighbour's slot to a fill that reads both
//! operands in place and writes the rounded sums once (`FabricSender::write_with_and_inc`).
//!
//! The fill runs under the neighbour's bank lock, so it only *tries* this chip's banks
//! (`Local::try_read_with`); when one is busy (the left neighbour delivering into this
//! chip's slot, say) it gives the run back and is handed it again with nothing locked, and
//! then reads the staged way (`Endpoint::input_plus_slot`). No thread ever waits for a lock
//! while holding one, so chips filling each other's slots around a ring cannot deadlock.
//! Both ways round each sum once with the same function on the same operands, so the bytes
//! are the same whichever ran, and a message that travels as packets (a fault on the link, a
//! busy receiver) carries them too.

use ttmesh_chip::allocator::MemSpace;
use ttmesh_fabric::HeldMemory;

use super::chip_io::{input_spans, FusedIo, Local, StepError};
use super::elements::fill_le_bf16_sum;
use super::execute::{message_bytes, Endpoint, Side};
use super::work::sized;
use super::SEM_SLOT_BASE;

/// Where a piece's sums go and the buffers a fill that must stage uses.
pub(crate) struct Onward<'a> {
    /// The neighbour's side and the slot the sums land in.
    pub to: (Side, usize),
    /// Sums staged when a bank is busy (see the module docs), in L1.
    pub sums: &'a mut Vec<u16>,
    /// The slot's partial sums copied out a block at a time when staging.
    pub slot_block: &'a mut Vec<u16>,
    /// The message's bytes when it travels as packets.
    pub packets: &'a mut Vec<u8>,
}

impl Endpoint {
    /// Sends this chip's bf16 input, elements `a..e` of chunk `chunk`, plus the partial sums
    /// at the same place of slot `from` (the input alone without one), rounded once, into
    /// the neighbour's slot at the same place, a message at a time; the last message raises
    /// the slot's semaphore.
    pub(crate) fn reduce_onward(
        &self,
        (io, mem): (&FusedIo, Local),
        from: Option<usize>,
        (chunk, a, e): (usize, usize, usize),
        bufs: Onward,
    ) -> Result<(), StepError> {
        let Onward {
            to: (side, slot),
            sums,
            slot_block,
            packets,
        } = bufs;
        let sender = self.slot_sender(slot);
        let (dest, sem) = (self.neighbour(side), SEM_SLOT_BASE + slot as u32);
        let per_message = message_bytes(sender) / 2;
        let mut first = a;
        loop {
            let end = (first + per_message).min(e);
            // A read that fails inside the fill (a bad address) is kept, and the run filled
            // with zeros: the fill cannot return an error, and the step fails after it.
            let mut failed = None;
            let mut fill = |o: usize, out: &mut [u8], held: Option<&dyn HeldMemory>| {
                let whole = o.is_multiple_of(2) && out.len().is_multiple_of(2);
                debug_assert!(whole, "runs of whole elements");
                let at = (chunk, first + o / 2);
                let done = match held.is_some() {
                    true => self.try_sum_in_place((io, mem), from, at, out),
                    false => {
                        let staged = sized(sums, out.len() / 2);
                        self.input_plus_slot(io, mem, from, at, staged, slot_block)
                            .map(|()| out.copy_from_slice(bytemuck::cast_slice(staged)))
                            .map(|()| true)
                    }
                };
                done.unwrap_or_else(|err| {
                    failed.get_or_insert(err);
                    out.fill(0);
                    true
                })
            };
            let at = self.slot_addr(slot).offset(first as u64 * 2);
            let by = u32::from(end == e);
            sender
                .write_with_and_inc(dest, at, (end - first) * 2, (sem, by), &mut fill, packets)
                .map_err(StepError::Fabric)?;
            if let Some(err) = failed {
                return Err(err);
            }
            if end == e {
                return Ok(());
            }
            first = end;
        }
    }

    /// Writes the rounded sums of this chip's input from element `at.1` of chunk `at.0` and
    /// the partial sums at the same place of slot `from` (or the input alone) into `out`,
    /// reading both in place; false, with `out` partly written, if a bank was busy.
    fn try_sum_in_place(
        &self,
        (io, mem): (&FusedIo, Local),
        from: Option<usize>,
        (chunk, first): (usize, usize),
        out: &mut [u8],
    ) -> Result<bool, StepError> {
        let space = io.input_pages.0.map.space;
        let me = self.me;
        // Hands `f(offset, input bytes)` the input under `len` bytes from byte `start`,
        // span by span, while every bank is free.
        let input = |start: usize, len: usize, f: &mut dyn FnMut(usize, &[u8])| {
            let (mut off, mut free) = (0, true);
            input_spans(io, (mem, me), (chunk, start), len, |bank, addr, n| {
                if free {
                    let at = (space, bank, addr);
                    free = mem.try_read_with(me, at, n, |o, x| f(off + o, x))?;
                }
                off += n;
                Ok(())
            })
            .map(|()| free)
        };
        let len = out.len();
        let Some(from) = from else {
            let copy = &mut |o: usize, x: &[u8]| out[o..o + x.len()].copy_from_slice(x);
            return input(first * 2, len, copy);
        };
        let (bank, addr) = self.slot_location(from);
        let (mut free, mut failed) = (true, None);
        let slot_at = (MemSpace::Dram, bank, addr + first as u64 * 2);
        let slot_free = mem.try_read_with(me, slot_at, len, |so, partials| {
            if !free || failed.is_some() {
                return;
            }
            let out = &mut out[so..so + partials.len()];
            let add = &mut |o: usize, x: &[u8]| {
                let n = x.len();
                fill_le_bf16_sum(&mut out[o..o + n], x, &partials[o..o + n]);
            };
            match input(first * 2 + so, partials.len(), add) {
                Ok(f) => free = f,
                Err(err) => failed = Some(err),
            }
        })?;
        match failed {
            Some(err) => Err(err),
            None => Ok(slot_free && free),
        }
    }
}
