//! Commands are bytes: the binary records a host sends to a chip's command queue and a trace
//! keeps in DRAM, in the spirit of tt-metal's prefetch/dispatch commands.
//!
//! Every record is a 16-byte header `[opcode u8 | flags u8 | aux u16 | payload_len u32 | arg u64]`
//! (little endian) followed by `payload_len` bytes, padded to a multiple of 16. One encoder
//! ([`Encoder`]) and one decoder ([`decode`]); the decoder checks every length and field so that
//! arbitrary bytes give an error, never a panic or an out-of-bounds read.

mod decode;
pub(crate) mod spare;

pub use decode::{decode, packed_arg, record_offsets, PageLocations, Record, RecordIter};

use crate::allocator::MemSpace;

pub const HEADER_BYTES: usize = 16;
pub const RECORD_ALIGN: usize = 16;

/// Record opcodes. Numbers are stable: they are what a trace holds in DRAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// Write `payload` at (space, bank, addr) packed in `arg`.
    WriteLinear = 0x01,
    /// Write pages: payload = page header, (bank, addr) per page, then the page data.
    WritePaged = 0x02,
    /// Runtime arguments for every core of a launch: payload = u32 args, `aux` = args per core.
    WritePacked = 0x03,
    /// Program launch: `arg` = program id | cores << 32; payload = kernel config image (CB
    /// configs and launch message), sized like tt-metal's.
    LaunchProgram = 0x04,
    /// Release the launched program's workers; the kernel runs here.
    GoSignal = 0x05,
    /// Wait for all workers to finish (kernels are synchronous here: an ordering point).
    Stall = 0x06,
    /// Read pages back to the host: `arg` = read handle; payload like WritePaged without data.
    ReadPaged = 0x07,
    /// Mark event `arg` complete on this queue once everything before it is done.
    RecordEvent = 0x08,
    /// Stall this queue until queue `aux` has completed event `arg`.
    WaitEvent = 0x09,
    /// Replay a trace: `arg` = DRAM address, `aux` = log2 page size, payload = pages u32,
    /// trace id u32, byte size u64.
    ExecBuf = 0x0A,
    /// End of a trace's commands.
    ExecBufEnd = 0x0B,
    /// Run host callback `arg` (mesh barriers and mesh events); never traced.
    HostCallback = 0x0C,
    /// Give host memory of a freed range back: payload = space u8, pad, addr u32 .. see encoder.
    Discard = 0x0D,
    /// Reset the go-signal counters before a replay.
    ResetGo = 0x0E,
    /// Stop the dispatcher.
    Terminate = 0x0F,
}

impl Opcode {
    pub fn from_u8(v: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match v {
            0x01 => WriteLinear,
            0x02 => WritePaged,
            0x03 => WritePacked,
            0x04 => LaunchProgram,
            0x05 => GoSignal,
            0x06 => Stall,
            0x07 => ReadPaged,
            0x08 => RecordEvent,
            0x09 => WaitEvent,
            0x0A => ExecBuf,
            0x0B => ExecBufEnd,
            0x0C => HostCallback,
            0x0D => Discard,
            0x0E => ResetGo,
            0x0F => Terminate,
            _ => return None,
        })
    }
}

pub fn space_code(space: MemSpace) -> u8 {
    match space {
        MemSpace::Dram => 0,
        MemSpace::L1 => 1,
        MemSpace::Host => 2,
    }
}

pub fn space_from_code(c: u8) -> Option<MemSpace> {
    match c {
        0 => Some(MemSpace::Dram),
        1 => Some(MemSpace::L1),
        2 => Some(MemSpace::Host),
        _ => None,
    }
}

/// Bytes a record with `payload` bytes takes, header and padding included.
pub fn record_size(payload: usize) -> usize {
    HEADER_BYTES + payload.div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// Appends records to a byte vector.
#[derive(Default, Debug)]
pub struct Encoder {
    pub bytes: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder { bytes: Vec::new() }
    }
    /// An encoder with room for `n` bytes; a large one reuses a buffer that has run
    /// (`spare`).
    pub fn with_capacity(n: usize) -> Encoder {
        Encoder {
            bytes: spare::take(n),
        }
    }
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    pub fn clear(&mut self) {
        self.bytes.clear();
    }

    fn header(&mut self, op: Opcode, aux: u16, payload_len: usize, arg: u64) {
        self.bytes.push(op as u8);
        self.bytes.push(0);
        self.bytes.extend_from_slice(&aux.to_le_bytes());
        self.bytes
            .extend_from_slice(&(payload_len as u32).to_le_bytes());
        self.bytes.extend_from_slice(&arg.to_le_bytes());
    }

    fn pad(&mut self) {
        let rem = self.bytes.len() % RECORD_ALIGN;
        if rem != 0 {
            self.bytes.resize(self.bytes.len() + RECORD_ALIGN - rem, 0);
        }
    }

    /// A record whose payload is written by `fill` (which must write exactly `len` bytes).
    fn record_with(
        &mut self,
        op: Opcode,
        aux: u16,
        arg: u64,
        len: usize,
        fill: impl FnOnce(&mut Vec<u8>),
    ) {
        self.header(op, aux, len, arg);
        let start = self.bytes.len();
        fill(&mut self.bytes);
        debug_assert_eq!(self.bytes.len() - start, len);
        self.pad();
    }

    pub fn simple(&mut self, op: Opcode, aux: u16, arg: u64) {
        self.header(op, aux, 0, arg);
    }

    pub fn write_linear(&mut self, space: MemSpace, bank: u32, addr: u32, data: &[u8]) {
        let arg = (space_code(space) as u64) << 56 | (bank as u64 & 0xFF_FFFF) << 32 | addr as u64;
        self.record_with(Opcode::WriteLinear, 0, arg, data.len(), |b| {
            b.extend_from_slice(data)
        });
    }

    /// Pages to (bank, addr) locations; `data` holds `locations.len()` pages of `page_size`.
    pub fn write_paged(
        &mut self,
        space: MemSpace,
        page_size: u32,
        locations: &[(u32, u32)],
        data: &[u8],
    ) {
        let len = 8 + locations.len() * 8 + data.len();
        self.record_with(
            Opcode::WritePaged,
            space_code(space) as u16,
            locations.len() as u64,
            len,
            |b| {
                b.extend_from_slice(&page_size.to_le_bytes());
                b.extend_from_slice(&0u32.to_le_bytes());
                for (bank, addr) in locations {
                    b.extend_from_slice(&bank.to_le_bytes());
                    b.extend_from_slice(&addr.to_le_bytes());
                }
                b.extend_from_slice(data);
            },
        );
    }

    pub fn read_paged(
        &mut self,
        handle: u64,
        space: MemSpace,
        page_size: u32,
        locations: &[(u32, u32)],
    ) {
        let len = 8 + locations.len() * 8;
        self.record_with(
            Opcode::ReadPaged,
            space_code(space) as u16,
            handle,
            len,
            |b| {
                b.extend_from_slice(&page_size.to_le_bytes());
                b.extend_from_slice(&(locations.len() as u32).to_le_bytes());
                for (bank, addr) in locations {
                    b.extend_from_slice(&bank.to_le_bytes());
                    b.extend_from_slice(&addr.to_le_bytes());
                }
            },
        );
    }

    /// A program launch: header with the kernel config image, per-core runtime args, go signal.
    pub fn launch(
        &mut self,
        program_id: u32,
        cores: u32,
        config_image: &[u8],
        args_per_core: u16,
        args: &[u32],
    ) {
        let arg = program_id as u64 | (cores as u64) << 32;
        self.record_with(Opcode::LaunchProgram, 0, arg, config_image.len(), |b| {
            b.extend_from_slice(config_image)
        });
        self.record_with(
            Opcode::WritePacked,
            args_per_core,
            program_id as u64,
            args.len() * 4,
            |b| {
                for a in args {
                    b.extend_from_slice(&a.to_le_bytes());
                }
            },
        );
        self.simple(Opcode::GoSignal, 0, program_id as u64);
    }

    pub fn exec_buf(
        &mut self,
        trace_id: u32,
        address: u32,
        log2_page_size: u16,
        num_pages: u32,
        size: u64,
    ) {
        self.record_with(Opcode::ExecBuf, log2_page_size, address as u64, 16, |b| {
            b.extend_from_slice(&num_pages.to_le_bytes());
            b.extend_from_slice(&trace_id.to_le_bytes());
            b.extend_from_slice(&size.to_le_bytes());
        });
    }

    pub fn discard(&mut self, space: MemSpace, address: u64, size: u64) {
        self.record_with(Opcode::Discard, space_code(space) as u16, address, 8, |b| {
            b.extend_from_slice(&size.to_le_bytes());
        });
    }
}

#[cfg(test)]
mod tests;
