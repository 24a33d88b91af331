//! The llama decode step on a mesh device, the way a TT-NN model runs it: weights and KV cache
//! in device DRAM, static shapes, every op a device kernel, token ids and positions in
//! persistent device tensors that the kernels read when they run, so one captured trace serves
//! every step. Traced mode captures the step once and replays it per token; untraced mode
//! enqueues the same ops one by one.
//!
//! On more than one chip the model is split for tensor parallelism as [`TensorParallel`] plans
//! it (heads and FFN columns sharded, two all_reduces per block, the LM head's logits
//! all-gathered); on one chip (an n150) everything is whole.

use std::borrow::Cow;

use ttmesh::ccl::{self, CclArgs};
use ttmesh::ops::{self, MeshMatmulConfig, MeshOpOptions};
use ttmesh::{
    Activation, CqId, DataType, HostTensor, LabelledMemory, Layout, MemoryConfig, MemoryRole,
    MeshDevice, MeshError, MeshMapper, MeshTensor, MeshTraceId, ReplicateTensorToMesh,
    ShardTensor2dMesh, ShardTensorToMesh, TensorSpec,
};

use ttmesh_chip::tensor::HostData;

use crate::config::LlamaConfig;
use crate::error::{ModelError, Result};
use crate::parallel::{LmHead, TensorParallel};
use crate::reference::greedy_decode;
use crate::rope::rope_tables;
use crate::weights::LlamaWeights;

/// Users decoded together: one per row of a tile, as TT-NN decodes.
pub const MAX_BATCH: usize = 32;
const CQ: CqId = CqId(0);

/// The decode loop's static shapes and number format.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceDecodeConfig {
    pub batch: usize,
    /// KV cache length: the longest prompt plus generated tokens.
    pub max_positions: usize,
    /// FLOAT32 or BFLOAT16: everything on the device. BFLOAT8_B: the projection weights and
    /// the LM head; the rest in BFLOAT16 (see [`DeviceDecodeConfig::activation_dtype`]).
    /// BFLOAT4_B: tt-metal's "performance" LLM configuration, the MLP weights in BFLOAT4_B,
    /// attention weights and the LM head in BFLOAT8_B, the rest in BFLOAT16.
    pub dtype: DataType,
}

impl DeviceDecodeConfig {
    /// The attention projections' and the LM head's format: `dtype` (BFLOAT8_B for
    /// BFLOAT4_B, whose precision tt-metal keeps for the MLP only).
    pub fn matrix_dtype(&self) -> DataType {
        match self.dtype {
            DataType::BFloat4B => DataType::BFloat8B,
            d => d,
        }
    }

    /// The MLP weights' format (gate, up, down): `dtype`.
    pub fn mlp_dtype(&self) -> DataType {
        self.dtype
    }

    /// The format of everything else: the embedding table, norms, RoPE tables, KV cache and
    /// so the activations (each op's output takes its first operand's format). `dtype`, but
    /// BFLOAT16 for BFLOAT8_B: a block-float tensor cannot be reshaped or split into heads
    /// without re-quantizing its blocks (TT-NN refuses; the chip does too), and TT-NN models
    /// run bfp8 weights with bf16 activations.
    pub fn activation_dtype(&self) -> DataType {
        match self.dtype {
            d if d.is_block_float() => DataType::BFloat16,
            d => d,
        }
    }
}

struct DeviceBlock {
    attn_norm: MeshTensor,
    /// Projections transposed to `[in, out]` (the matmul's second operand), each chip's slice:
    /// wq/wk/wv/w_gate/w_up by output columns, wo/w_down by input rows.
    wq: MeshTensor,
    wk: MeshTensor,
    wv: MeshTensor,
    wo: MeshTensor,
    ffn_norm: MeshTensor,
    w_gate: MeshTensor,
    w_up: MeshTensor,
    w_down: MeshTensor,
    /// `[B, local kv heads, max_positions, head_dim]`: each chip caches its own KV heads.
    k_cache: MeshTensor,
    v_cache: MeshTensor,
}

/// A captured decode step: its trace and the argmax output the replays write.
struct CapturedStep {
    id: MeshTraceId,
    next_ids: MeshTensor,
}

/// A llama model resident on a mesh, ready to decode.
pub struct DeviceLlama {
    mesh: MeshDevice,
    config: LlamaConfig,
    decode: DeviceDecodeConfig,
    parallel: TensorParallel,
    /// Host time of the last step until everything was enqueued (not waiting for the result).
    last_host_dispatch: std::time::Duration,
    /// `[vocab, hidden]`, rows for the embedding op.
    embedding: MeshTensor,
    /// `[hidden, vocab]` (or its vocabulary slice): the LM head (the embedding transposed
    /// when tied).
    lm_head: MeshTensor,
    output_norm: MeshTensor,
    blocks: Vec<DeviceBlock>,
    cos: MeshTensor,
    sin: MeshTensor,
    /// Persistent inputs, `[1, 1, 1, B]` UINT32, written before every step.
    ids: MeshTensor,
    positions: MeshTensor,
    captured: Option<CapturedStep>,
    /// Labels the weights and KV cache for `ttmesh monitor` while the model is placed.
    memory_labels: [LabelledMemory; 2],
}

fn device(context: impl Into<String>) -> impl FnOnce(MeshError) -> ModelError {
    let context = context.into();
    move |source| ModelError::Device {
        context,
        source: Box::new(source),
    }
}

fn host_tensor(name: &str) -> impl FnOnce(ttmesh_chip::ChipError) -> ModelError + '_ {
    move |source| ModelError::HostTensor {
        name: name.to_string(),
        source: Box::new(source),
    }
}

/// `[rows][cols]` row-major to `[cols][rows]`, in 32x32 blocks so reads and writes both stay
/// in cache (a weight is tens of MB; element by element, every write misses).
fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const BLOCK: usize = 32;
    let mut out = vec![0f32; w.len()];
    for r0 in (0..rows).step_by(BLOCK) {
        for c0 in (0..cols).step_by(BLOCK) {
            for r in r0..(r0 + BLOCK).min(rows) {
                for c in c0..(c0 + BLOCK).min(cols) {
                    out[c * rows + r] = w[r * cols + c];
                }
            }
        }
    }
    out
}

/// `w` (row-major `[rows][cols]`) with zero rows appended up to `len` values: the FFN's
/// padding outputs of the gate and up projections. Borrowed when nothing is added.
fn zero_rows_to(w: &[f32], len: usize) -> Cow<'_, [f32]> {
    if w.len() >= len {
        return Cow::Borrowed(w);
    }
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(w);
    v.resize(len, 0.0);
    Cow::Owned(v)
}

/// `w` (row-major `[rows][cols]`) with every row widened to `to` columns by zeros: the down
/// projection's inputs from the FFN's padding. Borrowed when nothing is added.
fn zero_cols_to(w: &[f32], rows: usize, cols: usize, to: usize) -> Cow<'_, [f32]> {
    if to <= cols {
        return Cow::Borrowed(w);
    }
    let mut v = vec![0f32; rows * to];
    for (out, row) in v.chunks_exact_mut(to).zip(w.chunks_exact(cols)) {
        out[..cols].copy_from_slice(row);
    }
    Cow::Owned(v)
}

/// How a weight is laid over the mesh.
#[derive(Clone, Copy)]
enum Placement {
    Replicated,
    /// Split along this dim over each tensor-parallel group.
    Sharded(usize),
}

/// The spec each chip holds of a `shape` tensor laid out as `placement` over groups of
/// `degree` chips: what `from_host` through the placement's mapper would allocate.
fn per_chip_spec(
    name: &str,
    mut shape: Vec<usize>,
    placement: Placement,
    degree: usize,
    dtype: DataType,
) -> Result<TensorSpec> {
    if let (Placement::Sharded(d), true) = (placement, degree > 1) {
        if !shape[d].is_multiple_of(degree) {
            return Err(device(format!("placing {name}"))(MeshError::Invalid {
                op: "ShardTensorToMesh".into(),
                detail: format!(
                    "dim {d} of {shape:?} ({}) does not split evenly over {degree} chips",
                    shape[d]
                ),
            }));
        }
        shape[d] /= degree;
    }
    Ok(TensorSpec::new(
        shape,
        dtype,
        Layout::Tile,
        MemoryConfig::DRAM,
    ))
}

/// Where placement takes the tensors' values from.
#[derive(Clone, Copy)]
pub enum WeightSource<'a> {
    /// The weights' values, written to the device.
    Values(&'a LlamaWeights),
    /// Only the shapes of a config: every tensor is allocated with the spec it would have,
    /// nothing is written and no tensor data exists on the host. For sizing a model under a
    /// NO_DISPATCH graph capture (`ttmesh::graph::plan`), with or without a weights file.
    ShapesOnly(&'a LlamaConfig),
}

impl WeightSource<'_> {
    pub fn config(&self) -> &LlamaConfig {
        match self {
            WeightSource::Values(w) => &w.config,
            WeightSource::ShapesOnly(c) => c,
        }
    }
}

/// Picks one weight's values out of a model (only called with [`WeightSource::Values`]).
type Values<'f> = &'f dyn Fn(&LlamaWeights) -> Vec<f32>;

impl DeviceLlama {
    /// Plans the split over the mesh ([`TensorParallel::plan`]), then places the weights (each
    /// chip its slice), an empty KV cache per chip, the RoPE tables and the persistent inputs
    /// in the mesh's DRAM. `progress` hears the name of each tensor as it is placed.
    pub fn new(
        mesh: &MeshDevice,
        weights: &LlamaWeights,
        decode: DeviceDecodeConfig,
    ) -> Result<Self> {
        Self::with_progress(mesh, weights, decode, &mut |_, _| {})
    }

    /// [`DeviceLlama::new`], calling `progress(done, total)` after each block is placed (a
    /// large model takes seconds per chip to encode and place).
    pub fn with_progress(
        mesh: &MeshDevice,
        weights: &LlamaWeights,
        decode: DeviceDecodeConfig,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        Self::place(mesh, WeightSource::Values(weights), decode, progress)
    }

    /// The model of `config` placed by shape alone ([`WeightSource::ShapesOnly`]): the same
    /// buffers as [`DeviceLlama::new`] allocates, with nothing written. Decoding with it gives
    /// meaningless tokens; it exists to be sized under a NO_DISPATCH capture.
    pub fn from_shapes(
        mesh: &MeshDevice,
        config: &LlamaConfig,
        decode: DeviceDecodeConfig,
    ) -> Result<Self> {
        Self::place(
            mesh,
            WeightSource::ShapesOnly(config),
            decode,
            &mut |_, _| {},
        )
    }

    /// Checks the decode config, plans the split and places every tensor from `source`.
    pub fn place(
        mesh: &MeshDevice,
        source: WeightSource<'_>,
        decode: DeviceDecodeConfig,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let c = source.config().clone();
        if decode.batch == 0 || decode.batch > MAX_BATCH {
            return Err(ModelError::BatchTooLarge {
                batch: decode.batch,
                max: MAX_BATCH,
            });
        }
        if decode.max_positions == 0 || decode.max_positions > c.context_length {
            return Err(ModelError::BeyondContext {
                positions: decode.max_positions,
                context_length: c.context_length,
            });
        }
        let shape = mesh.shape();
        let parallel = TensorParallel::plan_for(&c, shape.rows, shape.cols, mesh.fabric_config())?;
        // Heads padded and replicated so they divide over the group (identity on one chip),
        // block by block as each attention weight is placed (`HeadLayout::query_rows`, ...):
        // a laid out copy of the whole model was the largest of placement's host copies.
        let w = match source {
            WeightSource::Values(weights) => Some(weights),
            WeightSource::ShapesOnly(_) => None,
        };
        let heads = &parallel.heads;
        let mapper = |placement: Placement| -> Box<dyn MeshMapper> {
            match (placement, parallel.degree, parallel.cluster_axis) {
                (Placement::Replicated, ..) | (_, 1, _) => Box::new(ReplicateTensorToMesh),
                (Placement::Sharded(d), _, None) => Box::new(ShardTensorToMesh(d)),
                (Placement::Sharded(d), _, Some(1)) => Box::new(ShardTensor2dMesh([None, Some(d)])),
                (Placement::Sharded(d), _, Some(_)) => Box::new(ShardTensor2dMesh([Some(d), None])),
            }
        };
        let place = |name: &str, shape: Vec<usize>, placement, dtype, values: Values<'_>| {
            let placed = match w {
                Some(w) => {
                    let host =
                        HostTensor::from_f32(shape, dtype, values(w)).map_err(host_tensor(name))?;
                    MeshTensor::from_host(
                        &host,
                        mesh,
                        mapper(placement).as_ref(),
                        Layout::Tile,
                        MemoryConfig::DRAM,
                        CQ,
                    )
                }
                None => {
                    let spec = per_chip_spec(name, shape, placement, parallel.degree, dtype)?;
                    MeshTensor::allocate(mesh, &spec)
                }
            };
            placed.map_err(|e| match e {
                MeshError::Chip {
                    source: ttmesh_chip::ChipError::OutOfMemory { .. },
                    ..
                } => ModelError::DoesNotFit {
                    tensor: name.to_string(),
                    source: Box::new(e),
                },
                e => device(format!("placing {name}"))(e),
            })
        };
        // The FFN as placed: the model's, or padded to whole tiles per chip (zeros).
        let (h, f, hd) = (c.hidden_size, parallel.ffn_size, c.head_dim);
        let (q_dim, kv_dim) = (
            parallel.heads.padded_head_count() * hd,
            parallel.heads.padded_kv_head_count() * hd,
        );
        let (matrix, mlp, other) = (
            decode.matrix_dtype(),
            decode.mlp_dtype(),
            decode.activation_dtype(),
        );
        // `[out, in]` weights go to the device as `[in, out]`: a column-parallel one is split
        // by output columns (dim 1), a row-parallel one by input rows (dim 0).
        let weight = |name: &str,
                      w: &dyn Fn(&LlamaWeights) -> Cow<[f32]>,
                      (out, inp): (usize, usize),
                      split: usize,
                      dtype: DataType| {
            place(
                name,
                vec![inp, out],
                Placement::Sharded(split),
                dtype,
                &|m| transpose(&w(m), out, inp),
            )
        };
        let column = |name: &str, w: &dyn Fn(&LlamaWeights) -> Cow<[f32]>, out, inp| {
            weight(name, w, (out, inp), 1, matrix)
        };
        let row = |name: &str, w: &dyn Fn(&LlamaWeights) -> Cow<[f32]>, out, inp| {
            weight(name, w, (out, inp), 0, matrix)
        };
        let vector = |name: &str, v: &dyn Fn(&LlamaWeights) -> &[f32]| {
            place(name, vec![1, h], Placement::Replicated, other, &|m| {
                v(m).to_vec()
            })
        };
        let local_kv = parallel.local_kv_heads();
        let cache = |name: &str| {
            let shape = vec![decode.batch, local_kv, decode.max_positions, hd];
            let len = shape.iter().product();
            place(name, shape, Placement::Replicated, other, &|_| {
                vec![0.0; len]
            })
        };
        let mut blocks = Vec::with_capacity(c.block_count);
        for i in 0..c.block_count {
            let n = |t: &str| format!("blk.{i}.{t}");
            blocks.push(DeviceBlock {
                attn_norm: vector(&n("attn_norm"), &|m| &m.blocks[i].attn_norm)?,
                wq: column(
                    &n("attn_q"),
                    &|m| heads.query_rows(&m.blocks[i].wq, hd, h),
                    q_dim,
                    h,
                )?,
                wk: column(
                    &n("attn_k"),
                    &|m| heads.kv_rows(&m.blocks[i].wk, hd, h),
                    kv_dim,
                    h,
                )?,
                wv: column(
                    &n("attn_v"),
                    &|m| heads.kv_rows(&m.blocks[i].wv, hd, h),
                    kv_dim,
                    h,
                )?,
                wo: row(
                    &n("attn_output"),
                    &|m| heads.output_cols(&m.blocks[i].wo, hd, h),
                    h,
                    q_dim,
                )?,
                ffn_norm: vector(&n("ffn_norm"), &|m| &m.blocks[i].ffn_norm)?,
                w_gate: weight(
                    &n("ffn_gate"),
                    &|m| zero_rows_to(&m.blocks[i].w_gate, f * h),
                    (f, h),
                    1,
                    mlp,
                )?,
                w_up: weight(
                    &n("ffn_up"),
                    &|m| zero_rows_to(&m.blocks[i].w_up, f * h),
                    (f, h),
                    1,
                    mlp,
                )?,
                w_down: weight(
                    &n("ffn_down"),
                    &|m| zero_cols_to(&m.blocks[i].w_down, h, c.ffn_size, f),
                    (h, f),
                    0,
                    mlp,
                )?,
                k_cache: cache(&n("k_cache"))?,
                v_cache: cache(&n("v_cache"))?,
            });
            progress(i + 1, c.block_count);
        }
        let lm_head_placement = match parallel.lm_head {
            LmHead::Sharded => Placement::Sharded(1),
            LmHead::Replicated => Placement::Replicated,
        };
        let per_user = |name: &str| -> Result<MeshTensor> {
            let host = HostTensor::from_u32(vec![1, 1, 1, decode.batch], vec![0; decode.batch])
                .map_err(host_tensor(name))?;
            MeshTensor::from_host(
                &host,
                mesh,
                &ReplicateTensorToMesh,
                Layout::RowMajor,
                MemoryConfig::DRAM,
                CQ,
            )
            .map_err(device(format!("placing {name}")))
        };
        let table = |name: &str, cos: bool| {
            place(
                name,
                vec![1, 1, decode.max_positions, hd],
                Placement::Replicated,
                other,
                &|_| {
                    let (c, s) = rope_tables(decode.max_positions, hd, c.rope_base);
                    if cos {
                        c
                    } else {
                        s
                    }
                },
            )
        };
        let mut model = Self {
            mesh: mesh.clone(),
            embedding: place(
                "token_embd",
                vec![c.vocab_size, h],
                Placement::Replicated,
                other,
                &|m| m.token_embedding.clone(),
            )?,
            lm_head: place(
                "lm_head",
                vec![h, c.vocab_size],
                lm_head_placement,
                matrix,
                &|m| transpose(m.lm_head(), c.vocab_size, h),
            )?,
            output_norm: vector("output_norm", &|m| &m.output_norm)?,
            blocks,
            cos: table("rope_cos", true)?,
            sin: table("rope_sin", false)?,
            ids: per_user("token_ids")?,
            positions: per_user("positions")?,
            captured: None,
            config: c,
            decode,
            parallel,
            last_host_dispatch: std::time::Duration::ZERO,
            memory_labels: [
                mesh.label_memory(MemoryRole::Weights, 0),
                mesh.label_memory(MemoryRole::KvCache, 0),
            ],
        };
        // The figures the decode report gives, shown per chip by `ttmesh monitor`.
        let (weights, kv_cache) = model.dram_bytes_per_chip();
        model.memory_labels = [
            mesh.label_memory(MemoryRole::Weights, weights),
            mesh.label_memory(MemoryRole::KvCache, kv_cache),
        ];
        Ok(model)
    }

    /// Host time the last [`DeviceLlama::decode_step`] spent writing its inputs and enqueueing
    /// its work (the ops one by one, or one `execute_trace`), before waiting for the result:
    /// what trace removes.
    pub fn last_host_dispatch(&self) -> std::time::Duration {
        self.last_host_dispatch
    }

    /// Collectives one decode step runs: (all_reduces, all_gathers).
    pub fn collectives_per_step(&self) -> (usize, usize) {
        if self.parallel.degree == 1 {
            return (0, 0);
        }
        let gathers = usize::from(self.parallel.lm_head == LmHead::Sharded);
        (2 * self.blocks.len(), gathers)
    }

    /// DRAM bytes each chip holds for (weights, KV cache): what the monitor's DRAM figure is
    /// made of, besides the RoPE tables, the inputs and the step's activations.
    pub fn dram_bytes_per_chip(&self) -> (u64, u64) {
        let size = |t: &MeshTensor| t.spec().buffer_size();
        let mut weights = size(&self.embedding) + size(&self.lm_head) + size(&self.output_norm);
        let mut cache = 0;
        for b in &self.blocks {
            weights += [
                &b.attn_norm,
                &b.wq,
                &b.wk,
                &b.wv,
                &b.wo,
                &b.ffn_norm,
                &b.w_gate,
                &b.w_up,
                &b.w_down,
            ]
            .into_iter()
            .map(size)
            .sum::<u64>();
            cache += size(&b.k_cache) + size(&b.v_cache);
        }
        (weights, cache)
    }

    /// DRAM bytes each chip needs for (weights, KV cache) of `config` on a `rows x cols` mesh
    /// with `fabric`, from the tensor specs alone (no device, no values): what
    /// [`DeviceLlama::dram_bytes_per_chip`] reports once placed. Says by how much a model
    /// that cannot be placed misses.
    pub fn dram_bytes_needed(
        config: &LlamaConfig,
        decode: DeviceDecodeConfig,
        rows: usize,
        cols: usize,
        fabric: ttmesh::FabricConfig,
    ) -> Result<(u64, u64)> {
        let p = TensorParallel::plan_for(config, rows, cols, fabric)?;
        let (h, f, hd, v) = (
            config.hidden_size,
            p.ffn_size,
            config.head_dim,
            config.vocab_size,
        );
        let (q_dim, kv_dim) = (
            p.heads.padded_head_count() * hd,
            p.heads.padded_kv_head_count() * hd,
        );
        let size_in = |dtype, shape: Vec<usize>, placement| {
            per_chip_spec("", shape, placement, p.degree, dtype).map(|s| s.buffer_size())
        };
        let size = |shape, placement| size_in(decode.activation_dtype(), shape, placement);
        let matrix = |shape, placement| size_in(decode.matrix_dtype(), shape, placement);
        let mlp = |shape, placement| size_in(decode.mlp_dtype(), shape, placement);
        let (rep, col, row) = (
            Placement::Replicated,
            Placement::Sharded(1),
            Placement::Sharded(0),
        );
        let block = 2 * size(vec![1, h], rep)?
            + matrix(vec![h, q_dim], col)?
            + 2 * matrix(vec![h, kv_dim], col)?
            + matrix(vec![q_dim, h], row)?
            + 2 * mlp(vec![h, f], col)?
            + mlp(vec![f, h], row)?;
        let lm_head = match p.lm_head {
            LmHead::Sharded => col,
            LmHead::Replicated => rep,
        };
        let weights = size(vec![v, h], rep)?
            + matrix(vec![h, v], lm_head)?
            + size(vec![1, h], rep)?
            + config.block_count as u64 * block;
        let cache_shape = vec![decode.batch, p.local_kv_heads(), decode.max_positions, hd];
        let cache = 2 * config.block_count as u64 * size(cache_shape, rep)?;
        Ok((weights, cache))
    }

    /// The split this model runs with.
    pub fn parallel(&self) -> &TensorParallel {
        &self.parallel
    }

    pub fn decode_config(&self) -> DeviceDecodeConfig {
        self.decode
    }

    /// `[1, 1, B, heads * head_dim]` -> `[1, B, heads, head_dim]` (the decode layout).
    fn split_heads(&self, x: &MeshTensor, heads: usize) -> Result<MeshTensor> {
        self.relayout(x, vec![1, self.decode.batch, heads, self.config.head_dim])
    }

    /// `[1, B, heads, head_dim]` -> `[1, 1, B, heads * head_dim]`.
    fn merge_heads(&self, x: &MeshTensor, heads: usize) -> Result<MeshTensor> {
        self.relayout(
            x,
            vec![1, 1, self.decode.batch, heads * self.config.head_dim],
        )
    }

    /// A device reshape: no host round trip, so the decode step can be captured.
    fn relayout(&self, x: &MeshTensor, shape: Vec<usize>) -> Result<MeshTensor> {
        ops::reshape(x, &shape, &MeshOpOptions::default()).map_err(device("reshape"))
    }

    /// The sum of each tensor-parallel group's partial results (nothing on one chip).
    fn all_reduce(&self, partial: MeshTensor, what: &'static str) -> Result<MeshTensor> {
        if self.parallel.degree == 1 {
            return Ok(partial);
        }
        ccl::all_reduce(&partial, &self.ccl_args()).map_err(device(what))
    }

    fn ccl_args(&self) -> CclArgs {
        CclArgs {
            cluster_axis: self.parallel.cluster_axis,
            cq: CQ,
            ..Default::default()
        }
    }

    /// Enqueues one decode step for every user (reading `ids` and `positions` on the device);
    /// returns the device tensor of next token ids.
    fn enqueue_step(&self) -> Result<MeshTensor> {
        let c = &self.config;
        let none = MeshOpOptions::default();
        let mm = MeshMatmulConfig::default();
        let silu = MeshMatmulConfig {
            activation: Some(Activation::Silu),
            ..Default::default()
        };
        let (heads, kv_heads) = (self.parallel.local_heads(), self.parallel.local_kv_heads());
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        let d = |what: &'static str| device(what);
        let mut x = ops::embedding(&self.ids, &self.embedding, &none).map_err(d("embedding"))?;
        for b in &self.blocks {
            let n = ops::rms_norm(&x, Some(&b.attn_norm), c.rms_norm_eps, &none)
                .map_err(d("attn_norm"))?;
            // Column-parallel: each chip projects onto its own heads.
            let q = ops::matmul(&n, &b.wq, &mm).map_err(d("q projection"))?;
            let k = ops::matmul(&n, &b.wk, &mm).map_err(d("k projection"))?;
            let v = ops::matmul(&n, &b.wv, &mm).map_err(d("v projection"))?;
            let q = self.split_heads(&q, heads)?;
            let k = self.split_heads(&k, kv_heads)?;
            let v = self.split_heads(&v, kv_heads)?;
            let q = ops::rotary_embedding(&q, &self.cos, &self.sin, &self.positions, &none)
                .map_err(d("rotary q"))?;
            let k = ops::rotary_embedding(&k, &self.cos, &self.sin, &self.positions, &none)
                .map_err(d("rotary k"))?;
            ops::update_cache(&b.k_cache, &k, &self.positions, &none)
                .map_err(d("update k cache"))?;
            ops::update_cache(&b.v_cache, &v, &self.positions, &none)
                .map_err(d("update v cache"))?;
            let a = ops::scaled_dot_product_attention_decode(
                &q,
                &b.k_cache,
                &b.v_cache,
                &self.positions,
                scale,
                &none,
            )
            .map_err(d("attention"))?;
            let a = self.merge_heads(&a, heads)?;
            // Row-parallel: partial sums over each chip's heads, joined by all_reduce.
            let o = ops::matmul(&a, &b.wo, &mm).map_err(d("output projection"))?;
            let o = self.all_reduce(o, "all_reduce of the output projection")?;
            x = ops::add(&x, &o, &none).map_err(d("attention residual"))?;
            let n = ops::rms_norm(&x, Some(&b.ffn_norm), c.rms_norm_eps, &none)
                .map_err(d("ffn_norm"))?;
            let g = ops::matmul(&n, &b.w_gate, &silu).map_err(d("gate projection"))?;
            let u = ops::matmul(&n, &b.w_up, &mm).map_err(d("up projection"))?;
            let m = ops::mul(&g, &u, &none).map_err(d("silu(gate) * up"))?;
            let down = ops::matmul(&m, &b.w_down, &mm).map_err(d("down projection"))?;
            let down = self.all_reduce(down, "all_reduce of the down projection")?;
            x = ops::add(&x, &down, &none).map_err(d("mlp residual"))?;
        }
        let n = ops::rms_norm(&x, Some(&self.output_norm), c.rms_norm_eps, &none)
            .map_err(d("output_norm"))?;
        let mut logits = ops::matmul(&n, &self.lm_head, &mm).map_err(d("lm head"))?;
        if self.parallel.lm_head == LmHead::Sharded {
            logits = ccl::all_gather(&logits, -1, &self.ccl_args())
                .map_err(d("all_gather of the logits"))?;
        }
        ops::argmax(&logits, -1, &none).map_err(d("argmax"))
    }

    /// Captures the decode step as a mesh trace on first use (after enqueueing it once
    /// untraced, which compiles every program, as TT-NN does) and returns its id. Reads
    /// nothing back, so it also runs under a NO_DISPATCH graph capture, where it sizes the
    /// trace exactly.
    pub fn capture_decode_trace(&mut self) -> Result<MeshTraceId> {
        if let Some(step) = &self.captured {
            return Ok(step.id);
        }
        self.enqueue_step()?;
        let id = self
            .mesh
            .begin_trace_capture(CQ)
            .map_err(device("begin_trace_capture"))?;
        let next_ids = match self.enqueue_step() {
            Ok(t) => t,
            Err(e) => {
                // Leave no half-captured trace behind: the mesh stays usable.
                let _ = self.mesh.end_trace_capture(id, CQ);
                let _ = self.mesh.release_trace(id);
                return Err(e);
            }
        };
        self.mesh
            .end_trace_capture(id, CQ)
            .map_err(device("end_trace_capture"))?;
        self.captured = Some(CapturedStep { id, next_ids });
        Ok(id)
    }

    /// One decode step: writes `tokens` and `positions` into the persistent inputs, runs the
    /// step (replaying its trace when `traced`, capturing it on first use), returns the next
    /// token of every user.
    pub fn decode_step(
        &mut self,
        tokens: &[u32],
        positions: &[usize],
        traced: bool,
    ) -> Result<Vec<u32>> {
        let batch = self.decode.batch;
        for got in [tokens.len(), positions.len()] {
            if got != batch {
                return Err(ModelError::BatchMismatch {
                    got,
                    expected: batch,
                });
            }
        }
        if let Some(&token) = tokens
            .iter()
            .find(|&&t| t as usize >= self.config.vocab_size)
        {
            return Err(ModelError::TokenOutOfRange {
                token,
                vocab_size: self.config.vocab_size,
            });
        }
        if let Some(&position) = positions.iter().find(|&&p| p >= self.decode.max_positions) {
            return Err(ModelError::PositionOutOfRange {
                position,
                max_positions: self.decode.max_positions,
            });
        }
        let dispatch_started = std::time::Instant::now();
        let write = |t: &MeshTensor, values: Vec<u32>, name: &str| -> Result<()> {
            let host =
                HostTensor::from_u32(vec![1, 1, 1, batch], values).map_err(host_tensor(name))?;
            t.copy_from_host(&host, &ReplicateTensorToMesh, CQ)
                .map_err(device(format!("writing {name}")))
        };
        write(&self.ids, tokens.to_vec(), "token ids")?;
        write(
            &self.positions,
            positions.iter().map(|&p| p as u32).collect(),
            "positions",
        )?;
        let next = if traced {
            let id = self.capture_decode_trace()?;
            self.mesh
                .execute_trace(id, CQ, false)
                .map_err(device("execute_trace"))?;
            self.captured
                .as_ref()
                .expect("captured above")
                .next_ids
                .clone()
        } else {
            self.enqueue_step()?
        };
        self.last_host_dispatch = dispatch_started.elapsed();
        let host = next
            .to_host_shards(CQ)
            .map_err(device("reading next token ids"))?
            .remove(0);
        match host.data {
            HostData::U32(ids) => Ok(ids),
            HostData::F32(_) => Err(ModelError::Device {
                context: "reading next token ids".into(),
                source: Box::new(MeshError::Invalid {
                    op: "argmax".into(),
                    detail: "returned floats, not UINT32 ids".into(),
                }),
            }),
        }
    }

    /// Greedy generation on the device with the host reference's schedule ([`greedy_decode`]).
    pub fn generate(
        &mut self,
        prompts: &[&[u32]],
        n: usize,
        traced: bool,
    ) -> Result<Vec<Vec<u32>>> {
        let max_positions = self.decode.max_positions;
        greedy_decode(prompts, n, max_positions, |tokens, positions| {
            self.decode_step(tokens, positions, traced)
        })
    }
}
