//! The one decoder of command records. Every field read is bounds-checked; a malformed record is
//! a `ChipError::Decode` naming the byte offset.

use super::{space_from_code, Opcode, HEADER_BYTES, RECORD_ALIGN};
use crate::allocator::MemSpace;
use crate::error::{ChipError, Result};

/// One decoded record; payload slices borrow the input bytes (no allocation on the replay path).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Record<'a> {
    WriteLinear {
        space: MemSpace,
        bank: u32,
        addr: u32,
        data: &'a [u8],
    },
    WritePaged {
        space: MemSpace,
        page_size: u32,
        locations: PageLocations<'a>,
        data: &'a [u8],
    },
    WritePacked {
        program_id: u32,
        args_per_core: u16,
        args: &'a [u8],
    },
    LaunchProgram {
        program_id: u32,
        cores: u32,
        config: &'a [u8],
    },
    GoSignal {
        program_id: u32,
    },
    Stall,
    ReadPaged {
        handle: u64,
        space: MemSpace,
        page_size: u32,
        locations: PageLocations<'a>,
    },
    RecordEvent {
        event: u64,
    },
    WaitEvent {
        cq: u16,
        event: u64,
    },
    ExecBuf {
        trace_id: u32,
        address: u32,
        log2_page_size: u16,
        num_pages: u32,
        size: u64,
    },
    ExecBufEnd,
    HostCallback {
        id: u64,
    },
    Discard {
        space: MemSpace,
        address: u64,
        size: u64,
    },
    ResetGo,
    Terminate,
}

impl Record<'_> {
    pub fn opcode(&self) -> Opcode {
        match self {
            Record::WriteLinear { .. } => Opcode::WriteLinear,
            Record::WritePaged { .. } => Opcode::WritePaged,
            Record::WritePacked { .. } => Opcode::WritePacked,
            Record::LaunchProgram { .. } => Opcode::LaunchProgram,
            Record::GoSignal { .. } => Opcode::GoSignal,
            Record::Stall => Opcode::Stall,
            Record::ReadPaged { .. } => Opcode::ReadPaged,
            Record::RecordEvent { .. } => Opcode::RecordEvent,
            Record::WaitEvent { .. } => Opcode::WaitEvent,
            Record::ExecBuf { .. } => Opcode::ExecBuf,
            Record::ExecBufEnd => Opcode::ExecBufEnd,
            Record::HostCallback { .. } => Opcode::HostCallback,
            Record::Discard { .. } => Opcode::Discard,
            Record::ResetGo => Opcode::ResetGo,
            Record::Terminate => Opcode::Terminate,
        }
    }
}

/// (bank, addr) pairs of a paged command, read lazily.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct PageLocations<'a> {
    raw: &'a [u8],
}

impl<'a> PageLocations<'a> {
    pub fn len(&self) -> usize {
        self.raw.len() / 8
    }
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
    pub fn get(&self, i: usize) -> (u32, u32) {
        let b = &self.raw[i * 8..i * 8 + 8];
        (
            u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        )
    }
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u32, u32)> + 'a {
        let raw = self.raw;
        raw.chunks_exact(8).map(|b| {
            (
                u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            )
        })
    }
}

/// Reads u32 argument `i` of a WritePacked payload.
pub fn packed_arg(args: &[u8], i: usize) -> Option<u32> {
    args.get(i * 4..i * 4 + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn err(offset: usize, reason: impl Into<String>) -> ChipError {
    ChipError::Decode {
        offset,
        reason: reason.into(),
    }
}

fn u32_at(b: &[u8], at: usize, offset: usize) -> Result<u32> {
    b.get(at..at + 4)
        .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
        .ok_or_else(|| err(offset + at, "payload too short for a u32 field"))
}

fn u64_at(b: &[u8], at: usize, offset: usize) -> Result<u64> {
    b.get(at..at + 8)
        .map(|x| u64::from_le_bytes([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]]))
        .ok_or_else(|| err(offset + at, "payload too short for a u64 field"))
}

fn space(code: u16, offset: usize) -> Result<MemSpace> {
    u8::try_from(code)
        .ok()
        .and_then(space_from_code)
        .ok_or_else(|| err(offset, format!("unknown memory space {code}")))
}

/// Decodes the record at `offset`; returns it and the offset of the next record.
pub fn decode(bytes: &[u8], offset: usize) -> Result<(Record<'_>, usize)> {
    let h = bytes
        .get(
            offset
                ..offset
                    .checked_add(HEADER_BYTES)
                    .ok_or_else(|| err(offset, "offset overflow"))?,
        )
        .ok_or_else(|| {
            err(
                offset,
                format!(
                    "truncated header: {} bytes left",
                    bytes.len().saturating_sub(offset)
                ),
            )
        })?;
    let op = Opcode::from_u8(h[0])
        .ok_or_else(|| err(offset, format!("unknown opcode {:#04x}", h[0])))?;
    let aux = u16::from_le_bytes([h[2], h[3]]);
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    let arg = u64::from_le_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
    let start = offset + HEADER_BYTES;
    let padded = len
        .div_ceil(RECORD_ALIGN)
        .checked_mul(RECORD_ALIGN)
        .ok_or_else(|| err(offset, "length overflow"))?;
    let next = start
        .checked_add(padded)
        .ok_or_else(|| err(offset, "length overflow"))?;
    if next > bytes.len() {
        return Err(err(
            offset,
            format!(
                "{op:?} payload of {len} bytes runs past the end ({} bytes)",
                bytes.len()
            ),
        ));
    }
    let p = &bytes[start..start + len];
    let rec = match op {
        Opcode::WriteLinear => Record::WriteLinear {
            space: space((arg >> 56) as u16, offset)?,
            bank: ((arg >> 32) & 0xFF_FFFF) as u32,
            addr: arg as u32,
            data: p,
        },
        Opcode::WritePaged | Opcode::ReadPaged => {
            let n = usize::try_from(arg).map_err(|_| err(offset, "page count overflow"))?;
            let page_size = u32_at(p, 0, start)?;
            let (n, data_expected) = if op == Opcode::ReadPaged {
                let n = u32_at(p, 4, start)? as usize;
                (n, 0usize)
            } else {
                let data = n
                    .checked_mul(page_size as usize)
                    .ok_or_else(|| err(offset, "page data size overflow"))?;
                (n, data)
            };
            let locs_end = n
                .checked_mul(8)
                .and_then(|x| x.checked_add(8))
                .ok_or_else(|| err(offset, "page count overflow"))?;
            if locs_end.checked_add(data_expected) != Some(len) {
                return Err(err(offset, format!("{op:?} of {n} pages of {page_size} B needs {locs_end}+{data_expected} payload bytes, has {len}")));
            }
            let locations = PageLocations {
                raw: &p[8..locs_end],
            };
            let sp = space(aux, offset)?;
            if op == Opcode::ReadPaged {
                Record::ReadPaged {
                    handle: arg,
                    space: sp,
                    page_size,
                    locations,
                }
            } else {
                Record::WritePaged {
                    space: sp,
                    page_size,
                    locations,
                    data: &p[locs_end..],
                }
            }
        }
        Opcode::WritePacked => {
            if !len.is_multiple_of(4) || aux == 0 || !(len / 4).is_multiple_of(aux as usize) {
                return Err(err(
                    offset,
                    format!("WritePacked of {len} bytes is not whole cores of {aux} u32 args"),
                ));
            }
            Record::WritePacked {
                program_id: arg as u32,
                args_per_core: aux,
                args: p,
            }
        }
        Opcode::LaunchProgram => Record::LaunchProgram {
            program_id: arg as u32,
            cores: (arg >> 32) as u32,
            config: p,
        },
        Opcode::GoSignal => Record::GoSignal {
            program_id: arg as u32,
        },
        Opcode::Stall => Record::Stall,
        Opcode::RecordEvent => Record::RecordEvent { event: arg },
        Opcode::WaitEvent => Record::WaitEvent {
            cq: aux,
            event: arg,
        },
        Opcode::ExecBuf => {
            if len != 16 {
                return Err(err(offset, "ExecBuf payload must be 16 bytes"));
            }
            if !(10..=12).contains(&aux) {
                return Err(err(
                    offset,
                    format!("ExecBuf page size 2^{aux} is outside 1024..4096"),
                ));
            }
            Record::ExecBuf {
                trace_id: u32_at(p, 4, start)?,
                address: u32::try_from(arg)
                    .map_err(|_| err(offset, "ExecBuf address beyond 32 bits"))?,
                log2_page_size: aux,
                num_pages: u32_at(p, 0, start)?,
                size: u64_at(p, 8, start)?,
            }
        }
        Opcode::ExecBufEnd => Record::ExecBufEnd,
        Opcode::HostCallback => Record::HostCallback { id: arg },
        Opcode::Discard => Record::Discard {
            space: space(aux, offset)?,
            address: arg,
            size: u64_at(p, 0, start)?,
        },
        Opcode::ResetGo => Record::ResetGo,
        Opcode::Terminate => Record::Terminate,
    };
    Ok((rec, next))
}

/// Where each record of `bytes` starts; the first record that does not decode is the error.
pub fn record_offsets(bytes: &[u8]) -> Result<Vec<usize>> {
    let mut offsets = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        offsets.push(at);
        at = decode(bytes, at)?.1;
    }
    Ok(offsets)
}

/// Iterates over the records of a byte slice, stopping at the first error.
pub struct RecordIter<'a> {
    bytes: &'a [u8],
    offset: usize,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    pub fn new(bytes: &'a [u8]) -> RecordIter<'a> {
        RecordIter {
            bytes,
            offset: 0,
            failed: false,
        }
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<Record<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.offset >= self.bytes.len() {
            return None;
        }
        match decode(self.bytes, self.offset) {
            Ok((r, next)) => {
                self.offset = next;
                Some(Ok(r))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
