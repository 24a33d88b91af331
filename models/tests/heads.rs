//! Head layouts for tensor parallelism: padded and replicated heads change nothing.

mod common;

use std::sync::Arc;

use ttmesh_models::synthetic::{write_synthetic_llama, SyntheticConfig};
use ttmesh_models::{argmax, HeadLayout, HostReference, LlamaWeights, LoadOptions, ModelError};

#[test]
fn smollm2_heads_on_8_chips_pad_to_16_over_8() {
    let l = HeadLayout::plan(9, 3, 8).unwrap();
    assert_eq!((l.kv_slots_per_chip, l.q_per_slot), (1, 2));
    assert_eq!((l.padded_head_count(), l.padded_kv_head_count()), (16, 8));
    // KV head 0's query heads 0, 1, 2 sit on chips 0 (heads 0, 1) and 1 (head 2 + padding).
    assert_eq!(
        &l.kv_source,
        &[
            Some(0),
            Some(0),
            Some(1),
            Some(1),
            Some(2),
            Some(2),
            None,
            None
        ]
    );
    assert_eq!(
        &l.q_source[..6],
        &[Some(0), Some(1), Some(2), None, Some(3), Some(4)]
    );
    assert_eq!(l.q_source.iter().flatten().count(), 9);
    assert!(HeadLayout::plan(9, 3, 1).unwrap().is_identity());
    assert!(HeadLayout::plan(9, 3, 3).unwrap().is_identity());
    assert!(!HeadLayout::plan(9, 3, 2).unwrap().is_identity());
    let galaxy = HeadLayout::plan(9, 3, 32).unwrap();
    assert_eq!(
        (galaxy.padded_head_count(), galaxy.padded_kv_head_count()),
        (32, 32)
    );
    assert!(matches!(
        HeadLayout::plan(9, 2, 8),
        Err(ModelError::UnevenHeads { .. })
    ));
    assert!(HeadLayout::plan(9, 3, 0).is_err());
}

#[test]
fn padded_layouts_generate_the_same_tokens() {
    let path = common::TempFile::new("heads.gguf");
    write_synthetic_llama(&path, &SyntheticConfig::heads_9_kv_3()).unwrap();
    let weights = Arc::new(LlamaWeights::load(&path, LoadOptions::default()).unwrap());
    let prompt = [79, 110, 99, 101, 32, 117];
    let mut base = HostReference::new(Arc::clone(&weights), 1, 32).unwrap();
    let expected = base.generate(&prompt, 8).unwrap();
    let mut base = HostReference::new(Arc::clone(&weights), 1, 32).unwrap();
    let base_logits = base.forward_decode(&[prompt[0]], &[0]).unwrap();
    for chips in [1, 2, 3, 4, 5, 8, 32] {
        let layout = HeadLayout::plan(9, 3, chips).unwrap();
        let padded = Arc::new(weights.with_head_layout(&layout).unwrap());
        assert_eq!(padded.config.head_count % chips, 0);
        assert_eq!(padded.config.kv_head_count % chips, 0);
        let mut r = HostReference::new(Arc::clone(&padded), 1, 32).unwrap();
        let logits = r.forward_decode(&[prompt[0]], &[0]).unwrap();
        for (a, b) in logits.iter().zip(&base_logits) {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "{chips} chips: {a} vs {b}"
            );
        }
        assert_eq!(argmax(&logits), argmax(&base_logits));
        let mut r = HostReference::new(padded, 1, 32).unwrap();
        assert_eq!(r.generate(&prompt, 8).unwrap(), expected, "{chips} chips");
    }
    let wrong = HeadLayout::plan(4, 2, 8).unwrap();
    let err = weights.with_head_layout(&wrong).unwrap_err().to_string();
    assert!(
        err.contains("4 query heads over 2") && err.contains("9 over 3"),
        "{err}"
    );
}
