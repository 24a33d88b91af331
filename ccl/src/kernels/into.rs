//! A reduction's last hop added at delivery (`Step::ReduceInto`). A bf16 chunk's owner used
//! to receive the last partial sums into its slot, read them back, add its input and write
//! its output: the sums crossed host memory three times (slot write, slot read, output
//! write) besides the input read. Here the sender adds them to the owner's input as they
//! land and writes the owner's output, as the owner's core would at the end of that hop:
//! one write. The wire carries the same bytes (the link counts the same packets); a message
//! the fabric cannot deliver on this thread (a fault, a busy receiver) travels as packets
//! whose payload is the finished sums, so a dropped one still fails the owner's wait.
//!
//! The owner's input is read on this thread (through the fabric, like any chip memory a
//! runner reads), so every chip's input must sit at one address: the kernel enables this
//! only then (`CollectiveKernel::adds_at_delivery`).
//!
//! The owner's input pages lie in the same banks as the output pages the fill writes under
//! those banks' locks, so the fill reads them through the lock it holds
//! (`HeldMemory`) rather than copying them into L1 before each message. Up to about 1 MiB per chip an input
//! and the output allocated after it share a 64 KiB chunk in each bank, the very chunk being
//! filled; chip memory now lends the fill that chunk's other bytes too (before that, every
//! such fill was handed back and staged: counted on line-2 256 KiB, all of them). Where
//! they lie elsewhere (an input and output of different page layouts, a reduce_scatter's
//! chunk) they are still copied.
//! At a line's end the sums are this chip's input, which the fill reads in place, only
//! *trying* its banks as `onward`'s fill does (a busy bank hands the run back, to be filled
//! with nothing locked), where staging it was a second copy per byte.

use ttmesh_chip::allocator::MemSpace;
use ttmesh_fabric::{Fabric, FabricError, HeldMemory};

use super::chip_io::{
    bank_major, copy_input_pages, input_page_runs, noc, BankRun, FusedIo, InputRun, Local,
    StepError,
};
use super::elements::{fill_le_bf16, fill_le_bf16_sum};
use super::execute::{message_bytes, Endpoint};
use super::work::{sized, Buffers, Span};

impl Endpoint {
    /// Writes this chip's bf16 sums of block `chunk`'s bytes `ba..be` plus chip `dest`'s
    /// input at the same place, rounded once, into `dest`'s output pages, one message per
    /// run of pages in one bank (at most `message_bytes`); the last raises `dest`'s semaphore
    /// for `slot`. `dest`'s input pages share the bank of the output pages being written,
    /// whose lock the fill runs under, and are read through it (`owner_held_into`), else
    /// copied into L1 first. The sums are staged in `w.bufs.partials16`, or, at a line's end
    /// where they are this chip's input as it is, read in place beside.
    pub(crate) fn sums_into(
        &self,
        (fabric, own_input): (&Fabric, Option<Local>),
        (dest, slot): (u32, usize),
        (chunk, Span { a, ba, be, .. }): (usize, Span),
        (io, b): (&FusedIo, &mut Buffers),
    ) -> Result<(), StepError> {
        let Buffers {
            partials16: sums,
            staged,
            runs,
            into_input,
            into_sums,
            into_runs,
            ..
        } = b;
        let (pages, page_bytes, _) = &io.output_pages;
        let (page_bytes, space) = (*page_bytes, pages.map.space);
        let in_space = io.input_pages.0.map.space;
        piece_pages(io, chunk, (ba, be), self.me, runs);
        let sender = self.slot_sender(slot);
        let sem = super::SEM_SLOT_BASE + slot as u32;
        let per_message = (message_bytes(sender) / page_bytes).max(1);
        let owner = (Local::Fabric(fabric), dest);
        let mut i = 0;
        while i < runs.len() {
            let (bank, addr, _) = runs[i];
            let mut j = i + 1;
            while j < runs.len()
                && j - i < per_message
                && runs[j].0 == bank
                && runs[j].1 == addr + ((j - i) * page_bytes) as u64
            {
                j += 1;
            }
            let len = (j - i) * page_bytes;
            let (x, y) = (sized(into_input, len / 2), sized(into_sums, len / 2));
            // Page k of the run: its byte in the chunk's input, and its place in x and y.
            let starts = runs[i..j]
                .iter()
                .map(|&(_, _, off)| (chunk, a * 2 + off - ba));
            into_runs.clear();
            input_page_runs(io, owner, starts.clone(), page_bytes, |r| {
                into_runs.push(r);
                Ok(())
            })?;
            if own_input.is_none() {
                for (k, &(_, _, off)) in runs[i..j].iter().enumerate() {
                    let (at, s) = (k * page_bytes / 2, (off - ba) / 2);
                    y[at..at + page_bytes / 2].copy_from_slice(&sums[s..s + page_bytes / 2]);
                }
            }
            // The owner's input is read in place under its output bank's lock when it lies
            // in that bank (an interleaved input and output of one page size); else, or when
            // that fill is handed back, it is copied into `x` first.
            let in_place = in_space == space && into_runs.iter().all(|r| r.0 == bank);
            let mut x_staged = false;
            if !in_place {
                copy_input_pages(io, owner, starts.clone(), page_bytes, as_bytes(x))?;
                x_staged = true;
            }
            let by = u32::from(j == runs.len());
            let own = own_input.map(|mem| (mem, in_space, &into_runs[..]));
            let mut failed = None;
            let mut fill = |o: usize, out: &mut [u8], held: Option<&dyn HeldMemory>| {
                let done = match held.filter(|_| in_place) {
                    Some(held) => {
                        let given = (dest, in_space, &into_runs[..]);
                        self.owner_held_into(held, given, own_input, &y[..], (o, out))
                    }
                    None => (|| {
                        if !x_staged {
                            copy_input_pages(io, owner, starts.clone(), page_bytes, as_bytes(x))?;
                            x_staged = true;
                        }
                        let Some(own) = own else {
                            fill_le_bf16(out, &x[o / 2..], Some(&y[o / 2..]));
                            return Ok(true);
                        };
                        self.own_input_into((x, own), (o, out), held.is_some(), &mut y[..])
                    })(),
                };
                done.unwrap_or_else(|err| {
                    failed.get_or_insert(err);
                    out.fill(0);
                    true
                })
            };
            sender
                .write_with_and_inc(
                    dest,
                    noc(dest, space, bank, addr)?,
                    len,
                    (sem, by),
                    &mut fill,
                    staged,
                )
                .map_err(StepError::Fabric)?;
            if let Some(err) = failed {
                return Err(err);
            }
            i = j;
        }
        Ok(())
    }

    /// Fills `out`, bytes `o..` of a message, with the owner's input read in place through
    /// its held bank (`runs`: the input under the message, at one address on every chip)
    /// plus this chip's sums: its input tried in place at a line's end (`own`), else the
    /// partial sums staged in `y`. False, with `out` partly written, if a read could not be
    /// had in place.
    fn owner_held_into(
        &self,
        held: &dyn HeldMemory,
        (owner, space, runs): (u32, MemSpace, &[InputRun]),
        own: Option<Local>,
        y: &[u16],
        (o, out): (usize, &mut [u8]),
    ) -> Result<bool, StepError> {
        let y: &[u8] = bytemuck::cast_slice(y);
        let end = o + out.len();
        for &(bank, addr, at, n) in runs.iter().filter(|r| r.2 < end && r.2 + r.3 > o) {
            let (from, to) = (at.max(o), (at + n).min(end));
            let src = addr + (from - at) as u64;
            let lo = from - o;
            let (mut free, mut failed) = (true, None);
            let noc_at = noc(owner, space, bank, src)?;
            let mut add = |p: usize, theirs: &[u8]| {
                let (q, m) = (lo + p, theirs.len());
                let Some(mem) = own else {
                    let ys = &y[from + p..from + p + m];
                    return fill_le_bf16_sum(&mut out[q..q + m], theirs, ys);
                };
                if !free || failed.is_some() {
                    return;
                }
                let mine_at = (space, bank, src + p as u64);
                let sum = |r: usize, mine: &[u8]| {
                    let k = mine.len();
                    fill_le_bf16_sum(&mut out[q + r..q + r + k], &theirs[r..r + k], mine);
                };
                match mem.try_read_with(self.me, mine_at, m, sum) {
                    Ok(f) => free = f,
                    Err(err) => failed = Some(err),
                }
            };
            let held_free = held
                .try_read_held(noc_at, to - from, &mut add)
                .map_err(|e| StepError::Fabric(FabricError::read_failed(owner, noc_at)(e)))?;
            if let Some(err) = failed {
                return Err(err);
            }
            if !(held_free && free) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Fills `out`, bytes `o..` of a message, with `x` (the owner's input, staged) plus this
    /// chip's input under the same bytes (`runs`, see `input_page_runs`), rounded once. Under
    /// the owner's bank lock (`locked`) this chip's input is only tried in place, false if a
    /// bank was busy (the fabric hands the run back with nothing locked); else it is read
    /// into `y` first. Both ways sum the same operands with one function.
    fn own_input_into(
        &self,
        (x, (mem, space, runs)): (&[u16], (Local, MemSpace, &[InputRun])),
        (o, out): (usize, &mut [u8]),
        locked: bool,
        y: &mut [u16],
    ) -> Result<bool, StepError> {
        let x: &[u8] = bytemuck::cast_slice(x);
        let end = o + out.len();
        for &(bank, addr, at, n) in runs.iter().filter(|r| r.2 < end && r.2 + r.3 > o) {
            // The part of this run under `out`, and where it starts in `out`.
            let (from, to) = (at.max(o), (at + n).min(end));
            let src = (space, bank, addr + (from - at) as u64);
            let (lo, hi) = (from - o, to - o);
            match locked {
                true => {
                    let free = mem.try_read_with(self.me, src, to - from, |p, bytes| {
                        let (q, xp) = (lo + p, from + p);
                        let m = bytes.len();
                        fill_le_bf16_sum(&mut out[q..q + m], &x[xp..xp + m], bytes);
                    })?;
                    if !free {
                        return Ok(false);
                    }
                }
                false => {
                    let ys = &mut y[lo / 2..hi / 2];
                    let (space, bank, addr) = src;
                    mem.read(self.me, space, bank, addr, bytemuck::cast_slice_mut(ys))?;
                    let xs: &[u16] = bytemuck::cast_slice(&x[from..to]);
                    fill_le_bf16(&mut out[lo..hi], xs, Some(ys));
                }
            }
        }
        Ok(true)
    }
}

fn as_bytes(x: &mut [u16]) -> &mut [u8] {
    bytemuck::cast_slice_mut(x)
}

/// The output pages of block `block`'s bytes `ba..be` (whole pages) as (bank, address,
/// byte within the block), in bank and address order: an interleaved tensor's pages of one
/// bank lie back to back, so runs of them move as one message.
///
/// A chip of odd id starts half way round the banks: two neighbours adding into each other
/// at once (a line of two on two threads) would otherwise walk the banks in step, each
/// holding the other's bank `b` while it tries its own bank `b`, and hand the fill back
/// to be staged nearly every time.
fn piece_pages(
    io: &FusedIo,
    block: usize,
    (ba, be): (usize, usize),
    me: u32,
    out: &mut Vec<BankRun>,
) {
    let (pages, page_bytes, first) = &io.output_pages;
    let banks = pages.map.num_banks.max(1);
    let shift = if me % 2 == 1 { banks / 2 } else { 0 };
    out.clear();
    out.extend((ba..be).step_by(*page_bytes).map(|o| {
        let (bank, addr) = pages.location(((first[block] + o) / page_bytes) as u64);
        (bank, addr, o)
    }));
    out.sort_unstable_by_key(|&(bank, addr, _)| bank_major((bank + shift) % banks, addr));
}
