//! The llama decode step on a mesh device, the way a TT-NN model runs it: weights and KV cache
//! in device DRAM, static shapes, every op a device kernel, token ids and positions in
//! persistent device tensors that the kernels read when they run, so one captured trace serves
//! every step. Traced mode captures the step once and replays it per token; untraced mode
//! enqueues the same ops one by one.
//!
//! On more than one chip the model is split for tensor parallelism as [`TensorParallel`] plans
//! it (heads and FFN columns sharded, two all_reduces per block, the LM head's logits
//! all-gathered); on one chip (an n150) everything is whole.

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
use crate::weights::ModelTensors;

mod placement;

pub use placement::WeightSource;

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

impl DeviceLlama {
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
