//! The executor of the step vocabulary (`step`): what one chip's `Endpoint` does for each
//! `Step` of its list, on the buffers of its `Work`. Whichever runner carries the lists out
//! (`crate::schedule`: each chip's own thread, or one or two threads for the whole line),
//! every chip does the same arithmetic on the same operands in the same order, so results
//! are bitwise the same.

use std::time::Duration;

use ttmesh_chip::allocator::MemSpace;
use ttmesh_chip::tensor::{DataType, TensorPages};
use ttmesh_fabric::{Fabric, FabricError, FabricSender, NocAddr};

use super::chip_io::{
    copy_input, input_spans, noc, output_spans, read_input, write_output, BankRun, FusedIo,
    InputRun, Local, StepError,
};
use super::elements::{
    add_le_bf16_to_f32, add_le_f32, fill_le_bf16, fill_le_bf16_from_f32, sum_le_bf16,
    sum_le_bf16_to_f32, Elements,
};
use super::SEM_SLOT_BASE;

use super::onward::Onward;
pub(crate) use super::step::{Side, Step};

/// Range `[start, end)` of piece `q` of something `len` long cut in pieces of `size`.
pub(crate) fn piece_range(len: usize, size: usize, q: usize) -> (usize, usize) {
    let start = q.saturating_mul(size).min(len);
    (start, start.saturating_add(size).min(len))
}

/// How many pieces of `size` something `len` long has (none when it is empty).
pub(crate) fn piece_count(len: usize, size: usize) -> usize {
    len.div_ceil(size.max(1))
}

/// Elements of a received slot's bf16 partial sums copied out at a time to be added to the
/// input (`FusedIo` sums): 16 KiB, one chunk of chip memory, well inside the host's L1.
const SLOT_BLOCK: usize = 8192;

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

/// One chip's data while its steps run. Buffers only grow, and are reused across launches.
#[derive(Default)]
pub(crate) struct Work {
    pub chunk_lens: Vec<usize>,
    pub block_lens: Vec<usize>,
    pub out_dtype: Option<DataType>,
    /// Piece sizes: elements of a chunk, bytes of a block (`usize::MAX`: one piece).
    pub chunk_piece: usize,
    pub block_piece: usize,
    /// Set by the fused all_reduce (the `Reduce` steps need it).
    pub fused: Option<FusedIo>,
    pub bufs: Buffers,
}

/// Where a piece of a reduction lies: elements `a..e` of its chunk, bytes `ba..be` of the
/// block of the same index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub a: usize,
    pub e: usize,
    pub ba: usize,
    pub be: usize,
}

/// The buffers a chip's steps fill, apart from the fused input and output they read
/// (`Work::fused_parts` lends both at once).
#[derive(Default)]
pub(crate) struct Buffers {
    pub chunks: Vec<Vec<f32>>,
    pub blocks: Vec<Vec<u8>>,
    pub recv: Vec<f32>,
    /// A bf16 piece of partial sums on its way (see `FusedIo::partials_bf16`); for a
    /// chunk's last add, the input page it copies into L1 (`input_plus_slot_to_output`).
    pub partials16: Vec<u16>,
    /// A block of a received slot's bf16 partial sums, copied out to be added to the input
    /// (`SLOT_BLOCK` elements: it stays in the host's L1 cache).
    pub slot_block: Vec<u16>,
    /// Bytes on their way from this chip's memory to a neighbour's (`PassOutput`), and where.
    pub staged: Vec<u8>,
    pub runs: Vec<BankRun>,
    /// A run of the neighbour's input pages and of this chip's sums beside them, in L1, for a
    /// sum added at delivery (`ReduceInto`).
    pub into_input: Vec<u16>,
    pub into_sums: Vec<u16>,
    /// The input runs under such a message (every chip's input sits at one address): the
    /// owner's read in place beside its output, and this chip's at a line's end.
    pub into_runs: Vec<InputRun>,
}

impl Work {
    /// Elements `a..e` of chunk `chunk` that piece `piece` covers.
    fn chunk_piece(&self, chunk: usize, piece: usize) -> (usize, usize) {
        piece_range(self.chunk_lens[chunk], self.chunk_piece, piece)
    }

    /// Bytes `a..e` of block `block` that piece `piece` covers (the same piece of the chunk
    /// of the same index, in the output's format).
    fn block_piece(&self, block: usize, piece: usize) -> (usize, usize) {
        piece_range(self.block_lens[block], self.block_piece, piece)
    }

    /// Where piece `piece` of chunk `chunk` lies: its elements in the chunk and its bytes in
    /// block `chunk` (a reduction's steps work on both).
    fn span(&self, chunk: usize, piece: usize) -> Span {
        let (a, e) = self.chunk_piece(chunk, piece);
        let (ba, be) = self.block_piece(chunk, piece);
        Span { a, e, ba, be }
    }

    /// The fused reduction's input and output beside the buffers the steps fill, borrowed
    /// apart (a step reads the one while it writes the others).
    pub(crate) fn fused_parts(&mut self) -> (&FusedIo, &mut Buffers) {
        (self.fused.as_ref().expect(FUSED), &mut self.bufs)
    }

    /// Room for `n` chunks and blocks of the given lengths (elements / bytes). With `keep`,
    /// only that chunk and that block are held in the work: the fused all_reduce streams the
    /// others, and the gathers leave received blocks in chip memory (the slots or the
    /// output), so a buffer for each would only cost host memory (n times the output on every
    /// chip).
    pub(crate) fn shape(
        &mut self,
        chunk_lens: &[usize],
        block_lens: &[usize],
        keep: Option<usize>,
    ) {
        let n = chunk_lens.len().max(block_lens.len());
        if self.bufs.chunks.len() < n {
            self.bufs.chunks.resize_with(n, Vec::new);
        }
        if self.bufs.blocks.len() < n {
            self.bufs.blocks.resize_with(n, Vec::new);
        }
        for (j, (c, &l)) in self.bufs.chunks.iter_mut().zip(chunk_lens).enumerate() {
            if keep.is_none_or(|k| k == j) {
                sized(c, l);
            }
        }
        for (j, (b, &l)) in self.bufs.blocks.iter_mut().zip(block_lens).enumerate() {
            if keep.is_none_or(|k| k == j) {
                sized(b, l);
            }
        }
        self.chunk_lens.clear();
        self.chunk_lens.extend_from_slice(chunk_lens);
        self.block_lens.clear();
        self.block_lens.extend_from_slice(block_lens);
        self.chunk_piece = usize::MAX;
        self.block_piece = usize::MAX;
        self.fused = None;
    }

    /// True if the work holds no buffers (its part travelled to the line's runner).
    pub(crate) fn is_empty(&self) -> bool {
        self.bufs.chunks.is_empty() && self.bufs.blocks.is_empty()
    }

    /// This chip's own block, the only one the work holds (see `shape`).
    pub(crate) fn block(&self, j: usize) -> &[u8] {
        &self.bufs.blocks[j][..self.block_lens[j]]
    }
}

pub(crate) fn sized<T: Copy + Default>(v: &mut Vec<T>, len: usize) -> &mut [T] {
    if v.len() < len {
        v.resize(len, T::default());
    }
    &mut v[..len]
}

const FUSED: &str = "a fused reduction sets where its input and output are";
const SLOT_GIVEN: &str = "slot_blocks copies a block of the slot it is given";

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

    /// Copies the bytes at byte `offset` of this chip's slot into `out`.
    pub(crate) fn read_slot(
        &self,
        mem: Local,
        slot: usize,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), StepError> {
        let (bank, addr) = self.slot_location(slot);
        mem.read(self.me, MemSpace::Dram, bank, addr + offset as u64, out)
    }

    /// Hands `elems` partial sums of `elem` bytes at byte `offset` of this chip's slot to
    /// `f(first_element, bytes)` in runs of whole elements, in place from the chip's memory.
    fn read_partials(
        &self,
        mem: Local,
        slot: usize,
        offset: usize,
        (elem, elems): (usize, usize),
        f: impl FnMut(usize, &[u8]),
    ) -> Result<(), StepError> {
        let (bank, addr) = self.slot_location(slot);
        let mut runs = Elements::new(elem, f);
        let addr = addr + offset as u64;
        mem.read_with(self.me, MemSpace::Dram, bank, addr, elems * elem, |_, b| {
            runs.feed(b)
        })
    }

    /// Adds the partial sums (bf16 if `bf16`, else f32) of elements `a..` of this chip's slot
    /// into the f32 sums `acc`.
    fn add_slot(
        &self,
        mem: Local,
        slot: usize,
        a: usize,
        bf16: bool,
        acc: &mut [f32],
    ) -> Result<(), StepError> {
        let n = acc.len();
        match bf16 {
            true => self.read_partials(mem, slot, a * 2, (2, n), |at, b| {
                add_le_bf16_to_f32(&mut acc[at..], b)
            }),
            false => self.read_partials(mem, slot, a * 4, (4, n), |at, b| {
                add_le_f32(&mut acc[at..], b)
            }),
        }
    }

    /// Writes this chip's bf16 input, elements `a..` of chunk `chunk`, plus the partial sums
    /// at the same place of slot `from` (rounded once) into `sums`; the input alone without a
    /// slot. The slot is copied out a block at a time into `block` (L1-sized) and the input
    /// read in place, so `sums` is written once: copying the input into `sums` first and
    /// adding the slot there wrote and read a piece (up to 1 MiB) once more.
    pub(crate) fn input_plus_slot(
        &self,
        io: &FusedIo,
        mem: Local,
        from: Option<usize>,
        (chunk, a): (usize, usize),
        sums: &mut [u16],
        block: &mut Vec<u16>,
    ) -> Result<(), StepError> {
        let Some(from) = from else {
            return copy_input(
                io,
                mem,
                self.me,
                (chunk, a * 2),
                bytemuck::cast_slice_mut(sums),
            );
        };
        self.input_and_slot(io, mem, from, (chunk, a), sums, block, sum_le_bf16)
    }

    /// Calls `f(first, partials)` for each block of up to `SLOT_BLOCK` elements of a piece
    /// (`len` elements from element `a` of its chunk): `first` is the block's first element
    /// within the piece, `partials` the bf16 partial sums at the same place of slot `slot`,
    /// copied out into `block` (L1-sized; none without a slot).
    fn slot_blocks(
        &self,
        mem: Local,
        slot: Option<usize>,
        (a, len): (usize, usize),
        block: &mut Vec<u16>,
        mut f: impl FnMut(usize, usize, Option<&[u16]>) -> Result<(), StepError>,
    ) -> Result<(), StepError> {
        let block = sized(block, SLOT_BLOCK.min(len));
        for first in (0..len).step_by(SLOT_BLOCK) {
            let n = SLOT_BLOCK.min(len - first);
            let partials = match slot {
                Some(slot) => {
                    let p = &mut block[..n];
                    self.read_slot(mem, slot, (a + first) * 2, bytemuck::cast_slice_mut(p))?;
                    Some(&*p)
                }
                None => None,
            };
            f(first, n, partials)?;
        }
        Ok(())
    }

    /// `slot_blocks` over slot `slot`, whose partial sums every block has.
    fn slot_blocks_of(
        &self,
        mem: Local,
        slot: usize,
        at: (usize, usize),
        block: &mut Vec<u16>,
        mut f: impl FnMut(usize, usize, &[u16]) -> Result<(), StepError>,
    ) -> Result<(), StepError> {
        self.slot_blocks(mem, Some(slot), at, block, |first, n, partials| {
            f(first, n, partials.expect(SLOT_GIVEN))
        })
    }

    /// Runs `sum(out, input bytes, partials)` over this chip's bf16 input, elements `a..` of
    /// chunk `chunk`, and the bf16 partial sums at the same place of slot `from`, in runs of
    /// whole elements, writing `out`: the slot a block at a time (`slot_blocks`), the input
    /// read in place beside it.
    #[allow(clippy::too_many_arguments)]
    fn input_and_slot<T>(
        &self,
        io: &FusedIo,
        mem: Local,
        from: usize,
        (chunk, a): (usize, usize),
        out: &mut [T],
        block: &mut Vec<u16>,
        sum: impl Fn(&mut [T], &[u8], &[u16]),
    ) -> Result<(), StepError> {
        let space = io.input_pages.0.map.space;
        self.slot_blocks_of(mem, from, (a, out.len()), block, |first, n, partials| {
            let out = &mut out[first..first + n];
            let mut feed = Elements::new(2, |at, x: &[u8]| sum(&mut out[at..], x, &partials[at..]));
            input_spans(
                io,
                (mem, self.me),
                (chunk, (a + first) * 2),
                n * 2,
                |bank, addr, n| mem.read_with(self.me, space, bank, addr, n, |_, x| feed.feed(x)),
            )
        })
    }

    /// Writes f32 `sums` (elements `a..` of chunk `chunk`) plus the bf16 partial sums at the
    /// same place of slot `slot`, rounded once, straight into block `chunk`'s output pages
    /// from byte `ba` (`AddPartialOut`): the slot a block at a time into L1, the output
    /// filled in place, so neither the f32 sums are written back nor a bf16 piece is staged.
    fn sums_plus_slot_to_output(
        &self,
        io: &FusedIo,
        mem: Local,
        slot: usize,
        (a, sums): (usize, &[f32]),
        (chunk, ba): (usize, usize),
        block: &mut Vec<u16>,
    ) -> Result<(), StepError> {
        let space = io.output_pages.0.map.space;
        self.slot_blocks_of(mem, slot, (a, sums.len()), block, |first, n, partials| {
            let sums = &sums[first..first + n];
            let at = (chunk, ba + first * 2);
            output_spans(io, at, n * 2, |bank, addr, m, off| {
                let (s, p) = (&sums[off / 2..], &partials[off / 2..]);
                mem.write_with(self.me, space, bank, addr, m, |o, out| {
                    fill_le_bf16_from_f32(out, &s[o / 2..], &p[o / 2..])
                })
            })
        })
    }

    /// `input_plus_slot` written straight into block `chunk`'s output pages from byte `ba`
    /// (a bf16 chunk's last add): the input under each output page span is copied into
    /// `input`, in L1, and the sums computed in place in the output's memory, so no piece of
    /// sums is written and read back to be copied out (that copy was ~18% of a line-2 1 MiB
    /// all_reduce).
    fn input_plus_slot_to_output(
        &self,
        io: &FusedIo,
        mem: Local,
        from: Option<usize>,
        (chunk, a, len): (usize, usize, usize),
        ba: usize,
        (block, input): (&mut Vec<u16>, &mut Vec<u16>),
    ) -> Result<(), StepError> {
        let space = io.output_pages.0.map.space;
        self.slot_blocks(mem, from, (a, len), block, |first, n, partials| {
            output_spans(io, (chunk, ba + first * 2), n * 2, |bank, addr, m, off| {
                let x = sized(input, m / 2);
                let at = (chunk, (a + first) * 2 + off);
                copy_input(io, mem, self.me, at, bytemuck::cast_slice_mut(x))?;
                let y = partials.map(|p| &p[off / 2..]);
                mem.write_with(self.me, space, bank, addr, m, |o, out| {
                    fill_le_bf16(out, &x[o / 2..], y.map(|y| &y[o / 2..]))
                })
            })
        })
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
