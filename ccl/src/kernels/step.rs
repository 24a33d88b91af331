//! What a chip does in a collective, one step at a time: the `Step` vocabulary that
//! collectives' step plans write and `execute::Endpoint::step` carries out, and what each step waits for,
//! reads and writes (the runners schedule by it). No data moves here.

use crate::Topology;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Side {
    Left,
    Right,
}

/// One thing a chip does in a collective, on one piece of a chunk or block (see the collectives' step plans).
/// Slots are scratch rows, guarded by semaphore `SEM_SLOT_BASE + slot`; chunk `j` (sums, f32
/// while held; partial sums in the input's format on the wire) and block `j` (bytes) belong to
/// line position `j`; a piece sits at the same place in its chunk, block and slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Waits for a piece in the slot and adds its partial sums into chunk `chunk`'s f32.
    AddPartial {
        slot: usize,
        chunk: usize,
        piece: usize,
    },
    /// Adds a piece of this chip's input (chunk `chunk`) to the partial sums in slot `from`
    /// (waiting for them), or takes the input alone; sends the sums into the neighbour's slot
    /// (`to`: bf16 partials are added and rounded in bf16, never widened in memory), or keeps
    /// them in f32 as the chunk's. Fuses decode, receive, add and send, so the piece is read
    /// from memory once and written once.
    Reduce {
        from: Option<usize>,
        chunk: usize,
        piece: usize,
        to: Option<(Side, usize)>,
    },
    /// The last add of a piece of chunk `chunk` when partial sums and output are bf16: this
    /// chip's input plus the partial sums in slot `from` (or the input alone), rounded once
    /// and written straight into the output (bit for bit an f32 add, then `Encode`).
    ReduceOut {
        from: Option<usize>,
        chunk: usize,
        piece: usize,
    },
    /// The last add of a piece of chunk `chunk` whose sums are held in f32 (a line's middle
    /// position, joining the left's and the right's) when partial sums and output are bf16:
    /// the sums plus the partial sums in slot `slot`, rounded once and written straight into
    /// the output (bit for bit `AddPartial`, then `Encode`).
    AddPartialOut {
        slot: usize,
        chunk: usize,
        piece: usize,
    },
    /// The own chunk's sum at a line's middle position when partial sums and output are
    /// bf16: this chip's input plus the partial sums in slot `left`, plus those in slot
    /// `right`, added in that order in f32, rounded once and written straight into the
    /// output, a block at a time in L1 (bit for bit the `Reduce` into the f32 chunk and the
    /// `AddPartialOut` it replaces, without the f32 sums going to memory and back). Waits for
    /// `right`; a `Hold` earlier in the list waited for `left`.
    JoinOut {
        left: usize,
        right: usize,
        chunk: usize,
        piece: usize,
    },
    /// Waits for a piece in slot `slot` that a later step of this chip reads (`JoinOut`).
    Hold { slot: usize },
    /// Encodes a piece of chunk `chunk`'s sums in the output format as block `chunk`'s and
    /// writes it to the output, once the piece's sum is complete: it is still in the host's
    /// cache.
    Encode { chunk: usize, piece: usize },
    /// Sends a piece of block `block` into the neighbour's slot.
    SendBlock {
        to: Side,
        slot: usize,
        block: usize,
        piece: usize,
    },
    /// Waits for a piece of block `block` in slot `slot`. The bytes stay in the slot: a
    /// `PassSlot` forwards them from there and the kernel writes its output from the slots
    /// (so those slots never share memory: see `schedule::one_thread::alias_slots`).
    TakeBlock {
        slot: usize,
        block: usize,
        piece: usize,
    },
    /// Forwards a piece of block `block` that a `TakeBlock` saw land in this chip's slot
    /// `slot` into the neighbour's slot `slot`, copied from memory to memory by the fabric:
    /// one host copy per wire byte, where a copy out of the slot and a send from it were two.
    PassSlot {
        to: Side,
        slot: usize,
        block: usize,
        piece: usize,
    },
    /// Copies a piece of block `block` from this chip's output pages into the neighbour's
    /// output pages at the same place (every chip's output sits at one address, as tt-metal's
    /// all_gather writes straight into the receiver's output) and raises the neighbour's
    /// semaphore for `slot`. No slot and no copy out of one: the fused all_reduce's gather.
    PassOutput {
        to: Side,
        slot: usize,
        block: usize,
        piece: usize,
    },
    /// Waits until the neighbour has written the next piece of a block into this chip's
    /// output (its `PassOutput` or `ReduceInto` raising slot `slot`'s semaphore).
    AwaitOutput { slot: usize },
    /// The last hop of chunk `chunk`'s reduction, added at delivery (bf16 partials and
    /// output): this chip's sums as `Reduce` makes them (its input plus slot `from`), added
    /// to the neighbour's input and rounded once, written into the neighbour's output pages,
    /// raising its semaphore for `slot`. The neighbour's `ReduceOut` would have made the
    /// same bits from the same two operands after a write into its slot and a read back;
    /// it only waits (`AwaitOutput`). See `into`.
    ReduceInto {
        from: Option<usize>,
        chunk: usize,
        piece: usize,
        to: Side,
        slot: usize,
    },
}

impl Step {
    /// The piece this step moves or adds, if it works on one.
    pub(crate) fn piece(&self) -> Option<usize> {
        match *self {
            Step::AddPartial { piece, .. }
            | Step::Reduce { piece, .. }
            | Step::ReduceOut { piece, .. }
            | Step::AddPartialOut { piece, .. }
            | Step::JoinOut { piece, .. }
            | Step::Encode { piece, .. }
            | Step::SendBlock { piece, .. }
            | Step::TakeBlock { piece, .. }
            | Step::PassSlot { piece, .. }
            | Step::PassOutput { piece, .. }
            | Step::ReduceInto { piece, .. } => Some(piece),
            Step::Hold { .. } | Step::AwaitOutput { .. } => None,
        }
    }

    /// The slot this step waits for, if it receives.
    pub(crate) fn receives(&self) -> Option<usize> {
        match *self {
            Step::AddPartial { slot, .. }
            | Step::AddPartialOut { slot, .. }
            | Step::TakeBlock { slot, .. }
            | Step::Hold { slot }
            | Step::JoinOut { right: slot, .. }
            | Step::AwaitOutput { slot, .. } => Some(slot),
            Step::Reduce { from, .. }
            | Step::ReduceOut { from, .. }
            | Step::ReduceInto { from, .. } => from,
            _ => None,
        }
    }

    /// The slot whose memory this step reads (`receives`, less a gather's waits, whose piece
    /// is already in the output or stays in the slot, and a `Hold`, whose piece its `JoinOut`
    /// reads: only lists
    /// whose slot writes all go one way share slot memory, and a line's middle position
    /// receives from both sides).
    pub(crate) fn reads_slot(&self) -> Option<usize> {
        match self {
            Step::AwaitOutput { .. } | Step::Hold { .. } | Step::TakeBlock { .. } => None,
            _ => self.receives(),
        }
    }

    /// The neighbour and slot whose memory this step writes (`sends`, less a gather's pass
    /// and a sum added at delivery, which write the neighbour's output and only raise the
    /// slot's semaphore).
    pub(crate) fn writes_slot(&self) -> Option<(Side, usize)> {
        match self {
            Step::PassOutput { .. } | Step::ReduceInto { .. } => None,
            _ => self.sends(),
        }
    }

    /// The neighbour and slot this step writes into, if it sends.
    pub(crate) fn sends(&self) -> Option<(Side, usize)> {
        match *self {
            Step::SendBlock { to, slot, .. }
            | Step::PassSlot { to, slot, .. }
            | Step::PassOutput { to, slot, .. }
            | Step::ReduceInto { to, slot, .. } => Some((to, slot)),
            Step::Reduce { to, .. } => to,
            _ => None,
        }
    }
}

/// Every piece of chunk `c`, as steps made by `f(piece)`.
pub(crate) fn each_piece(s: &mut Vec<Step>, pieces: &[usize], c: usize, f: impl Fn(usize) -> Step) {
    s.extend((0..pieces[c]).map(f));
}

/// The position beside `pos` on a line of `n` (a ring wraps round).
pub(crate) fn neighbour_pos(topology: Topology, n: usize, pos: usize, side: Side) -> Option<usize> {
    match (topology, side) {
        (Topology::Ring, Side::Left) => Some((pos + n - 1) % n),
        (Topology::Ring, Side::Right) => Some((pos + 1) % n),
        (Topology::Linear, Side::Left) => pos.checked_sub(1),
        (Topology::Linear, Side::Right) => (pos + 1 < n).then_some(pos + 1),
    }
}
