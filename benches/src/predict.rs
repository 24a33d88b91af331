//! Predicted hardware speed against Tenstorrent's published figures (`ttmesh bench predict`),
//! and the shape-only decode capture `ttmesh plan decode --predict` shares with it.
//!
//! Every prediction places the model by shape (no weights, nothing computes) under a
//! NO_DISPATCH capture, records the decode step's trace and models it replayed back to back
//! with ttmesh-profile's calibrated model (`ttmesh_profile::predict`). The published rows and
//! where each comes from are listed in [`published`]; docs/prediction.md explains each miss.

use std::fmt::Write as _;

use ttmesh::ccl::{self, CclArgs};
use ttmesh::graph;
use ttmesh::{
    CqId, DataType, FabricConfig, Layout, MemoryConfig, MeshConfig, MeshDevice, MeshTensor,
    TensorSpec,
};
use ttmesh_models::{DeviceDecodeConfig, DeviceLlama, LlamaConfig, ModelError};
use ttmesh_profile::recorder::{Command, HostEvent};
use ttmesh_profile::{predict, Calibration, DeviceModel, Recorder, Timeline, TokenPrediction};

/// What placing and capturing a decode step found.
pub struct CapturedDecode {
    /// The split, for people ("tensor parallel over 8 chips ...").
    pub parallel: String,
    /// (weights, KV cache) bytes per chip.
    pub dram: (u64, u64),
    /// The recorder's events: the captured trace's submissions.
    pub events: Vec<HostEvent>,
}

/// Places `config` by shape on `mesh`, captures its decode step as a trace (recorded) and
/// replays it once, as `ttmesh decode` does. Runs under a NO_DISPATCH graph capture.
pub fn capture_decode(
    mesh: &MeshDevice,
    config: &LlamaConfig,
    decode: DeviceDecodeConfig,
) -> Result<CapturedDecode, ModelError> {
    let mut model = DeviceLlama::from_shapes(mesh, config, decode)?;
    let recorder = Recorder::new();
    recorder.attach(mesh.chips());
    let captured = model.capture_decode_trace();
    recorder.detach(mesh.chips());
    let id = captured?;
    mesh.execute_trace(id, CqId(0), false)
        .map_err(|e| ModelError::Device {
            context: "execute_trace".into(),
            source: Box::new(e),
        })?;
    Ok(CapturedDecode {
        parallel: model.parallel().describe(),
        dram: model.dram_bytes_per_chip(),
        events: recorder.events(),
    })
}

/// A decode prediction: the traced token and the estimated time to first token.
#[derive(Clone, Debug)]
pub struct DecodePrediction {
    pub token: TokenPrediction,
    /// The steady-state token modeled on every chip (what `--profile` would write for it).
    pub timeline: Timeline,
    /// The constants it was modeled with.
    pub cal: Calibration,
    pub batch: usize,
    pub prompt_len: usize,
    pub ttft_ns: Option<f64>,
}

impl DecodePrediction {
    /// Models `captured` on `arch`'s default calibration.
    pub fn of(
        captured: &CapturedDecode,
        arch: &ttmesh::ArchSpec,
        batch: usize,
        prompt_len: usize,
    ) -> Option<DecodePrediction> {
        Self::with(captured, Calibration::for_arch(arch), batch, prompt_len)
    }

    /// Models `captured` on the constants `cal`.
    pub fn with(
        captured: &CapturedDecode,
        cal: Calibration,
        batch: usize,
        prompt_len: usize,
    ) -> Option<DecodePrediction> {
        let model = DeviceModel::new(cal.clone());
        let (token, timeline) = predict::traced(&captured.events, &model)?;
        Some(DecodePrediction {
            token,
            timeline,
            cal,
            batch,
            prompt_len,
            ttft_ns: predict::prefill_ns(&captured.events, &model, prompt_len),
        })
    }

    /// Writes the predicted token as a profile folder (`ops_perf_results.csv` in tt-metal's
    /// columns, the Perfetto trace, ...), as `run --profile` writes a run's; returns the files.
    pub fn write_profile(
        &self,
        dir: &std::path::Path,
        arch: &ttmesh::ArchSpec,
    ) -> Result<Vec<std::path::PathBuf>, String> {
        ttmesh_profile::check_dir(dir).map_err(|e| e.to_string())?;
        let summary = ttmesh_profile::Summary::of(&self.timeline, 0);
        let model = DeviceModel::new(self.cal.clone());
        ttmesh_profile::write_reports(
            dir,
            &self.timeline,
            &summary,
            Some(&self.token),
            &model,
            arch,
        )
        .map_err(|e| e.to_string())
    }

    pub fn tokens_per_s(&self) -> f64 {
        self.token.tokens_per_s_per_user() * self.batch as f64
    }

    pub fn to_json(&self, top: usize) -> serde_json::Value {
        let mut v = self.token.to_json(top);
        v["tokens_per_s_per_user"] = self.token.tokens_per_s_per_user().into();
        v["tokens_per_s"] = self.tokens_per_s().into();
        v["batch"] = self.batch.into();
        v["prompt_len"] = self.prompt_len.into();
        v["ttft_ms"] = self.ttft_ns.map(|t| t / 1e6).into();
        v["ttft_is"] = "estimate: the decode op set re-costed for the prompt's rows".into();
        v
    }

    /// The human lines `plan decode --predict` prints.
    pub fn describe(&self, top: usize) -> String {
        let t = &self.token;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "predicted (modeled device time, traced): {:.1} us per token = {:.1} tokens/s/user, {:.1} tokens/s at batch {}",
            t.token_ns / 1e3,
            t.tokens_per_s_per_user(),
            self.tokens_per_s(),
            self.batch
        );
        let _ = writeln!(
            s,
            "  on chip {} ({} ops per token): kernels {:.1} us, dispatch and firmware {:.1} us, waiting at collectives {:.1} us, EXEC_BUF {:.1} us; collectives' kernels {:.1} us; DRAM floor {:.1} us",
            t.critical_chip,
            t.ops_per_chip,
            t.kernel_ns / 1e3,
            t.overhead_ns / 1e3,
            t.collective_wait_ns / 1e3,
            t.exec_buf_ns / 1e3,
            t.collective_ns / 1e3,
            t.dram_ns_per_chip / 1e3
        );
        if let Some(ttft) = self.ttft_ns {
            let _ = writeln!(
                s,
                "  time to first token for a {}-token prompt: {:.2} ms (estimate: the decode op set re-costed for the prompt's rows, not a prefill program)",
                self.prompt_len,
                ttft / 1e6
            );
        }
        let _ = writeln!(s, "  top ops by share of the token:");
        for o in t.ops.iter().take(top) {
            let _ = writeln!(
                s,
                "  {:>6.1}% {:>9.1} us  x{:<4} {}{}",
                o.share * 100.0,
                o.ns / 1e3,
                o.count,
                o.op,
                if o.collective { "  (collective)" } else { "" }
            );
        }
        s
    }
}

/// Places and predicts `config` on `topology` (every shape check and memory check of `plan
/// decode` applies). Errors name what failed.
pub fn predict_decode(
    topology: &str,
    config: &LlamaConfig,
    decode: DeviceDecodeConfig,
    prompt_len: usize,
) -> Result<(DecodePrediction, String), String> {
    let (c, arch) = capture_on(topology, config, decode)?;
    let p = DecodePrediction::of(&c, &arch, decode.batch, prompt_len)
        .ok_or_else(|| format!("{topology}: the decode step captured no programs"))?;
    Ok((p, c.parallel))
}

/// Opens `topology` under a NO_DISPATCH plan, places `config` and captures its decode step.
pub fn capture_on(
    topology: &str,
    config: &LlamaConfig,
    decode: DeviceDecodeConfig,
) -> Result<(CapturedDecode, ttmesh::ArchSpec), String> {
    let fabric_config = if topology.starts_with("ring") {
        FabricConfig::Fabric1DRing
    } else {
        FabricConfig::Fabric1D
    };
    let mesh_config = MeshConfig {
        topology: topology.into(),
        fabric_config,
        ..Default::default()
    };
    let mut out = None;
    let mut arch = None;
    let plan = graph::plan(&mesh_config, |mesh| {
        arch = Some(mesh.arch().clone());
        let c = capture_decode(mesh, config, decode).map_err(|e| ttmesh::MeshError::Invalid {
            op: "decode prediction".into(),
            detail: e.to_string(),
        })?;
        out = Some(c);
        Ok(())
    })
    .map_err(|e| format!("{topology}: {e}"))?;
    if let Some(e) = plan.error {
        return Err(e);
    }
    match (out, arch) {
        (Some(c), Some(arch)) => Ok((c, arch)),
        _ => Err(format!("{topology}: nothing was captured")),
    }
}

/// A llama-architecture model's shapes, by the names its card gives.
#[derive(Clone, Copy, Debug)]
pub struct Shapes {
    pub name: &'static str,
    pub hidden: usize,
    pub ffn: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub vocab: usize,
    pub tied: bool,
}

impl Shapes {
    pub fn config(&self, context: usize) -> LlamaConfig {
        LlamaConfig {
            block_count: self.layers,
            hidden_size: self.hidden,
            ffn_size: self.ffn,
            head_count: self.heads,
            kv_head_count: self.kv_heads,
            head_dim: self.hidden / self.heads,
            vocab_size: self.vocab,
            context_length: context,
            rope_base: 500_000.0,
            rms_norm_eps: 1e-5,
            tied_embeddings: self.tied,
        }
    }
}

// Shapes from each model's published config.json (Hugging Face model cards).
pub const LLAMA_3_2_1B: Shapes = Shapes {
    name: "Llama-3.2-1B",
    hidden: 2048,
    ffn: 8192,
    layers: 16,
    heads: 32,
    kv_heads: 8,
    vocab: 128256,
    tied: true,
};
pub const LLAMA_3_2_3B: Shapes = Shapes {
    name: "Llama-3.2-3B",
    hidden: 3072,
    ffn: 8192,
    layers: 28,
    heads: 24,
    kv_heads: 8,
    vocab: 128256,
    tied: true,
};
pub const LLAMA_3_1_8B: Shapes = Shapes {
    name: "Llama-3.1-8B",
    hidden: 4096,
    ffn: 14336,
    layers: 32,
    heads: 32,
    kv_heads: 8,
    vocab: 128256,
    tied: false,
};
pub const LLAMA_3_1_70B: Shapes = Shapes {
    name: "Llama-3.1-70B",
    hidden: 8192,
    ffn: 28672,
    layers: 80,
    heads: 64,
    kv_heads: 8,
    vocab: 128256,
    tied: false,
};
pub const MISTRAL_7B: Shapes = Shapes {
    name: "Mistral-7B",
    hidden: 4096,
    ffn: 14336,
    layers: 32,
    heads: 32,
    kv_heads: 8,
    vocab: 32768,
    tied: false,
};
pub const QWEN_2_5_7B: Shapes = Shapes {
    name: "Qwen2.5-7B",
    hidden: 3584,
    ffn: 18944,
    layers: 28,
    heads: 28,
    kv_heads: 4,
    vocab: 152064,
    tied: false,
};

/// Where a published figure comes from (paths in github.com/tenstorrent/tt-metal).
pub const MODELS_README: &str = "models/README.md (LLMs table, Nov 3 2025)";
pub const TT_TRANSFORMERS_PERF: &str = "models/tt_transformers/PERF.md (performance config)";
pub const CCL_SUMMARY: &str = "tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md";

/// The weight formats of the published figures: tt_transformers' "performance" configuration,
/// the MLP weights in bfp4_b and the attention weights in bfp8_b (`DeviceDecodeConfig`'s
/// BFLOAT4_B).
pub const PUBLISHED_DTYPE: DataType = DataType::BFloat4B;

/// One published decode figure.
#[derive(Clone, Copy, Debug)]
pub struct LlmRow {
    pub model: Shapes,
    /// ttmesh's mesh name for the published system.
    pub mesh: &'static str,
    pub batch: usize,
    pub tokens_per_s_per_user: f64,
    pub source: &'static str,
}

/// Every published llama-architecture decode figure ttmesh can place (prompt 128 tokens in
/// every one). None is used for calibration: no constant of the model was fitted to them.
pub fn published() -> Vec<LlmRow> {
    let r = |model, mesh, batch, tps, source| LlmRow {
        model,
        mesh,
        batch,
        tokens_per_s_per_user: tps,
        source,
    };
    vec![
        r(LLAMA_3_2_1B, "n150", 32, 80.5, MODELS_README),
        r(LLAMA_3_2_3B, "n150", 32, 46.6, MODELS_README),
        r(LLAMA_3_1_8B, "n150", 32, 26.0, MODELS_README),
        r(MISTRAL_7B, "n150", 32, 28.7, MODELS_README),
        r(QWEN_2_5_7B, "n300", 32, 22.1, MODELS_README),
        r(LLAMA_3_1_70B, "t3k", 32, 15.9, MODELS_README),
        r(LLAMA_3_1_70B, "galaxy", 32, 72.5, MODELS_README),
        r(LLAMA_3_1_8B, "p150", 32, 33.1, MODELS_README),
        r(LLAMA_3_2_1B, "n150", 1, 87.8, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_2_1B, "n300", 1, 105.9, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_2_1B, "t3k", 1, 119.8, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_2_1B, "galaxy", 1, 51.0, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_2_3B, "n150", 1, 54.0, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_2_3B, "n300", 1, 68.0, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_2_3B, "t3k", 1, 68.5, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_1_8B, "n150", 1, 28.3, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_1_8B, "n300", 1, 44.2, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_1_8B, "p150", 1, 33.6, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_1_8B, "t3k", 1, 64.3, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_1_8B, "galaxy", 1, 29.5, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_1_70B, "t3k", 1, 16.6, TT_TRANSFORMERS_PERF),
        r(LLAMA_3_1_70B, "galaxy", 1, 12.7, TT_TRANSFORMERS_PERF),
        r(MISTRAL_7B, "n150", 1, 29.75, TT_TRANSFORMERS_PERF),
        r(MISTRAL_7B, "n300", 1, 47.01, TT_TRANSFORMERS_PERF),
        r(MISTRAL_7B, "t3k", 1, 67.82, TT_TRANSFORMERS_PERF),
        r(QWEN_2_5_7B, "n300", 1, 24.6, TT_TRANSFORMERS_PERF),
        r(
            LLAMA_3_2_1B,
            "n150",
            32,
            54.7,
            "models/tt_transformers/PERF.md (batch 32)",
        ),
        r(
            LLAMA_3_2_3B,
            "n150",
            32,
            36.5,
            "models/tt_transformers/PERF.md (batch 32)",
        ),
        r(
            LLAMA_3_1_8B,
            "n150",
            32,
            22.3,
            "models/tt_transformers/PERF.md (batch 32)",
        ),
        r(
            LLAMA_3_1_8B,
            "n300",
            32,
            33.5,
            "models/tt_transformers/PERF.md (batch 32)",
        ),
        r(
            LLAMA_3_1_8B,
            "t3k",
            32,
            45.6,
            "models/tt_transformers/PERF.md (batch 32)",
        ),
        r(
            LLAMA_3_1_70B,
            "t3k",
            32,
            14.8,
            "models/tt_transformers/PERF.md (batch 32)",
        ),
    ]
}

/// One published collective figure: op, chips, ring or line, bytes (nccl-tests' size) and
/// the measured kernel time.
#[derive(Clone, Copy, Debug)]
pub struct CclRow {
    pub op: &'static str,
    pub chips: usize,
    pub ring: bool,
    pub size: usize,
    pub us: f64,
}

/// The CCL report's rows at three sizes per op and device count (small-message latency, 1 MiB,
/// 64 MiB). Its all_gather lines are the calibration set.
pub fn published_ccl() -> Vec<CclRow> {
    let r = |op, chips, ring, size, us| CclRow {
        op,
        chips,
        ring,
        size,
        us,
    };
    vec![
        r("all_gather", 2, false, 32768, 9.67),
        r("all_gather", 2, false, 1 << 20, 89.16),
        r("all_gather", 2, false, 64 << 20, 5285.95),
        r("all_gather", 4, false, 32768, 12.97),
        r("all_gather", 4, false, 1 << 20, 77.50),
        r("all_gather", 4, false, 64 << 20, 4298.77),
        r("all_gather", 8, true, 32768, 19.20),
        r("all_gather", 8, true, 1 << 20, 69.56),
        r("all_gather", 8, true, 64 << 20, 2843.17),
        r("reduce_scatter", 2, false, 32768, 10.16),
        r("reduce_scatter", 2, false, 1 << 20, 75.16),
        r("reduce_scatter", 2, false, 64 << 20, 3798.40),
        r("reduce_scatter", 4, false, 32768, 18.68),
        r("reduce_scatter", 4, false, 1 << 20, 101.24),
        r("reduce_scatter", 4, false, 64 << 20, 4833.48),
        r("reduce_scatter", 8, true, 32768, 21.24),
        r("reduce_scatter", 8, true, 1 << 20, 80.92),
        r("reduce_scatter", 8, true, 64 << 20, 3572.99),
        r("all_reduce", 2, false, 32768, 19.01),
        r("all_reduce", 2, false, 1 << 20, 162.98),
        r("all_reduce", 2, false, 64 << 20, 9083.53),
        r("all_reduce", 4, false, 32768, 33.30),
        r("all_reduce", 4, false, 1 << 20, 190.05),
        r("all_reduce", 4, false, 64 << 20, 9168.96),
        r("all_reduce", 8, true, 32768, 38.82),
        r("all_reduce", 8, true, 1 << 20, 150.71),
        r("all_reduce", 8, true, 64 << 20, 6454.59),
    ]
}

/// The modeled kernel time of one collective as the CCL report ran it (bf16 tiles in DRAM,
/// nccl-tests' size: all_gather's output, reduce_scatter's input, all_reduce's tensor),
/// captured under NO_DISPATCH on a line or ring of `row.chips`.
pub fn predict_ccl(row: &CclRow) -> Result<f64, String> {
    let topology = format!("{}-{}", if row.ring { "ring" } else { "line" }, row.chips);
    let mesh_config = MeshConfig {
        topology: topology.clone(),
        fabric_config: if row.ring {
            FabricConfig::Fabric1DRing
        } else {
            FabricConfig::Fabric1D
        },
        ..Default::default()
    };
    let n = row.chips;
    let width = 1024;
    let rows = (row.size / 2 / width).max(32);
    let (input, output) = match row.op {
        "all_gather" => ([1, 1, rows, width / n], [1, 1, rows, width]),
        "reduce_scatter" => ([1, 1, rows, width], [1, 1, rows, width / n]),
        _ => ([1, 1, rows, width], [1, 1, rows, width]),
    };
    let mut events = Vec::new();
    let mut arch = None;
    let plan = graph::plan(&mesh_config, |mesh| {
        arch = Some(mesh.arch().clone());
        let spec = |shape: [usize; 4]| {
            TensorSpec::new(shape, DataType::BFloat16, Layout::Tile, MemoryConfig::DRAM)
        };
        let x = MeshTensor::allocate(mesh, &spec(input))?;
        let out = MeshTensor::allocate(mesh, &spec(output))?;
        let args = CclArgs {
            output: Some(out),
            ..Default::default()
        };
        let run = || match row.op {
            "all_gather" => ccl::all_gather(&x, 3, &args),
            "reduce_scatter" => ccl::reduce_scatter(&x, 3, &args),
            _ => ccl::all_reduce(&x, &args),
        };
        // Once untraced (compiles, as a trace capture requires), then captured and recorded.
        run()?;
        let recorder = Recorder::new();
        recorder.attach(mesh.chips());
        let tid = mesh.begin_trace_capture(CqId(0))?;
        let ran = run();
        let ended = mesh.end_trace_capture(tid, CqId(0));
        recorder.detach(mesh.chips());
        ran?;
        ended?;
        events = recorder.events();
        Ok(())
    })
    .map_err(|e| format!("{topology}: {e}"))?;
    if let Some(e) = plan.error {
        return Err(e);
    }
    let model = DeviceModel::new(Calibration::for_arch(
        arch.as_ref().ok_or("no mesh was opened")?,
    ));
    predict::captured_programs(&events)
        .iter()
        .flat_map(|(_, cmds)| cmds.iter())
        .find_map(|c| match c {
            Command::Program { program, cores, .. } if program.cost.collective.is_some() => {
                Some(model.kernel_time(&program.cost, *cores).kernel_ns / 1e3)
            }
            _ => None,
        })
        .ok_or_else(|| format!("{topology}: {} captured no collective", row.op))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One printed row's error: |ratio - 1| as a fraction, with whether it calibrated.
struct Miss {
    err: f64,
    calibration: bool,
}

fn summary(name: &str, misses: &[Miss], out: &mut String) {
    for (set, cal) in [("calibration", true), ("held out", false)] {
        let errs: Vec<f64> = misses
            .iter()
            .filter(|m| m.calibration == cal)
            .map(|m| m.err)
            .collect();
        if errs.is_empty() {
            continue;
        }
        let within = errs.iter().filter(|e| **e <= 0.25).count();
        let _ = writeln!(
            out,
            "{name} {set}: {} rows, median |error| {:.1}%, worst {:.1}%, {within} of {} within 25%",
            errs.len(),
            median(errs.clone()) * 100.0,
            errs.iter().copied().fold(0.0, f64::max) * 100.0,
            errs.len()
        );
    }
}

/// The row `predict_op_extra_ns` is calibrated on: the published decode figure most dominated by
/// per-op cost (the smallest model on one chip at batch 1).
pub const CALIBRATION_ROW: (&str, &str, usize) = ("Llama-3.2-1B", "n150", 1);

/// The `predict_op_extra_ns` at which `captured` predicts `tokens_per_s_per_user`: the token
/// is linear in the per-op cost, so two predictions give the slope.
pub fn fit_op_extra(
    captured: &CapturedDecode,
    arch: &ttmesh::ArchSpec,
    batch: usize,
    tokens_per_s_per_user: f64,
) -> Option<f64> {
    let at = |fixed: f64| {
        let mut cal = Calibration::for_arch(arch);
        cal.predict_op_extra_ns = fixed;
        DecodePrediction::with(captured, cal, batch, 1).map(|p| p.token.token_ns)
    };
    let (a, b) = (at(0.0)?, at(10_000.0)?);
    let slope = (b - a) / 10_000.0;
    (slope > 0.0).then(|| ((1e9 / tokens_per_s_per_user - a) / slope).max(0.0))
}

/// The fidelity table: every published figure beside the prediction for the same
/// configuration. Quick: the small models only.
pub fn run(quick: bool) -> String {
    let mut s = String::new();
    let rows: Vec<LlmRow> = published()
        .into_iter()
        .filter(|r| !quick || r.model.hidden <= 2048)
        .collect();
    // Each row placed and captured once; modeled as often as the calibration needs.
    let captured: Vec<Result<(CapturedDecode, ttmesh::ArchSpec), String>> = rows
        .iter()
        .map(|row| {
            let decode = DeviceDecodeConfig {
                batch: row.batch,
                max_positions: 128 + 1,
                dtype: PUBLISHED_DTYPE,
            };
            capture_on(row.mesh, &row.model.config(131072), decode)
        })
        .collect();
    let is_cal = |r: &LlmRow| (r.model.name, r.mesh, r.batch) == CALIBRATION_ROW;
    let fitted = rows
        .iter()
        .zip(&captured)
        .find(|(r, _)| is_cal(r))
        .and_then(|(r, c)| {
            let (c, arch) = c.as_ref().ok()?;
            fit_op_extra(c, arch, r.batch, r.tokens_per_s_per_user)
        });
    let default_extra = Calibration::for_arch(&ttmesh::ArchSpec::wormhole_b0()).predict_op_extra_ns;
    let _ = writeln!(
        s,
        "LLM decode, tokens/s/user: published (tt-metal) vs predicted (bfp4_b MLP and bfp8_b attention weights, traced device time, prompt 128)"
    );
    let _ = writeln!(
        s,
        "  sourced: nothing fitted (predict_op_extra_ns 0); fitted: predict_op_extra_ns fitted on {} {} batch {} = {} (calibration.rs ships {default_extra:.0} ns)",
        CALIBRATION_ROW.0,
        CALIBRATION_ROW.1,
        CALIBRATION_ROW.2,
        fitted.map_or("(not fitted)".to_string(), |f| format!("{f:.0} ns")),
    );
    let _ = writeln!(
        s,
        "  ratio = predicted (fitted) / published; cal = the row the fit used"
    );
    let _ = writeln!(
        s,
        "{:<14} {:<7} {:>5} {:>9} {:>8} {:>8} {:>7} {:>4}  source",
        "model", "mesh", "batch", "published", "sourced", "fitted", "ratio", "cal"
    );
    let mut misses = Vec::new();
    let mut sourced_misses = Vec::new();
    for (row, c) in rows.iter().zip(&captured) {
        let head = format!(
            "{:<14} {:<7} {:>5} {:>9.1}",
            row.model.name, row.mesh, row.batch, row.tokens_per_s_per_user
        );
        let cal = is_cal(row);
        let predicted = c.as_ref().map_err(|e| e.clone()).and_then(|(c, arch)| {
            let mut unfitted = Calibration::for_arch(arch);
            unfitted.predict_op_extra_ns = 0.0;
            let sourced = DecodePrediction::with(c, unfitted, row.batch, 128);
            let mut fit = Calibration::for_arch(arch);
            if let Some(f) = fitted {
                fit.predict_op_extra_ns = f;
            }
            let fit = DecodePrediction::with(c, fit, row.batch, 128);
            match (sourced, fit) {
                (Some(a), Some(b)) => Ok((
                    a.token.tokens_per_s_per_user(),
                    b.token.tokens_per_s_per_user(),
                )),
                _ => Err("the decode step captured no programs".into()),
            }
        });
        match predicted {
            Ok((sourced, fit)) => {
                let ratio = fit / row.tokens_per_s_per_user;
                misses.push(Miss {
                    err: (ratio - 1.0).abs(),
                    calibration: cal,
                });
                sourced_misses.push(Miss {
                    err: (sourced / row.tokens_per_s_per_user - 1.0).abs(),
                    calibration: false,
                });
                let _ = writeln!(
                    s,
                    "{head} {sourced:>8.1} {fit:>8.1} {ratio:>6.2}x {:>4}  {}",
                    if cal { "yes" } else { "no" },
                    row.source
                );
            }
            Err(e) => {
                let _ = writeln!(
                    s,
                    "{head} {:>8} {:>8} {:>7} {:>4}  {} -- not predicted: {e}",
                    "-", "-", "-", "no", row.source
                );
            }
        }
    }
    summary("LLM decode, fitted,", &misses, &mut s);
    summary(
        "LLM decode, sourced only (nothing fitted), all",
        &sourced_misses,
        &mut s,
    );

    let _ = writeln!(
        s,
        "\nCCL kernel time, us: published ({CCL_SUMMARY}) vs predicted; cal = the all_gather line rows (ccl_fixed_ns, ccl_step_sync_ns, eth_efficiency)"
    );
    let _ = writeln!(
        s,
        "{:<15} {:>5} {:<5} {:>10} {:>11} {:>11} {:>7} {:>4}",
        "op", "chips", "kind", "size", "published", "predicted", "ratio", "cal"
    );
    let mut ccl_misses = Vec::new();
    for row in published_ccl() {
        if quick && row.size > 1 << 20 {
            continue;
        }
        let cal = row.op == "all_gather" && !row.ring;
        let kind = if row.ring { "ring" } else { "line" };
        match predict_ccl(&row) {
            Ok(us) => {
                // The published figure is the measured time: ratio as time measured / time
                // predicted, so that > 1 means the prediction is faster, as for tokens/s.
                let ratio = row.us / us;
                ccl_misses.push(Miss {
                    err: (ratio - 1.0).abs(),
                    calibration: cal,
                });
                let _ = writeln!(
                    s,
                    "{:<15} {:>5} {:<5} {:>10} {:>11.2} {:>11.2} {:>6.2}x {:>4}",
                    row.op,
                    row.chips,
                    kind,
                    row.size,
                    row.us,
                    us,
                    ratio,
                    if cal { "yes" } else { "no" }
                );
            }
            Err(e) => {
                let _ = writeln!(
                    s,
                    "{:<15} {:>5} {:<5} {:>10} {:>11.2} -- not predicted: {e}",
                    row.op, row.chips, kind, row.size, row.us
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "(CCL ratio = published time / predicted time: > 1 means the prediction is faster than measured)"
    );
    summary("CCL", &ccl_misses, &mut s);
    if quick {
        s.push_str("(quick: the 1B model and CCL sizes up to 1 MiB only)\n");
    }
    s
}
