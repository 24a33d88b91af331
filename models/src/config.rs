//! The llama architecture's hyperparameters, read from a GGUF's `llama.*` metadata.

use crate::error::{ModelError, Result};
use crate::gguf::GgufFile;

const ARCH: &str = "llama";

/// What a llama-architecture decoder needs to know about its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub block_count: usize,
    pub hidden_size: usize,
    pub ffn_size: usize,
    pub head_count: usize,
    pub kv_head_count: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub rope_base: f32,
    pub rms_norm_eps: f32,
    /// True when the file has no `output.weight`: the LM head is the token embedding.
    pub tied_embeddings: bool,
}

impl LlamaConfig {
    /// Reads the config, refusing other architectures and inconsistent shapes by name.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let path = file.path();
        let arch = file.require_str("general.architecture", ARCH)?;
        if arch != ARCH {
            return Err(ModelError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                architecture: arch.to_string(),
            });
        }
        let usize_key = |key: &str| -> Result<usize> {
            let v = file.require_u64(&format!("{ARCH}.{key}"), ARCH)?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0 && v <= 1 << 24)
                .ok_or_else(|| bad(file, key, format!("{v} is outside 1..={}", 1 << 24)))
        };
        let block_count = usize_key("block_count")?;
        let hidden_size = usize_key("embedding_length")?;
        let ffn_size = usize_key("feed_forward_length")?;
        let head_count = usize_key("attention.head_count")?;
        let kv_head_count = match file.get("llama.attention.head_count_kv") {
            Some(_) => usize_key("attention.head_count_kv")?,
            None => head_count,
        };
        let context_length = usize_key("context_length")?;
        let rope_base = match file.get("llama.rope.freq_base") {
            Some(_) => file.require_f64("llama.rope.freq_base", ARCH)? as f32,
            None => 10_000.0,
        };
        let rms_norm_eps = file.require_f64("llama.attention.layer_norm_rms_epsilon", ARCH)? as f32;

        if hidden_size % head_count != 0 {
            return Err(bad(
                file,
                "attention.head_count",
                format!("{head_count} heads do not divide the hidden size {hidden_size}"),
            ));
        }
        if head_count % kv_head_count != 0 {
            return Err(bad(
                file,
                "attention.head_count_kv",
                format!("{kv_head_count} KV heads do not divide the {head_count} query heads"),
            ));
        }
        let head_dim = hidden_size / head_count;
        if head_dim % 2 != 0 {
            return Err(bad(
                file,
                "attention.head_count",
                format!("head dimension {head_dim} is odd; RoPE needs pairs"),
            ));
        }
        if let Some(v) = file.get("llama.rope.dimension_count") {
            if v.as_u64() != Some(head_dim as u64) {
                return Err(bad(
                    file,
                    "rope.dimension_count",
                    format!("{v:?} differs from the head dimension {head_dim}; partial RoPE is not supported"),
                ));
            }
        }
        if !(rope_base.is_finite() && rope_base > 1.0) {
            return Err(bad(
                file,
                "rope.freq_base",
                format!("{rope_base} is not a finite base above 1"),
            ));
        }
        if !(rms_norm_eps.is_finite() && rms_norm_eps > 0.0) {
            return Err(bad(
                file,
                "attention.layer_norm_rms_epsilon",
                format!("{rms_norm_eps} is not positive"),
            ));
        }

        let embedding =
            file.tensor_info("token_embd.weight")
                .ok_or_else(|| ModelError::MissingTensor {
                    path: path.to_path_buf(),
                    tensor: "token_embd.weight".into(),
                    architecture: ARCH,
                })?;
        let vocab_from_tensor = embedding.dims.get(1).copied().unwrap_or(0) as usize;
        let vocab_size = match file.get("llama.vocab_size") {
            Some(_) => usize_key("vocab_size")?,
            None => vocab_from_tensor,
        };
        if embedding.dims.len() != 2
            || embedding.dims[0] as usize != hidden_size
            || vocab_from_tensor != vocab_size
        {
            return Err(ModelError::BadTensor {
                path: path.to_path_buf(),
                tensor: "token_embd.weight".into(),
                problem: format!(
                    "has dims {:?}, expected [{hidden_size}, {vocab_size}] (hidden size, vocabulary)",
                    embedding.dims
                ),
            });
        }
        let tied_embeddings = file.tensor_info("output.weight").is_none();

        Ok(Self {
            block_count,
            hidden_size,
            ffn_size,
            head_count,
            kv_head_count,
            head_dim,
            vocab_size,
            context_length,
            rope_base,
            rms_norm_eps,
            tied_embeddings,
        })
    }

    /// Query heads per KV head (the GQA group size).
    pub fn group_size(&self) -> usize {
        self.head_count / self.kv_head_count
    }

    pub fn kv_dim(&self) -> usize {
        self.kv_head_count * self.head_dim
    }

    /// Number of parameters (counting a tied embedding once).
    pub fn parameter_count(&self) -> u64 {
        let (h, f, kv) = (
            self.hidden_size as u64,
            self.ffn_size as u64,
            self.kv_dim() as u64,
        );
        let per_block = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h;
        let embed = self.vocab_size as u64 * h;
        let head = if self.tied_embeddings { 0 } else { embed };
        embed + head + h + self.block_count as u64 * per_block
    }

    /// Bytes of an f32 KV cache for `batch` users of `positions` each.
    pub fn kv_cache_bytes(&self, batch: usize, positions: usize) -> u64 {
        2 * self.block_count as u64 * batch as u64 * positions as u64 * self.kv_dim() as u64 * 4
    }
}

fn bad(file: &GgufFile, key: &str, problem: String) -> ModelError {
    ModelError::BadMetadata {
        path: file.path().to_path_buf(),
        key: format!("{ARCH}.{key}"),
        problem,
    }
}
