//! `ttmesh plan decode --predict`: the prediction is deterministic, more chips never cost more
//! DRAM time per chip, bfp4_b is never slower than bfp8_b nor bfp8_b than bf16, a
//! Llama-3.1-70B-shaped model on a Galaxy predicts in seconds under 500 MB of peak RSS, and
//! bad input is a clear error.

mod common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::ttmesh;

const LLAMA_8B: &[&str] = &[
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
const LLAMA_70B: &[&str] = &[
    "--hidden",
    "8192",
    "--ffn",
    "28672",
    "--layers",
    "80",
    "--heads",
    "64",
    "--kv-heads",
    "8",
    "--vocab",
    "128256",
];

fn predict(mesh: &str, shapes: &[&str], extra: &[&str]) -> Output {
    let mut all = vec!["plan", "decode", "--predict", "--json", "--mesh", mesh];
    all.extend_from_slice(shapes);
    all.extend_from_slice(extra);
    ttmesh(&all)
}

fn json_ok(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn stderr(out: &Output) -> String {
    assert!(!out.status.success(), "should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn num(v: &serde_json::Value, key: &str) -> f64 {
    v["predict"][key]
        .as_f64()
        .unwrap_or_else(|| panic!("predict.{key} in {v}"))
}

#[test]
fn deterministic_and_complete() {
    let args = ["--batch", "32", "--context", "256", "--dtype", "bfp8_b"];
    let a = json_ok(&predict("n300", LLAMA_8B, &args));
    let b = json_ok(&predict("n300", LLAMA_8B, &args));
    assert_eq!(a["predict"], b["predict"]);
    let p = &a["predict"];
    let token_us = num(&a, "token_us");
    assert!(token_us > 0.0);
    assert!((num(&a, "tokens_per_s_per_user") - 1e6 / token_us).abs() < 1e-6 * 1e6 / token_us);
    assert!((num(&a, "tokens_per_s") - 32.0 * num(&a, "tokens_per_s_per_user")).abs() < 1e-6);
    assert!(num(&a, "ttft_ms") * 1e3 >= token_us);
    let top = p["top_ops"].as_array().unwrap();
    assert!(!top.is_empty());
    // Decode streams weights: a matmul leads, and on two chips a collective is listed.
    assert!(top[0]["op"].as_str().unwrap().starts_with("Matmul"), "{p}");
    let shares: Vec<f64> = top.iter().map(|o| o["share"].as_f64().unwrap()).collect();
    assert!(shares.windows(2).all(|w| w[0] >= w[1]), "{shares:?}");
    assert!(num(&a, "collective_us") > 0.0, "{p}");
}

#[test]
fn more_chips_never_cost_more_dram_time_per_chip() {
    let args = ["--batch", "1", "--context", "256", "--dtype", "bfp8_b"];
    let mut last = f64::INFINITY;
    for mesh in ["n150", "n300", "t3k"] {
        let v = json_ok(&predict(mesh, LLAMA_8B, &args));
        let dram = num(&v, "dram_us_per_chip");
        assert!(dram <= last, "{mesh}: {dram} us after {last} us");
        last = dram;
    }
}

#[test]
fn smaller_weight_formats_are_never_slower() {
    let small = [
        "--hidden",
        "2048",
        "--ffn",
        "8192",
        "--layers",
        "4",
        "--heads",
        "32",
        "--kv-heads",
        "8",
        "--vocab",
        "32768",
        "--context",
        "256",
    ];
    for mesh in ["n150", "t3k"] {
        let t = |dtype: &str| {
            let v = json_ok(&predict(mesh, &small, &["--dtype", dtype]));
            num(&v, "token_us")
        };
        let (bf16, bfp8, bfp4) = (t("bf16"), t("bfp8_b"), t("bfp4_b"));
        assert!(bfp8 <= bf16, "{mesh}: bfp8_b {bfp8} us, bf16 {bf16} us");
        assert!(bfp4 <= bfp8, "{mesh}: bfp4_b {bfp4} us, bfp8_b {bfp8} us");
    }
}

/// Runs `ttmesh args` under `/usr/bin/time -v`: its output and peak RSS in kB (None without
/// GNU time on the host).
fn with_peak_rss(args: &[&str]) -> (Output, Option<u64>) {
    let timed = std::path::Path::new("/usr/bin/time");
    if !timed.exists() {
        return (ttmesh(args), None);
    }
    let out = std::process::Command::new(timed)
        .arg("-v")
        .arg(common::BIN)
        .args(args)
        .env("TTMESH_MONITOR", "0")
        .output()
        .expect("/usr/bin/time runs ttmesh");
    let err = String::from_utf8_lossy(&out.stderr);
    let rss = err
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes):"))
        .and_then(|v| v.trim().parse().ok());
    (out, rss)
}

#[test]
fn llama_70b_on_a_galaxy_in_seconds_and_little_memory() {
    let mut args = vec!["plan", "decode", "--predict", "--json", "--mesh", "galaxy"];
    args.extend_from_slice(LLAMA_70B);
    args.extend_from_slice(&["--batch", "32", "--context", "4096", "--dtype", "bfp8_b"]);
    let t = Instant::now();
    let (out, rss) = with_peak_rss(&args);
    let took = t.elapsed();
    let v = json_ok(&out);
    assert!(num(&v, "token_us") > 0.0, "{v}");
    assert_eq!(v["predict"]["chips"], 32, "{v}");
    // Seconds on an idle host; the bound leaves room for a loaded 2-core builder.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    if let Some(kb) = rss {
        assert!(kb < 500 * 1024, "peak RSS {kb} kB");
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let e = stderr(&predict("n150", LLAMA_8B, &["--dtype", "bfp2_b"]));
    assert!(e.contains("bfp2_b") && e.contains("bfp4_b"), "{e}");
    // An FFN of 1000 columns does not split into tiles over 8 chips.
    let odd = [
        "--hidden",
        "1024",
        "--ffn",
        "1000",
        "--layers",
        "2",
        "--heads",
        "8",
        "--kv-heads",
        "8",
    ];
    let e = stderr(&predict("t3k", &odd, &[]));
    assert!(e.contains("FFN") && e.contains("1000"), "{e}");
    // 70B in bf16 on one chip: far past its DRAM, by how much.
    let out = predict("n150", LLAMA_70B, &["--context", "256"]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("B more than the"), "{text}");
    let e = stderr(&predict("n150", LLAMA_8B, &["--prompt-len", "0"]));
    assert!(e.contains("--prompt-len 0"), "{e}");
    let e = stderr(&predict("n150", LLAMA_8B, &["--batch", "33"]));
    assert!(e.contains("--batch 33"), "{e}");
}
