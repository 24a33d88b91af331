//! Small llama models with fixed-seed random weights, written as real GGUF files (so they go
//! through the same reader, dequantisation, un-permutation and tokenizer as a downloaded model).
//! They keep the architecture's features: grouped-query attention, tied embeddings, RoPE, and a
//! byte-level BPE vocabulary (all 256 bytes plus merges learnt from a fixed text), so any text
//! round-trips. The tensors mix F32, F16, Q8_0 and Q4_1 so the quantised paths are exercised.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::LlamaConfig;
use crate::error::Result;
use crate::gguf::{GgmlType, GgufWriter, MetadataValue, WriteTensor};
use crate::rope::permute_rows_to_gguf;

/// Shape and seed of a synthetic model.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticConfig {
    pub block_count: usize,
    pub hidden_size: usize,
    pub ffn_size: usize,
    pub head_count: usize,
    pub kv_head_count: usize,
    /// Total vocabulary: 256 bytes + merges + 3 control tokens.
    pub vocab_size: usize,
    pub context_length: usize,
    pub rope_base: f32,
    pub rms_norm_eps: f32,
    pub seed: u64,
}

impl SyntheticConfig {
    /// 2 blocks, hidden 128, 4 query heads over 2 KV heads (head dim 32), FFN 256, vocab 320.
    pub fn small() -> Self {
        Self {
            block_count: 2,
            hidden_size: 128,
            ffn_size: 256,
            head_count: 4,
            kv_head_count: 2,
            vocab_size: 320,
            context_length: 256,
            rope_base: 10_000.0,
            rms_norm_eps: 1e-5,
            seed: 0x5eed_11a4a,
        }
    }

    /// SmolLM2's head layout at small scale: 9 query heads over 3 KV heads (head dim 32, hidden
    /// 288), FFN 512, for tensor-parallel padding tests.
    pub fn heads_9_kv_3() -> Self {
        Self {
            hidden_size: 288,
            ffn_size: 512,
            head_count: 9,
            kv_head_count: 3,
            seed: 0x0093_5eed,
            ..Self::small()
        }
    }

    /// SmolLM2-135M's shape (30 blocks, hidden 576, 9 query heads over 3 KV heads, FFN 1536,
    /// vocab 49152), with random weights.
    pub fn smollm2_135m() -> Self {
        Self {
            block_count: 30,
            hidden_size: 576,
            ffn_size: 1536,
            head_count: 9,
            kv_head_count: 3,
            vocab_size: 49152,
            context_length: 8192,
            rope_base: 100_000.0,
            rms_norm_eps: 1e-5,
            seed: 0x5307_1135,
        }
    }

    /// Llama-3.2-1B's shape (16 blocks, hidden 2048, 32 query heads over 8 KV heads, FFN 8192,
    /// vocab 128256, 1.24 B parameters with tied embeddings), with random weights: for sizing
    /// and timing a model of that size when its real weights are not at hand.
    pub fn llama_3_2_1b() -> Self {
        Self {
            block_count: 16,
            hidden_size: 2048,
            ffn_size: 8192,
            head_count: 32,
            kv_head_count: 8,
            vocab_size: 128_256,
            context_length: 131_072,
            rope_base: 500_000.0,
            rms_norm_eps: 1e-5,
            seed: 0x1a3a_0321,
        }
    }

    /// Llama-3.1-8B's shape (32 blocks, hidden 4096, 32 query heads over 8 KV heads, FFN
    /// 14336, vocab 128256), with random weights; the embedding is tied (the real model has a
    /// separate LM head), so 7.5 B parameters rather than 8.0 B.
    pub fn llama_3_1_8b() -> Self {
        Self {
            block_count: 32,
            hidden_size: 4096,
            ffn_size: 14336,
            seed: 0x1a3a_1808,
            ..Self::llama_3_2_1b()
        }
    }

    /// The shapes [`SyntheticConfig::named`] knows.
    pub const NAMES: [&'static str; 4] = ["small", "smollm2-135m", "llama-3.2-1b", "llama-3.1-8b"];

    /// A shape by name (one of [`SyntheticConfig::NAMES`]).
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "small" => Some(Self::small()),
            "smollm2-135m" => Some(Self::smollm2_135m()),
            "llama-3.2-1b" => Some(Self::llama_3_2_1b()),
            "llama-3.1-8b" => Some(Self::llama_3_1_8b()),
            _ => None,
        }
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.head_count
    }

    /// The config [`LlamaConfig::from_gguf`] reads back from the written file (embeddings
    /// tied): for sizing the model without writing it.
    pub fn llama_config(&self) -> LlamaConfig {
        LlamaConfig {
            block_count: self.block_count,
            hidden_size: self.hidden_size,
            ffn_size: self.ffn_size,
            head_count: self.head_count,
            kv_head_count: self.kv_head_count,
            head_dim: self.head_dim(),
            vocab_size: self.vocab_size,
            context_length: self.context_length,
            rope_base: self.rope_base,
            rms_norm_eps: self.rms_norm_eps,
            tied_embeddings: true,
        }
    }
}

/// The control tokens at the end of the vocabulary; the first is BOS/EOS.
pub const CONTROL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// The text the synthetic vocabulary's merges are learnt from.
const MERGE_TEXT: &str = "Once upon a time there was a little girl who lived in a village near the forest. \
Whenever she went out, the little girl wore a red riding cloak, so everyone in the village called her \
Little Red Riding Hood. One morning she set out to visit her grandmother, who lived on the other side \
of the forest, and the sun was shining and the birds were singing in the trees.";

/// GPT-2's byte-to-character map: printable bytes map to themselves, the rest to U+0100 onward
/// in byte order, so every byte is one visible character.
pub fn byte_to_char() -> [char; 256] {
    let printable = |b: u32| {
        (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b)
    };
    let mut out = ['\0'; 256];
    let mut next = 0x100;
    for (b, slot) in out.iter_mut().enumerate() {
        let b = b as u32;
        *slot = if printable(b) {
            char::from_u32(b).expect("printable byte is a char")
        } else {
            next += 1;
            char::from_u32(next - 1).expect("U+0100.. are chars")
        };
    }
    out
}

/// The vocabulary (`tokens`, in id order) and merges: 256 byte tokens, then `merge_count`
/// merges learnt by counting adjacent pairs in a fixed English paragraph (most frequent first, ties by
/// the pair's text), then the control tokens.
pub fn byte_level_vocabulary(merge_count: usize) -> (Vec<String>, Vec<String>) {
    let map = byte_to_char();
    let mut tokens: Vec<String> = map.iter().map(|c| c.to_string()).collect();
    // Words as GPT-2's split makes them: a leading space stays with the word after it.
    let mut words: Vec<Vec<String>> = Vec::new();
    for (i, word) in MERGE_TEXT.split(' ').enumerate() {
        let text = if i == 0 {
            word.to_string()
        } else {
            format!(" {word}")
        };
        words.push(text.bytes().map(|b| map[b as usize].to_string()).collect());
    }
    let mut merges = Vec::with_capacity(merge_count);
    for _ in 0..merge_count {
        let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
        for w in &words {
            for pair in w.windows(2) {
                *counts
                    .entry((pair[0].clone(), pair[1].clone()))
                    .or_default() += 1;
            }
        }
        let Some(((a, b), _)) = counts
            .into_iter()
            .max_by(|x, y| x.1.cmp(&y.1).then(y.0.cmp(&x.0)))
        else {
            break;
        };
        let joined = format!("{a}{b}");
        for w in &mut words {
            let mut merged = Vec::with_capacity(w.len());
            let mut i = 0;
            while i < w.len() {
                if i + 1 < w.len() && w[i] == a && w[i + 1] == b {
                    merged.push(joined.clone());
                    i += 2;
                } else {
                    merged.push(w[i].clone());
                    i += 1;
                }
            }
            *w = merged;
        }
        merges.push(format!("{a} {b}"));
        tokens.push(joined);
    }
    tokens.extend(CONTROL_TOKENS.iter().map(|s| s.to_string()));
    (tokens, merges)
}

/// The vocabulary of `vocab_size` tokens and its merges: [`byte_level_vocabulary`], and when
/// the paragraph teaches too few merges (a few hundred), reserved tokens before the control
/// tokens (plain tokens no merge reaches, so encoding never produces them), so the embedding
/// and LM head have the model's real size.
pub fn synthetic_vocabulary(vocab_size: usize) -> (Vec<String>, Vec<String>) {
    let merge_count = vocab_size.saturating_sub(256 + CONTROL_TOKENS.len());
    let (mut tokens, merges) = byte_level_vocabulary(merge_count);
    let control_at = tokens.len() - CONTROL_TOKENS.len();
    let missing = vocab_size.saturating_sub(tokens.len());
    tokens.splice(
        control_at..control_at,
        (0..missing).map(|i| format!("<reserved_{i}>")),
    );
    (tokens, merges)
}

/// Uniform bound of the token embedding: small beside the blocks' unit-scale outputs, so the
/// residual stream is not just the input token's embedding (with tied embeddings, that would make
/// the model echo its last token forever).
const EMBEDDING_SCALE: f32 = 0.1;

/// SplitMix64: a fixed, dependency-free generator so the weights never change.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn fill(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.unit()).collect()
    }
}

/// The GGUF writer holding the synthetic model `cfg`.
pub fn synthetic_llama(cfg: &SyntheticConfig) -> GgufWriter {
    let mut w = GgufWriter::new();
    fill_synthetic_llama(cfg, &mut w);
    w
}

/// Gives `w` the synthetic model's metadata and tensors, in file order.
fn fill_synthetic_llama(cfg: &SyntheticConfig, w: &mut GgufWriter) {
    let (tokens, merges) = synthetic_vocabulary(cfg.vocab_size);
    let vocab_size = tokens.len();
    let control_start = vocab_size - CONTROL_TOKENS.len();
    let (h, f, hd) = (cfg.hidden_size, cfg.ffn_size, cfg.head_dim());
    let (q_dim, kv_dim) = (cfg.head_count * hd, cfg.kv_head_count * hd);

    let u32v = |v: usize| MetadataValue::U32(v as u32);
    w.metadata(
        "general.architecture",
        MetadataValue::String("llama".into()),
    )
    .metadata(
        "general.name",
        MetadataValue::String("ttmesh synthetic llama".into()),
    )
    .metadata("llama.block_count", u32v(cfg.block_count))
    .metadata("llama.context_length", u32v(cfg.context_length))
    .metadata("llama.embedding_length", u32v(h))
    .metadata("llama.feed_forward_length", u32v(f))
    .metadata("llama.attention.head_count", u32v(cfg.head_count))
    .metadata("llama.attention.head_count_kv", u32v(cfg.kv_head_count))
    .metadata("llama.rope.freq_base", MetadataValue::F32(cfg.rope_base))
    .metadata("llama.rope.dimension_count", u32v(hd))
    .metadata(
        "llama.attention.layer_norm_rms_epsilon",
        MetadataValue::F32(cfg.rms_norm_eps),
    )
    .metadata("llama.vocab_size", u32v(vocab_size))
    .metadata("tokenizer.ggml.model", MetadataValue::String("gpt2".into()))
    .metadata("tokenizer.ggml.pre", MetadataValue::String("gpt2".into()))
    .metadata("tokenizer.ggml.tokens", MetadataValue::string_array(tokens))
    .metadata(
        "tokenizer.ggml.token_type",
        MetadataValue::i32_array((0..vocab_size).map(|i| if i >= control_start { 3 } else { 1 })),
    )
    .metadata("tokenizer.ggml.merges", MetadataValue::string_array(merges))
    .metadata("tokenizer.ggml.bos_token_id", u32v(control_start))
    .metadata("tokenizer.ggml.eos_token_id", u32v(control_start))
    .metadata("tokenizer.ggml.add_bos_token", MetadataValue::Bool(false));

    let mut rng = SplitMix64(cfg.seed);
    let mut tensor = |name: String, dims: Vec<usize>, ty: GgmlType, values: Vec<f32>| {
        w.tensor(WriteTensor {
            name,
            dims: dims.iter().map(|&d| d as u64).collect(),
            ty,
            values,
        });
    };
    // Uniform weights with variance 1/fan_in keep activations near unit scale.
    let init = |rng: &mut SplitMix64, rows: usize, cols: usize| {
        rng.fill(rows * cols, (3.0 / cols as f32).sqrt(), 0.0)
    };
    tensor(
        "token_embd.weight".into(),
        vec![h, vocab_size],
        GgmlType::Q8_0,
        rng.fill(vocab_size * h, EMBEDDING_SCALE, 0.0),
    );
    for b in 0..cfg.block_count {
        let name = |t: &str| format!("blk.{b}.{t}.weight");
        let wq = init(&mut rng, q_dim, h);
        let wk = init(&mut rng, kv_dim, h);
        tensor(
            name("attn_norm"),
            vec![h],
            GgmlType::F32,
            rng.fill(h, 0.1, 1.0),
        );
        tensor(
            name("attn_q"),
            vec![h, q_dim],
            GgmlType::F16,
            permute_rows_to_gguf(&wq, cfg.head_count, hd, h),
        );
        tensor(
            name("attn_k"),
            vec![h, kv_dim],
            GgmlType::Q4_1,
            permute_rows_to_gguf(&wk, cfg.kv_head_count, hd, h),
        );
        tensor(
            name("attn_v"),
            vec![h, kv_dim],
            GgmlType::Q8_0,
            init(&mut rng, kv_dim, h),
        );
        tensor(
            name("attn_output"),
            vec![q_dim, h],
            GgmlType::F32,
            init(&mut rng, h, q_dim),
        );
        tensor(
            name("ffn_norm"),
            vec![h],
            GgmlType::F32,
            rng.fill(h, 0.1, 1.0),
        );
        tensor(
            name("ffn_gate"),
            vec![h, f],
            GgmlType::Q4_1,
            init(&mut rng, f, h),
        );
        tensor(
            name("ffn_up"),
            vec![h, f],
            GgmlType::F16,
            init(&mut rng, f, h),
        );
        tensor(
            name("ffn_down"),
            vec![f, h],
            GgmlType::Q8_0,
            init(&mut rng, h, f),
        );
    }
    tensor(
        "output_norm.weight".into(),
        vec![h],
        GgmlType::F32,
        rng.fill(h, 0.1, 1.0),
    );
}

/// Writes the synthetic model `cfg` to `path` as GGUF v3, holding one tensor at a time (the
/// data goes to `path` + ".data" as it is made, then after the header into `path`).
pub fn write_synthetic_llama(path: &Path, cfg: &SyntheticConfig) -> Result<()> {
    let mut spill = path.as_os_str().to_owned();
    spill.push(".data");
    let mut w = GgufWriter::spilling_to(Path::new(&spill))?;
    fill_synthetic_llama(cfg, &mut w);
    w.write(path)
}
