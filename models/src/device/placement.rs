//! Placing a model on the mesh: each weight laid out as the split plans it (sharded by output
//! columns or input rows, or replicated), the KV cache, RoPE tables and persistent inputs,
//! from a model's values or from its shapes alone; and what that costs each chip's DRAM.

use std::borrow::Cow;

use super::*;

/// `[rows][cols]` row-major to `[cols][rows]`, in 32x32 blocks so reads and writes both stay
/// in cache (a weight is tens of MB; element by element, every write misses), each band of 32
/// output rows on its own thread (placing a large model is mostly this and the tile encoding).
fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    use rayon::prelude::*;
    const BLOCK: usize = 32;
    let mut out = vec![0f32; w.len()];
    if rows == 0 {
        return out;
    }
    out.par_chunks_mut(BLOCK * rows)
        .enumerate()
        .for_each(|(band, out)| {
            let c0 = band * BLOCK;
            let width = out.len() / rows;
            for r0 in (0..rows).step_by(BLOCK) {
                for c in 0..width {
                    for r in r0..(r0 + BLOCK).min(rows) {
                        out[c * rows + r] = w[r * cols + c0 + c];
                    }
                }
            }
        });
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
    /// The weights' values, written to the device: a loaded [`crate::LlamaWeights`], or a file read
    /// one block at a time ([`crate::GgufWeights`]).
    Values(&'a dyn ModelTensors),
    /// Only the shapes of a config: every tensor is allocated with the spec it would have,
    /// nothing is written and no tensor data exists on the host. For sizing a model under a
    /// NO_DISPATCH graph capture (`ttmesh::graph::plan`), with or without a weights file.
    ShapesOnly(&'a LlamaConfig),
}

impl WeightSource<'_> {
    pub fn config(&self) -> &LlamaConfig {
        match self {
            WeightSource::Values(w) => w.config(),
            WeightSource::ShapesOnly(c) => c,
        }
    }
}

impl DeviceLlama {
    /// Plans the split over the mesh ([`TensorParallel::plan`]), then places the weights (each
    /// chip its slice), an empty KV cache per chip, the RoPE tables and the persistent inputs
    /// in the mesh's DRAM. `progress` hears the name of each tensor as it is placed.
    pub fn new(
        mesh: &MeshDevice,
        weights: &dyn ModelTensors,
        decode: DeviceDecodeConfig,
    ) -> Result<Self> {
        Self::with_progress(mesh, weights, decode, &mut |_, _| {})
    }

    /// [`DeviceLlama::new`], calling `progress(done, total)` after each block is placed (a
    /// large model takes seconds per chip to encode and place).
    pub fn with_progress(
        mesh: &MeshDevice,
        weights: &dyn ModelTensors,
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
        // `values` is None exactly when placing by shape alone.
        let place = |name: &str, shape: Vec<usize>, placement, dtype, values: Option<Vec<f32>>| {
            let placed = match values {
                Some(values) => {
                    let host =
                        HostTensor::from_f32(shape, dtype, values).map_err(host_tensor(name))?;
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
                      w: Option<Cow<[f32]>>,
                      (out, inp): (usize, usize),
                      split: usize,
                      dtype: DataType| {
            place(
                name,
                vec![inp, out],
                Placement::Sharded(split),
                dtype,
                w.map(|w| transpose(&w, out, inp)),
            )
        };
        let column =
            |name: &str, w: Option<Cow<[f32]>>, out, inp| weight(name, w, (out, inp), 1, matrix);
        let row =
            |name: &str, w: Option<Cow<[f32]>>, out, inp| weight(name, w, (out, inp), 0, matrix);
        let vector = |name: &str, v: Option<&[f32]>| {
            place(
                name,
                vec![1, h],
                Placement::Replicated,
                other,
                v.map(<[f32]>::to_vec),
            )
        };
        let local_kv = parallel.local_kv_heads();
        let cache = |name: &str| {
            let shape = vec![decode.batch, local_kv, decode.max_positions, hd];
            let len = shape.iter().product();
            place(
                name,
                shape,
                Placement::Replicated,
                other,
                w.map(|_| vec![0.0; len]),
            )
        };
        let mut blocks = Vec::with_capacity(c.block_count);
        for i in 0..c.block_count {
            let n = |t: &str| format!("blk.{i}.{t}");
            // One block's values at a time: read (from a file source) just before it is placed.
            let block = w.map(|w| w.block(i)).transpose()?;
            let b = block.as_deref();
            blocks.push(DeviceBlock {
                attn_norm: vector(&n("attn_norm"), b.map(|b| &b.attn_norm[..]))?,
                wq: column(
                    &n("attn_q"),
                    b.map(|b| heads.query_rows(&b.wq, hd, h)),
                    q_dim,
                    h,
                )?,
                wk: column(
                    &n("attn_k"),
                    b.map(|b| heads.kv_rows(&b.wk, hd, h)),
                    kv_dim,
                    h,
                )?,
                wv: column(
                    &n("attn_v"),
                    b.map(|b| heads.kv_rows(&b.wv, hd, h)),
                    kv_dim,
                    h,
                )?,
                wo: row(
                    &n("attn_output"),
                    b.map(|b| heads.output_cols(&b.wo, hd, h)),
                    h,
                    q_dim,
                )?,
                ffn_norm: vector(&n("ffn_norm"), b.map(|b| &b.ffn_norm[..]))?,
                w_gate: weight(
                    &n("ffn_gate"),
                    b.map(|b| zero_rows_to(&b.w_gate, f * h)),
                    (f, h),
                    1,
                    mlp,
                )?,
                w_up: weight(
                    &n("ffn_up"),
                    b.map(|b| zero_rows_to(&b.w_up, f * h)),
                    (f, h),
                    1,
                    mlp,
                )?,
                w_down: weight(
                    &n("ffn_down"),
                    b.map(|b| zero_cols_to(&b.w_down, h, c.ffn_size, f)),
                    (h, f),
                    0,
                    mlp,
                )?,
                k_cache: cache(&n("k_cache"))?,
                v_cache: cache(&n("v_cache"))?,
            });
            drop(block);
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
                w.map(|_| {
                    let (c, s) = rope_tables(decode.max_positions, hd, c.rope_base);
                    if cos {
                        c
                    } else {
                        s
                    }
                }),
            )
        };
        let embedding = w.map(|w| w.token_embedding()).transpose()?;
        let embedding = place(
            "token_embd",
            vec![c.vocab_size, h],
            Placement::Replicated,
            other,
            embedding.map(Cow::into_owned),
        )?;
        let lm_head = w.map(|w| w.lm_head()).transpose()?;
        let lm_head = place(
            "lm_head",
            vec![h, c.vocab_size],
            lm_head_placement,
            matrix,
            lm_head.map(|l| transpose(&l, c.vocab_size, h)),
        )?;
        let output_norm = w.map(|w| w.output_norm()).transpose()?;
        let mut model = Self {
            mesh: mesh.clone(),
            embedding,
            lm_head,
            output_norm: vector("output_norm", output_norm.as_deref())?,
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
}

#[cfg(test)]
mod tests {
    use super::transpose;

    #[test]
    fn transpose_matches_element_by_element_for_any_shape() {
        for (rows, cols) in [(0, 5), (1, 1), (3, 70), (33, 31), (64, 96), (100, 33)] {
            let w: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let t = transpose(&w, rows, cols);
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(
                        t[c * rows + r],
                        w[r * cols + c],
                        "{rows}x{cols} at ({r}, {c})"
                    );
                }
            }
        }
    }
}
