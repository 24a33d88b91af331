//! Which TT-NN 0.81.1 device operation each ttmesh op is recorded as: the frame's name, the
//! program factories its `program_factory_index` counts through (the variant TT-NN selects
//! from, in TT-NN's order; `program_factory_type` is the chosen one's demangled type), whether
//! its mesh workload is one program over the mesh or one program per chip, and whether its
//! per-core L1 shows as circular buffers or as Metal 2.0 dataflow buffers.
//!
//! Where the names come from: `BinaryNgDeviceOperation` and its factory are read off TT-NN
//! 0.81.1's own capture of `ttnn.add` (tests/data/graph_add*.json). `AllGatherDeviceOperation`
//! with `program_cache_hit` / `program_factory_index` / `program_factory_type`, and matmul's
//! dataflow buffers, are what a 0.81.1 capture showed the author (issue 50). Every other
//! name and factory list is inferred from tt-metal's sources (the device operations'
//! `program_factory_t` variants), not from a capture.

use super::recorder::LaunchRec;

/// How a device operation's per-core L1 appears in a NO_DISPATCH graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProgramL1 {
    /// `circular_buffer_allocate` per buffer, on the op's whole worker grid.
    CircularBuffers,
    /// Metal 2.0: `dataflow_buffer_allocate` per buffer, on the cores the program runs on.
    DataflowBuffers,
    /// One circular buffer (the packet buffer) on the worker cores, per chip's program.
    OnePacketBuffer,
}

pub(crate) struct DeviceOp {
    pub name: &'static str,
    /// The type TT-NN's reflection prints for the operation's attributes (its first argument).
    pub attributes: &'static str,
    pub factories: &'static [&'static str],
    /// A collective's workload holds a different program for each chip, so each chip's program
    /// has its own program-scope nodes; otherwise one program spans the mesh.
    pub program_per_chip: bool,
    pub l1: ProgramL1,
}

const fn op(
    name: &'static str,
    attributes: &'static str,
    factories: &'static [&'static str],
) -> DeviceOp {
    DeviceOp {
        name,
        attributes,
        factories,
        program_per_chip: false,
        l1: ProgramL1::CircularBuffers,
    }
}

const ATTRS: &str = "operation_attributes_t";

// Captured: the one name and factory read off a 0.81.1 graph. Every other entry is inferred.
static BINARY_NG: DeviceOp = op(
    "BinaryNgDeviceOperation",
    ATTRS,
    &["ttnn::operations::binary_ng::BinaryNgDeviceOperation::ProgramFactory"],
);
static MATMUL: DeviceOp = DeviceOp {
    l1: ProgramL1::DataflowBuffers,
    ..op(
        "MatmulDeviceOperation",
        "MatmulParams",
        &[
            "ttnn::prim::MatmulMeshWorkloadMultiCoreFactory",
            "ttnn::prim::MatmulMeshWorkloadMultiCoreReuseOptimizedProgramFactory",
            "ttnn::prim::MatmulMeshWorkloadMultiCoreReuseMcast1DProgramFactory",
            "ttnn::prim::MatmulMeshWorkloadMultiCoreReuseMcast2DProgramFactory",
            "ttnn::prim::MatmulMultiCoreReuseMultiCastDRAMShardedProgramFactory",
        ],
    )
};
static UNARY: DeviceOp = op(
    "UnaryDeviceOperation",
    ATTRS,
    &["ttnn::operations::unary::UnaryDeviceOperation::ProgramFactory"],
);
static SOFTMAX: DeviceOp = op(
    "SoftmaxDeviceOperation",
    "SoftmaxParams",
    &[
        "ttnn::prim::SoftmaxDeviceOperation::SoftmaxProgramFactoryGeneralWSmall",
        "ttnn::prim::SoftmaxDeviceOperation::SoftmaxProgramFactoryGeneralWLarge",
        "ttnn::prim::SoftmaxDeviceOperation::SoftmaxProgramFactoryGeneralHSmall",
        "ttnn::prim::SoftmaxDeviceOperation::SoftmaxProgramFactoryGeneralHLarge",
        "ttnn::prim::SoftmaxDeviceOperation::SoftmaxProgramFactoryGeneralCLarge",
        "ttnn::prim::SoftmaxDeviceOperation::SoftmaxShardedProgramFactoryAttentionOptimized",
        "ttnn::prim::SoftmaxDeviceOperation::SoftmaxProgramFactoryAttentionOptimized",
    ],
);
static LAYER_NORM: DeviceOp = op(
    "LayerNormDeviceOperation",
    "LayerNormParams",
    &[
        "ttnn::prim::LayerNormMultiCoreProgramFactory",
        "ttnn::prim::LayerNormShardedProgramFactory",
    ],
);
static TYPECAST: DeviceOp = op(
    "TypecastDeviceOperation",
    "TypecastParams",
    &[
        "ttnn::prim::TypecastProgramFactory",
        "ttnn::prim::TypecastShardedProgramFactory",
        "ttnn::prim::TypecastSubgridProgramFactory",
    ],
);
static COPY: DeviceOp = op(
    "CopyDeviceOperation",
    "CopyParams",
    &["ttnn::prim::CopyProgramFactory"],
);
static INTERLEAVED_TO_SHARDED: DeviceOp = op(
    "InterleavedToShardedDeviceOperation",
    "InterleavedToShardedParams",
    &["ttnn::prim::InterleavedToShardedProgramFactory"],
);
static SHARDED_TO_INTERLEAVED: DeviceOp = op(
    "ShardedToInterleavedDeviceOperation",
    "ShardedToInterleavedParams",
    &["ttnn::prim::ShardedToInterleavedProgramFactory"],
);
static RESHARD: DeviceOp = op(
    "ReshardDeviceOperation",
    "ReshardParams",
    &[
        "ttnn::prim::ReshardSameWidthFactory",
        "ttnn::prim::ReshardSameHeightFactory",
        "ttnn::prim::ReshardGenericFactory",
    ],
);
static TILIZE: DeviceOp = op(
    "TilizeDeviceOperation",
    "TilizeParams",
    &["ttnn::prim::TilizeMultiCoreInterleavedProgramFactory"],
);
static UNTILIZE: DeviceOp = op(
    "UntilizeDeviceOperation",
    "UntilizeParams",
    &["ttnn::prim::UntilizeMultiCoreProgramFactory"],
);
static RESHAPE: DeviceOp = op(
    "ReshapeDeviceOperation",
    "ReshapeParams",
    &["ttnn::prim::ReshapeTileProgramFactory"],
);
static SLICE: DeviceOp = op(
    "SliceDeviceOperation",
    "SliceParams",
    &[
        "ttnn::prim::SliceRmProgramFactory",
        "ttnn::prim::SliceRmShardedProgramFactory",
        "ttnn::prim::SliceRmStrideProgramFactory",
        "ttnn::prim::SliceTileProgramFactory",
    ],
);
static CONCAT: DeviceOp = op(
    "ConcatDeviceOperation",
    "ConcatParams",
    &[
        "ttnn::prim::ConcatProgramFactory",
        "ttnn::prim::ConcatS2STiledProgramFactory",
        "ttnn::prim::ConcatS2SRMProgramFactory",
        "ttnn::prim::ConcatS2SMultiProgramFactory",
        "ttnn::prim::ConcatS2IProgramFactory",
    ],
);
static PERMUTE: DeviceOp = op(
    "PermuteDeviceOperation",
    "PermuteParams",
    &[
        "ttnn::prim::PermuteDeviceOperation::MultiCoreRowInvariant",
        "ttnn::prim::PermuteDeviceOperation::MultiCoreBlockedGeneric",
        "ttnn::prim::PermuteDeviceOperation::MultiCoreTileInvariant",
        "ttnn::prim::PermuteDeviceOperation::MultiCoreTiledGeneric",
    ],
);
static TRANSPOSE: DeviceOp = op(
    "TransposeDeviceOperation",
    "TransposeParams",
    &[
        "ttnn::prim::TransposeWHProgramFactory",
        "ttnn::prim::TransposeHCProgramFactory",
        "ttnn::prim::TransposeCNProgramFactory",
    ],
);
static EMBEDDINGS: DeviceOp = op(
    "EmbeddingsDeviceOperation",
    "EmbeddingParams",
    &["ttnn::prim::EmbeddingsRMProgramFactory"],
);
static ROTARY_EMBEDDING_LLAMA: DeviceOp = op(
    "RotaryEmbeddingLlamaDeviceOperation",
    "RotaryEmbeddingLlamaParams",
    &[
        "ttnn::prim::RotaryEmbeddingLlamaMultiCore",
        "ttnn::prim::RotaryEmbeddingLlamaMultiCoreSharded",
    ],
);
static PAGED_UPDATE_CACHE: DeviceOp = op(
    "PagedUpdateCacheDeviceOperation",
    "PagedUpdateCacheParams",
    &["ttnn::prim::PagedUpdateCacheProgramFactory"],
);
static SDPA_DECODE: DeviceOp = op(
    "SdpaDecodeDeviceOperation",
    ATTRS,
    &["ttnn::operations::transformer::sdpa_decode::program::SdpaDecodeProgramFactory"],
);
static ARGMAX: DeviceOp = op(
    "ArgMaxDeviceOperation",
    "ArgMaxParams",
    &[
        "ttnn::prim::ArgMaxSingleCoreProgramFactory",
        "ttnn::prim::ArgMaxMultiCoreProgramFactory",
    ],
);
static ALL_GATHER: DeviceOp = DeviceOp {
    program_per_chip: true,
    l1: ProgramL1::OnePacketBuffer,
    ..op(
        "AllGatherDeviceOperation",
        "AllGatherParams",
        &[
            "ttnn::operations::ccl::AllGatherMulticastFactory",
            "ttnn::operations::ccl::AllGatherUnicastFactory",
        ],
    )
};
static REDUCE_SCATTER: DeviceOp = DeviceOp {
    program_per_chip: true,
    l1: ProgramL1::OnePacketBuffer,
    ..op(
        "ReduceScatterDeviceOperation",
        ATTRS,
        &["ttnn::operations::ccl::ReduceScatterDeviceOperation::ReduceScatterProgram"],
    )
};
// TT-NN 0.81.1 composes all_reduce from a reduce_scatter and an all_gather; ttmesh runs it as
// one fused program per chip, recorded as one frame of that program.
static ALL_REDUCE: DeviceOp = DeviceOp {
    program_per_chip: true,
    l1: ProgramL1::OnePacketBuffer,
    ..op(
        "AllReduceAsyncDeviceOperation",
        ATTRS,
        &["ttnn::operations::experimental::ccl::AllReduceAsyncDeviceOperation::AllReduceAsyncProgram"],
    )
};

/// The device operation a chip op (its launch name, or the name a mesh op frames itself with)
/// is recorded as; `None` for a name no op of ours has.
pub(crate) fn device_op(name: &str) -> Option<&'static DeviceOp> {
    Some(match name {
        "BinaryNg" => &BINARY_NG,
        "Matmul" => &MATMUL,
        "Unary" => &UNARY,
        "Softmax" => &SOFTMAX,
        "RMSNorm" => &LAYER_NORM,
        "Typecast" => &TYPECAST,
        "Copy" => &COPY,
        "InterleavedToSharded" => &INTERLEAVED_TO_SHARDED,
        "Reshard" => &RESHARD,
        "Tilize" => &TILIZE,
        "Untilize" => &UNTILIZE,
        "Reshape" => &RESHAPE,
        "Slice" => &SLICE,
        "Concat" => &CONCAT,
        "Permute" => &PERMUTE,
        "Transpose" => &TRANSPOSE,
        "Embeddings" => &EMBEDDINGS,
        "RotaryEmbeddingLlama" => &ROTARY_EMBEDDING_LLAMA,
        "PagedUpdateCache" => &PAGED_UPDATE_CACHE,
        "ScaledDotProductAttentionDecode" => &SDPA_DECODE,
        "ArgMax" => &ARGMAX,
        "all_gather" | "ttnn::all_gather" => &ALL_GATHER,
        "reduce_scatter" | "ttnn::reduce_scatter" => &REDUCE_SCATTER,
        "all_reduce" | "ttnn::all_reduce" => &ALL_REDUCE,
        _ => return None,
    })
}

/// The device operation a launch is recorded as. A move between memory configs is one chip op
/// of ours; TT-NN's `to_memory_config` picks its device operation by the layouts on each side.
pub(crate) fn device_op_of(l: &LaunchRec) -> Option<&'static DeviceOp> {
    if l.name == "InterleavedToSharded" {
        let from = l.sharded.first().copied().unwrap_or(false);
        let to = l.sharded.last().copied().unwrap_or(false);
        return Some(match (from, to) {
            (false, true) => &INTERLEAVED_TO_SHARDED,
            (true, false) => &SHARDED_TO_INTERLEAVED,
            (true, true) => &RESHARD,
            (false, false) => &COPY,
        });
    }
    device_op(l.name)
}

/// The factory TT-NN would select for this launch (an index into `DeviceOp::factories`),
/// decided by the same facts TT-NN's `select_program_factory` reads where ttmesh knows them:
/// sharded operands pick the sharded factory; a matmul picks 2D multicast when its output spans
/// several tiles both ways, 1D multicast when one way, the plain multi-core factory for one
/// tile. Inferred from tt-metal's selection code, not from a capture.
pub(crate) fn factory_index(op: &DeviceOp, l: &LaunchRec) -> usize {
    let sharded_input = l.sharded.first().copied().unwrap_or(false);
    let index = match op.name {
        "MatmulDeviceOperation" => {
            let tiles = |shape: Option<&Vec<usize>>, from_end: usize| {
                shape
                    .and_then(|s| s.len().checked_sub(from_end).map(|i| s[i]))
                    .map_or(1, |d| d.div_ceil(32))
            };
            let m = tiles(l.shapes.first(), 2);
            let n = tiles(l.shapes.get(1), 1);
            match (m > 1, n > 1) {
                (true, true) => 3,
                (false, false) => 0,
                _ => 2,
            }
        }
        "SoftmaxDeviceOperation" if sharded_input => 5,
        "SoftmaxDeviceOperation" => 6,
        "LayerNormDeviceOperation" | "TypecastDeviceOperation" if sharded_input => 1,
        "SliceDeviceOperation" if !l.row_major => 3,
        "ArgMaxDeviceOperation" => 1,
        _ => 0,
    };
    index.min(op.factories.len().saturating_sub(1))
}
