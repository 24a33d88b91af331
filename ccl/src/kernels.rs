//! The collective kernels: what one chip does inside all_gather and reduce_scatter.

use std::sync::{Arc, Weak};
use std::time::Duration;

use ttmesh_chip::allocator::MemSpace;
use ttmesh_chip::error::ForeignError;
use ttmesh_chip::program::{CollectiveCost, Kernel, KernelContext, KernelCost, Launched};
use ttmesh_chip::tensor::{DataType, HostData, TensorSpec};
use ttmesh_chip::ChipError;
use ttmesh_fabric::{Fabric, FabricError};

use chip_io::{Local, StepError};
use execute::{Endpoint, Step};
use work::Work;

use crate::schedule::{self, meeting, own_thread, Runner};
use crate::{CclLine, Topology};

pub(crate) mod chip_io;
mod elements;
pub(crate) mod execute;
mod into;
mod onward;
pub(crate) mod pages;
mod slots;
pub(crate) mod step;
pub(crate) mod work;

/// Semaphore ids the collectives use on every chip (fabric semaphore tables are per chip).
///
/// "Ready" increments are kept apart per neighbour chip and side: `SEM_READY_BASE + 2 *
/// neighbour + side` (side 0: the neighbour is on the left, 1: on the right). A chip sits on a
/// row and a column at once, and a neighbour on one axis may already have entered the next
/// collective of its own line; sharing one "ready from the right" count between lines let a
/// column neighbour's early increment pass for the row neighbour's, so a chip wrote into a
/// row neighbour still reading its previous collective (a whole-mesh collective's phases,
/// traced, lost blocks this way).
pub const SEM_READY_BASE: u32 = 0x1000;
/// Chip ids below this keep their ready semaphores below `SEM_SLOT_BASE`.
pub const MAX_CHIP_ID: u32 = (SEM_SLOT_BASE - SEM_READY_BASE) / 2;

/// The semaphore `neighbour` raises on a chip when it enters a collective, `neighbour_on_right`
/// saying which side of that chip it is on.
pub fn ready_semaphore(neighbour: u32, neighbour_on_right: bool) -> u32 {
    SEM_READY_BASE + 2 * neighbour + u32::from(neighbour_on_right)
}
/// Slot `s` of the scratch buffer is guarded by semaphore `SEM_SLOT_BASE + s`.
pub const SEM_SLOT_BASE: u32 = 0x2000;
/// When a large ring's slots share memory on the chips' own threads, semaphore
/// `SEM_FREE_BASE + s` on the writing chip counts its neighbour's credits for slot `s`.
pub const SEM_FREE_BASE: u32 = 0x3000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollectiveKind {
    AllGather {
        dim: usize,
    },
    ReduceScatter {
        dim: usize,
    },
    /// The whole all_reduce in one kernel (pages split unevenly; see `crate::all_reduce`).
    AllReduce,
}

/// Bytes per element on the wire: bfloat16 travels as bf16 bits, everything else as 32 bits.
pub fn wire_bytes(dtype: DataType) -> usize {
    if dtype == DataType::BFloat16 {
        2
    } else {
        4
    }
}

pub(crate) struct CollectiveKernel {
    pub(crate) kind: CollectiveKind,
    pub(crate) pos: usize,
    pub(crate) line: CclLine,
    /// Result place of each line position's block / chunk (a permutation).
    pub(crate) order: Vec<usize>,
    pub(crate) topology: Topology,
    pub(crate) num_links: usize,
    pub(crate) input: TensorSpec,
    pub(crate) output: TensorSpec,
    pub(crate) scratch: TensorSpec,
    /// Weak: the kernel sits in its chip's program cache, and the fabric holds the chips'
    /// memories, so a strong reference would keep a closed mesh alive.
    pub(crate) fabric: Weak<Fabric>,
    /// The same on every chip's kernel of one collective: where they meet (`schedule::meeting`).
    pub(crate) meet_key: u64,
    /// The steps write all of the output, so a launch that runs together may return before
    /// the line has run: the fused all_reduce, the page reduce_scatter and the direct
    /// all_gather. Decided once here,
    /// not at every launch (`hands_off` is asked on the dispatch path).
    pub(crate) defers: bool,
    /// A fused reduction's step list, built at the first launch: it depends only on the
    /// kernel (line, position, sizes), and building it was ~5% of a small line-2 collective.
    pub(crate) fused_steps: std::sync::OnceLock<Vec<Step>>,
    /// Every chip's input sits at one address, so a bf16 reduction's last hop may be added
    /// at delivery (`into`), reading the receiver's input from the sender's thread.
    pub(crate) adds_at_delivery: bool,
    /// Every chip of the line is held by this process (see `new`).
    pub(crate) line_is_local: bool,
}

impl CollectiveKernel {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        kind: CollectiveKind,
        pos: usize,
        line: CclLine,
        order: Vec<usize>,
        topology: Topology,
        num_links: usize,
        input: TensorSpec,
        output: TensorSpec,
        scratch: TensorSpec,
        fabric: Arc<Fabric>,
        inputs_share_address: bool,
    ) -> Self {
        let meet_key = ttmesh_chip::program::program_key(&(
            kind, &line, &order, topology, num_links, &input, &output, &scratch,
        ));
        let n = line.chips.len();
        let defers = match kind {
            CollectiveKind::AllReduce => true,
            CollectiveKind::ReduceScatter { dim } => crate::reduce_scatter::defers(&input, dim, n),
            CollectiveKind::AllGather { dim } => crate::all_gather::defers(&input, dim),
        };
        // A line with chips another process holds (a big mesh over MPI ranks) runs on its
        // chips' own threads, packets only: a runner that takes a whole line, or a last add
        // made on the sender's thread, reads other chips' memory, which is not here.
        let line_is_local = line.chips.iter().all(|&c| !fabric.is_remote(c));
        let adds_at_delivery = inputs_share_address
            && line_is_local
            && input.dtype == DataType::BFloat16
            && output.dtype == DataType::BFloat16
            && input.page_size() == output.page_size();
        CollectiveKernel {
            adds_at_delivery,
            line_is_local,
            meet_key,
            defers,
            kind,
            pos,
            line,
            order,
            topology,
            num_links,
            input,
            output,
            scratch,
            fabric: Arc::downgrade(&fabric),
            fused_steps: std::sync::OnceLock::new(),
        }
    }
}

/// One chip's view of the line while a collective runs.
pub(crate) struct Run<'a> {
    pub(crate) ctx: &'a KernelContext<'a>,
    pub(crate) k: &'a CollectiveKernel,
    pub(crate) ep: Endpoint,
    pub(crate) fabric: &'a Arc<Fabric>,
    pub(crate) timeout: Duration,
    /// The launch may return before the line has run (`Kernel::launch`).
    pub(crate) may_defer: bool,
}

/// A fabric error inside a collective kernel, kept whole as the chip error's source.
fn fab(ctx: &KernelContext, what: &str, e: FabricError) -> ChipError {
    ChipError::KernelFault {
        kernel: what.into(),
        chip: ctx.chip,
        source: ForeignError::new(e),
    }
}

/// Fails the collective on every chip: the fabric refuses new work naming `cause` until it
/// is reset, so the other chips end now and nothing reuses the half-used semaphores.
fn abort(fabric: &Fabric, ctx: &KernelContext, what: &str, cause: FabricError) -> ChipError {
    fabric.abort(ctx.chip, cause.clone());
    fab(ctx, what, cause)
}

impl<'a> Run<'a> {
    fn name(&self) -> &'static str {
        match self.k.kind {
            CollectiveKind::AllGather { .. } => "AllGather",
            CollectiveKind::ReduceScatter { .. } => "ReduceScatter",
            CollectiveKind::AllReduce => "AllReduce",
        }
    }

    pub(crate) fn fail(&self, e: FabricError) -> ChipError {
        abort(self.fabric, self.ctx, self.name(), e)
    }

    pub(crate) fn send(&self, to: u32, slot: usize, data: &[u8]) -> Result<(), ChipError> {
        self.ep.send(to, slot, 0, data).map_err(|e| self.fail(e))
    }

    pub(crate) fn wait_slot(&self, slot: usize) -> Result<(), ChipError> {
        self.fabric
            .wait_semaphore_spinning(
                self.ep.me,
                SEM_SLOT_BASE + slot as u32,
                1,
                self.timeout,
                self.ep.spins,
            )
            .map_err(|e| self.fail(e))
    }

    pub(crate) fn read_slot(&self, slot: usize, len: usize) -> Result<Vec<u8>, ChipError> {
        let mut buf = vec![0u8; len];
        self.read_slot_into(slot, 0, &mut buf)?;
        Ok(buf)
    }

    /// Copies the bytes at byte `offset` of this chip's slot into `out`.
    pub(crate) fn read_slot_into(
        &self,
        slot: usize,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), ChipError> {
        self.ep
            .read_slot(Local::Memory(self.ctx.memory), slot, offset, out)
            .map_err(|e| self.step_error(e))
    }

    pub(crate) fn write_slot_local(&self, slot: usize, data: &[u8]) -> Result<(), ChipError> {
        let (bank, addr) = self.ep.slots.location(slot as u64);
        self.ctx.memory.write(MemSpace::Dram, bank, addr, data)
    }

    pub(crate) fn step_error(&self, e: StepError) -> ChipError {
        match e {
            StepError::Fabric(e) => self.fail(e),
            StepError::Chip(e) => e,
        }
    }

    /// Runs this chip's `steps` on `work`, on the runner `schedule::runner` picks: together
    /// with the rest of the line at the collective's meeting, or here, after the handshake
    /// (`writes_left`: the steps write into the left neighbour too). With `complete` (the
    /// steps write everything the kernel outputs) and a launch that may defer, a chip that
    /// is not the last to arrive at the meeting returns at once, its part left to the last.
    pub(crate) fn run_steps(
        &self,
        work: &mut Work,
        steps: Vec<Step>,
        writes_left: bool,
        complete: bool,
    ) -> Result<Launched, ChipError> {
        let input_bytes = self.k.input.buffer_size() as usize;
        let n = self.k.line.chips.len();
        let runner = schedule::runner(input_bytes, n, self.k.defers, self.k.line_is_local);
        if runner == Runner::OwnThreads {
            return own_thread::run(self, work, steps, writes_left);
        }
        let c = meeting::Collective {
            fabric: self.fabric,
            key: self.k.meet_key,
            name: self.name(),
            chips: &self.k.line.chips,
            pos: self.k.pos,
            timeout: self.timeout,
            pair: runner == Runner::TwoThreads,
        };
        let part = meeting::Part {
            ep: self.endpoint(None)?,
            work: Box::new(std::mem::take(work)),
            steps,
        };
        if complete && self.may_defer {
            return Ok(match meeting::meet_deferred(&c, part)? {
                meeting::Met::Ran(part) => {
                    *work = *part.work;
                    Launched::Done
                }
                meeting::Met::Deferred(d) => Launched::Deferred(d),
            });
        }
        *work = *meeting::meet(&c, part)?.work;
        Ok(Launched::Done)
    }

    /// A second endpoint for this chip's place on the line, with senders of its own, whose
    /// slots share memory `regions` apart if given (see `Endpoint::regions`).
    pub(crate) fn endpoint(&self, regions: Option<usize>) -> Result<Endpoint, ChipError> {
        let senders = (0..self.ep.senders.len())
            .map(|l| self.fabric.sender(self.ep.me).map(|s| s.with_link(l)))
            .collect::<Result<_, _>>()
            .map_err(|e| self.fail(e))?;
        Ok(Endpoint {
            me: self.ep.me,
            left: self.ep.left,
            right: self.ep.right,
            slots: self.ep.slots.clone(),
            senders,
            spins: self.ep.spins,
            regions,
        })
    }

    /// Tells the neighbours that write into this chip that it has entered the collective, and
    /// waits until the neighbours it writes into have done the same.
    pub(crate) fn handshake(&self, writes_left: bool, writes_right: bool) -> Result<(), ChipError> {
        let inc = |to: u32, sem: u32| {
            self.ep.senders[0]
                .atomic_inc(to, sem, 1)
                .map_err(|e| self.fail(e))
        };
        // Who writes into me: the left neighbour if it writes right, the right one if it writes left.
        let ring = self.k.topology == Topology::Ring;
        let me = self.ep.me;
        if let Some(l) = self.ep.left {
            // I am on my left neighbour's right.
            inc(l, ready_semaphore(me, true))?;
        }
        if let (Some(r), false) = (self.ep.right, ring) {
            inc(r, ready_semaphore(me, false))?;
        }
        let wait = |sem: u32| {
            self.fabric
                .wait_semaphore_spinning(me, sem, 1, self.timeout, self.ep.spins)
                .map_err(|e| self.fail(e))
        };
        if let (true, Some(r)) = (writes_right, self.ep.right) {
            wait(ready_semaphore(r, true))?;
        }
        if let (true, Some(l)) = (writes_left, self.ep.left) {
            wait(ready_semaphore(l, false))?;
        }
        Ok(())
    }

    pub(crate) fn flush(&self) -> Result<(), ChipError> {
        self.ep.flush(self.timeout).map_err(|e| self.fail(e))
    }
}

impl Kernel for CollectiveKernel {
    fn name(&self) -> &str {
        match self.kind {
            CollectiveKind::AllGather { .. } => "AllGather",
            CollectiveKind::ReduceScatter { .. } => "ReduceScatter",
            CollectiveKind::AllReduce => "AllReduce",
        }
    }

    fn execute(&self, ctx: &KernelContext, addresses: &[u32]) -> Result<(), ChipError> {
        self.start(ctx, addresses, false).map(|_| ())
    }

    fn launch(&self, ctx: &KernelContext, addresses: &[u32]) -> Result<Launched, ChipError> {
        self.start(ctx, addresses, true)
    }

    /// A small all_reduce (or page reduce_scatter) hands its part to the line's runner and
    /// never waits at launch.
    fn hands_off(&self) -> bool {
        self.defers
            && schedule::runs_together(
                self.input.buffer_size() as usize,
                self.line.chips.len(),
                true,
                self.line_is_local,
            )
    }

    fn cost(&self) -> KernelCost {
        self.model_cost()
    }
}

impl CollectiveKernel {
    /// Runs (`may_defer`: or starts) this chip's part of the collective.
    fn start(
        &self,
        ctx: &KernelContext,
        addresses: &[u32],
        may_defer: bool,
    ) -> Result<Launched, ChipError> {
        let Some(fabric) = self.fabric.upgrade() else {
            return Err(fab(ctx, self.name(), FabricError::ShutDown));
        };
        // After a failed collective, nothing runs until the fabric is reset.
        if let Some(e) = fabric.failure() {
            return Err(fab(ctx, self.name(), e));
        }
        let result = self.run(ctx, &fabric, addresses, may_defer);
        if let Err(e) = &result {
            // Errors from the fabric aborted it already; anything else must too, or the other
            // chips would wait for this one until their timeouts.
            if fabric.failure().is_none() {
                let cause = FabricError::KernelFailed {
                    chip: ctx.chip,
                    reason: e.to_string(),
                };
                fabric.abort(ctx.chip, cause);
            }
        }
        result
    }

    fn model_cost(&self) -> KernelCost {
        let n = self.line.chips.len() as f64;
        let share = (n - 1.0) / n;
        let (bytes, phases) = match self.kind {
            CollectiveKind::AllGather { .. } => (
                self.output.volume() as f64 * wire_bytes(self.input.dtype) as f64 * share,
                1,
            ),
            CollectiveKind::ReduceScatter { .. } => (
                self.input.volume() as f64 * wire_bytes(self.input.dtype) as f64 * share,
                1,
            ),
            // A reduce_scatter of the input, then an all_gather of the reduced parts.
            CollectiveKind::AllReduce => (
                self.input.volume() as f64
                    * (wire_bytes(self.input.dtype) + wire_bytes(self.output.dtype)) as f64
                    * share,
                2,
            ),
        };
        // On a ring the hardware sends both ways around, each half of the data: the busiest
        // link direction carries half of a line's bytes.
        let directions = if self.topology == Topology::Ring {
            2.0
        } else {
            1.0
        };
        let participants = self
            .line
            .chips
            .iter()
            .filter(|&&c| c < 64)
            .fold(0u64, |m, &c| m | 1 << c);
        KernelCost {
            fabric_bytes: bytes / directions,
            dram_bytes: (self.input.buffer_size() + self.output.buffer_size()) as f64,
            collective: Some(CollectiveCost {
                participants,
                chips: n as u32,
                steps: phases * (n as u32).saturating_sub(1),
                links: self.num_links.max(1) as u32,
                phases,
            }),
            ..Default::default()
        }
    }
}

impl CollectiveKernel {
    fn run(
        &self,
        ctx: &KernelContext,
        fabric: &Arc<Fabric>,
        addresses: &[u32],
        may_defer: bool,
    ) -> Result<Launched, ChipError> {
        let n = self.line.chips.len();
        let ring = self.topology == Topology::Ring;
        let left = if self.pos > 0 {
            Some(self.line.chips[self.pos - 1])
        } else if ring {
            Some(self.line.chips[n - 1])
        } else {
            None
        };
        let right = if self.pos + 1 < n {
            Some(self.line.chips[self.pos + 1])
        } else if ring {
            Some(self.line.chips[0])
        } else {
            None
        };
        let me = self.line.chips[self.pos];
        let slots = self.scratch.page_map(ctx.arch, addresses[1] as u64)?;
        let senders = (0..self.num_links)
            .map(|l| fabric.sender(me).map(|s| s.with_link(l)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| abort(fabric, ctx, self.name(), e))?;
        let run = Run {
            ctx,
            k: self,
            ep: Endpoint {
                me,
                left,
                right,
                slots,
                senders,
                spins: schedule::wait_spins(n),
                regions: None,
            },
            fabric,
            timeout: ctx.timeout,
            may_defer,
        };
        match self.kind {
            CollectiveKind::AllGather { dim } => crate::all_gather::run(&run, dim, addresses),
            CollectiveKind::ReduceScatter { dim } => {
                crate::reduce_scatter::run(&run, dim, addresses)
            }
            CollectiveKind::AllReduce => crate::all_reduce::run(&run, addresses),
        }
    }
}

pub(crate) fn to_wire(dtype: DataType, data: &HostData) -> Vec<u8> {
    match (data, dtype) {
        (HostData::F32(v), DataType::BFloat16) => v
            .iter()
            .flat_map(|x| half::bf16::from_f32(*x).to_bits().to_le_bytes())
            .collect(),
        (HostData::F32(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (HostData::U32(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

pub(crate) fn from_wire(dtype: DataType, bytes: &[u8], out: &mut HostData) {
    match out {
        HostData::F32(v) if dtype == DataType::BFloat16 => v.extend(
            bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()),
        ),
        HostData::F32(v) => v.extend(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        ),
        HostData::U32(v) => v.extend(
            bytes
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        ),
    }
}

/// Splits a shape at `dim`: (outer count, extent of dim, inner block size).
pub(crate) fn split_dims(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    (
        shape[..dim].iter().product(),
        shape[dim],
        shape[dim + 1..].iter().product(),
    )
}
