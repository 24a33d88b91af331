//! `ttmesh plan decode`: `ttmesh decode`'s model sized before running, from a GGUF's header
//! (the weight data is never read) or from shapes given by flags (no file at all). The model
//! is placed by shape alone (`WeightSource::ShapesOnly`: buffers allocated, nothing written, no
//! tensor data on the host) under a NO_DISPATCH capture, and its decode step captured as a
//! trace and replayed as `ttmesh decode` does; per chip the plan names the trace_region_size
//! the trace needs, the peaks of DRAM / L1 / L1_SMALL, and whether it fits. A model whose
//! weights and KV cache do not fit in DRAM is reported with the numbers.
//!
//! `--predict` also models the captured trace replayed on the hardware (ttmesh-profile's
//! calibrated model, `ttmesh_benches::predict`): device time per token, tokens/s, an estimated
//! time to first token, and the ops and collectives that take the token.

use std::path::PathBuf;

use serde_json::json;
use ttmesh::graph::{self, Plan};
use ttmesh::MeshShape;
use ttmesh_models::gguf::GgufFile;
use ttmesh_models::synthetic::SyntheticConfig;
use ttmesh_models::{
    DeviceDecodeConfig, DeviceLlama, LlamaConfig, ModelError, TensorParallel, MAX_BATCH,
};

use ttmesh_benches::predict::{capture_decode, DecodePrediction};

use crate::plan::print_chips;

/// The largest value a shape flag takes (as the GGUF reader allows).
const MAX_DIM: usize = 1 << 24;

#[derive(clap::Args, Debug, Clone)]
pub struct DecodePlanArgs {
    #[command(flatten)]
    pub on: crate::mesh_args::MeshArgs,
    /// A llama-architecture GGUF: only its header (metadata and tensor shapes) is read. Without
    /// it (and without shape flags), the synthetic model `ttmesh decode` uses by default.
    #[arg(long, value_name = "PATH.gguf", conflicts_with_all = ["hidden", "ffn", "layers", "heads", "kv_heads", "vocab"])]
    pub model: Option<PathBuf>,
    /// Hidden size (embedding length). Shape flags not given take the synthetic model's.
    #[arg(long)]
    pub hidden: Option<usize>,
    /// FFN (feed-forward) size.
    #[arg(long)]
    pub ffn: Option<usize>,
    /// Decoder blocks.
    #[arg(long)]
    pub layers: Option<usize>,
    /// Query heads.
    #[arg(long)]
    pub heads: Option<usize>,
    /// KV heads (grouped-query attention).
    #[arg(long)]
    pub kv_heads: Option<usize>,
    /// Vocabulary size.
    #[arg(long)]
    pub vocab: Option<usize>,
    /// Users decoded together (1 to 32).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// KV cache positions per user (`ttmesh decode` uses prompt + new tokens). Default: the
    /// GGUF's context length, or the synthetic model's (256) for shapes from flags.
    #[arg(long)]
    pub context: Option<usize>,
    /// bf16 or f32: weights, KV cache and activations on the device. bfp8_b: the projection
    /// weights and LM head in bfp8_b, the rest (embedding, norms, KV cache, activations) in bf16.
    /// bfp4_b: tt-metal's performance configuration, the MLP weights in bfp4_b, attention
    /// weights and LM head in bfp8_b, the rest in bf16.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Also predict the hardware's speed: modeled device time per traced token, tokens/s/user
    /// and tokens/s, time to first token for --prompt-len, and the ops that take the token.
    #[arg(long)]
    pub predict: bool,
    /// Prompt tokens for the predicted time to first token (default: 128, or the context
    /// length when shorter).
    #[arg(long)]
    pub prompt_len: Option<usize>,
    /// With --predict: write the predicted token's modeled device profile here, the files
    /// `run --profile` writes (ops_perf_results.csv for tt-perf-report, trace.json, ...).
    #[arg(long, value_name = "DIR", requires = "predict")]
    pub profile: Option<PathBuf>,
}

/// Ops listed in the predicted breakdown.
const TOP_OPS: usize = 12;

/// The model to plan and where its shapes came from.
fn model_config(args: &DecodePlanArgs) -> Result<(LlamaConfig, String), String> {
    if let Some(path) = &args.model {
        // The header only: metadata and tensor infos, never the weight data.
        let file = GgufFile::open(path).map_err(|e| format!("--model: {e}"))?;
        let config = LlamaConfig::from_gguf(&file).map_err(|e| format!("--model: {e}"))?;
        return Ok((config, path.display().to_string()));
    }
    let base = SyntheticConfig::small();
    let flags = [
        ("--hidden", args.hidden, base.hidden_size),
        ("--ffn", args.ffn, base.ffn_size),
        ("--layers", args.layers, base.block_count),
        ("--heads", args.heads, base.head_count),
        ("--kv-heads", args.kv_heads, base.kv_head_count),
        ("--vocab", args.vocab, base.vocab_size),
    ];
    let mut v = [0usize; 6];
    for (slot, (flag, given, default)) in v.iter_mut().zip(flags) {
        let value = given.unwrap_or(default);
        if value == 0 || value > MAX_DIM {
            return Err(format!("{flag} {value}: give a size from 1 to {MAX_DIM}"));
        }
        *slot = value;
    }
    let [hidden, ffn, layers, heads, kv_heads, vocab] = v;
    if !hidden.is_multiple_of(heads) {
        return Err(format!(
            "--heads {heads} does not divide --hidden {hidden}: the head dimension is hidden / heads"
        ));
    }
    if !heads.is_multiple_of(kv_heads) {
        return Err(format!(
            "--kv-heads {kv_heads} does not divide --heads {heads}: each KV head serves a whole group of query heads"
        ));
    }
    let head_dim = hidden / heads;
    if head_dim % 2 != 0 {
        return Err(format!(
            "--hidden {hidden} / --heads {heads} = head dimension {head_dim}, which is odd; RoPE needs pairs"
        ));
    }
    let given = flags.iter().any(|f| f.1.is_some());
    let config = LlamaConfig {
        block_count: layers,
        hidden_size: hidden,
        ffn_size: ffn,
        head_count: heads,
        kv_head_count: kv_heads,
        head_dim,
        vocab_size: vocab,
        // Shapes from flags have no context of their own: the plan's is theirs.
        context_length: args.context.unwrap_or(base.context_length),
        rope_base: base.rope_base,
        rms_norm_eps: base.rms_norm_eps,
        tied_embeddings: !given,
    };
    let source = if given {
        "shapes from flags".to_string()
    } else {
        "synthetic llama (no --model given)".to_string()
    };
    Ok((config, source))
}

/// What the plan found besides the chips' figures.
struct Placed {
    shape: MeshShape,
    parallel: String,
    /// (weights, KV cache) bytes per chip, placed or (when placement failed) needed.
    dram: (u64, u64),
}

pub fn run(args: &DecodePlanArgs) -> Result<(), String> {
    let dtype = crate::decode::parse_dtype(&args.dtype)?;
    if let Some(dir) = &args.profile {
        ttmesh_profile::check_dir(dir).map_err(|e| format!("--profile: {e}"))?;
    }
    if args.batch == 0 || args.batch > MAX_BATCH {
        return Err(format!(
            "--batch {}: decode 1 to {MAX_BATCH} users per step",
            args.batch
        ));
    }
    let mesh_config = args.on.config()?;
    let (config, source) = model_config(args)?;
    let positions = args.context.unwrap_or(config.context_length);
    if positions == 0 || positions > config.context_length {
        return Err(format!(
            "--context {positions}: give 1 to the model's context length of {}",
            config.context_length
        ));
    }
    let prompt_len = args.prompt_len.unwrap_or(128.min(config.context_length));
    if args.predict && (prompt_len == 0 || prompt_len > config.context_length) {
        return Err(format!(
            "--prompt-len {prompt_len}: give 1 to the model's context length of {} (for shapes from flags, --context sets it)",
            config.context_length
        ));
    }
    let decode = DeviceDecodeConfig {
        batch: args.batch,
        max_positions: positions,
        dtype,
    };
    let mut placed = None;
    let mut failure = None;
    let mut predicted = None;
    let mut arch = None;
    let plan = graph::plan(&mesh_config, |mesh| {
        let shape = mesh.shape();
        // As `ttmesh decode` does: the step once untraced (compiles), captured, replayed.
        match capture_decode(mesh, &config, decode) {
            Ok(captured) => {
                if args.predict {
                    predicted =
                        DecodePrediction::of(&captured, mesh.arch(), args.batch, prompt_len);
                    arch = Some(mesh.arch().clone());
                }
                placed = Some(Placed {
                    shape,
                    parallel: captured.parallel,
                    dram: captured.dram,
                });
                Ok(())
            }
            Err(e) => {
                let detail = e.to_string();
                let fabric = mesh.fabric_config();
                let needed =
                    DeviceLlama::dram_bytes_needed(&config, decode, shape.rows, shape.cols, fabric);
                let split = TensorParallel::plan_for(&config, shape.rows, shape.cols, fabric);
                if let (ModelError::DoesNotFit { .. }, Ok(dram), Ok(split)) = (&e, needed, split) {
                    placed = Some(Placed {
                        shape,
                        parallel: split.describe(),
                        dram,
                    });
                }
                failure = Some(e);
                Err(ttmesh::MeshError::Invalid {
                    op: "decode plan".into(),
                    detail,
                })
            }
        }
    })
    .map_err(|e| format!("--mesh {}: {e}", args.on.mesh))?;
    let mut profile_files = Vec::new();
    if let (Some(dir), Some(p), Some(arch)) = (&args.profile, &predicted, &arch) {
        profile_files = p
            .write_profile(dir, arch)
            .map_err(|e| format!("--profile: {e}"))?;
    }
    let mut report = Report {
        args,
        config: &config,
        source: &source,
        positions,
        plan,
        placed,
        does_not_fit: None,
        predicted,
        profile_files,
    };
    if let Some(ModelError::DoesNotFit { tensor, .. }) = &failure {
        report.mark_dram_short(tensor);
    }
    if args.on.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report.json()).map_err(|e| e.to_string())?
        );
    } else {
        report.print();
    }
    if report.does_not_fit.is_some() {
        return Err("the model does not fit in DRAM on every chip (see above)".into());
    }
    if let Some(e) = &report.plan.error {
        return Err(format!("the decode step does not run: {e}"));
    }
    if !report.plan.fits() {
        return Err("the decode step does not fit on every chip (see the table)".into());
    }
    Ok(())
}

struct Report<'a> {
    args: &'a DecodePlanArgs,
    config: &'a LlamaConfig,
    source: &'a str,
    positions: usize,
    plan: Plan,
    placed: Option<Placed>,
    /// Set when the weights and KV cache alone do not fit: the line that says by how much.
    does_not_fit: Option<String>,
    /// With --predict, once the step was captured.
    predicted: Option<DecodePrediction>,
    /// With --profile: the predicted profile's files.
    profile_files: Vec<PathBuf>,
}

impl Report<'_> {
    /// Placement ran out of DRAM at `tensor`: every chip is marked with the bytes the model
    /// needs against the bytes it has (the plan's error is then this, not the allocator's).
    fn mark_dram_short(&mut self, tensor: &str) {
        let Some(p) = &self.placed else { return };
        let (weights, cache) = p.dram;
        let needed = weights + cache;
        for c in &mut self.plan.chips {
            let has = c.capacity_bytes.dram;
            c.fits = false;
            c.problems.push(if needed > has {
                format!(
                    "DRAM: the weights ({weights} B) and KV cache ({cache} B) need {needed} B, {} B more than the {has} B of DRAM a chip has (placing {tensor} failed)",
                    needed - has,
                )
            } else {
                // Within the planning mesh's TRACE region of the top: too close to call.
                format!(
                    "DRAM: the weights ({weights} B) and KV cache ({cache} B) need {needed} B of the {has} B a chip has, but placing {tensor} failed while the plan held a TRACE region of {} B: the model fits by less than that, if at all",
                    graph::PLANNING_TRACE_REGION
                )
            });
        }
        let has = self.plan.chips.first().map_or(0, |c| c.capacity_bytes.dram);
        self.does_not_fit = Some(format!(
            "does not fit: each chip needs {needed} B of DRAM for the weights and KV cache alone and has {has} B; use more chips, a smaller --dtype (bfp8_b), a smaller --batch or --context"
        ));
        self.plan.error = None;
    }

    fn json(&self) -> serde_json::Value {
        let c = self.config;
        json!({
            "mesh": self.args.on.mesh,
            "fabric": self.args.on.fabric_name(),
            "model": {
                "source": self.source,
                "hidden": c.hidden_size, "ffn": c.ffn_size, "layers": c.block_count,
                "heads": c.head_count, "kv_heads": c.kv_head_count, "head_dim": c.head_dim,
                "vocab": c.vocab_size, "parameters": c.parameter_count(),
            },
            "batch": self.args.batch,
            "context": self.positions,
            "dtype": self.args.dtype,
            "parallel": self.placed.as_ref().map(|p| p.parallel.clone()),
            "mesh_shape": self.placed.as_ref().map(|p| [p.shape.rows, p.shape.cols]),
            "weights_bytes_per_chip": self.placed.as_ref().map(|p| p.dram.0),
            "kv_cache_bytes_per_chip": self.placed.as_ref().map(|p| p.dram.1),
            "chips": self.plan.chips,
            "fits": self.does_not_fit.is_none() && self.plan.fits(),
            "does_not_fit": self.does_not_fit,
            "error": self.plan.error,
            "predict": self.predicted.as_ref().map(|p| p.to_json(TOP_OPS)),
            "profile_files": self.profile_files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
        })
    }

    fn print(&self) {
        let c = self.config;
        println!(
            "ttmesh plan: decode of {} (hidden {}, ffn {}, {} layers, {} heads / {} KV heads, vocab {}) on {}, batch {}, context {}, {}, sized under NO_DISPATCH",
            self.source,
            c.hidden_size,
            c.ffn_size,
            c.block_count,
            c.head_count,
            c.kv_head_count,
            c.vocab_size,
            self.args.on.mesh,
            self.args.batch,
            self.positions,
            self.args.dtype
        );
        if let Some(p) = &self.placed {
            println!("{}", p.parallel);
            println!(
                "each chip's DRAM holds {} B of weights and {} B of KV cache",
                p.dram.0, p.dram.1
            );
        }
        print_chips(&self.plan.chips);
        if let Some(line) = &self.does_not_fit {
            println!("{line}");
        }
        if let Some(p) = &self.predicted {
            print!("{}", p.describe(TOP_OPS));
        }
        for f in &self.profile_files {
            println!("  wrote {}", f.display());
        }
    }
}
