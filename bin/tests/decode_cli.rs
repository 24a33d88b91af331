//! `ttmesh decode` as a user runs it: the synthetic model's token ids, traced and untraced,
//! equal the host reference's; bad flags exit 1 naming the flag.

use std::process::{Command, Output};
use std::sync::Arc;

use ttmesh_models::synthetic::{write_synthetic_llama, SyntheticConfig};
use ttmesh_models::{GgufTokenizer, HostReference, LlamaWeights, LoadOptions};

fn ttmesh(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ttmesh"))
        .args(args)
        .output()
        .expect("run ttmesh")
}

fn token_ids(out: &Output) -> Vec<u32> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    v["token_ids"]
        .as_array()
        .expect("token_ids")
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The synthetic model the command writes when no --model is given, and the default prompt's
/// tokens.
fn default_model_and_prompt(tag: &str) -> (Arc<LlamaWeights>, Vec<u32>) {
    let path = std::env::temp_dir().join(format!("ttmesh-{tag}-{}.gguf", std::process::id()));
    write_synthetic_llama(&path, &SyntheticConfig::small()).unwrap();
    let weights = Arc::new(LlamaWeights::load(&path, LoadOptions::default()).unwrap());
    let prompt = GgufTokenizer::load(&path)
        .unwrap()
        .encode("Once upon a time")
        .unwrap();
    let _ = std::fs::remove_file(&path);
    (weights, prompt)
}

/// `ttmesh decode --json` on an n300 in f32 for 8 tokens, with `extra` flags.
fn decode_8_on_n300(extra: &[&str]) -> (Vec<u32>, serde_json::Value) {
    let mut args = vec![
        "decode",
        "--mesh",
        "n300",
        "--dtype",
        "f32",
        "--max-new-tokens",
        "8",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = ttmesh(&args);
    let ids = token_ids(&out);
    (ids, serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn synthetic_decode_traced_and_untraced_give_the_host_reference_ids() {
    let (weights, prompt) = default_model_and_prompt("decode-cli");
    let expected = HostReference::new(weights, 1, prompt.len() + 12)
        .unwrap()
        .generate(&prompt, 12)
        .unwrap();
    for (mesh, fabric) in [("n150", "1d"), ("n300", "1d"), ("t3k", "1d-ring")] {
        for trace in [&["--no-trace"][..], &[][..]] {
            let mut args = vec![
                "decode",
                "--mesh",
                mesh,
                "--fabric",
                fabric,
                "--dtype",
                "f32",
                "--max-new-tokens",
                "12",
                "--json",
            ];
            args.extend_from_slice(trace);
            assert_eq!(token_ids(&ttmesh(&args)), expected, "{args:?}");
        }
    }
}

#[test]
fn bad_decode_flags_exit_1_naming_the_flag() {
    for (args, needle) in [
        (&["decode", "--batch", "33"][..], "--batch 33"),
        (&["decode", "--batch", "0"][..], "--batch 0"),
        (&["decode", "--dtype", "f16"][..], "--dtype f16"),
        (
            &["decode", "--max-new-tokens", "0"][..],
            "--max-new-tokens 0",
        ),
        (&["decode", "--hold", "inf"][..], "--hold inf"),
        (
            &["decode", "--synthetic", "llama-70b"][..],
            "--synthetic llama-70b: use one of small, smollm2-135m, llama-3.2-1b, llama-3.1-8b",
        ),
        (&["decode", "--fabric", "3d"][..], "--fabric 3d"),
        // The synthetic model's FFN (256 = 8 tiles) does not split over 16 chips.
        (
            &["decode", "--mesh", "line-16"][..],
            "what would work: a line of 1, 2, 4, 8 chips",
        ),
        (
            &["decode", "--model", "/nonexistent/model.gguf"][..],
            "--model /nonexistent",
        ),
        (&["decode", "--model", "/tmp"][..], "is a folder"),
        (
            &["decode", "--max-new-tokens", "99999"][..],
            "beyond the model's context",
        ),
    ] {
        let out = ttmesh(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn score_against_feeds_the_given_ids_and_counts_agreement() {
    // Fed ids that are not the model's own picks: each step's pick must be the host reference's
    // argmax after the same forced inputs, and the agreement the count of equal positions.
    let (weights, prompt) = default_model_and_prompt("decode-forced");
    let n = 8;
    let fed: Vec<u32> = (0..n as u32).map(|i| 3 + 7 * i).collect();
    let mut host = HostReference::new(weights, 1, prompt.len() + n).unwrap();
    let inputs: Vec<u32> = prompt.iter().chain(&fed).copied().collect();
    let mut expected = Vec::new();
    for (pos, &token) in inputs.iter().enumerate().take(prompt.len() + n - 1) {
        let logits = host.forward_decode(&[token], &[pos]).unwrap();
        if pos + 1 >= prompt.len() {
            expected.push(ttmesh_models::argmax(&logits));
        }
    }
    let agree = expected.iter().zip(&fed).filter(|(a, b)| a == b).count();
    let fed_text: Vec<String> = fed.iter().map(|t| t.to_string()).collect();
    let fed_text = fed_text.join(", ");
    let (ids, v) = decode_8_on_n300(&["--score-against", &fed_text]);
    assert_eq!(ids, expected);
    assert_eq!(v["teacher_forced"]["top1_agree"], agree as u64);
    assert_eq!(v["teacher_forced"]["of"], n as u64);

    // The host reference run by the command itself: f32 on the device gives its ids, and
    // feeding them back agrees everywhere.
    let (ids, v) = decode_8_on_n300(&["--check-host", "--score-against", "host"]);
    assert_eq!(v["host_reference"]["equal"], true, "{v}");
    assert_eq!(v["host_reference"]["token_ids"], serde_json::json!(ids));
    assert_eq!(v["teacher_forced"]["top1_agree"], 8);

    for (ids, needle) in [
        ("1, 2", "has 2 ids for --max-new-tokens 8"),
        ("1,x", "\"x\" is not a token id"),
    ] {
        let out = ttmesh(&["decode", "--max-new-tokens", "8", "--score-against", ids]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{ids}: {err}");
        assert!(err.contains(needle), "{ids}: {err}");
    }
}
