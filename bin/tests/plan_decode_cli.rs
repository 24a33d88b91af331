//! `ttmesh plan decode`: the trace_region_size it names suffices for `ttmesh decode` and half
//! of it does not (both checked by running), its DRAM peak is the one a NORMAL run of the same
//! model reaches, the real GGUF is planned from its header, and a Llama-3.1-8B-shaped model on
//! a T3K is planned (fits, and does not fit with the numbers).

mod common;

use common::ttmesh;

use std::process::Output;

use ttmesh::{BufferType, MeshConfig, MeshDevice};
use ttmesh_models::synthetic::{write_synthetic_llama, SyntheticConfig};
use ttmesh_models::{
    DeviceDecodeConfig, DeviceLlama, GgufTokenizer, LlamaWeights, LoadOptions, DEFAULT_MODEL_PATH,
};

const PROMPT: &str = "Once upon a time";
const NEW_TOKENS: usize = 4;

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn plan(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["plan", "decode", "--json"];
    all.extend_from_slice(args);
    let out = ttmesh(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(&out)
}

/// The one trace_region_size every chip of the plan names.
fn planned_trace_size(v: &serde_json::Value) -> u64 {
    assert_eq!(v["fits"], true, "{v}");
    let sizes: Vec<u64> = v["chips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["trace_region_size"].as_u64().unwrap())
        .collect();
    assert!(
        sizes[0] > 0 && sizes.iter().all(|s| *s == sizes[0]),
        "{sizes:?}"
    );
    sizes[0]
}

/// Runs `ttmesh decode` traced with exactly `needed` (succeeds) and half of it (fails with
/// tt-metal's too-small message naming `needed`).
fn decode_needs_exactly(needed: u64, model: &[&str]) {
    let decode = |size: u64| {
        let size = size.to_string();
        let n = NEW_TOKENS.to_string();
        let mut args = vec![
            "decode",
            "--mesh",
            "n300",
            "--max-new-tokens",
            &n,
            "--json",
            "--trace-region-size",
            &size,
        ];
        args.extend_from_slice(model);
        ttmesh(&args)
    };
    let ok = decode(needed);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(json(&ok)["traced"], true);
    let half = decode(needed / 2);
    assert!(!half.status.success());
    let err = String::from_utf8_lossy(&half.stderr);
    assert!(
        err.contains(&format!("Creating trace buffers of size {needed}B")),
        "{err}"
    );
}

fn prompt_tokens(path: &std::path::Path) -> usize {
    GgufTokenizer::load(path)
        .unwrap()
        .encode(PROMPT)
        .unwrap()
        .len()
}

#[test]
fn synthetic_plan_names_the_trace_size_decode_needs_and_the_dram_peak_a_run_reaches() {
    let path = std::env::temp_dir().join(format!("ttmesh-plan-decode-{}.gguf", std::process::id()));
    write_synthetic_llama(&path, &SyntheticConfig::small()).unwrap();
    // `ttmesh decode`'s KV cache holds the prompt and the new tokens.
    let positions = prompt_tokens(&path) + NEW_TOKENS;
    let context = positions.to_string();
    let v = plan(&["--mesh", "n300", "--context", &context]);
    assert_eq!(v["model"]["source"], "synthetic llama (no --model given)");
    let needed = planned_trace_size(&v);
    decode_needs_exactly(needed, &[]);

    // A NORMAL run of the same model on the same mesh reaches the plan's peaks.
    let weights = LlamaWeights::load(&path, LoadOptions::default()).unwrap();
    let _ = std::fs::remove_file(&path);
    let mesh = MeshDevice::open(MeshConfig {
        topology: "n300".into(),
        trace_region_size: needed,
        ..Default::default()
    })
    .unwrap();
    let decode = DeviceDecodeConfig {
        batch: 1,
        max_positions: positions,
        dtype: ttmesh::DataType::BFloat16,
    };
    let mut model = DeviceLlama::new(&mesh, &weights, decode).unwrap();
    for pos in 0..positions - 1 {
        model.decode_step(&[1], &[pos], pos >= 2).unwrap();
    }
    let (w, kv) = model.dram_bytes_per_chip();
    assert_eq!(v["weights_bytes_per_chip"].as_u64().unwrap(), w);
    assert_eq!(v["kv_cache_bytes_per_chip"].as_u64().unwrap(), kv);
    for (chip, planned) in mesh.chips().iter().zip(v["chips"].as_array().unwrap()) {
        assert_eq!(planned["chip"].as_u64().unwrap(), chip.id() as u64);
        for (t, key) in [(BufferType::Dram, "dram"), (BufferType::L1, "l1")] {
            assert_eq!(
                chip.usage().snapshot(t).peak_per_bank,
                planned["peak_per_bank"][key].as_u64().unwrap(),
                "chip {} {key}",
                chip.id()
            );
        }
        assert_eq!(
            chip.trace_stats().trace_buffers_size,
            planned["trace_region_size"].as_u64().unwrap()
        );
    }
    drop(model);
    mesh.close().unwrap();
}

#[test]
fn real_model_plan_reads_the_header_and_names_the_trace_size_decode_needs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let Some(path) = ttmesh_models::real_model_path(&root) else {
        eprintln!("SKIPPED: no real model at {DEFAULT_MODEL_PATH} (run scripts/fetch-model.sh)");
        return;
    };
    let model = path.to_str().unwrap();
    let context = (prompt_tokens(&path) + NEW_TOKENS).to_string();
    let v = plan(&["--mesh", "n300", "--model", model, "--context", &context]);
    assert_eq!(v["model"]["hidden"], 576);
    assert_eq!(v["model"]["layers"], 30);
    let needed = planned_trace_size(&v);
    decode_needs_exactly(needed, &["--model", model]);
}

const LLAMA_8B: [&str; 12] = [
    "--hidden",
    "4096",
    "--ffn",
    "14336",
    "--layers",
    "32",
    "--heads",
    "32",
    "--kv-heads",
    "8",
    "--vocab",
    "128256",
];

#[test]
fn llama_8b_shapes_on_a_t3k_fit_at_8k_context_and_not_at_batch_32_of_128k() {
    // T3K chips are Wormhole n150s: 12 GiB of DRAM each.
    let mut args = vec!["--mesh", "t3k", "--context", "8192"];
    args.extend_from_slice(&LLAMA_8B);
    let v = plan(&args);
    assert_eq!(
        v["model"]["parameters"].as_u64().unwrap() / 1_000_000_000,
        8
    );
    let chips = v["chips"].as_array().unwrap();
    assert_eq!(chips.len(), 8);
    let weights = v["weights_bytes_per_chip"].as_u64().unwrap();
    let kv = v["kv_cache_bytes_per_chip"].as_u64().unwrap();
    // bf16: 32 blocks of an eighth of each projection, the embedding whole, an eighth of the
    // LM head; the norms padded to a tile's 32 rows; K and V of one KV head per chip, 8192
    // positions of 128.
    let block = 2 * 32 * 4096 * 2 + (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336) / 8 * 2;
    assert_eq!(
        weights,
        32 * block + 128256 * 4096 * 2 + 4096 * 128256 / 8 * 2 + 4096 * 32 * 2
    );
    assert_eq!(kv, 32 * 2 * 8192 * 128 * 2);
    for c in chips {
        assert_eq!(c["fits"], true);
        assert!(c["trace_region_size"].as_u64().unwrap() > 0);
        let peak = c["peak_bytes"]["dram"].as_u64().unwrap();
        assert!(peak > weights + kv, "{c}");
        assert!(peak < c["capacity_bytes"]["dram"].as_u64().unwrap(), "{c}");
        assert_eq!(
            c["capacity_bytes"]["dram"].as_u64().unwrap(),
            12 * 1_072_693_184 - c["capacity_bytes"]["trace"].as_u64().unwrap()
        );
    }

    // 32 users of 128K positions: 64 GiB of KV cache per chip. Said with the numbers.
    let mut args = vec!["--mesh", "t3k", "--context", "131072", "--batch", "32"];
    args.extend_from_slice(&LLAMA_8B);
    let mut all = vec!["plan", "decode", "--json"];
    all.extend_from_slice(&args);
    let out = ttmesh(&all);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not fit in DRAM"), "{err}");
    let v = json(&out);
    assert_eq!(v["fits"], false);
    assert!(v["error"].is_null(), "{v}");
    let kv = v["kv_cache_bytes_per_chip"].as_u64().unwrap();
    assert_eq!(kv, 32 * 2 * 32 * 131072 * 128 * 2);
    let needed = kv + v["weights_bytes_per_chip"].as_u64().unwrap();
    assert!(v["does_not_fit"]
        .as_str()
        .unwrap()
        .contains(&needed.to_string()));
    for c in v["chips"].as_array().unwrap() {
        assert_eq!(c["fits"], false);
        let has = c["capacity_bytes"]["dram"].as_u64().unwrap();
        let problem = c["problems"][0].as_str().unwrap();
        assert!(
            problem.contains(&format!(
                "need {needed} B, {} B more than the {has} B",
                needed - has
            )),
            "{problem}"
        );
    }
}

#[test]
fn llama_8b_shapes_within_the_planning_trace_region_of_full_are_said_to_be_too_close() {
    // 32 users of 18700 positions: weights and KV cache need 12.76 GB of the 12.87 GB a chip
    // has, less than the planning mesh's TRACE region below full.
    let mut all = vec![
        "plan",
        "decode",
        "--json",
        "--mesh",
        "t3k",
        "--context",
        "18700",
        "--batch",
        "32",
    ];
    all.extend_from_slice(&LLAMA_8B);
    let out = ttmesh(&all);
    assert!(!out.status.success());
    let v = json(&out);
    assert_eq!(v["fits"], false);
    let needed = v["weights_bytes_per_chip"].as_u64().unwrap()
        + v["kv_cache_bytes_per_chip"].as_u64().unwrap();
    for c in v["chips"].as_array().unwrap() {
        let has = c["capacity_bytes"]["dram"].as_u64().unwrap();
        assert!(needed <= has && has - needed < 256 << 20, "{needed} {has}");
        let problem = c["problems"][0].as_str().unwrap();
        assert!(
            problem.contains("the model fits by less than that, if at all"),
            "{problem}"
        );
    }
}

#[test]
fn bare_plan_and_plan_run_size_the_same_block() {
    let a = ttmesh(&["plan", "--mesh", "n300", "--json"]);
    let b = ttmesh(&["plan", "run", "--mesh", "n300", "--json"]);
    assert!(a.status.success() && b.status.success());
    assert_eq!(json(&a)["chips"], json(&b)["chips"]);
}

#[test]
fn bad_shape_flags_name_the_flag() {
    for (args, says) in [
        (
            &["--heads", "5"][..],
            "--heads 5 does not divide --hidden 128",
        ),
        (
            &["--kv-heads", "3"][..],
            "--kv-heads 3 does not divide --heads 4",
        ),
        (&["--layers", "0"][..], "--layers 0"),
        (&["--batch", "33"][..], "--batch 33"),
        (&["--dtype", "f16"][..], "--dtype f16"),
        (&["--model", "/nonexistent.gguf"][..], "--model"),
        (
            &["--model", "x.gguf", "--hidden", "64"][..],
            "cannot be used with",
        ),
    ] {
        let mut all = vec!["plan", "decode", "--mesh", "n300"];
        all.extend_from_slice(args);
        let out = ttmesh(&all);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn readme_plan_decode_examples_run_and_fit() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let examples: Vec<Vec<&str>> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("cargo run --release -- plan decode "))
        .map(|l| l.split('#').next().unwrap().split_whitespace().collect())
        .collect();
    assert_eq!(
        examples.len(),
        4,
        "the README's plan decode blocks (sizing and --predict)"
    );
    for args in examples {
        if let Some(i) = args.iter().position(|a| *a == "--model") {
            if !root.join(args[i + 1]).is_file() {
                eprintln!("SKIPPED: {args:?} (run scripts/fetch-model.sh)");
                continue;
            }
        }
        let args: Vec<String> = args
            .iter()
            .map(|a| match a.strip_prefix("target/") {
                Some(_) => root.join(a).to_string_lossy().into_owned(),
                None => a.to_string(),
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let v = plan(&args);
        assert_eq!(v["fits"], true, "{args:?}");
        planned_trace_size(&v);
    }
    // The figures the README shows for the Llama-3.1-8B shapes.
    assert!(readme
        .contains("each chip's DRAM holds 2943877120 B of weights and 134217728 B of KV cache"));
    let mut args = vec!["--mesh", "t3k", "--context", "8192"];
    args.extend_from_slice(&LLAMA_8B);
    let v = plan(&args);
    let c = &v["chips"][0];
    let row = format!(
        "    4 {:>20} {:>14}",
        c["trace_region_size"].as_u64().unwrap(),
        c["peak_bytes"]["dram"].as_u64().unwrap()
    );
    assert!(
        readme.contains(&row),
        "README's table row should be {row:?}"
    );
}
