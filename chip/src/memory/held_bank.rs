//! The bank a fill holds while it writes (`DeviceMemory::write_trying`), lent to the fill so
//! it can read the rest of that bank in place, including the bytes beside it in the chunk
//! it is filling.

use super::{chunk_spans, hand_valid, in_bank, Bank};
use crate::allocator::MemSpace;
use crate::error::Result;

/// The bank whose write lock a fill holds (`DeviceMemory::write_trying`), bar the bytes it
/// is filling: the fill may read the bank's other bytes in place (a reduction's owner's
/// input beside the output pages it writes), which it could not lock a second time.
pub struct HeldBank<'a> {
    pub(super) bank: &'a Bank,
    pub(super) chip: u32,
    pub(super) space: MemSpace,
    pub(super) index: u32,
    pub(super) size: u64,
    /// The chunk being filled, out of the bank's map meanwhile.
    pub(super) filling: u64,
    /// That chunk's bytes beside the ones being filled: all before them (from offset 0),
    /// and the valid ones after them (from `filled_end`). An input and an output allocated
    /// side by side share a 64 KiB DRAM chunk in every bank up to 1 MiB or so per chip.
    pub(super) before: &'a [u8],
    pub(super) after: &'a [u8],
    pub(super) filled_end: usize,
}

impl HeldBank<'_> {
    pub fn space(&self) -> MemSpace {
        self.space
    }

    pub fn bank(&self) -> u32 {
        self.index
    }

    /// Hands `f(offset, bytes)` the `len` bytes at `addr` of this bank in place, a chunk at
    /// a time (zeros where never written); Ok(false), handing nothing, if they share the
    /// chunk being filled.
    pub fn read_in_place(
        &self,
        addr: u64,
        len: usize,
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<bool> {
        let at = (self.chip, self.space, self.index);
        in_bank(at, addr, len as u64, self.size)?;
        let size = self.bank.chunk;
        let filled = self.before.len()..self.filled_end;
        let overlaps = |(_, chunk, at, n): (usize, u64, usize, usize)| {
            chunk == self.filling && at < filled.end && at + n > filled.start
        };
        if chunk_spans(addr, len, size).any(overlaps) {
            return Ok(false);
        }
        for span in chunk_spans(addr, len, size) {
            let (off, chunk, at, n) = span;
            match chunk == self.filling {
                false => self.bank.hand(span, &mut f),
                true if at < filled.start => f(off, &self.before[at..at + n]),
                true => hand_valid(self.after, (off, at - filled.end, n), &mut f),
            }
        }
        Ok(true)
    }
}
