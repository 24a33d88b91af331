//! The data movement of the page-path collectives, written once as a list of steps per chip.
//! The same lists run two ways: by each chip's own kernel (`run_own`: waits block), or all
//! chips' lists by one thread for the whole line (`together`). Either way every chip does the
//! same arithmetic on the same operands in the same order, so results are bitwise the same.

use std::time::Duration;

use ttmesh_chip::allocator::MemSpace;
use ttmesh_chip::memory::DeviceMemory;
use ttmesh_chip::tensor::{DataType, TensorPages};
use ttmesh_chip::ChipError;
use ttmesh_fabric::{Fabric, FabricError, FabricSender, NocAddr};

use super::SEM_SLOT_BASE;
use crate::Topology;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Left,
    Right,
}

/// One thing a chip does in a collective. Slots are scratch rows, guarded by semaphore
/// `SEM_SLOT_BASE + slot`; chunk `j` (f32 partial sums) and block `j` (bytes) belong to line
/// position `j`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    /// Sends chunk `chunk`'s f32 partial sums into the neighbour's slot.
    SendPartial { to: Side, slot: usize, chunk: usize },
    /// Waits for the slot and adds the f32 partial sums in it into chunk `chunk`.
    AddPartial { slot: usize, chunk: usize },
    /// Encodes chunk `chunk`'s sums in the output format as block `chunk`.
    Encode { chunk: usize },
    /// Sends block `block` into the neighbour's slot.
    SendBlock { to: Side, slot: usize, block: usize },
    /// Waits for the slot and keeps its bytes as block `block`.
    TakeBlock { slot: usize, block: usize },
}

impl Step {
    /// The slot this step waits for, if it receives.
    pub(crate) fn receives(&self) -> Option<usize> {
        match *self {
            Step::AddPartial { slot, .. } | Step::TakeBlock { slot, .. } => Some(slot),
            _ => None,
        }
    }

    /// The neighbour and slot this step writes into, if it sends.
    pub(crate) fn sends(&self) -> Option<(Side, usize)> {
        match *self {
            Step::SendPartial { to, slot, .. } | Step::SendBlock { to, slot, .. } => {
                Some((to, slot))
            }
            _ => None,
        }
    }
}

/// The reduction steps of line position `pos` (slots `base..base + 2n`): afterwards chunk
/// `pos` holds the line's sum, added in the fixed order the crate docs give. Ring: chunk `j`
/// starts at position `j+1` and travels forward. Line: partial sums of the left end travel
/// right (slots `base + c`), of the right end travel left (slots `base + n + c`), and
/// position `j` adds the two.
pub(crate) fn reduce_steps(topology: Topology, n: usize, pos: usize, base: usize) -> Vec<Step> {
    let mut s = Vec::new();
    if topology == Topology::Ring {
        for t in 0..n - 1 {
            s.push(Step::SendPartial {
                to: Side::Right,
                slot: base + t,
                chunk: (pos + 2 * n - t - 1) % n,
            });
            s.push(Step::AddPartial {
                slot: base + t,
                chunk: (pos + 2 * n - t - 2) % n,
            });
        }
        return s;
    }
    let (has_left, has_right) = (pos > 0, pos + 1 < n);
    // Rightward: partial sums of positions 0..=i for chunks further right.
    if !has_left {
        if has_right {
            for c in 1..n {
                s.push(Step::SendPartial {
                    to: Side::Right,
                    slot: base + c,
                    chunk: c,
                });
            }
        }
    } else {
        for c in pos..n {
            s.push(Step::AddPartial {
                slot: base + c,
                chunk: c,
            });
            if c != pos && has_right {
                s.push(Step::SendPartial {
                    to: Side::Right,
                    slot: base + c,
                    chunk: c,
                });
            }
        }
    }
    // Leftward: partial sums of positions i..n for chunks further left. Chunks left of pos
    // were never sent right by this position, so adding into them is safe.
    if !has_right {
        if has_left {
            for c in (0..n - 1).rev() {
                s.push(Step::SendPartial {
                    to: Side::Left,
                    slot: base + n + c,
                    chunk: c,
                });
            }
        }
    } else {
        for c in (0..=pos).rev() {
            s.push(Step::AddPartial {
                slot: base + n + c,
                chunk: c,
            });
            if c != pos {
                s.push(Step::SendPartial {
                    to: Side::Left,
                    slot: base + n + c,
                    chunk: c,
                });
            }
        }
    }
    s
}

/// The gather steps of line position `pos` (slots `base..base + n`): block `pos` is this
/// position's; afterwards every block `j` holds position `j`'s.
pub(crate) fn gather_steps(topology: Topology, n: usize, pos: usize, base: usize) -> Vec<Step> {
    let mut s = Vec::new();
    if topology == Topology::Ring {
        for t in 0..n - 1 {
            let c = (pos + n - t) % n;
            s.push(Step::SendBlock {
                to: Side::Right,
                slot: base + c,
                block: c,
            });
            let r = (pos + 2 * n - 1 - t) % n;
            s.push(Step::TakeBlock {
                slot: base + r,
                block: r,
            });
        }
        return s;
    }
    let (has_left, has_right) = (pos > 0, pos + 1 < n);
    let send = |to, c| Step::SendBlock {
        to,
        slot: base + c,
        block: c,
    };
    if has_right {
        s.push(send(Side::Right, pos));
    }
    if has_left {
        s.push(send(Side::Left, pos));
    }
    // Blocks from the left arrive nearest first; pass each on to the right, and back.
    for c in (0..pos).rev() {
        s.push(Step::TakeBlock {
            slot: base + c,
            block: c,
        });
        if has_right {
            s.push(send(Side::Right, c));
        }
    }
    for c in pos + 1..n {
        s.push(Step::TakeBlock {
            slot: base + c,
            block: c,
        });
        if has_left {
            s.push(send(Side::Left, c));
        }
    }
    s
}

/// One chip's data while its steps run. Buffers only grow, and are reused across launches.
#[derive(Default)]
pub(crate) struct Work {
    pub chunks: Vec<Vec<f32>>,
    pub chunk_lens: Vec<usize>,
    pub blocks: Vec<Vec<u8>>,
    pub block_lens: Vec<usize>,
    pub recv: Vec<f32>,
    /// Raw input pages (read before the steps, on the chip's own thread).
    pub input: Vec<u8>,
    pub out_dtype: Option<DataType>,
}

impl Work {
    /// Room for `n` chunks and blocks of the given lengths (elements / bytes).
    pub(crate) fn shape(&mut self, chunk_lens: &[usize], block_lens: &[usize]) {
        let n = chunk_lens.len().max(block_lens.len());
        if self.chunks.len() < n {
            self.chunks.resize_with(n, Vec::new);
        }
        if self.blocks.len() < n {
            self.blocks.resize_with(n, Vec::new);
        }
        for (c, &l) in self.chunks.iter_mut().zip(chunk_lens) {
            sized(c, l);
        }
        for (b, &l) in self.blocks.iter_mut().zip(block_lens) {
            sized(b, l);
        }
        self.chunk_lens.clear();
        self.chunk_lens.extend_from_slice(chunk_lens);
        self.block_lens.clear();
        self.block_lens.extend_from_slice(block_lens);
    }

    pub(crate) fn chunk(&self, j: usize) -> &[f32] {
        &self.chunks[j][..self.chunk_lens[j]]
    }

    pub(crate) fn block(&self, j: usize) -> &[u8] {
        &self.blocks[j][..self.block_lens[j]]
    }
}

pub(crate) fn sized<T: Copy + Default>(v: &mut Vec<T>, len: usize) -> &mut [T] {
    if v.len() < len {
        v.resize(len, T::default());
    }
    &mut v[..len]
}

/// Where a chip's own memory is read: by its kernel directly, or through the fabric by a
/// thread running the chip's steps for it.
#[derive(Clone, Copy)]
pub(crate) enum Local<'a> {
    Memory(&'a DeviceMemory),
    Fabric(&'a Fabric),
}

/// A step that failed: on the fabric (the cause names the link) or in the chip's memory.
#[derive(Debug)]
pub(crate) enum StepError {
    Fabric(FabricError),
    Chip(ChipError),
}

/// One chip's place on the line: whom it sends to, where its slots are, its senders.
pub(crate) struct Endpoint {
    pub me: u32,
    pub left: Option<u32>,
    pub right: Option<u32>,
    pub slots: TensorPages,
    /// One sender per parallel link; slot `s` uses link `s % links`.
    pub senders: Vec<FabricSender>,
}

impl Endpoint {
    pub(crate) fn slot_addr(&self, slot: usize) -> NocAddr {
        let (bank, addr) = self.slots.location(slot as u64);
        NocAddr::dram(bank, addr)
    }

    pub(crate) fn neighbour(&self, side: Side) -> u32 {
        match side {
            Side::Left => self.left,
            Side::Right => self.right,
        }
        .expect("the steps send only to neighbours the line has")
    }

    pub(crate) fn send(&self, to: u32, slot: usize, data: &[u8]) -> Result<(), FabricError> {
        self.senders[slot % self.senders.len()].write_and_inc(
            to,
            self.slot_addr(slot),
            data,
            SEM_SLOT_BASE + slot as u32,
            1,
        )
    }

    pub(crate) fn read_slot(
        &self,
        mem: Local,
        slot: usize,
        out: &mut [u8],
    ) -> Result<(), StepError> {
        let (bank, addr) = self.slots.location(slot as u64);
        match mem {
            Local::Memory(m) => m
                .read(MemSpace::Dram, bank, addr, out)
                .map_err(StepError::Chip),
            Local::Fabric(f) => f
                .read_local(self.me, NocAddr::dram(bank, addr), out)
                .map_err(StepError::Fabric),
        }
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
                .wait_semaphore(self.me, SEM_SLOT_BASE + slot as u32, 1, timeout)
                .map_err(StepError::Fabric)?;
        }
        match s {
            Step::SendPartial { to, slot, chunk } => self
                .send(
                    self.neighbour(to),
                    slot,
                    bytemuck::cast_slice(w.chunk(chunk)),
                )
                .map_err(StepError::Fabric),
            Step::SendBlock { to, slot, block } => self
                .send(self.neighbour(to), slot, w.block(block))
                .map_err(StepError::Fabric),
            Step::AddPartial { slot, chunk } => {
                let len = w.chunk_lens[chunk];
                let recv = sized(&mut w.recv, len);
                self.read_slot(mem, slot, bytemuck::cast_slice_mut(recv))?;
                for (a, b) in w.chunks[chunk][..len].iter_mut().zip(recv.iter()) {
                    *a += *b;
                }
                Ok(())
            }
            Step::TakeBlock { slot, block } => {
                let len = w.block_lens[block];
                self.read_slot(mem, slot, &mut w.blocks[block][..len])
            }
            Step::Encode { chunk } => {
                let dtype = w
                    .out_dtype
                    .expect("an encoding collective sets its output format");
                let len = w.block_lens[chunk];
                let Work { chunks, blocks, .. } = w;
                super::pages::encode(
                    dtype,
                    &chunks[chunk][..w.chunk_lens[chunk]],
                    &mut blocks[chunk][..len],
                );
                Ok(())
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
