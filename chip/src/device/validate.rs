//! Checks a dispatcher makes before acting on a decoded record. A trace's commands are bytes in
//! DRAM that any write can damage, so nothing read from a record is trusted: operand addresses
//! are checked against the program and the allocator's ranges, page locations and sizes against
//! the memory they describe (before anything is allocated from them), and a trace may hold only
//! what a capture can put there.

use std::any::Any;

use crate::allocator::{Allocator, BufferType, MemSpace};
use crate::command::Record;
use crate::error::{ChipError, LiveTraceWrite, RecordFault};
use crate::memory::DeviceMemory;
use crate::program::Program;

/// Per-bank address ranges [base, top) of each buffer type; fixed once the chip is open.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Regions([(u64, u64); BufferType::ALL.len()]);

impl Regions {
    pub(crate) fn of(allocator: &Allocator) -> Regions {
        let mut r = [(0, 0); BufferType::ALL.len()];
        for t in BufferType::ALL {
            let m = allocator.manager(t);
            r[t as usize] = (m.base(), m.top());
        }
        Regions(r)
    }

    fn get(&self, t: BufferType) -> (u64, u64) {
        self.0[t as usize]
    }
}

/// A launch's records must have the shape the program gives them: its cores and config image
/// (LaunchProgram), its args per core and one set per core (WritePacked). A record whose length
/// was damaged could otherwise swallow the records after it and skip a launch unseen. Inlined:
/// as a call it took 14% of a no-op replay's samples, most on reloading its argument arrays.
#[inline(always)]
pub(crate) fn check_launch_shape(
    program: &Program,
    found: [(&'static str, u64); 2],
    expected: [u64; 2],
) -> Result<(), RecordFault> {
    for ((what, found), expected) in found.into_iter().zip(expected) {
        if found != expected {
            return Err(RecordFault::LaunchMismatch {
                program: program.id,
                kernel: program.kernel.name().to_string(),
                what,
                found,
                expected,
            });
        }
    }
    Ok(())
}

/// A launch may run only with one address per operand, each operand inside its buffer type's
/// range: what lets every kernel index `addresses` by operand without checking.
pub(crate) fn check_operands(
    program: &Program,
    addresses: &[u32],
    regions: &Regions,
) -> Result<(), RecordFault> {
    if addresses.len() != program.operands.len() {
        return Err(RecordFault::MissingOperands {
            program: program.id,
            kernel: program.kernel.name().to_string(),
            given: addresses.len(),
            needs: program.operands.len(),
        });
    }
    for (i, (op, &address)) in program.operands.iter().zip(addresses).enumerate() {
        let (base, top) = regions.get(op.buffer_type);
        let end = (address as u64).checked_add(op.per_bank_size);
        if (address as u64) < base || end.is_none_or(|e| e > top) {
            return Err(RecordFault::OperandOutOfRange {
                program: program.id,
                kernel: program.kernel.name().to_string(),
                operand: i,
                buffer_type: op.buffer_type,
                address,
                size: op.per_bank_size,
                base,
                top,
            });
        }
    }
    Ok(())
}

/// Pages of `page_size` at `locations` must each lie inside one bank, a write may not land in a
/// live trace's bytes (refused before any page is written), and a read may not be
/// larger than the whole memory it reads (so the host buffer it fills is bounded by that).
pub(crate) fn check_pages(
    memory: &DeviceMemory,
    space: MemSpace,
    page_size: u32,
    locations: impl ExactSizeIterator<Item = (u32, u32)>,
    reading: bool,
) -> Result<(), RecordFault> {
    let banks = memory.num_banks(space);
    let bank_size = memory.bank_size(space);
    let pages = locations.len();
    let capacity = banks as u64 * bank_size;
    if reading && (pages as u64).saturating_mul(page_size as u64) > capacity {
        return Err(RecordFault::ReadTooLarge {
            space,
            pages,
            page_size,
            banks,
            bank_size,
            capacity,
        });
    }
    for (page, (bank, address)) in locations.enumerate() {
        if bank >= banks || address as u64 + page_size as u64 > bank_size {
            return Err(RecordFault::PageOutOfRange {
                space,
                page,
                bank,
                address: address as u64,
                page_size: page_size as u64,
                banks,
                bank_size,
            });
        }
        if !reading {
            let refused = memory.check_write(space, bank, address as u64, page_size as u64);
            if let Err(ChipError::IntoLiveTrace(w)) = refused {
                return Err(RecordFault::IntoLiveTrace(LiveTraceWrite {
                    by: format!("its page {page}'s write"),
                    ..w
                }));
            }
        }
    }
    Ok(())
}

/// Whether a capture can have produced `rec`: program launches and the end marker only (writes,
/// reads, events and callbacks are refused during capture). Anything else in a trace is damage;
/// running it could stop the dispatcher, complete another queue's event or read, or wait.
pub(crate) fn allowed_in_trace(rec: &Record<'_>) -> bool {
    matches!(
        rec,
        Record::LaunchProgram { .. }
            | Record::WritePacked { .. }
            | Record::GoSignal { .. }
            | Record::Stall
            | Record::ResetGo
            | Record::ExecBufEnd
    )
}

/// The text of a caught panic.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}
