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

fn synthetic_shape(name: &str) -> Result<SyntheticConfig, String> {
    SyntheticConfig::named(name).ok_or_else(|| {
        format!(
            "--synthetic {name}: use one of {}",
            SyntheticConfig::NAMES.join(", ")
        )
    })
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

/// Wire bytes that crossed every fabric link so far.
fn fabric_bytes(mesh: &MeshDevice) -> u64 {
    mesh.fabric()
        .map(|f| f.link_stats().iter().map(|l| l.bytes).sum())
        .unwrap_or(0)
}

/// Steps a traced run enqueues untraced first, for the side-by-side figures.
const COMPARISON_STEPS: usize = 4;

/// The model's weights as this run needs them: all of them in f32 when the host reference
/// computes with them too, else read from the file one block at a time as they are placed (the
/// host never holds the whole f32 model).
struct ModelWeights {
    tensors: Tensors,
    /// The synthetic model's file, read until the weights are dropped.
    _file: Option<RemoveOnDrop>,
}

enum Tensors {
    Whole(Arc<LlamaWeights>),
    ByBlock(GgufWeights),
}

impl ModelWeights {
    fn tensors(&self) -> &dyn ModelTensors {
        match &self.tensors {
            Tensors::Whole(w) => w.as_ref(),
            Tensors::ByBlock(w) => w,
        }
    }

    fn whole(&self) -> Option<&Arc<LlamaWeights>> {
        match &self.tensors {
            Tensors::Whole(w) => Some(w),
            Tensors::ByBlock(_) => None,
        }
    }
}

/// Opens the weights (all of them when `whole`) and tokenizer; the synthetic model when no
/// --model is given.
fn load(
    args: &DecodeArgs,
    whole: bool,
    progress: &dyn Fn(&str),
) -> Result<(ModelWeights, GgufTokenizer, String), String> {
    let (path, model_name, file) = match &args.model {
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
            let shape = synthetic_shape(&args.synthetic)?;
            progress(&format!("writing the synthetic llama ({})", args.synthetic));
            let guard = RemoveOnDrop(p.clone());
            write_synthetic_llama(&p, &shape).map_err(|e| e.to_string())?;
            let name = if args.synthetic == "small" {
                "synthetic llama (no --model given)".to_string()
            } else {
                format!(
                    "synthetic llama at {}'s shape (random weights)",
                    args.synthetic
                )
            };
            (p, name, Some(guard))
        }
    };
    progress(&format!("loading {model_name}"));
    let bad_file = |e: ttmesh_models::ModelError| format!("--model {}: {e}", path.display());
    let tensors = if whole {
        Tensors::Whole(Arc::new(
            LlamaWeights::load(&path, LoadOptions::default()).map_err(bad_file)?,
        ))
    } else {
        Tensors::ByBlock(GgufWeights::open(&path).map_err(bad_file)?)
    };
    let tokenizer = GgufTokenizer::load(&path).map_err(|e| e.to_string())?;
    let weights = ModelWeights {
        tensors,
        _file: file,
    };
    Ok((weights, tokenizer, model_name))
}

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

/// The host f32 reference's greedy decode of the same prompt (`--check-host`).
struct HostRun {
    ids: Vec<u32>,
    per_token: Duration,
}

impl HostRun {
    fn run(weights: &Arc<LlamaWeights>, prompt: &[u32], n: usize) -> Result<HostRun, String> {
        let started = Instant::now();
        let ids = HostReference::new(Arc::clone(weights), 1, prompt.len() + n)
            .and_then(|mut host| host.generate(prompt, n))
            .map_err(|e| format!("--check-host: the host reference failed: {e}"))?;
        let steps = (prompt.len() + n - 1).max(1) as u32;
        Ok(HostRun {
            ids,
            per_token: started.elapsed() / steps,
        })
    }

    /// The first position where `device` differs from the host's ids, None when all equal.
    fn first_difference(&self, device: &[u32]) -> Option<usize> {
        (0..self.ids.len().max(device.len())).find(|&i| self.ids.get(i) != device.get(i))
    }
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
            steady_bytes_from = Some(fabric_bytes(mesh));
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
    let wire_bytes_per_token = steady_bytes_from
        .filter(|_| steady_steps > 0)
        .map(|from| (fabric_bytes(mesh) - from) as f64 / steady_steps as f64);
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

/// What a run measured, printed as a table or one JSON object.
struct Report<'a> {
    args: &'a DecodeArgs,
    model_name: &'a str,
    mesh: &'a MeshDevice,
    model: &'a DeviceLlama,
    prompt_tokens: usize,
    generated: &'a [u32],
    /// The ids fed after the prompt under `--score-against`.
    forced: Option<&'a [u32]>,
    host_reference: Option<&'a HostRun>,
    text: &'a str,
    total: Duration,
    /// Median step and host dispatch time of the requested mode's steady state.
    step: Duration,
    host: Duration,
    /// (step, host) of the untraced first steps of a traced run.
    untraced_first: Option<(Duration, Duration)>,
    wire_bytes_per_token: Option<f64>,
}

impl Report<'_> {
    fn traced(&self) -> bool {
        !self.args.no_trace
    }

    fn tokens_per_s(&self) -> f64 {
        (self.generated.len() * self.args.batch) as f64
            / self.total.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Under `--score-against`: how many greedy picks equal the ids fed, of how many.
    fn teacher_forced_agreement(&self) -> Option<(usize, usize)> {
        let forced = self.forced?;
        let agree = self
            .generated
            .iter()
            .zip(forced)
            .filter(|(a, b)| a == b)
            .count();
        Some((agree, self.generated.len()))
    }

    fn json(&self) -> serde_json::Value {
        let p = self.model.parallel();
        let (all_reduces, all_gathers) = self.model.collectives_per_step();
        let chips: Vec<_> = self
            .mesh
            .reports()
            .iter()
            .map(|r| {
                json!({
                    "id": r.id, "coord": [r.coord.row, r.coord.col],
                    "dram_allocated": r.dram_allocated, "dram_capacity": r.dram_capacity,
                    "l1_allocated": r.l1_allocated, "trace_allocated": r.trace_allocated,
                    "trace_region_size": r.trace_region_size, "trace_replays": r.trace_replays,
                    "host_bytes": r.host_bytes,
                })
            })
            .collect();
        json!({
            "model": self.model_name, "mesh": self.args.on.mesh, "chips": self.mesh.num_devices(),
            "fabric": self.args.on.fabric_name(),
            "parallel": {
                "degree": p.degree, "cluster_axis": p.cluster_axis, "replicas": p.replicas,
                "query_heads_per_chip": p.local_heads(), "kv_heads_per_chip": p.local_kv_heads(),
                "lm_head": format!("{:?}", p.lm_head).to_lowercase(),
                "both_axes": p.both_axes, "ffn_size": p.ffn_size, "ffn_padding": p.ffn_padding,
            },
            "dtype": self.args.dtype, "batch": self.args.batch, "traced": self.traced(),
            "prompt_tokens": self.prompt_tokens, "generated_tokens": self.generated.len(),
            "token_ids": self.generated, "text": self.text,
            "host_reference": self.host_reference.map(|h| json!({"token_ids": h.ids, "equal": h.first_difference(self.generated).is_none(), "first_difference": h.first_difference(self.generated), "ms_per_token": ms(h.per_token)})),
            "teacher_forced": self.teacher_forced_agreement().map(|(agree, of)| json!({"fed_ids": self.forced, "top1_agree": agree, "of": of})),
            "tokens_per_s": self.tokens_per_s(),
            "median_step_ms": ms(self.step),
            "host_ms_per_token": ms(self.host),
            "untraced_first_steps": self.untraced_first.map(|(s, h)| json!({"median_step_ms": ms(s), "host_ms_per_token": ms(h)})),
            "total_s": self.total.as_secs_f64(),
            "replay_skew_us": self.mesh.last_replay().map(|r| r.skew_us),
            "collectives_per_token": {"all_reduce": all_reduces, "all_gather": all_gathers},
            "fabric_wire_bytes_per_token": self.wire_bytes_per_token,
            "weights_bytes_per_chip": self.model.dram_bytes_per_chip().0,
            "kv_cache_bytes_per_chip": self.model.dram_bytes_per_chip().1,
            "per_chip": chips,
            "host_peak_rss_bytes": peak_rss_bytes(),
        })
    }

    fn print(&self) {
        let a = self.args;
        println!(
            "\n{} on {} ({} chip(s), {} fabric), {}, batch {}",
            self.model_name,
            a.on.mesh,
            self.mesh.num_devices(),
            a.on.fabric_name(),
            a.dtype,
            a.batch
        );
        println!("{}", self.model.parallel().describe());
        println!(
            "{} prompt + {} generated tokens in {:.2} s: {:.1} tokens/s",
            self.prompt_tokens,
            self.generated.len(),
            self.total.as_secs_f64(),
            self.tokens_per_s()
        );
        let mode = if self.traced() { "traced" } else { "untraced" };
        println!(
            "{:<38} {:>12} {:>22}",
            "per token (median)", "step", "host time (dispatch)"
        );
        println!(
            "{:<38} {:>9.2} ms {:>19.3} ms",
            mode,
            ms(self.step),
            ms(self.host)
        );
        if let Some((s, h)) = self.untraced_first {
            println!(
                "{:<38} {:>9.2} ms {:>19.3} ms",
                "untraced (first steps, incl. compile)",
                ms(s),
                ms(h)
            );
            println!(
                "trace removes {:.1}x of the host time per token and {:.2}x of the step time",
                h.as_secs_f64() / self.host.as_secs_f64().max(1e-9),
                s.as_secs_f64() / self.step.as_secs_f64().max(1e-9)
            );
        }
        let (all_reduces, all_gathers) = self.model.collectives_per_step();
        if all_reduces + all_gathers > 0 {
            let phases = if self.model.parallel().both_axes {
                " (each over the whole mesh: along columns then rows, the gather rows then columns)"
            } else {
                ""
            };
            println!(
                "collectives per token: {all_reduces} all_reduce + {all_gathers} all_gather{phases}; fabric wire bytes per token {}",
                self.wire_bytes_per_token
                    .map_or("n/a".into(), |b| format!("{:.2} MiB (measured on the links)", b / (1 << 20) as f64))
            );
        }
        let (weights, cache) = self.model.dram_bytes_per_chip();
        println!(
            "each chip's DRAM holds {:.2} MiB of weights and {:.2} MiB of KV cache",
            mib(weights),
            mib(cache)
        );
        println!(
            "{:>5} {:>7} {:>12} {:>10} {:>12} {:>8} {:>12}",
            "chip", "coord", "DRAM", "L1", "TRACE", "replays", "host"
        );
        let reports = self.mesh.reports();
        for r in &reports {
            println!(
                "{:>5} {:>7} {:>8.2} MiB {:>6.2} MiB {:>8.2} MiB {:>8} {:>8.2} MiB",
                r.id,
                format!("({},{})", r.coord.row, r.coord.col),
                mib(r.dram_allocated),
                mib(r.l1_allocated),
                mib(r.trace_allocated),
                r.trace_replays,
                mib(r.host_bytes)
            );
        }
        let device: u64 = reports
            .iter()
            .map(|r| r.dram_allocated + r.l1_allocated)
            .sum();
        let host: u64 = reports.iter().map(|r| r.host_bytes).sum();
        println!(
            "chip memory on the host: {:.2} MiB for {:.2} MiB allocated on the devices (equal chunks stored once); process peak RSS {}",
            mib(host),
            mib(device),
            peak_rss_bytes().map_or("n/a".into(), |b| format!("{:.2} MiB", mib(b)))
        );
        if let Some(r) = self.mesh.last_replay() {
            println!("replay skew between chips (last step): {:.1} us", r.skew_us);
        }
        println!("token ids: {:?}", self.generated);
        if let Some(h) = self.host_reference {
            match h.first_difference(self.generated) {
                None => println!(
                    "host f32 reference: the same {} ids ({:.1} ms per token on the host)",
                    h.ids.len(),
                    ms(h.per_token)
                ),
                Some(i) => println!(
                    "host f32 reference: ids differ from token {i} on (device {:?}, host {:?}); host ids {:?}",
                    self.generated.get(i),
                    h.ids.get(i),
                    h.ids
                ),
            }
        }
        if let Some((agree, of)) = self.teacher_forced_agreement() {
            println!(
                "teacher forced (--score-against): {agree} of {of} greedy picks equal the ids fed"
            );
        }
    }
}

/// Removes the synthetic model's temporary file when the run ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
