//! A llama model's weights dequantised to f32 on the host, in Hugging Face order (Q and K rows
//! un-permuted, see [`crate::rope`]), every matrix row-major `[out][in]`: all at once
//! ([`LlamaWeights`], what the host reference computes with), or one block at a time as they
//! are placed ([`GgufWeights`], so the host never holds the whole f32 model).

use std::borrow::Cow;
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

    /// Reads and dequantises the whole model.
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

        let h = config.hidden_size;
        let token_embedding = read_matrix(file, "token_embd.weight", config.vocab_size, h)?;
        let output_norm = read_matrix(file, "output_norm.weight", 1, h)?;
        let output = if config.tied_embeddings {
            None
        } else {
            Some(read_matrix(file, "output.weight", config.vocab_size, h)?)
        };
        let blocks = (0..config.block_count)
            .map(|b| read_block(file, &config, b))
            .collect::<Result<Vec<_>>>()?;
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

/// Block `b`'s tensors, dequantised, Q and K rows in Hugging Face order.
fn read_block(file: &GgufFile, config: &LlamaConfig, b: usize) -> Result<BlockWeights> {
    let (h, f) = (config.hidden_size, config.ffn_size);
    let (q_dim, kv_dim) = (config.head_count * config.head_dim, config.kv_dim());
    let name = |t: &str| format!("blk.{b}.{t}.weight");
    let matrix = |t: &str, rows: usize, cols: usize| read_matrix(file, &name(t), rows, cols);
    let wq = matrix("attn_q", q_dim, h)?;
    let wk = matrix("attn_k", kv_dim, h)?;
    Ok(BlockWeights {
        attn_norm: matrix("attn_norm", 1, h)?,
        wq: unpermute_rows_from_gguf(&wq, config.head_count, config.head_dim, h),
        wk: unpermute_rows_from_gguf(&wk, config.kv_head_count, config.head_dim, h),
        wv: matrix("attn_v", kv_dim, h)?,
        wo: matrix("attn_output", h, q_dim)?,
        ffn_norm: matrix("ffn_norm", 1, h)?,
        w_gate: matrix("ffn_gate", f, h)?,
        w_up: matrix("ffn_up", f, h)?,
        w_down: matrix("ffn_down", h, f)?,
    })
}

/// A model's tensors as placement asks for them, in the order it places them: borrowed from a
/// loaded [`LlamaWeights`], or read and dequantised from the file on each call
/// ([`GgufWeights`]).
pub trait ModelTensors {
    fn config(&self) -> &LlamaConfig;
    /// `[vocab][hidden]`.
    fn token_embedding(&self) -> Result<Cow<'_, [f32]>>;
    fn output_norm(&self) -> Result<Cow<'_, [f32]>>;
    /// `[vocab][hidden]`: `output.weight`, or the token embedding when tied.
    fn lm_head(&self) -> Result<Cow<'_, [f32]>>;
    fn block(&self, b: usize) -> Result<Cow<'_, BlockWeights>>;
}

impl ModelTensors for LlamaWeights {
    fn config(&self) -> &LlamaConfig {
        &self.config
    }
    fn token_embedding(&self) -> Result<Cow<'_, [f32]>> {
        Ok(Cow::Borrowed(&self.token_embedding))
    }
    fn output_norm(&self) -> Result<Cow<'_, [f32]>> {
        Ok(Cow::Borrowed(&self.output_norm))
    }
    fn lm_head(&self) -> Result<Cow<'_, [f32]>> {
        Ok(Cow::Borrowed(LlamaWeights::lm_head(self)))
    }
    fn block(&self, b: usize) -> Result<Cow<'_, BlockWeights>> {
        Ok(Cow::Borrowed(&self.blocks[b]))
    }
}

/// A shared model places as the model itself does.
impl<T: ModelTensors + ?Sized> ModelTensors for std::sync::Arc<T> {
    fn config(&self) -> &LlamaConfig {
        (**self).config()
    }
    fn token_embedding(&self) -> Result<Cow<'_, [f32]>> {
        (**self).token_embedding()
    }
    fn output_norm(&self) -> Result<Cow<'_, [f32]>> {
        (**self).output_norm()
    }
    fn lm_head(&self) -> Result<Cow<'_, [f32]>> {
        (**self).lm_head()
    }
    fn block(&self, b: usize) -> Result<Cow<'_, BlockWeights>> {
        (**self).block(b)
    }
}

/// A model file whose tensors are dequantised only when asked for, one at a time: placing from
/// it holds one block's f32 values on the host at once (a 1B model's f32 copy is 5 GB; an 8B
/// model's would not fit an ordinary host at all). Every tensor's presence and dims are
/// checked when it is opened, so a bad file fails before any chip is written.
pub struct GgufWeights {
    file: GgufFile,
    config: LlamaConfig,
}

impl GgufWeights {
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let file = GgufFile::open(path.as_ref())?;
        let config = LlamaConfig::from_gguf(&file)?;
        let (h, f, v) = (config.hidden_size, config.ffn_size, config.vocab_size);
        let (q_dim, kv_dim) = (config.head_count * config.head_dim, config.kv_dim());
        let mut expected: Vec<(String, usize, usize)> = vec![
            ("token_embd.weight".into(), v, h),
            ("output_norm.weight".into(), 1, h),
        ];
        if !config.tied_embeddings {
            expected.push(("output.weight".into(), v, h));
        }
        for b in 0..config.block_count {
            for (t, rows, cols) in [
                ("attn_norm", 1, h),
                ("attn_q", q_dim, h),
                ("attn_k", kv_dim, h),
                ("attn_v", kv_dim, h),
                ("attn_output", h, q_dim),
                ("ffn_norm", 1, h),
                ("ffn_gate", f, h),
                ("ffn_up", f, h),
                ("ffn_down", h, f),
            ] {
                expected.push((format!("blk.{b}.{t}.weight"), rows, cols));
            }
        }
        for (name, rows, cols) in &expected {
            check_dims(&file, name, *rows, *cols)?;
        }
        Ok(Self { file, config })
    }
}

impl ModelTensors for GgufWeights {
    fn config(&self) -> &LlamaConfig {
        &self.config
    }
    fn token_embedding(&self) -> Result<Cow<'_, [f32]>> {
        let c = &self.config;
        read_matrix(&self.file, "token_embd.weight", c.vocab_size, c.hidden_size).map(Cow::Owned)
    }
    fn output_norm(&self) -> Result<Cow<'_, [f32]>> {
        read_matrix(&self.file, "output_norm.weight", 1, self.config.hidden_size).map(Cow::Owned)
    }
    fn lm_head(&self) -> Result<Cow<'_, [f32]>> {
        let name = if self.config.tied_embeddings {
            "token_embd.weight"
        } else {
            "output.weight"
        };
        let c = &self.config;
        read_matrix(&self.file, name, c.vocab_size, c.hidden_size).map(Cow::Owned)
    }
    fn block(&self, b: usize) -> Result<Cow<'_, BlockWeights>> {
        read_block(&self.file, &self.config, b).map(Cow::Owned)
    }
}

/// Checks tensor `name` exists with the dims of `rows` rows of `cols` values (a vector when
/// `rows` is 1).
fn check_dims(file: &GgufFile, name: &str, rows: usize, cols: usize) -> Result<()> {
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
    Ok(())
}

/// Reads tensor `name` as `rows` rows of `cols` values (a vector when `rows` is 1), checking
/// its dims first.
fn read_matrix(file: &GgufFile, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
    check_dims(file, name, rows, cols)?;
    file.read_tensor_f32(name)
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn available_host_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
