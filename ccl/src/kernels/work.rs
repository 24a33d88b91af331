//! One chip's data while its steps run (`Work`: chunk and block lengths, piece sizes, the
//! fused reduction's input and output, and the buffers the steps fill) and how a chunk or
//! block is cut into pieces.

use ttmesh_chip::tensor::DataType;

use super::chip_io::{BankRun, FusedIo, InputRun};

/// Range `[start, end)` of piece `q` of something `len` long cut in pieces of `size`.
pub(crate) fn piece_range(len: usize, size: usize, q: usize) -> (usize, usize) {
    let start = q.saturating_mul(size).min(len);
    (start, start.saturating_add(size).min(len))
}

/// How many pieces of `size` something `len` long has (none when it is empty).
pub(crate) fn piece_count(len: usize, size: usize) -> usize {
    len.div_ceil(size.max(1))
}

/// One chip's data while its steps run. Buffers only grow, and are reused across launches.
#[derive(Default)]
pub(crate) struct Work {
    pub chunk_lens: Vec<usize>,
    pub block_lens: Vec<usize>,
    pub out_dtype: Option<DataType>,
    /// Piece sizes: elements of a chunk, bytes of a block (`usize::MAX`: one piece).
    pub chunk_piece: usize,
    pub block_piece: usize,
    /// Set by the fused all_reduce (the `Reduce` steps need it).
    pub fused: Option<FusedIo>,
    pub bufs: Buffers,
}

/// Where a piece of a reduction lies: elements `a..e` of its chunk, bytes `ba..be` of the
/// block of the same index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub a: usize,
    pub e: usize,
    pub ba: usize,
    pub be: usize,
}

/// The buffers a chip's steps fill, apart from the fused input and output they read
/// (`Work::fused_parts` lends both at once).
#[derive(Default)]
pub(crate) struct Buffers {
    pub chunks: Vec<Vec<f32>>,
    pub blocks: Vec<Vec<u8>>,
    pub recv: Vec<f32>,
    /// A bf16 piece of partial sums on its way (see `FusedIo::partials_bf16`); for a
    /// chunk's last add, the input page it copies into L1 (`input_plus_slot_to_output`).
    pub partials16: Vec<u16>,
    /// A block of a received slot's bf16 partial sums, copied out to be added to the input
    /// (`SLOT_BLOCK` elements: it stays in the host's L1 cache).
    pub slot_block: Vec<u16>,
    /// Bytes on their way from this chip's memory to a neighbour's (`PassOutput`), and where.
    pub staged: Vec<u8>,
    pub runs: Vec<BankRun>,
    /// A run of the neighbour's input pages and of this chip's sums beside them, in L1, for a
    /// sum added at delivery (`ReduceInto`).
    pub into_input: Vec<u16>,
    pub into_sums: Vec<u16>,
    /// The input runs under such a message (every chip's input sits at one address): the
    /// owner's read in place beside its output, and this chip's at a line's end.
    pub into_runs: Vec<InputRun>,
}

impl Work {
    /// Elements `a..e` of chunk `chunk` that piece `piece` covers.
    pub(super) fn chunk_piece(&self, chunk: usize, piece: usize) -> (usize, usize) {
        piece_range(self.chunk_lens[chunk], self.chunk_piece, piece)
    }

    /// Bytes `a..e` of block `block` that piece `piece` covers (the same piece of the chunk
    /// of the same index, in the output's format).
    pub(super) fn block_piece(&self, block: usize, piece: usize) -> (usize, usize) {
        piece_range(self.block_lens[block], self.block_piece, piece)
    }

    /// Where piece `piece` of chunk `chunk` lies: its elements in the chunk and its bytes in
    /// block `chunk` (a reduction's steps work on both).
    pub(super) fn span(&self, chunk: usize, piece: usize) -> Span {
        let (a, e) = self.chunk_piece(chunk, piece);
        let (ba, be) = self.block_piece(chunk, piece);
        Span { a, e, ba, be }
    }

    /// The fused reduction's input and output beside the buffers the steps fill, borrowed
    /// apart (a step reads the one while it writes the others).
    pub(crate) fn fused_parts(&mut self) -> (&FusedIo, &mut Buffers) {
        (self.fused.as_ref().expect(FUSED), &mut self.bufs)
    }

    /// Room for `n` chunks and blocks of the given lengths (elements / bytes). With `keep`,
    /// only that chunk and that block are held in the work: the fused all_reduce streams the
    /// others, and the gathers leave received blocks in chip memory (the slots or the
    /// output), so a buffer for each would only cost host memory (n times the output on every
    /// chip).
    pub(crate) fn shape(
        &mut self,
        chunk_lens: &[usize],
        block_lens: &[usize],
        keep: Option<usize>,
    ) {
        let n = chunk_lens.len().max(block_lens.len());
        if self.bufs.chunks.len() < n {
            self.bufs.chunks.resize_with(n, Vec::new);
        }
        if self.bufs.blocks.len() < n {
            self.bufs.blocks.resize_with(n, Vec::new);
        }
        for (j, (c, &l)) in self.bufs.chunks.iter_mut().zip(chunk_lens).enumerate() {
            if keep.is_none_or(|k| k == j) {
                sized(c, l);
            }
        }
        for (j, (b, &l)) in self.bufs.blocks.iter_mut().zip(block_lens).enumerate() {
            if keep.is_none_or(|k| k == j) {
                sized(b, l);
            }
        }
        self.chunk_lens.clear();
        self.chunk_lens.extend_from_slice(chunk_lens);
        self.block_lens.clear();
        self.block_lens.extend_from_slice(block_lens);
        self.chunk_piece = usize::MAX;
        self.block_piece = usize::MAX;
        self.fused = None;
    }

    /// True if the work holds no buffers (its part travelled to the line's runner).
    pub(crate) fn is_empty(&self) -> bool {
        self.bufs.chunks.is_empty() && self.bufs.blocks.is_empty()
    }

    /// This chip's own block, the only one the work holds (see `shape`).
    pub(crate) fn block(&self, j: usize) -> &[u8] {
        &self.bufs.blocks[j][..self.block_lens[j]]
    }
}

pub(crate) fn sized<T: Copy + Default>(v: &mut Vec<T>, len: usize) -> &mut [T] {
    if v.len() < len {
        v.resize(len, T::default());
    }
    &mut v[..len]
}

const FUSED: &str = "a fused reduction sets where its input and output are";
