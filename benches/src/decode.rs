//! LLM decode on the emulated mesh, traced vs untraced, side by side in one run: the step's wall
//! time, the host's time per token (writing the inputs and enqueueing: what trace removes), and
//! the host f32 reference's step for the same model, batch and positions (the physical limit on
//! this host), each traced step followed by the reference's so that both see the same load. Tensor parallel on the T3K. Uses SmolLM2 when `scripts/fetch-model.sh` has
//! fetched it, else the synthetic llama. Weights in bf16 and in bfp8_b (the width closest to
//! llama.cpp's Q4 that the chip has). When `scripts/llama-cpp-setup.sh` has measured llama.cpp
//! on the same model on this host, its tokens/s are printed beside ours (the host's real
//! yardstick for an LLM step). The full run ends with a model of Llama-3.2-1B's shape
//! (synthetic weights) on a T3K in bfp8_b.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ttmesh::{DataType, MeshConfig, MeshDevice};
use ttmesh_models::synthetic::{write_synthetic_llama, SyntheticConfig};
use ttmesh_models::{DeviceDecodeConfig, DeviceLlama, HostReference, LlamaWeights, LoadOptions};

/// The goals of the decode step, per mesh at batch 1: our traced tokens/s over llama.cpp's
/// (at least), and our traced step over the host f32 reference's (at most).
fn goals(mesh: &str) -> (f64, f64) {
    if mesh == "n150" {
        (0.5, 1.2)
    } else {
        (0.25, 2.0)
    }
}

/// llama.cpp's figures on this host, from `target/llama-cpp-decode.json`
/// (`scripts/llama-cpp-setup.sh`): (tokens/s, llama-cpp-python version).
fn llama_cpp(root: &std::path::Path) -> Option<(f64, String)> {
    let text = std::fs::read_to_string(root.join("target/llama-cpp-decode.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some((
        v["tokens_per_s"].as_f64()?,
        v["llama_cpp_python"].as_str()?.to_string(),
    ))
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort_unstable();
    v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

fn median_f64(mut v: Vec<f64>) -> f64 {
    v.sort_unstable_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The name [`bench_model`] gives SmolLM2.
const REAL_MODEL_NAME: &str = "SmolLM2-135M";

/// The model the decode benchmarks run, and its name: SmolLM2 when `scripts/fetch-model.sh`
/// has fetched it (not in a quick run), else the small synthetic llama.
pub(crate) fn bench_model(quick: bool) -> Result<(Arc<LlamaWeights>, &'static str), String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match (!quick)
        .then(|| ttmesh_models::real_model_path(&root))
        .flatten()
    {
        Some(path) => LlamaWeights::load(&path, LoadOptions::default())
            .map(|w| (Arc::new(w), REAL_MODEL_NAME))
            .map_err(|e| e.to_string()),
        None => Ok((
            load_synthetic(&SyntheticConfig::small())?,
            "synthetic llama",
        )),
    }
}

/// A synthetic llama of `shape`, written to a temporary file, loaded, and the file removed.
fn load_synthetic(shape: &SyntheticConfig) -> Result<Arc<LlamaWeights>, String> {
    let path = std::env::temp_dir().join(format!("ttmesh-bench-{}.gguf", std::process::id()));
    write_synthetic_llama(&path, shape).map_err(|e| e.to_string())?;
    let loaded = LlamaWeights::load(&path, LoadOptions::default());
    let _ = std::fs::remove_file(&path);
    loaded.map(Arc::new).map_err(|e| e.to_string())
}

/// Runs the benchmark; the report says which model, mesh and batch it used.
pub fn run(quick: bool) -> String {
    match bench(quick) {
        Ok(s) => s,
        Err(e) => format!("decode bench failed: {e}\n"),
    }
}

fn bench(quick: bool) -> Result<String, String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (weights, name) = bench_model(quick)?;
    let is_real = name == REAL_MODEL_NAME;
    let steps = if quick { 6 } else { 16 };
    let mut s = String::new();
    let yardstick = if is_real { llama_cpp(&root) } else { None };
    match &yardstick {
        Some((tps, version)) => {
            let _ = writeln!(
                s,
                "llama.cpp (llama-cpp-python {version}, 2 threads) on this host, same model: {tps:.1} tokens/s at batch 1"
            );
        }
        None if is_real => s.push_str(
            "llama.cpp: not measured here (run scripts/llama-cpp-setup.sh to print it beside ours)\n",
        ),
        None => {}
    }
    let (bf16, bfp8) = (DataType::BFloat16, DataType::BFloat8B);
    let runs: &[(&str, usize, DataType)] = if quick {
        &[("n150", 1, bf16), ("t3k", 1, bf16)]
    } else {
        &[
            ("n150", 1, bf16),
            ("n150", 1, bfp8),
            ("t3k", 1, bf16),
            ("t3k", 1, bfp8),
            ("n150", 32, bf16),
            ("t3k", 32, bf16),
        ]
    };
    for &(mesh_name, batch, dtype) in runs {
        measure(
            &mut s,
            name,
            &weights,
            yardstick.as_ref(),
            mesh_name,
            batch,
            dtype,
            steps,
        )?;
    }
    if !quick {
        // A model of Llama-3.2-1B's shape (random weights: no registry this project reaches
        // ships one) on a T3K in bfp8_b: what a user bringing a bigger model gets.
        drop(weights);
        let weights = load_synthetic(&SyntheticConfig::llama_3_2_1b())?;
        let name = "Llama-3.2-1B shape (synthetic)";
        measure(&mut s, name, &weights, None, "t3k", 1, bfp8, 8)?;
    }
    if quick {
        s.push_str("(quick: synthetic model, few steps; figures are only indicative)\n");
    }
    Ok(s)
}

/// One mesh, batch and weight format: untraced then traced steps, each traced step paired with
/// the host reference's at the same position; appends the figures to `s`.
#[allow(clippy::too_many_arguments)]
fn measure(
    s: &mut String,
    name: &str,
    weights: &Arc<LlamaWeights>,
    yardstick: Option<&(f64, String)>,
    mesh_name: &str,
    batch: usize,
    dtype: DataType,
    steps: usize,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mesh = MeshDevice::open(MeshConfig {
        topology: mesh_name.into(),
        trace_region_size: 64 << 20,
        ..Default::default()
    })
    .map_err(|x| e(&x))?;
    let decode = DeviceDecodeConfig {
        batch,
        max_positions: steps + 1,
        dtype,
    };
    let mut model = DeviceLlama::new(&mesh, weights, decode).map_err(|x| e(&x))?;
    let split = model.parallel().describe();
    let mut host = HostReference::new(Arc::clone(weights), batch, steps + 1).map_err(|x| e(&x))?;
    // (median step, median host time per token) of one mode. Traced, each step is paired
    // with the host reference's step at the same position, and the ratio is the median of
    // the pairs': a burst of load from other processes on the host lands on both sides of
    // it. Which of the two goes first alternates, so neither always runs while the
    // other's threads are still winding down.
    let (mut host_steps, mut ratios) = (Vec::new(), Vec::new());
    let mut time = |traced: bool| -> Result<(f64, f64), String> {
        let (mut step, mut host_time) = (Vec::new(), Vec::new());
        for pos in 0..steps {
            let mut reference = || -> Result<Duration, String> {
                let t = Instant::now();
                host.forward_decode(&vec![1; batch], &vec![pos; batch])
                    .map_err(|x| e(&x))?;
                Ok(t.elapsed())
            };
            let reference_first = traced && pos % 2 == 1;
            let before = if reference_first {
                Some(reference()?)
            } else {
                None
            };
            let t = Instant::now();
            model
                .decode_step(&vec![1; batch], &vec![pos; batch], traced)
                .map_err(|x| e(&x))?;
            let ours = t.elapsed();
            let reference_time = match before {
                Some(d) => Some(d),
                None if traced => Some(reference()?),
                None => None,
            };
            // The first step of each mode compiles (and, traced, captures).
            if pos == 0 {
                continue;
            }
            step.push(ours);
            host_time.push(model.last_host_dispatch());
            if let Some(r) = reference_time {
                host_steps.push(r);
                ratios.push(ours.as_secs_f64() / r.as_secs_f64().max(1e-9));
            }
        }
        Ok((median(step), median(host_time)))
    };
    let (untraced, untraced_host) = time(false)?;
    let (traced, traced_host) = time(true)?;
    drop(model);
    mesh.close().map_err(|x| e(&x))?;
    let host_ms = median(host_steps);
    let (llama_goal, reference_goal) = goals(mesh_name);
    let traced_tps = batch as f64 * 1e3 / traced.max(1e-9);
    let _ = writeln!(
        s,
        "{name} weights {} on {mesh_name}, batch {batch} ({split}):\n  step untraced {untraced:.2} ms, traced {traced:.2} ms ({:.2}x); emulated tokens/s untraced {:.1}, traced {traced_tps:.1}\n  host time per token untraced {untraced_host:.3} ms, traced {traced_host:.3} ms: trace removes {:.0}x (goal >= 50x)\n  host f32 reference step {host_ms:.2} ms: emulated traced / reference = {:.2}x, median of step pairs (goal <= {reference_goal}x)",
        dtype.as_str().to_lowercase(),
        untraced / traced.max(1e-9),
        batch as f64 * 1e3 / untraced.max(1e-9),
        untraced_host / traced_host.max(1e-9),
        median_f64(ratios)
    );
    if let (Some((tps, _)), 1) = (&yardstick, batch) {
        let _ = writeln!(
            s,
            "  llama.cpp {tps:.1} tokens/s: ours / llama.cpp = {:.2} (goal >= {llama_goal})",
            traced_tps / tps
        );
    }
    Ok(())
}
