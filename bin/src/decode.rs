//! `ttmesh decode`: greedy LLM decode on the emulated mesh, the way a TT-NN model runs it:
//! weights and KV cache in device DRAM, the decode step captured once as a trace and replayed
//! per token (or, with --no-trace, the same ops enqueued one by one). On a mesh the model is
//! split for tensor parallelism (heads and FFN columns per chip, all_reduce per block). Streams
//! the text, then prints step and host times traced vs untraced, per-chip memory, trace bytes,
//! replay skew and what the collectives moved.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use ttmesh::{DataType, MeshConfig, MeshDevice};
use ttmesh_models::synthetic::{write_synthetic_llama, SyntheticConfig};
use ttmesh_models::{
    DeviceDecodeConfig, DeviceLlama, GgufTokenizer, GgufWeights, HostReference, LlamaWeights,
    LoadOptions, ModelTensors, TextStream, MAX_BATCH,
};

mod model;
mod report;

use model::{load, synthetic_shape, HostRun, ModelWeights};
use report::Report;

/// The longest --hold: a day.
const MAX_HOLD_SECONDS: f64 = 86_400.0;
/// The most new tokens one run generates.
const MAX_NEW_TOKENS: usize = 100_000;

#[derive(clap::Args, Debug, Clone)]
pub struct DecodeArgs {
    /// The mesh (the model is split over its chips, tensor parallel; a Galaxy splits it over
    /// each row of 8), the fabric, JSON output.
    #[command(flatten)]
    pub on: crate::mesh_args::MeshArgs,
    /// A llama-architecture GGUF file. Without it, a small synthetic llama (fixed-seed random
    /// weights, GQA, tied embeddings) is written to a temporary file and used.
    #[arg(long, value_name = "PATH.gguf")]
    pub model: Option<PathBuf>,
    /// Without --model: the synthetic llama's shape, random weights at the size of a real model
    /// (small, smollm2-135m, llama-3.2-1b or llama-3.1-8b), for memory and speed at that size.
    #[arg(
        long,
        value_name = "SHAPE",
        default_value = "small",
        conflicts_with = "model"
    )]
    pub synthetic: String,
    #[arg(long, default_value = "Once upon a time")]
    pub prompt: String,
    /// Tokens to generate after the prompt.
    #[arg(long, default_value_t = 32, allow_negative_numbers = true,
          value_parser = crate::limits::whole::<usize>("a whole number of tokens, 1 or more"))]
    pub max_new_tokens: usize,
    /// Users decoded together (1 to 32), each with the same prompt.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true,
          value_parser = crate::limits::whole::<usize>("a whole number of users, 1 to 32"))]
    pub batch: usize,
    /// bf16 or f32: weights, KV cache and activations on the device. bfp8_b: the projection
    /// weights and LM head in bfp8_b, the rest (embedding, norms, KV cache, activations) in bf16.
    /// bfp4_b: the MLP weights in bfp4_b, attention weights and LM head in bfp8_b.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Enqueue the decode step's ops one by one instead of replaying a captured trace.
    #[arg(long)]
    pub no_trace: bool,
    /// Teacher forcing: after the prompt, feed these token ids (comma-separated, or `host` for
    /// the host f32 reference's) instead of the model's own picks, and report how many of its
    /// greedy picks equal them. Free-running decode diverges for good after one different
    /// token; this measures top-1 agreement at every position.
    #[arg(long, value_name = "IDS")]
    pub score_against: Option<String>,
    /// Also run the host's f32 reference (written apart from the device path) on the same
    /// weights and prompt first, and report whether the device's greedy ids equal its ids, or
    /// where they first differ.
    #[arg(long)]
    pub check_host: bool,
    /// Bytes per chip reserved for the decode trace.
    #[arg(long, default_value_t = 64 << 20, allow_negative_numbers = true,
          value_parser = crate::limits::whole::<u64>("a number of bytes per chip, 0 or more"))]
    pub trace_region_size: u64,
    /// Keep the mesh open this many seconds after decoding (for `ttmesh monitor`).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub hold: f64,
    #[command(flatten)]
    pub profile: crate::profile::ProfileArgs,
    /// Capture TT-NN's graph of the decode (NORMAL mode: placement and every step) and write
    /// DIR/report.json, also when the decode fails.
    #[arg(long, value_name = "DIR")]
    pub graph: Option<PathBuf>,
}

pub(crate) fn parse_dtype(s: &str) -> Result<DataType, String> {
    match s {
        "bf16" => Ok(DataType::BFloat16),
        "f32" => Ok(DataType::Float32),
        "bfp8_b" => Ok(DataType::BFloat8B),
        "bfp4_b" => Ok(DataType::BFloat4B),
        other => Err(format!("--dtype {other}: use bf16, f32, bfp8_b or bfp4_b")),
    }
}

/// The ids of `--score-against`: at least one per generated token.
pub(crate) fn parse_forced_ids(text: &str, max_new_tokens: usize) -> Result<Vec<u32>, String> {
    let ids = text
        .split(',')
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<u32>().map_err(|_| {
                format!("--score-against: {t:?} is not a token id; give ids like 1,2,3 (whole numbers from 0)")
            })
        })
        .collect::<Result<Vec<u32>, String>>()?;
    if ids.len() < max_new_tokens {
        return Err(format!(
            "--score-against has {} ids for --max-new-tokens {max_new_tokens}: give one id per generated token, or lower --max-new-tokens",
            ids.len()
        ));
    }
    Ok(ids)
}

fn check_flags(args: &DecodeArgs) -> Result<DataType, String> {
    synthetic_shape(&args.synthetic)?;
    args.on.fabric_config()?;
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
    if let Some(ids) = args.score_against.as_deref().filter(|&ids| ids != "host") {
        parse_forced_ids(ids, args.max_new_tokens)?;
    }
    parse_dtype(&args.dtype)
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(Duration::ZERO)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// The process's peak resident set so far (Linux's VmHWM), None where the system has none.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Steps of one mode: wall time of each step and the host's share of it.
#[derive(Default)]
struct Timings {
    step: Vec<Duration>,
    host: Vec<Duration>,
}

impl Timings {
    fn push(&mut self, step: Duration, model: &DeviceLlama) {
        self.step.push(step);
        self.host.push(model.last_host_dispatch());
    }

    /// The steady state: a traced run's first step also compiles and captures.
    fn steady(&self, traced: bool) -> (Duration, Duration) {
        let skip = usize::from(traced && self.step.len() > 1);
        (median(&self.step[skip..]), median(&self.host[skip..]))
    }
}

/// Wire bytes that crossed every fabric link of the whole mesh so far (every rank's).
fn fabric_bytes(mesh: &MeshDevice) -> Result<u64, String> {
    let timeout = mesh.chips()[0].operation_timeout();
    ttmesh::ranks::fabric_wire_bytes(mesh, timeout).map_err(|e| e.to_string())
}

/// Steps a traced run enqueues untraced first, for the side-by-side figures.
const COMPARISON_STEPS: usize = 4;

/// Places the model with a progress bar per block (hidden with --json or off a terminal).
fn place(
    args: &DecodeArgs,
    mesh: &MeshDevice,
    weights: &dyn ModelTensors,
    decode: DeviceDecodeConfig,
) -> Result<DeviceLlama, String> {
    let bar = if args.on.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(weights.config().block_count as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("decode: placing blocks [{bar:30}] {pos}/{len} {elapsed}")
            .map_err(|e| e.to_string())?,
    );
    let model = DeviceLlama::with_progress(mesh, weights, decode, &mut |done, _| {
        bar.set_position(done as u64)
    })
    .map_err(|e| e.to_string());
    bar.finish_and_clear();
    model
}

pub fn run(args: &DecodeArgs) -> Result<(), String> {
    let dtype = check_flags(args)?;
    args.profile.check()?;
    let fabric_config = args.on.fabric_config()?;
    let progress = |what: &str| {
        if !args.on.json {
            eprintln!("decode: {what}");
        }
    };
    let t = Instant::now();
    let host_reference = args.check_host || args.score_against.as_deref() == Some("host");
    let (weights, tokenizer, model_name) = load(args, host_reference, &progress)?;
    let prompt = tokenizer
        .encode(&args.prompt)
        .map_err(|e| format!("--prompt: {e}"))?;
    if prompt.is_empty() {
        return Err("--prompt encodes to no tokens; give some text".into());
    }
    let positions = prompt.len() + args.max_new_tokens;
    let context = weights.tensors().config().context_length;
    if positions > context {
        return Err(format!(
            "--prompt ({} tokens) + --max-new-tokens ({}) = {positions} positions, beyond the model's context of {context}; shorten one of them",
            prompt.len(),
            args.max_new_tokens
        ));
    }
    let host = match weights.whole() {
        Some(whole) if host_reference => {
            progress("running the host f32 reference on the same prompt");
            Some(HostRun::run(whole, &prompt, args.max_new_tokens)?)
        }
        _ => None,
    };
    let weights = weights.into_by_block()?;
    progress(&format!(
        "loaded in {:.2} s; opening {} and placing weights, KV cache and RoPE tables in DRAM",
        t.elapsed().as_secs_f64(),
        args.on.mesh
    ));
    let mesh = MeshDevice::open(MeshConfig {
        topology: args.on.mesh.clone(),
        trace_region_size: args.trace_region_size,
        fabric_config,
        ..Default::default()
    })
    .map_err(|e| args.on.open_error(e))?;
    let loaded = Loaded {
        weights,
        tokenizer: &tokenizer,
        model_name: &model_name,
        prompt: &prompt,
        started: t,
        host,
    };
    let result = crate::graph_report::capture_to_dir(args.graph.as_deref(), &mesh, || {
        decode_on(args, &mesh, dtype, loaded, &progress)
    });
    let closed = mesh.close().map_err(|e| e.to_string());
    result?;
    closed
}

/// What the decode runs with, loaded before the mesh opens.
struct Loaded<'a> {
    /// Dropped once the model is placed: the chips hold the weights from then on (a whole f32
    /// copy is the largest thing on the host: 5 GB for a 1B model).
    weights: ModelWeights,
    tokenizer: &'a GgufTokenizer,
    model_name: &'a str,
    prompt: &'a [u32],
    started: Instant,
    host: Option<HostRun>,
}

/// Places the model on `mesh` and decodes, printing as it goes.
fn decode_on(
    args: &DecodeArgs,
    mesh: &MeshDevice,
    dtype: DataType,
    loaded: Loaded<'_>,
    progress: &dyn Fn(&str),
) -> Result<(), String> {
    let host_reference = loaded.host.as_ref();
    let (weights, tokenizer, model_name, prompt, t) = (
        loaded.weights,
        loaded.tokenizer,
        loaded.model_name,
        loaded.prompt,
        loaded.started,
    );
    let positions = prompt.len() + args.max_new_tokens;
    let decode = DeviceDecodeConfig {
        batch: args.batch,
        max_positions: positions,
        dtype,
    };
    let mut model = place(args, mesh, weights.tensors(), decode)?;
    drop(weights);
    let profiler = args.profile.start(mesh)?;
    progress(&format!(
        "placed on {} chip(s) in {:.2} s ({}); prefilling {} prompt tokens through the decode step{}",
        mesh.num_devices(),
        t.elapsed().as_secs_f64(),
        model.parallel().describe(),
        prompt.len(),
        if args.no_trace {
            ""
        } else {
            " (the first step is captured as a trace, then replayed)"
        }
    ));

    let traced = !args.no_trace;
    // A traced run enqueues its first steps untraced, for the side-by-side figures (they also
    // compile every program), then captures the step and replays it; at least two traced steps
    // remain so the steady state (after the capture) is measured.
    let untraced_first = if traced {
        COMPARISON_STEPS.min((positions - 1).saturating_sub(2))
    } else {
        0
    };
    let mut stream = TextStream::new(tokenizer);
    let mut generated = Vec::with_capacity(args.max_new_tokens);
    let forced = match args.score_against.as_deref() {
        Some("host") => loaded.host.as_ref().map(|h| h.ids.clone()),
        Some(ids) => Some(parse_forced_ids(ids, args.max_new_tokens)?),
        None => None,
    };
    let (mut timings, mut comparison) = (Timings::default(), Timings::default());
    let mut input = prompt[0];
    let mut out = std::io::stdout();
    // Over MPI ranks every rank decodes the same tokens; rank 0 speaks for the job.
    let speaks = mesh.rank().unwrap_or(0) == 0;
    // Prefill runs the decode step once per prompt token: a long prompt must not look hung.
    let prefill_bar = if args.on.json || prompt.len() < 2 {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(prompt.len() as u64 - 1)
    };
    prefill_bar.set_style(
        ProgressStyle::with_template("decode: prefilling [{bar:30}] {pos}/{len} prompt tokens")
            .map_err(|e| e.to_string())?,
    );
    let started = Instant::now();
    // Wire bytes are counted over the steady steps: after the capture (traced) or the first.
    let steady_from = untraced_first + 1;
    let mut steady_bytes_from = None;
    for pos in 0..positions - 1 {
        if pos == steady_from {
            steady_bytes_from = Some(fabric_bytes(mesh)?);
        }
        let step_traced = traced && pos >= untraced_first;
        let t = Instant::now();
        let next = model
            .decode_step(
                &vec![input; args.batch],
                &vec![pos; args.batch],
                step_traced,
            )
            .map_err(|e| format!("decode step at position {pos}: {e}"))?;
        let took = t.elapsed();
        if traced && !step_traced {
            comparison.push(took, &model);
        } else {
            timings.push(took, &model);
        }
        if pos + 1 < prompt.len() {
            input = prompt[pos + 1];
            prefill_bar.set_position(pos as u64 + 1);
            continue;
        }
        if !prefill_bar.is_finished() {
            // The prompt is printed once prefill is done, so the bar never draws over it.
            prefill_bar.finish_and_clear();
            if !args.on.json {
                print!("{}", args.prompt);
            }
        }
        let picked = next[0];
        generated.push(picked);
        input = forced
            .as_ref()
            .map_or(picked, |ids| ids[generated.len() - 1]);
        if !args.on.json && speaks {
            print!("{}", stream.push(picked).map_err(|e| e.to_string())?);
            let _ = out.flush();
        }
    }
    let total = started.elapsed();
    let profile = crate::profile::finish(profiler, positions - 1)?;
    let steady_steps = (positions - 1).saturating_sub(steady_from);
    let wire_bytes_per_token = match steady_bytes_from.filter(|_| steady_steps > 0) {
        Some(from) => Some((fabric_bytes(mesh)? - from) as f64 / steady_steps as f64),
        None => None,
    };
    if !args.on.json && speaks {
        println!("{}", stream.finish().map_err(|e| e.to_string())?);
    }
    let untraced_first = (!comparison.step.is_empty()).then(|| comparison.steady(false));
    let text = tokenizer.decode(&generated).map_err(|e| e.to_string())?;
    let (step, host) = timings.steady(traced);
    let report = Report {
        args,
        model_name,
        mesh,
        model: &model,
        prompt_tokens: prompt.len(),
        generated: &generated,
        forced: forced.as_deref(),
        host_reference,
        text: &text,
        total,
        step,
        host,
        untraced_first,
        wire_bytes_per_token,
    };
    if speaks && args.on.json {
        let mut v = report.json();
        if let Some(p) = &profile {
            v["profile"] = crate::profile::to_json(p);
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else if speaks {
        report.print();
        profile.iter().for_each(crate::profile::print);
    }
    if args.hold > 0.0 {
        progress(&format!(
            "holding the mesh open for {} s (ttmesh monitor)",
            args.hold
        ));
        std::thread::sleep(Duration::from_secs_f64(args.hold));
    }
    Ok(())
}
