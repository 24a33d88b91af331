//! What a chip does with the partial sums its neighbours left in its slots: reads them
//! (`read_slot`), adds them into f32 sums (`add_slot`), or adds them to its input, in runs
//! of whole elements, into a buffer or straight into its output pages. Slots are read a
//! block at a time (`SLOT_BLOCK` elements, in the host's L1), inputs in place.

use ttmesh_chip::allocator::MemSpace;

use super::chip_io::{copy_input, input_spans, output_spans, FusedIo, Local, StepError};
use super::elements::{
    add_le_bf16_to_f32, add_le_f32, fill_le_bf16, fill_le_bf16_from_f32, sum_le_bf16, Elements,
};
use super::execute::Endpoint;
use super::work::sized;

/// Elements of a received slot's bf16 partial sums copied out at a time to be added to the
/// input (`FusedIo` sums): 16 KiB, one chunk of chip memory, well inside the host's L1.
pub(super) const SLOT_BLOCK: usize = 8192;

const SLOT_GIVEN: &str = "slot_blocks copies a block of the slot it is given";

impl Endpoint {
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
    pub(super) fn add_slot(
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
    pub(super) fn input_and_slot<T>(
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
    pub(super) fn sums_plus_slot_to_output(
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
    pub(super) fn input_plus_slot_to_output(
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
}
