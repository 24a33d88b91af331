//! The byte-level BPE tokenizer from a GGUF's vocabulary: round trips, known ids on a
//! vocabulary built here, and SmolLM2's real vocabulary when the model file is present.

mod common;

use common::TempFile;
use std::path::PathBuf;

use proptest::prelude::*;
use ttmesh_models::gguf::{GgufFile, GgufWriter, MetadataValue};
use ttmesh_models::synthetic::{
    byte_level_vocabulary, byte_to_char, synthetic_llama, synthetic_vocabulary, SyntheticConfig,
    CONTROL_TOKENS,
};
use ttmesh_models::{GgufTokenizer, ModelError, TextStream};

fn temp_path(name: &str) -> TempFile {
    TempFile::new(name)
}

/// Writes `writer` to a file of its own (tests run in parallel) and builds its tokenizer.
fn tokenizer_from(name: &str, writer: &GgufWriter) -> Result<GgufTokenizer, ModelError> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = temp_path(&format!("{n}-{name}"));
    writer.write(&path).unwrap();
    GgufTokenizer::from_gguf(&GgufFile::open(&path)?)
}

fn synthetic_tokenizer() -> GgufTokenizer {
    tokenizer_from(
        "synthetic.gguf",
        &synthetic_llama(&SyntheticConfig::small()),
    )
    .unwrap()
}

/// A vocabulary laid out like SmolLM2's for "Once upon a time": the 256 byte tokens, filler,
/// and the merged tokens at SmolLM2's ids (6403 "Once", 1980 "Ġupon", 253 "Ġa", 655 "Ġtime"),
/// with the merges that build them, and a SmolLM2-style digit-splitting pre-tokenizer.
fn smollm_like_writer() -> GgufWriter {
    let bytes = byte_to_char();
    let mut tokens: Vec<String> = (0..7000).map(|i| format!("<filler_{i}>")).collect();
    for (b, c) in bytes.iter().enumerate() {
        tokens[b] = c.to_string();
    }
    let merges_and_ids = [
        ("O n", 300),
        ("On c", 301),
        ("Onc e", 6403),
        ("Ġ u", 302),
        ("Ġu p", 303),
        ("o n", 308),
        ("Ġup on", 1980),
        ("Ġ a", 253),
        ("Ġ t", 304),
        ("Ġt i", 305),
        ("Ġti m", 306),
        ("Ġtim e", 655),
        ("1 2", 307), // never applies: digits are split one by one first
    ];
    for (merge, id) in merges_and_ids {
        tokens[id] = merge.replace(' ', "");
    }
    tokens[0] = "<|endoftext|>".into(); // as in SmolLM2 (byte 0 moves to a filler slot)
    tokens[6999] = bytes[0].to_string();
    let types = (0..tokens.len()).map(|i| if i == 0 { 3 } else { 1 });
    let mut w = GgufWriter::new();
    w.metadata("tokenizer.ggml.model", MetadataValue::String("gpt2".into()))
        .metadata("tokenizer.ggml.pre", MetadataValue::String("smollm".into()))
        .metadata("tokenizer.ggml.tokens", MetadataValue::string_array(tokens))
        .metadata("tokenizer.ggml.token_type", MetadataValue::i32_array(types))
        .metadata(
            "tokenizer.ggml.merges",
            MetadataValue::string_array(merges_and_ids.iter().map(|(m, _)| *m)),
        )
        .metadata("tokenizer.ggml.add_bos_token", MetadataValue::Bool(false));
    w
}

#[test]
fn once_upon_a_time_on_a_built_vocabulary() {
    let tok = tokenizer_from("smollm_like.gguf", &smollm_like_writer()).unwrap();
    let ids = tok.encode("Once upon a time").unwrap();
    assert_eq!(ids, [6403, 1980, 253, 655]);
    assert_eq!(tok.decode(&ids).unwrap(), "Once upon a time");
    // Digits are split individually before BPE, so the "1 2" merge never applies.
    let b = |c: char| c as u32;
    assert_eq!(tok.encode("12").unwrap(), [b('1'), b('2')]);
    // Control tokens are matched whole.
    assert_eq!(tok.encode("a<|endoftext|>").unwrap(), [b('a'), 0]);
    assert_eq!(tok.decode(&[0]).unwrap(), "<|endoftext|>");
    // No BOS is added.
    assert_eq!(tok.encode("").unwrap(), Vec::<u32>::new());
}

#[test]
fn synthetic_vocabulary_merges_and_round_trips() {
    let (tokens, merges) = byte_level_vocabulary(61);
    assert_eq!(tokens.len(), 256 + 61 + 3);
    assert_eq!(merges.len(), 61);
    let tok = synthetic_tokenizer();
    assert_eq!(tok.vocab_size(), 320);
    let text = "the little girl lived in the village near the forest";
    let ids = tok.encode(text).unwrap();
    assert!(
        ids.len() < text.len() / 2,
        "merges should shorten common English: {ids:?}"
    );
    assert_eq!(tok.decode(&ids).unwrap(), text);
    let err = tok.decode(&[320]).unwrap_err();
    assert!(err.to_string().contains("token id 320"), "{err}");
}

#[test]
fn large_synthetic_vocabularies_are_padded_with_reserved_tokens_encoding_never_produces() {
    for name in SyntheticConfig::NAMES {
        let cfg = SyntheticConfig::named(name).unwrap();
        let (tokens, _) = synthetic_vocabulary(cfg.vocab_size);
        assert_eq!(tokens.len(), cfg.vocab_size, "{name}");
        assert_eq!(&tokens[cfg.vocab_size - 3..], &CONTROL_TOKENS[..], "{name}");
    }
    assert!(SyntheticConfig::named("llama-70b").is_none());
    // A padded vocabulary small enough to write: reserved ids decode to their names, and
    // encoding text reaches none of them.
    let cfg = SyntheticConfig {
        vocab_size: 2000,
        ..SyntheticConfig::small()
    };
    let tok = tokenizer_from("padded.gguf", &synthetic_llama(&cfg)).unwrap();
    assert_eq!(tok.vocab_size(), 2000);
    let (learnt, _) = byte_level_vocabulary(2000 - 259);
    let first_reserved = (learnt.len() - 3) as u32;
    let ids = tok
        .encode("Once upon a time there was a little girl, 42 <reserved_0> times.")
        .unwrap();
    assert!(
        ids.iter().all(|&i| i < first_reserved || i >= 1997),
        "{ids:?}"
    );
    assert_eq!(tok.decode(&[first_reserved + 5]).unwrap(), "<reserved_5>");
}

#[test]
fn streamed_text_holds_back_partial_characters() {
    let tok = synthetic_tokenizer();
    let text = "the 😀 café, naïve";
    let ids = tok.encode(text).unwrap();
    let mut stream = TextStream::new(&tok);
    let mut pieces = Vec::new();
    for &id in &ids {
        pieces.push(stream.push(id).unwrap());
    }
    pieces.push(stream.finish().unwrap());
    assert_eq!(pieces.concat(), text);
    // The emoji is 4 byte tokens: three pushes return nothing, the fourth the whole character.
    assert!(
        pieces.iter().any(|p| p == "😀" || p.ends_with('😀')),
        "{pieces:?}"
    );
    assert!(
        pieces
            .iter()
            .all(|p| !p.contains(char::REPLACEMENT_CHARACTER)),
        "{pieces:?}"
    );
    // An unfinished character at the end comes out as U+FFFD from finish().
    let mut stream = TextStream::new(&tok);
    assert_eq!(stream.push(tok.encode("e").unwrap()[0]).unwrap(), "e");
    let partial = tok.encode("😀").unwrap();
    assert_eq!(stream.push(partial[0]).unwrap(), "");
    assert_eq!(stream.finish().unwrap(), "\u{fffd}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn any_text_round_trips(text in any::<String>()) {
        let tok = synthetic_tokenizer();
        let ids = tok.encode(&text).unwrap();
        prop_assert_eq!(tok.decode(&ids).unwrap(), text);
    }

    #[test]
    fn any_text_round_trips_with_digit_splitting(text in "[ -~\\n\\t0-9éü€😀]{0,64}") {
        let tok = tokenizer_from("smollm_like_prop.gguf", &smollm_like_writer()).unwrap();
        let ids = tok.encode(&text).unwrap();
        prop_assert_eq!(tok.decode(&ids).unwrap(), text);
    }
}

#[test]
fn bad_tokenizer_metadata_is_named() {
    // An unknown pre-tokenizer and a non-BPE model are refused by name.
    let mut bad_pre = GgufWriter::new();
    bad_pre
        .metadata("tokenizer.ggml.model", MetadataValue::String("gpt2".into()))
        .metadata(
            "tokenizer.ggml.pre",
            MetadataValue::String("klingon".into()),
        )
        .metadata("tokenizer.ggml.tokens", MetadataValue::string_array(["a"]))
        .metadata(
            "tokenizer.ggml.merges",
            MetadataValue::string_array(Vec::<String>::new()),
        );
    let err = tokenizer_from("bad_pre.gguf", &bad_pre)
        .unwrap_err()
        .to_string();
    assert!(err.contains("klingon") && err.contains("smollm"), "{err}");

    let mut spm = GgufWriter::new();
    spm.metadata(
        "tokenizer.ggml.model",
        MetadataValue::String("llama".into()),
    );
    let err = tokenizer_from("spm.gguf", &spm).unwrap_err().to_string();
    assert!(
        err.contains("tokenizer.ggml.model") && err.contains("\"llama\""),
        "{err}"
    );

    let mut bad_merge = GgufWriter::new();
    bad_merge
        .metadata("tokenizer.ggml.model", MetadataValue::String("gpt2".into()))
        .metadata(
            "tokenizer.ggml.tokens",
            MetadataValue::string_array(["a", "b"]),
        )
        .metadata(
            "tokenizer.ggml.merges",
            MetadataValue::string_array(["a c"]),
        );
    let err = tokenizer_from("bad_merge.gguf", &bad_merge)
        .unwrap_err()
        .to_string();
    assert!(err.contains("merge #0") && err.contains("\"c\""), "{err}");

    let missing = GgufWriter::new();
    let err = tokenizer_from("no_tokenizer.gguf", &missing)
        .unwrap_err()
        .to_string();
    assert!(err.contains("tokenizer.ggml.model is missing"), "{err}");
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn smollm2_vocabulary_known_ids() {
    let Some(path) = ttmesh_models::real_model_path(&workspace_root()) else {
        eprintln!(
            "SKIPPED smollm2_vocabulary_known_ids: no model file (run scripts/fetch-model.sh or set TTMESH_MODEL)"
        );
        return;
    };
    let tok = GgufTokenizer::load(&path).unwrap();
    assert_eq!(tok.vocab_size(), 49152);
    assert!(!tok.add_bos);
    assert_eq!(
        tok.encode("Once upon a time").unwrap(),
        [6403, 1980, 253, 655]
    );
    for text in [
        "Hello, world! 2024 costs $3.50.",
        "  leading spaces\n\ttabs",
        "naïve café 😀",
    ] {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), text);
    }
    assert_eq!(tok.encode("<|im_start|>").unwrap(), [1]);
}
