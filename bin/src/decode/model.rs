//! The model a decode runs: its weights (whole, or read block by block as they are placed), the
//! synthetic model's file, and the host f32 reference run beside it (`--check-host`).

use super::*;

pub(super) fn synthetic_shape(name: &str) -> Result<SyntheticConfig, String> {
    SyntheticConfig::named(name).ok_or_else(|| {
        format!(
            "--synthetic {name}: use one of {}",
            SyntheticConfig::NAMES.join(", ")
        )
    })
}

/// The model's weights as this run needs them: all of them in f32 when the host reference
/// computes with them too, else read from the file one block at a time as they are placed (the
/// host never holds the whole f32 model).
pub(super) struct ModelWeights {
    tensors: Tensors,
    path: PathBuf,
    /// The synthetic model's file, read until the weights are dropped.
    _file: Option<RemoveOnDrop>,
}

pub(super) enum Tensors {
    Whole(Arc<LlamaWeights>),
    ByBlock(GgufWeights),
}

impl ModelWeights {
    pub(super) fn tensors(&self) -> &dyn ModelTensors {
        match &self.tensors {
            Tensors::Whole(w) => w.as_ref(),
            Tensors::ByBlock(w) => w,
        }
    }

    /// The same weights read one block at a time from now on: the whole f32 copy is freed
    /// before the chips are given theirs, so the two never sit on the host together.
    pub(super) fn into_by_block(self) -> Result<ModelWeights, String> {
        if let Tensors::ByBlock(_) = self.tensors {
            return Ok(self);
        }
        let tensors = Tensors::ByBlock(
            GgufWeights::open(&self.path)
                .map_err(|e| format!("--model {}: {e}", self.path.display()))?,
        );
        Ok(ModelWeights { tensors, ..self })
    }

    pub(super) fn whole(&self) -> Option<&Arc<LlamaWeights>> {
        match &self.tensors {
            Tensors::Whole(w) => Some(w),
            Tensors::ByBlock(_) => None,
        }
    }
}

/// Opens the weights (all of them when `whole`) and tokenizer; the synthetic model when no
/// --model is given.
pub(super) fn load(
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
        path,
        _file: file,
    };
    Ok((weights, tokenizer, model_name))
}

/// The host f32 reference's greedy decode of the same prompt (`--check-host`).
pub(super) struct HostRun {
    pub(super) ids: Vec<u32>,
    pub(super) per_token: Duration,
}

impl HostRun {
    pub(super) fn run(
        weights: &Arc<LlamaWeights>,
        prompt: &[u32],
        n: usize,
    ) -> Result<HostRun, String> {
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
    pub(super) fn first_difference(&self, device: &[u32]) -> Option<usize> {
        (0..self.ids.len().max(device.len())).find(|&i| self.ids.get(i) != device.get(i))
    }
}

/// Removes the synthetic model's temporary file when the run ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
