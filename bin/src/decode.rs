//! `ttmesh decode`: greedy LLM decode on the emulated mesh, the way a TT-NN model runs it:
//! weights and KV cache in device DRAM, the decode step captured once as a trace and replayed
//! per token (or, with --no-trace, the same ops enqueued one by one). Streams the text, then
//! prints step times and per-chip memory. The model is replicated on every chip for now.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use ttmesh::{DataType, MeshConfig, MeshDevice};
use ttmesh_models::synthetic::{write_synthetic_llama, SyntheticConfig};
use ttmesh_models::{
    DeviceDecodeConfig, DeviceLlama, GgufTokenizer, LlamaWeights, LoadOptions, TextStream,
    MAX_BATCH,
};

/// The longest --hold: a day.
const MAX_HOLD_SECONDS: f64 = 86_400.0;
/// The most new tokens one run generates.
const MAX_NEW_TOKENS: usize = 100_000;

#[derive(clap::Args, Debug, Clone)]
pub struct DecodeArgs {
    /// n150, n300, t3k, galaxy, p150, p300, line-N, ring-N, or a topology TOML file. Every chip
    /// holds the whole model (replicated) for now.
    #[arg(long, default_value = "t3k")]
    pub mesh: String,
    /// A llama-architecture GGUF file. Without it, a small synthetic llama (fixed-seed random
    /// weights, GQA, tied embeddings) is written to a temporary file and used.
    #[arg(long, value_name = "PATH.gguf")]
    pub model: Option<PathBuf>,
    #[arg(long, default_value = "Once upon a time")]
    pub prompt: String,
    /// Tokens to generate after the prompt.
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: usize,
    /// Users decoded together (1 to 32), each with the same prompt.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// bf16, f32 or bfp8_b: weights, KV cache and activations on the device.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Enqueue the decode step's ops one by one instead of replaying a captured trace.
    #[arg(long)]
    pub no_trace: bool,
    /// Bytes per chip reserved for the decode trace.
    #[arg(long, default_value_t = 64 << 20)]
    pub trace_region_size: u64,
    /// Print one JSON object instead of streamed text and tables.
    #[arg(long)]
    pub json: bool,
    /// Keep the mesh open this many seconds after decoding (for `ttmesh monitor`).
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    pub hold: f64,
}

fn parse_dtype(s: &str) -> Result<DataType, String> {
    match s {
        "bf16" => Ok(DataType::BFloat16),
        "f32" => Ok(DataType::Float32),
        "bfp8_b" => Ok(DataType::BFloat8B),
        other => Err(format!("--dtype {other}: use bf16, f32 or bfp8_b")),
    }
}

fn check_flags(args: &DecodeArgs) -> Result<DataType, String> {
    if args.batch == 0 || args.batch > MAX_BATCH {
        return Err(format!(
            "--batch {}: decode 1 to {MAX_BATCH} users per step (one per row of a tile, as TT-NN does)",
            args.batch
        ));
    }
    if args.max_new_tokens == 0 || args.max_new_tokens > MAX_NEW_TOKENS {
        return Err(format!(
            "--max-new-tokens {}: generate 1 to {MAX_NEW_TOKENS} tokens",
            args.max_new_tokens
        ));
    }
    if !(args.hold.is_finite() && (0.0..=MAX_HOLD_SECONDS).contains(&args.hold)) {
        return Err(format!(
            "--hold {}: give a number of seconds from 0 to {MAX_HOLD_SECONDS} (a day)",
            args.hold
        ));
    }
    if args.prompt.is_empty() {
        return Err("--prompt is empty: give at least one character to start from".into());
    }
    parse_dtype(&args.dtype)
}

fn median(v: &mut [Duration]) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort_unstable();
    v[v.len() / 2]
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

pub fn run(args: &DecodeArgs) -> Result<(), String> {
    let dtype = check_flags(args)?;
    let progress = |what: &str| {
        if !args.json {
            eprintln!("decode: {what}");
        }
    };
    let (path, model_name, _synthetic_file) = match &args.model {
        Some(p) => {
            if p.is_dir() {
                return Err(format!(
                    "--model {}: is a folder; give the path of a .gguf file",
                    p.display()
                ));
            }
            (p.clone(), p.display().to_string(), None)
        }
        None => {
            let p = std::env::temp_dir().join(format!(
                "ttmesh-decode-synthetic-{}.gguf",
                std::process::id()
            ));
            write_synthetic_llama(&p, &SyntheticConfig::small()).map_err(|e| e.to_string())?;
            let guard = RemoveOnDrop(p.clone());
            (
                p,
                "synthetic llama (no --model given)".to_string(),
                Some(guard),
            )
        }
    };
    progress(&format!("loading {model_name}"));
    let t = Instant::now();
    let weights = Arc::new(
        LlamaWeights::load(&path, LoadOptions::default())
            .map_err(|e| format!("--model {}: {e}", path.display()))?,
    );
    let tokenizer = GgufTokenizer::load(&path).map_err(|e| e.to_string())?;
    let prompt = tokenizer
        .encode(&args.prompt)
        .map_err(|e| format!("--prompt: {e}"))?;
    if prompt.is_empty() {
        return Err("--prompt encodes to no tokens; give some text".into());
    }
    let positions = prompt.len() + args.max_new_tokens;
    let context = weights.config.context_length;
    if positions > context {
        return Err(format!(
            "--prompt ({} tokens) + --max-new-tokens ({}) = {positions} positions, beyond the model's context of {context}; shorten one of them",
            prompt.len(),
            args.max_new_tokens
        ));
    }
    progress(&format!(
        "loaded in {:.2} s; opening {} and placing weights, KV cache and RoPE tables in DRAM",
        t.elapsed().as_secs_f64(),
        args.mesh
    ));
    let mesh = MeshDevice::open(MeshConfig {
        topology: args.mesh.clone(),
        trace_region_size: args.trace_region_size,
        ..Default::default()
    })
    .map_err(|e| format!("--mesh {}: {e}", args.mesh))?;
    let decode = DeviceDecodeConfig {
        batch: args.batch,
        max_positions: positions,
        dtype,
    };
    let mut model = DeviceLlama::new(&mesh, &weights, decode).map_err(|e| e.to_string())?;
    progress(&format!(
        "placed on {} chip(s) in {:.2} s; prefilling {} prompt tokens through the decode step{}",
        mesh.num_devices(),
        t.elapsed().as_secs_f64(),
        prompt.len(),
        if args.no_trace {
            ""
        } else {
            " (the first step is captured as a trace, then replayed)"
        }
    ));

    let traced = !args.no_trace;
    let mut stream = TextStream::new(&tokenizer);
    let mut generated = Vec::with_capacity(args.max_new_tokens);
    let mut step_times = Vec::with_capacity(positions);
    let mut input = prompt[0];
    let mut out = std::io::stdout();
    if !args.json {
        print!("{}", args.prompt);
        let _ = out.flush();
    }
    let started = Instant::now();
    let mut first_generated_at = None;
    for pos in 0..positions - 1 {
        let t = Instant::now();
        let next = model
            .decode_step(&vec![input; args.batch], &vec![pos; args.batch], traced)
            .map_err(|e| format!("decode step at position {pos}: {e}"))?;
        step_times.push(t.elapsed());
        if pos + 1 < prompt.len() {
            input = prompt[pos + 1];
            continue;
        }
        input = next[0];
        generated.push(input);
        first_generated_at.get_or_insert_with(Instant::now);
        if !args.json {
            print!("{}", stream.push(input).map_err(|e| e.to_string())?);
            let _ = out.flush();
        }
    }
    let total = started.elapsed();
    if !args.json {
        println!("{}", stream.finish().map_err(|e| e.to_string())?);
    }
    let text = tokenizer.decode(&generated).map_err(|e| e.to_string())?;
    // The first step of a traced run also compiles and captures: leave it out of the median.
    let steady: &mut [Duration] = if traced && step_times.len() > 1 {
        &mut step_times[1..]
    } else {
        &mut step_times[..]
    };
    let median_step = median(steady);
    let tokens_per_s =
        (generated.len() * args.batch) as f64 / total.as_secs_f64().max(f64::MIN_POSITIVE);
    let reports = mesh.reports();
    let skew = mesh.last_replay().map(|r| r.skew_us);

    if args.json {
        let chips: Vec<_> = reports
            .iter()
            .map(|r| {
                json!({
                    "id": r.id, "coord": [r.coord.row, r.coord.col],
                    "dram_allocated": r.dram_allocated, "dram_capacity": r.dram_capacity,
                    "l1_allocated": r.l1_allocated, "trace_allocated": r.trace_allocated,
                    "trace_region_size": r.trace_region_size, "trace_replays": r.trace_replays,
                })
            })
            .collect();
        let report = json!({
            "model": model_name, "mesh": args.mesh, "chips": mesh.num_devices(),
            "dtype": args.dtype, "batch": args.batch, "traced": traced,
            "prompt_tokens": prompt.len(), "generated_tokens": generated.len(),
            "token_ids": generated, "text": text,
            "tokens_per_s": tokens_per_s,
            "median_step_ms": median_step.as_secs_f64() * 1e3,
            "total_s": total.as_secs_f64(),
            "replay_skew_us": skew,
            "per_chip": chips,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "\n{} on {} ({} chip(s), model replicated), {}, batch {}, {}",
            model_name,
            args.mesh,
            mesh.num_devices(),
            args.dtype,
            args.batch,
            if traced { "traced" } else { "untraced" }
        );
        println!(
            "{} prompt + {} generated tokens in {:.2} s: {:.1} tokens/s, median step {:.2} ms",
            prompt.len(),
            generated.len(),
            total.as_secs_f64(),
            tokens_per_s,
            median_step.as_secs_f64() * 1e3
        );
        println!(
            "{:>5} {:>7} {:>12} {:>10} {:>12} {:>8}",
            "chip", "coord", "DRAM", "L1", "TRACE", "replays"
        );
        for r in &reports {
            println!(
                "{:>5} {:>7} {:>8.2} MiB {:>6.2} MiB {:>8.2} MiB {:>8}",
                r.id,
                format!("({},{})", r.coord.row, r.coord.col),
                mib(r.dram_allocated),
                mib(r.l1_allocated),
                mib(r.trace_allocated),
                r.trace_replays
            );
        }
        if let Some(s) = skew {
            println!("replay skew between chips (last step): {s:.1} us");
        }
        println!("token ids: {generated:?}");
    }
    if args.hold > 0.0 {
        progress(&format!(
            "holding the mesh open for {} s (ttmesh monitor)",
            args.hold
        ));
        std::thread::sleep(Duration::from_secs_f64(args.hold));
    }
    drop(model);
    mesh.close().map_err(|e| e.to_string())
}

/// Removes the synthetic model's temporary file when the run ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
