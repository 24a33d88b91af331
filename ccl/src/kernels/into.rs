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

use ttmesh_fabric::Fabric;

use super::chip_io::{copy_input_pages, noc, BankRun, FusedIo, Local, StepError};
use super::elements::fill_le_bf16;
use super::steps::{message_bytes, sized, Endpoint, Work};

impl Endpoint {
    /// Writes this chip's bf16 sums of block `chunk`'s bytes `ba..be` plus chip `dest`'s
    /// input at the same place, rounded once, into `dest`'s output pages, one message per
    /// run of pages in one bank (at most `message_bytes`); the last raises `dest`'s semaphore
    /// for `slot`. The sums are staged in `w.partials16`, or, at a line's end where they are
    /// this chip's input as it is, read from `own_input` page by page beside `dest`'s.
    pub(crate) fn sums_into(
        &self,
        (fabric, own_input): (&Fabric, Option<Local>),
        (dest, slot): (u32, usize),
        (chunk, a, ba, be): (usize, usize, usize, usize),
        w: &mut Work,
    ) -> Result<(), StepError> {
        let Work {
            fused,
            partials16: sums,
            staged,
            runs,
            into_input,
            into_sums,
            ..
        } = w;
        let io = fused
            .as_ref()
            .expect("a ReduceInto step's collective sets its fused io");
        let (pages, page_bytes, _) = &io.output_pages;
        let (page_bytes, space) = (*page_bytes, pages.map.space);
        piece_pages(io, chunk, (ba, be), runs);
        let sender = self.slot_sender(slot);
        let sem = super::SEM_SLOT_BASE + slot as u32;
        let per_message = (message_bytes(sender) / page_bytes).max(1);
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
            let dest_input = (
                Local::Fabric(fabric),
                dest,
                bytemuck::cast_slice_mut(&mut x[..]),
            );
            match own_input {
                Some(mem) => {
                    let mine = (mem, self.me, bytemuck::cast_slice_mut(&mut y[..]));
                    copy_input_pages(io, starts, page_bytes, &mut [dest_input, mine])?;
                }
                None => {
                    copy_input_pages(io, starts, page_bytes, &mut [dest_input])?;
                    for (k, &(_, _, off)) in runs[i..j].iter().enumerate() {
                        let (at, s) = (k * page_bytes / 2, (off - ba) / 2);
                        y[at..at + page_bytes / 2].copy_from_slice(&sums[s..s + page_bytes / 2]);
                    }
                }
            }
            let by = u32::from(j == runs.len());
            let (x, y) = (&*x, &*y);
            // Staged above, so the fill reads no chip memory and never gives a run back.
            let mut fill = |o: usize, out: &mut [u8], _: bool| {
                fill_le_bf16(out, &x[o / 2..], Some(&y[o / 2..]));
                true
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
            i = j;
        }
        Ok(())
    }
}

/// The output pages of block `block`'s bytes `ba..be` (whole pages) as (bank, address,
/// byte within the block), in bank and address order: an interleaved tensor's pages of one
/// bank lie back to back, so runs of them move as one message.
fn piece_pages(io: &FusedIo, block: usize, (ba, be): (usize, usize), out: &mut Vec<BankRun>) {
    let (pages, page_bytes, first) = &io.output_pages;
    out.clear();
    out.extend((ba..be).step_by(*page_bytes).map(|o| {
        let (bank, addr) = pages.location(((first[block] + o) / page_bytes) as u64);
        (bank, addr, o)
    }));
    out.sort_unstable();
}
