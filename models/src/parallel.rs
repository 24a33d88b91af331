//! How a llama is split over a mesh for tensor-parallel decode (Megatron style, as TT-NN's
//! multi-chip llama does it):
//!
//! - attention: Q, K and V projections column-parallel by heads ([`HeadLayout`] pads the heads
//!   so every chip has the same number, exactly), attention on each chip's own heads against its
//!   own KV cache, output projection row-parallel, then all_reduce;
//! - MLP: gate and up column-parallel, SiLU(gate) x up on each chip's columns, down
//!   row-parallel, then all_reduce;
//! - RMSNorm, residuals, embedding and RoPE tables replicated;
//! - LM head: vocabulary-sharded and all-gathered when the vocabulary splits into whole tiles
//!   over the chips (every chip computes 1/N of the logits, and the gather moves only B x vocab
//!   values), else replicated (zero padding columns would add logits of 0 that argmax could
//!   pick, so a vocabulary that does not split is not padded). Argmax runs on the device.
//!
//! On a 1D fabric the tensor-parallel group is one line of chips. A 1-row or 1-column mesh uses
//! all its chips. A 2D mesh uses all its chips (along the line the fabric threads through
//! them) when the FFN splits over them, else the chips of each row (cluster_axis 1), else of
//! each column (cluster_axis 0), the other axis holding replicas that decode the same users. A
//! Galaxy (4x8) runs SmolLM2 on rows of 8: its FFN of 1536 does not split into whole tiles
//! over 32.
//!
//! On a 2D fabric a 2D mesh is used whole ([`TensorParallel::plan_for`]): every weight is split
//! over both axes, chip `(r, c)` holding slice `r * cols + c` (heads, FFN columns, vocabulary),
//! and each partial sum is reduced along the columns and then along the rows (the mesh's
//! whole-mesh all_reduce), the logits gathered along the rows and then the columns. The FFN is
//! padded with zero columns (zero rows of the down projection) to whole tiles per chip:
//! SiLU(0) x 0 adds exactly nothing. The hidden size stays whole on every chip: SmolLM2's 576
//! (18 tiles) splits over neither 4 nor 8 chips, so the split tt-metal's Llama-70B uses on a
//! Galaxy (hidden over one axis, FFN over the other) cannot be tiled for it.

use crate::config::LlamaConfig;
use crate::error::{ModelError, Result};
use crate::heads::HeadLayout;

/// A tile is 32 columns: every per-chip slice of a weight must be whole tiles.
const TILE: usize = 32;

/// Where the LM head lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LmHead {
    /// `vocab / degree` columns per chip, logits all-gathered before argmax.
    Sharded,
    /// The whole `[hidden, vocab]` on every chip.
    Replicated,
}

/// The split of one model over one mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorParallel {
    /// Chips per tensor-parallel group (1 = no collectives).
    pub degree: usize,
    /// The mesh axis the groups run along: None = all chips of the mesh in one group, 0 =
    /// columns, 1 = rows (TT-NN's `cluster_axis`).
    pub cluster_axis: Option<usize>,
    /// Groups holding the same model and decoding the same users.
    pub replicas: usize,
    pub heads: HeadLayout,
    pub lm_head: LmHead,
    /// The FFN width the gate, up and down projections are placed with: the model's, or
    /// padded with zero columns to whole tiles per chip (the whole-mesh 2D split only).
    pub ffn_size: usize,
    /// Zero columns added to the model's FFN (`ffn_size` minus the model's).
    pub ffn_padding: usize,
    /// The group is a whole 2D mesh on a 2D fabric: its collectives run along one axis and
    /// then the other.
    pub both_axes: bool,
}

impl TensorParallel {
    /// Plans the split of `config` over a `rows x cols` mesh whose fabric is `fabric`: the whole
    /// mesh over both axes on a 2D fabric (see the module doc), else [`TensorParallel::plan`].
    pub fn plan_for(
        config: &LlamaConfig,
        rows: usize,
        cols: usize,
        fabric: ttmesh::FabricConfig,
    ) -> Result<Self> {
        if !(fabric.is_2d() && rows > 1 && cols > 1) {
            return Self::plan(config, rows, cols);
        }
        let degree = rows * cols;
        check_tiles(config, rows, cols)?;
        let heads = HeadLayout::plan(config.head_count, config.kv_head_count, degree)?;
        let lm_head = if config.vocab_size.is_multiple_of(TILE * degree) {
            LmHead::Sharded
        } else {
            LmHead::Replicated
        };
        Ok(Self {
            degree,
            cluster_axis: None,
            replicas: 1,
            heads,
            lm_head,
            ffn_size: config.ffn_size.next_multiple_of(TILE * degree),
            ffn_padding: config.ffn_size.next_multiple_of(TILE * degree) - config.ffn_size,
            both_axes: true,
        })
    }

    /// Plans the split of `config` over a `rows x cols` mesh; refuses a model whose FFN does
    /// not split into whole tiles over any line of the mesh, naming the degrees that would.
    pub fn plan(config: &LlamaConfig, rows: usize, cols: usize) -> Result<Self> {
        let chips = rows * cols;
        let mut candidates: Vec<(usize, Option<usize>)> = vec![(chips, None)];
        if rows > 1 && cols > 1 {
            candidates.push((cols, Some(1)));
            candidates.push((rows, Some(0)));
        }
        let fits = |degree: usize| config.ffn_size.is_multiple_of(TILE * degree);
        let Some(&(degree, cluster_axis)) = candidates.iter().find(|(d, _)| fits(*d)) else {
            let tiles = config.ffn_size / TILE;
            let works: Vec<String> = (1..=tiles.min(64))
                .filter(|&d| config.ffn_size.is_multiple_of(TILE * d))
                .map(|d| d.to_string())
                .collect();
            return Err(ModelError::CannotSplit {
                what: format!("FFN of {}", config.ffn_size),
                mesh: format!("{rows}x{cols}"),
                reason: format!(
                    "each chip's slice of the gate, up and down projections must be whole 32-column tiles, and {} / (32 x {}) is not whole{}",
                    config.ffn_size,
                    candidates.iter().map(|c| c.0.to_string()).collect::<Vec<_>>().join(", "),
                    if rows > 1 && cols > 1 { " for any of the mesh's lines" } else { "" }
                ),
                works: if works.is_empty() {
                    "none: the FFN is not a whole number of tiles; use a model whose FFN is a multiple of 32".into()
                } else {
                    format!(
                        "a line of {} chips (e.g. --mesh line-N, n300 for 2, t3k for 8)",
                        works.join(", ")
                    )
                },
            });
        };
        check_tiles(config, rows, cols)?;
        let heads = HeadLayout::plan(config.head_count, config.kv_head_count, degree)?;
        let lm_head = if degree > 1 && config.vocab_size.is_multiple_of(TILE * degree) {
            LmHead::Sharded
        } else {
            LmHead::Replicated
        };
        Ok(Self {
            degree,
            cluster_axis,
            replicas: chips / degree,
            heads,
            lm_head,
            ffn_size: config.ffn_size,
            ffn_padding: 0,
            both_axes: false,
        })
    }

    /// Query heads on each chip (padding included).
    pub fn local_heads(&self) -> usize {
        self.heads.padded_head_count() / self.degree
    }

    /// KV heads (slots) on each chip.
    pub fn local_kv_heads(&self) -> usize {
        self.heads.padded_kv_head_count() / self.degree
    }

    /// One line for people: "tensor parallel over 8 chips (all chips), 16 query heads (7
    /// padding) ...".
    pub fn describe(&self) -> String {
        let group = match self.cluster_axis {
            None if self.both_axes => {
                "all chips, both axes: reductions along columns then rows".to_string()
            }
            None => "all chips".to_string(),
            Some(1) => format!("each row, {} replicas", self.replicas),
            Some(_) => format!("each column, {} replicas", self.replicas),
        };
        let pad_q = self.heads.padded_head_count() - self.heads.head_count;
        let ffn = if self.ffn_padding > 0 {
            format!(
                ", FFN padded to {} ({} columns per chip)",
                self.ffn_size,
                self.ffn_size / self.degree
            )
        } else {
            String::new()
        };
        format!(
            "tensor parallel over {} chip(s) ({group}): {} query heads per chip ({} of them padding in all), {} KV head(s) per chip{ffn}, LM head {}",
            self.degree,
            self.local_heads(),
            pad_q,
            self.local_kv_heads(),
            match self.lm_head {
                LmHead::Sharded => "vocabulary-sharded + all_gather",
                LmHead::Replicated => "replicated",
            }
        )
    }
}

/// The hidden size and head dim must be whole tiles on every chip: both stay whole on each.
fn check_tiles(config: &LlamaConfig, rows: usize, cols: usize) -> Result<()> {
    if config.hidden_size.is_multiple_of(TILE) && config.head_dim.is_multiple_of(TILE) {
        return Ok(());
    }
    Err(ModelError::CannotSplit {
        what: format!(
            "hidden size {} with head dim {}",
            config.hidden_size, config.head_dim
        ),
        mesh: format!("{rows}x{cols}"),
        reason: "the hidden size and head dim must be whole 32-column tiles".into(),
        works: "none: use a model whose hidden size and head dim are multiples of 32".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(heads: usize, kv: usize, hidden: usize, ffn: usize, vocab: usize) -> LlamaConfig {
        LlamaConfig {
            block_count: 2,
            hidden_size: hidden,
            ffn_size: ffn,
            head_count: heads,
            kv_head_count: kv,
            head_dim: hidden / heads,
            vocab_size: vocab,
            context_length: 8192,
            rope_base: 100_000.0,
            rms_norm_eps: 1e-5,
            tied_embeddings: true,
        }
    }

    fn smollm2() -> LlamaConfig {
        config(9, 3, 576, 1536, 49152)
    }

    #[test]
    fn smollm2_over_the_shipped_meshes() {
        let c = smollm2();
        let t3k = TensorParallel::plan(&c, 2, 4).unwrap();
        assert_eq!((t3k.degree, t3k.cluster_axis, t3k.replicas), (8, None, 1));
        assert_eq!((t3k.local_heads(), t3k.local_kv_heads()), (2, 1));
        assert_eq!(t3k.lm_head, LmHead::Sharded);
        let galaxy = TensorParallel::plan(&c, 4, 8).unwrap();
        assert_eq!(
            (galaxy.degree, galaxy.cluster_axis, galaxy.replicas),
            (8, Some(1), 4)
        );
        let n300 = TensorParallel::plan(&c, 1, 2).unwrap();
        assert_eq!((n300.local_heads(), n300.local_kv_heads()), (6, 2));
        // A Galaxy on a 2D fabric is used whole: FFN padded to 2048 (64 columns per chip), one
        // query head and one KV slot per chip, the vocabulary in 48-tile slices.
        let whole = TensorParallel::plan_for(&c, 4, 8, ttmesh::FabricConfig::Fabric2D).unwrap();
        assert_eq!(
            (whole.degree, whole.cluster_axis, whole.replicas),
            (32, None, 1)
        );
        assert_eq!(
            (whole.ffn_size, whole.ffn_padding, whole.both_axes),
            (2048, 512, true)
        );
        assert_eq!((whole.local_heads(), whole.local_kv_heads()), (1, 1));
        assert_eq!(whole.lm_head, LmHead::Sharded);
        assert!(whole
            .describe()
            .contains("FFN padded to 2048 (64 columns per chip)"));
        // On a 1D fabric, or a mesh of one row, plan_for is plan.
        for (r, cols, f) in [
            (4, 8, ttmesh::FabricConfig::Fabric1D),
            (1, 8, ttmesh::FabricConfig::Fabric2D),
        ] {
            assert_eq!(
                TensorParallel::plan_for(&c, r, cols, f).unwrap(),
                TensorParallel::plan(&c, r, cols).unwrap()
            );
        }
        let n150 = TensorParallel::plan(&c, 1, 1).unwrap();
        assert_eq!((n150.degree, n150.lm_head), (1, LmHead::Replicated));
        assert!(n150.heads.is_identity());
    }

    #[test]
    fn an_ffn_that_does_not_split_is_refused_with_what_works() {
        let c = smollm2();
        let err = TensorParallel::plan(&c, 1, 32).unwrap_err().to_string();
        assert!(err.contains("FFN of 1536"), "{err}");
        assert!(err.contains("1, 2, 3, 4, 6, 8, 12, 16, 24, 48"), "{err}");
        // A vocabulary that does not split leaves the LM head replicated.
        let odd_vocab = config(4, 2, 128, 256, 320);
        let plan = TensorParallel::plan(&odd_vocab, 1, 8).unwrap();
        assert_eq!(plan.lm_head, LmHead::Replicated);
        assert_eq!(
            TensorParallel::plan(&odd_vocab, 1, 2).unwrap().lm_head,
            LmHead::Sharded
        );
    }
}
