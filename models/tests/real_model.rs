//! SmolLM2-135M-Instruct through the host reference, when the file is present
//! (`scripts/fetch-model.sh`, or `TTMESH_MODEL=path`). Skipped, saying so, when it is not.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use ttmesh_models::gguf::{GgmlType, GgufFile};
use ttmesh_models::{GgufTokenizer, HostReference, LlamaConfig, LlamaWeights, LoadOptions};

/// The host reference's 32 greedy tokens (f32) after "Once upon a time": ", the city of Nova
/// Haven was a thriving metropolis, with towering skyscrapers and bustling streets. But as the
/// years went by, the city began to lose its original".
pub const ONCE_UPON_A_TIME_32: [u32; 32] = [
    28, 260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228, 28, 351, 25854, 41658, 284, 14055,
    9018, 30, 1249, 347, 260, 929, 3514, 411, 28, 260, 2240, 2585, 288, 5946, 624, 2798,
];

fn model_path(test: &str) -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = ttmesh_models::real_model_path(&root);
    if path.is_none() {
        eprintln!(
            "SKIPPED {test}: SmolLM2 not present (run scripts/fetch-model.sh or set TTMESH_MODEL)"
        );
    }
    path
}

#[test]
fn smollm2_config_and_tensor_types() {
    let Some(path) = model_path("smollm2_config_and_tensor_types") else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let c = LlamaConfig::from_gguf(&file).unwrap();
    assert_eq!(
        (
            c.block_count,
            c.hidden_size,
            c.ffn_size,
            c.head_count,
            c.kv_head_count,
            c.head_dim
        ),
        (30, 576, 1536, 9, 3, 64)
    );
    assert_eq!(
        (c.vocab_size, c.context_length, c.rope_base),
        (49152, 8192, 100_000.0)
    );
    assert!((c.rms_norm_eps - 1e-5).abs() < 1e-9);
    assert!(c.tied_embeddings);
    assert_eq!(file.tensors().len(), 272);
    let count = |ty| file.tensors().iter().filter(|t| t.ty == ty).count();
    assert_eq!(
        (
            count(GgmlType::Q4_1),
            count(GgmlType::F32),
            count(GgmlType::Q8_0)
        ),
        (210, 61, 1)
    );
    // Spot values of the dequantised embedding: finite and of sensible size.
    let embd = file.read_tensor_f32("token_embd.weight").unwrap();
    assert_eq!(embd.len(), 49152 * 576);
    assert!(embd.iter().all(|v| v.is_finite() && v.abs() < 10.0));
}

#[test]
fn smollm2_once_upon_a_time_32_tokens() {
    let Some(path) = model_path("smollm2_once_upon_a_time_32_tokens") else {
        return;
    };
    let started = Instant::now();
    let weights = Arc::new(
        LlamaWeights::load(
            &path,
            LoadOptions {
                kv_batch: 1,
                kv_positions: 64,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let load_time = started.elapsed();
    let tok = GgufTokenizer::load(&path).unwrap();
    let prompt = tok.encode("Once upon a time").unwrap();
    assert_eq!(prompt, [6403, 1980, 253, 655]);
    let mut reference = HostReference::new(weights, 1, 64).unwrap();
    let started = Instant::now();
    let ids = reference.generate(&prompt, 32).unwrap();
    let steps = prompt.len() + 31;
    let per_step = started.elapsed() / steps as u32;
    let text = tok.decode(&ids).unwrap();
    println!("load + dequantise: {load_time:?}; host reference decode step (batch 1, f32): {per_step:?} over {steps} steps");
    println!("ids: {ids:?}");
    println!("text: Once upon a time{text}");
    assert_eq!(ids, ONCE_UPON_A_TIME_32, "text: {text:?}");
}
