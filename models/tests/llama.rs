//! The llama config, the RoPE convention and un-permutation, the host-memory check and the host
//! reference forward on the synthetic models.

mod common;

use common::TempFile;
use std::sync::Arc;

use ttmesh_models::gguf::{GgufFile, GgufWriter, MetadataValue, WriteTensor};
use ttmesh_models::rope::{
    apply_rope_half, apply_rope_interleaved, gguf_row_of_hf_row, permute_rows_to_gguf, rope_angles,
    rope_tables, unpermute_rows_from_gguf,
};
use ttmesh_models::synthetic::{synthetic_llama, write_synthetic_llama, SyntheticConfig};
use ttmesh_models::{
    argmax, GgufTokenizer, HostReference, LlamaConfig, LlamaWeights, LoadOptions, ModelError,
};

fn temp_path(name: &str) -> TempFile {
    TempFile::new(name)
}

fn synthetic(cfg: &SyntheticConfig, name: &str) -> (TempFile, Arc<LlamaWeights>) {
    let path = temp_path(name);
    write_synthetic_llama(&path, cfg).unwrap();
    let weights = LlamaWeights::load(&path, LoadOptions::default()).unwrap();
    (path, Arc::new(weights))
}

/// A deterministic pseudo-random vector (no generator shared with the code under test).
fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503));
            ((x >> 8) % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

#[test]
fn config_from_synthetic_gguf() {
    for cfg in [SyntheticConfig::small(), SyntheticConfig::heads_9_kv_3()] {
        let path = temp_path("config.gguf");
        write_synthetic_llama(&path, &cfg).unwrap();
        let c = LlamaConfig::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
        assert_eq!(c.block_count, cfg.block_count);
        assert_eq!(c.hidden_size, cfg.hidden_size);
        assert_eq!(c.ffn_size, cfg.ffn_size);
        assert_eq!(
            (c.head_count, c.kv_head_count, c.head_dim),
            (cfg.head_count, cfg.kv_head_count, 32)
        );
        assert_ne!(
            c.head_count, c.kv_head_count,
            "the synthetic models use GQA"
        );
        assert_eq!(c.vocab_size, cfg.vocab_size);
        assert_eq!(c.rope_base, cfg.rope_base);
        assert_eq!(c.rms_norm_eps, cfg.rms_norm_eps);
        assert!(c.tied_embeddings);
    }
}

fn with_metadata(key: &str, value: MetadataValue) -> GgufWriter {
    let mut w = synthetic_llama(&SyntheticConfig::small());
    w.metadata(key, value);
    w
}

#[test]
fn unsupported_architecture_and_bad_shapes_are_named() {
    // A later duplicate key is refused by the reader; build files whose values are wrong instead.
    let mut w = GgufWriter::new();
    w.metadata(
        "general.architecture",
        MetadataValue::String("mamba".into()),
    );
    let path = temp_path("mamba.gguf");
    w.write(&path).unwrap();
    let err = LlamaConfig::from_gguf(&GgufFile::open(&path).unwrap()).unwrap_err();
    assert!(matches!(err, ModelError::UnsupportedArchitecture { .. }));
    assert!(
        err.to_string().contains("\"mamba\"")
            && err.to_string().contains(&path.display().to_string())
    );

    let path = temp_path("dup.gguf");
    with_metadata("llama.block_count", MetadataValue::U32(3))
        .write(&path)
        .unwrap();
    let err = GgufFile::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("llama.block_count") && err.contains("twice"),
        "{err}"
    );

    let mut w = GgufWriter::new();
    for (k, v) in [
        (
            "general.architecture",
            MetadataValue::String("llama".into()),
        ),
        ("llama.block_count", MetadataValue::U32(1)),
        ("llama.embedding_length", MetadataValue::U32(96)),
        ("llama.feed_forward_length", MetadataValue::U32(64)),
        ("llama.attention.head_count", MetadataValue::U32(3)),
        ("llama.attention.head_count_kv", MetadataValue::U32(2)),
        ("llama.context_length", MetadataValue::U32(64)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            MetadataValue::F32(1e-5),
        ),
    ] {
        w.metadata(k, v);
    }
    let path = temp_path("gqa.gguf");
    w.write(&path).unwrap();
    let err = LlamaConfig::from_gguf(&GgufFile::open(&path).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("llama.attention.head_count_kv") && err.contains("2 KV heads"),
        "{err}"
    );

    let mut w = GgufWriter::new();
    w.metadata(
        "general.architecture",
        MetadataValue::String("llama".into()),
    )
    .metadata("llama.block_count", MetadataValue::String("thirty".into()));
    let path = temp_path("type.gguf");
    w.write(&path).unwrap();
    let err = LlamaConfig::from_gguf(&GgufFile::open(&path).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("llama.block_count has type string"), "{err}");
}

#[test]
fn missing_or_misshapen_tensors_are_named() {
    let cfg = SyntheticConfig::small();
    let mut w = synthetic_llama(&cfg);
    // An output.weight of the wrong shape: untied, and refused by name.
    w.tensor(WriteTensor {
        name: "output.weight".into(),
        dims: vec![64, 320],
        ty: ttmesh_models::gguf::GgmlType::F32,
        values: vec![0.0; 64 * 320],
    });
    let path = temp_path("bad_output.gguf");
    w.write(&path).unwrap();
    let err = LlamaWeights::load(&path, LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("output.weight") && err.contains("[64, 320]") && err.contains("[128, 320]"),
        "{err}"
    );
}

#[test]
fn too_large_for_host_memory_is_refused_before_loading() {
    let path = temp_path("memory.gguf");
    write_synthetic_llama(&path, &SyntheticConfig::small()).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let weight_bytes = LlamaWeights::f32_bytes(&config);
    let options = LoadOptions {
        host_memory_limit: Some(weight_bytes - 1),
        kv_batch: 1,
        kv_positions: 16,
    };
    let err = LlamaWeights::from_gguf(&file, options).unwrap_err();
    let ModelError::HostMemory {
        needed_bytes,
        kv_cache_bytes,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(*kv_cache_bytes, config.kv_cache_bytes(1, 16));
    assert_eq!(*needed_bytes, weight_bytes + kv_cache_bytes);
    let msg = err.to_string();
    assert!(
        msg.contains(&weight_bytes.to_string()) && msg.contains(&(weight_bytes - 1).to_string()),
        "{msg}"
    );
    // The parameter count matches the tensors in the file.
    let elements: u64 = file.tensors().iter().map(|t| t.element_count()).sum();
    assert_eq!(config.parameter_count(), elements);
}

/// The GGUF row permutation and RoPE conventions, checked numerically: interleaved-pair RoPE on
/// q computed with the raw GGUF rows equals rotate_half RoPE on q computed with the un-permuted
/// rows, element for element after the matching permutation of outputs, and attention scores
/// (q . k) are the same either way.
#[test]
fn gguf_rows_with_interleaved_rope_equal_unpermuted_rows_with_rotate_half() {
    let (heads, kv_heads, head_dim, cols) = (3, 1, 8, 5);
    let wq_gguf = values(heads * head_dim * cols, 1);
    let wk_gguf = values(kv_heads * head_dim * cols, 2);
    let x = values(cols, 3);
    let project = |w: &[f32]| -> Vec<f32> {
        w.chunks_exact(cols)
            .map(|row| row.iter().zip(&x).map(|(a, b)| a * b).sum())
            .collect()
    };
    let wq_hf = unpermute_rows_from_gguf(&wq_gguf, heads, head_dim, cols);
    let wk_hf = unpermute_rows_from_gguf(&wk_gguf, kv_heads, head_dim, cols);
    assert_eq!(permute_rows_to_gguf(&wq_hf, heads, head_dim, cols), wq_gguf);
    assert_ne!(wq_hf, wq_gguf);

    for (position, base) in [(0, 10_000.0), (7, 10_000.0), (123, 100_000.0)] {
        let angles = rope_angles(position, head_dim, base);
        let mut q_interleaved = project(&wq_gguf);
        apply_rope_interleaved(&mut q_interleaved, head_dim, &angles);
        let mut q_half = project(&wq_hf);
        apply_rope_half(&mut q_half, head_dim, &angles);
        for h in 0..heads {
            for hf_row in 0..head_dim {
                let a = q_half[h * head_dim + hf_row];
                let b = q_interleaved[h * head_dim + gguf_row_of_hf_row(hf_row, head_dim)];
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + a.abs()),
                    "pos {position} head {h} row {hf_row}: {a} vs {b}"
                );
            }
        }
        let mut k_interleaved = project(&wk_gguf);
        apply_rope_interleaved(
            &mut k_interleaved,
            head_dim,
            &rope_angles(position / 2, head_dim, base),
        );
        let mut k_half = project(&wk_hf);
        apply_rope_half(
            &mut k_half,
            head_dim,
            &rope_angles(position / 2, head_dim, base),
        );
        for h in 0..heads {
            let dot = |q: &[f32], k: &[f32]| -> f32 {
                q[h * head_dim..(h + 1) * head_dim]
                    .iter()
                    .zip(k)
                    .map(|(a, b)| a * b)
                    .sum()
            };
            let (s1, s2) = (dot(&q_interleaved, &k_interleaved), dot(&q_half, &k_half));
            assert!(
                (s1 - s2).abs() <= 1e-4 * (1.0 + s1.abs()),
                "score {s1} vs {s2}"
            );
        }
    }
    // Position 0 rotates nothing; rotate_half pairs element i with i + d/2.
    let mut v: Vec<f32> = (0..8).map(|i| i as f32).collect();
    apply_rope_half(&mut v, 8, &rope_angles(0, 8, 10_000.0));
    assert_eq!(v, (0..8).map(|i| i as f32).collect::<Vec<_>>());
    let mut v = vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    apply_rope_half(&mut v, 8, &[(0.0, 1.0); 4]); // a quarter turn of every pair
    assert_eq!(v, [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
}

/// The device's table form of RoPE (`x * cos + rotate_half(x) * sin`) equals apply_rope_half.
#[test]
fn rope_tables_match_apply_rope_half() {
    let (max_positions, head_dim, base) = (40, 16, 100_000.0);
    let (cos, sin) = rope_tables(max_positions, head_dim, base);
    assert_eq!(cos.len(), max_positions * head_dim);
    let x = values(2 * head_dim, 9);
    for p in [0, 1, 39] {
        let mut expected = x.clone();
        apply_rope_half(&mut expected, head_dim, &rope_angles(p, head_dim, base));
        for head in 0..2 {
            let xh = &x[head * head_dim..(head + 1) * head_dim];
            for i in 0..head_dim {
                let rotated = if i < head_dim / 2 {
                    -xh[i + head_dim / 2]
                } else {
                    xh[i - head_dim / 2]
                };
                let got = xh[i] * cos[p * head_dim + i] + rotated * sin[p * head_dim + i];
                let e = expected[head * head_dim + i];
                assert!(
                    (got - e).abs() <= 1e-6 * (1.0 + e.abs()),
                    "p {p} i {i}: {got} vs {e}"
                );
            }
        }
    }
}

#[test]
fn loader_unpermutes_q_and_k_rows() {
    let cfg = SyntheticConfig::small();
    let (path, weights) = synthetic(&cfg, "unpermute.gguf");
    let file = GgufFile::open(&path).unwrap();
    let raw_q = file.read_tensor_f32("blk.1.attn_q.weight").unwrap();
    let raw_v = file.read_tensor_f32("blk.1.attn_v.weight").unwrap();
    let h = cfg.hidden_size;
    let blk = &weights.blocks[1];
    // HF row 1 of head 2 is GGUF row 2 of head 2; row 16 (first of the second half) is row 1.
    assert_eq!(
        blk.wq[(2 * 32 + 1) * h..(2 * 32 + 2) * h],
        raw_q[(2 * 32 + 2) * h..(2 * 32 + 3) * h]
    );
    assert_eq!(blk.wq[16 * h..17 * h], raw_q[h..2 * h]);
    assert_eq!(blk.wv, raw_v, "V is not permuted");
}

#[test]
fn synthetic_model_generates_deterministic_tokens() {
    let (path, weights) = synthetic(&SyntheticConfig::small(), "gen.gguf");
    let tok = GgufTokenizer::load(&path).unwrap();
    let prompt = tok.encode("Once upon a time").unwrap();
    let mut reference = HostReference::new(Arc::clone(&weights), 1, 64).unwrap();
    let ids = reference.generate(&prompt, 16).unwrap();
    assert_eq!(ids.len(), 16);
    // A second model from a second file written from the same seed generates the same.
    let (_, again) = synthetic(&SyntheticConfig::small(), "gen2.gguf");
    let mut reference2 = HostReference::new(again, 1, 64).unwrap();
    assert_eq!(reference2.generate(&prompt, 16).unwrap(), ids);
    println!(
        "synthetic prompt {prompt:?} -> {ids:?} {:?}",
        tok.decode(&ids).unwrap()
    );
    // Pinned: a change here means the reference forward, the writer or the generator changed.
    assert_eq!(ids, SMALL_EXPECTED);
    let distinct: std::collections::BTreeSet<_> = ids.iter().collect();
    assert!(
        distinct.len() > 1,
        "the synthetic model should not be degenerate: {ids:?}"
    );
}

const SMALL_EXPECTED: [u32; 16] = [
    7, 133, 133, 304, 272, 234, 288, 105, 105, 146, 10, 219, 93, 130, 130, 217,
];

/// Every greedy choice of the synthetic models wins by a margin far above f32 rounding, so a
/// device forward in f32 (other summation order) must pick the same tokens.
#[test]
fn synthetic_greedy_choices_have_clear_margins() {
    for cfg in [SyntheticConfig::small(), SyntheticConfig::heads_9_kv_3()] {
        let (path, weights) = synthetic(&cfg, "margin.gguf");
        let prompt = GgufTokenizer::load(&path)
            .unwrap()
            .encode("Once upon a time")
            .unwrap();
        let mut r = HostReference::new(Arc::clone(&weights), 1, 64).unwrap();
        let mut token = prompt[0];
        let mut smallest = f32::INFINITY;
        for pos in 0..prompt.len() + 15 {
            let logits = r.forward_decode(&[token], &[pos]).unwrap();
            let best = argmax(&logits) as usize;
            let runner_up = logits
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != best)
                .map(|(_, &v)| v)
                .fold(f32::NEG_INFINITY, f32::max);
            if pos + 1 >= prompt.len() {
                smallest = smallest.min(logits[best] - runner_up);
            }
            token = prompt.get(pos + 1).copied().unwrap_or(best as u32);
        }
        println!(
            "{} heads: smallest greedy margin {smallest}",
            cfg.head_count
        );
        assert!(
            smallest > 1e-3,
            "{} heads: margin {smallest}",
            cfg.head_count
        );
    }
}

#[test]
fn batch_users_at_their_own_positions_match_single_runs() {
    let (path, weights) = synthetic(&SyntheticConfig::heads_9_kv_3(), "batch.gguf");
    let tok = GgufTokenizer::load(&path).unwrap();
    let prompts: Vec<Vec<u32>> = [
        "Once upon a time",
        "The forest",
        "Little Red Riding Hood went",
    ]
    .iter()
    .map(|p| tok.encode(p).unwrap())
    .collect();
    let refs: Vec<&[u32]> = prompts.iter().map(|p| p.as_slice()).collect();
    let mut batched = HostReference::new(Arc::clone(&weights), 3, 64).unwrap();
    let together = batched.generate_batch(&refs, 8).unwrap();
    for (prompt, expected) in prompts.iter().zip(&together) {
        let mut single = HostReference::new(Arc::clone(&weights), 1, 64).unwrap();
        assert_eq!(&single.generate(prompt, 8).unwrap(), expected);
    }

    // forward_decode with different positions per user equals each user's own run.
    let mut a = HostReference::new(Arc::clone(&weights), 2, 8).unwrap();
    a.forward_decode(&[5, 6], &[0, 0]).unwrap();
    a.forward_decode(&[7, 8], &[1, 1]).unwrap();
    let both = a.forward_decode(&[9, 10], &[2, 0]).unwrap(); // user 1 restarts at position 0
    let mut b = HostReference::new(Arc::clone(&weights), 1, 8).unwrap();
    let alone = b.forward_decode(&[10], &[0]).unwrap();
    let vocab = weights.config.vocab_size;
    assert_eq!(&both[vocab..], &alone[..]);
    assert_eq!(argmax(&both[vocab..]), argmax(&alone));
}

#[test]
fn reference_refuses_bad_steps() {
    let (_, weights) = synthetic(&SyntheticConfig::small(), "bad_steps.gguf");
    let mut r = HostReference::new(weights, 2, 4).unwrap();
    let msg = |e: ModelError| e.to_string();
    assert!(msg(r.forward_decode(&[1], &[0]).unwrap_err()).contains("batch of 1"));
    assert!(msg(r.forward_decode(&[1, 320], &[0, 0]).unwrap_err()).contains("token id 320"));
    let e = msg(r.forward_decode(&[1, 2], &[0, 4]).unwrap_err());
    assert!(e.contains("position 4") && e.contains("(4)"), "{e}");
    let e = msg(r.generate_batch(&[&[1, 2, 3], &[1]], 3).unwrap_err());
    assert!(e.contains("position 4"), "{e}");
    assert!(msg(r.generate(&[1], 1).unwrap_err()).contains("batch of 1"));
    assert!(
        msg(HostReference::new(r.weights().clone().into(), 0, 4).unwrap_err()).contains("batch")
    );
}

#[test]
fn kv_cache_larger_than_host_memory_is_refused() {
    let cfg = SyntheticConfig {
        context_length: 1 << 24,
        ..SyntheticConfig::small()
    };
    let (_, weights) = synthetic(&cfg, "long_context.gguf");
    // 2 (K, V) x 2 blocks x 32 users x 2^24 positions x 64 values x 4 bytes = 512 GiB.
    let err = HostReference::new(weights, 32, 1 << 24).unwrap_err();
    assert!(
        matches!(err, ModelError::KvCacheMemory { needed_bytes, .. } if needed_bytes == 1 << 39),
        "{err}"
    );
    assert!(err.to_string().contains("549755813888 bytes"), "{err}");
}

#[test]
fn argmax_picks_the_first_maximum() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
    assert_eq!(argmax(&[-5.0]), 0);
}
