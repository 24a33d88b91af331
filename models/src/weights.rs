//! A llama model's weights dequantised to f32 on the host, in Hugging Face order (Q and K rows
//! un-permuted, see [`crate::rope`]), every matrix row-major `[out][in]`.

use std::path::Path;

use crate::config::LlamaConfig;
use crate::error::{ModelError, Result};
use crate::gguf::GgufFile;
use crate::rope::unpermute_rows_from_gguf;

/// One decoder block's weights.
#[derive(Debug, Clone)]
pub struct BlockWeights {
    pub attn_norm: Vec<f32>,
    /// `[head_count * head_dim][hidden]`, HF row order.
    pub wq: Vec<f32>,
    /// `[kv_head_count * head_dim][hidden]`, HF row order.
    pub wk: Vec<f32>,
    pub wv: Vec<f32>,
    /// `[hidden][head_count * head_dim]`.
    pub wo: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    /// `[ffn][hidden]`.
    pub w_gate: Vec<f32>,
    pub w_up: Vec<f32>,
    /// `[hidden][ffn]`.
    pub w_down: Vec<f32>,
}

/// The whole model.
#[derive(Debug, Clone)]
pub struct LlamaWeights {
    pub config: LlamaConfig,
    /// `[vocab][hidden]`.
    pub token_embedding: Vec<f32>,
    pub blocks: Vec<BlockWeights>,
    pub output_norm: Vec<f32>,
    /// `[vocab][hidden]`; `None` when tied to the token embedding.
    pub output: Option<Vec<f32>>,
}

/// Options for loading.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// Host bytes the f32 weights plus the KV cache may take; `None` reads the system's
    /// available memory (`MemAvailable`), and skips the check where that cannot be read.
    pub host_memory_limit: Option<u64>,
    /// Users and positions of the KV cache to budget for (0 = none).
    pub kv_batch: usize,
    pub kv_positions: usize,
}

impl LlamaWeights {
    /// The f32 size of the weights, from the config alone (nothing read yet).
    pub fn f32_bytes(config: &LlamaConfig) -> u64 {
        config.parameter_count() * 4
    }

    pub fn load(path: impl AsRef<Path>, options: LoadOptions) -> Result<Self> {
        let file = GgufFile::open(path.as_ref())?;
        Self::from_gguf(&file, options)
    }

    /// Reads and dequantises every tensor, after checking the f32 model fits in host memory.
    pub fn from_gguf(file: &GgufFile, options: LoadOptions) -> Result<Self> {
        let config = LlamaConfig::from_gguf(file)?;
        let weight_bytes = Self::f32_bytes(&config);
        let kv_cache_bytes = config.kv_cache_bytes(options.kv_batch, options.kv_positions);
        let needed_bytes = weight_bytes + kv_cache_bytes;
        if let Some(available_bytes) = options.host_memory_limit.or_else(available_host_memory) {
            if needed_bytes > available_bytes {
                return Err(ModelError::HostMemory {
                    path: file.path().to_path_buf(),
                    needed_bytes,
                    weight_bytes,
                    kv_cache_bytes,
                    available_bytes,
                });
            }
        }

        let (h, f) = (config.hidden_size, config.ffn_size);
        let (q_dim, kv_dim) = (config.head_count * config.head_dim, config.kv_dim());
        let matrix = |name: &str, rows: usize, cols: usize| read_matrix(file, name, rows, cols);
        let token_embedding = matrix("token_embd.weight", config.vocab_size, h)?;
        let output_norm = matrix("output_norm.weight", 1, h)?;
        let output = if config.tied_embeddings {
            None
        } else {
            Some(matrix("output.weight", config.vocab_size, h)?)
        };
        let mut blocks = Vec::with_capacity(config.block_count);
        for b in 0..config.block_count {
            let name = |t: &str| format!("blk.{b}.{t}.weight");
            let wq = matrix(&name("attn_q"), q_dim, h)?;
            let wk = matrix(&name("attn_k"), kv_dim, h)?;
            blocks.push(BlockWeights {
                attn_norm: matrix(&name("attn_norm"), 1, h)?,
                wq: unpermute_rows_from_gguf(&wq, config.head_count, config.head_dim, h),
                wk: unpermute_rows_from_gguf(&wk, config.kv_head_count, config.head_dim, h),
                wv: matrix(&name("attn_v"), kv_dim, h)?,
                wo: matrix(&name("attn_output"), h, q_dim)?,
                ffn_norm: matrix(&name("ffn_norm"), 1, h)?,
                w_gate: matrix(&name("ffn_gate"), f, h)?,
                w_up: matrix(&name("ffn_up"), f, h)?,
                w_down: matrix(&name("ffn_down"), h, f)?,
            });
        }
        Ok(Self {
            config,
            token_embedding,
            blocks,
            output_norm,
            output,
        })
    }

    /// The LM head: `output.weight`, or the token embedding when tied.
    pub fn lm_head(&self) -> &[f32] {
        self.output.as_deref().unwrap_or(&self.token_embedding)
    }
}

/// Reads tensor `name` as `rows` rows of `cols` values (a vector when `rows` is 1), checking
/// its dims first.
fn read_matrix(file: &GgufFile, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
    let info = file
        .tensor_info(name)
        .ok_or_else(|| ModelError::MissingTensor {
            path: file.path().to_path_buf(),
            tensor: name.to_string(),
            architecture: "llama",
        })?;
    let expected: Vec<u64> = if rows == 1 {
        vec![cols as u64]
    } else {
        vec![cols as u64, rows as u64]
    };
    if info.dims != expected {
        return Err(ModelError::BadTensor {
            path: file.path().to_path_buf(),
            tensor: name.to_string(),
            problem: format!("has dims {:?}, the config needs {expected:?}", info.dims),
        });
    }
    file.read_tensor_f32(name)
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn available_host_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
