//! ttmesh-models: the host side of running a language model on ttmesh. GGUF files (reading,
//! dequantisation, a small writer), the llama configuration and its f32 weights in Hugging Face
//! order, the byte-level BPE tokenizer from the file's vocabulary, the host f32 reference
//! forward that gives the expected tokens, and fixed-seed synthetic llamas written as GGUF.
//!
//! Owns: model files, everything computed on the host to check a device, and the decode loop
//! that drives a llama through the mesh API (weights and KV cache in device DRAM, one captured
//! trace per step). Must not touch: device kernels (they live in the chip) or the mesh's
//! internals; the host reference shares no code with the device path.

mod config;
mod device;
mod error;
pub mod gguf;
mod heads;
mod parallel;
mod reference;
pub mod rope;
pub mod synthetic;
mod tokenizer;
mod weights;

pub use config::LlamaConfig;
pub use device::{DeviceDecodeConfig, DeviceLlama, WeightSource, MAX_BATCH};
pub use error::{ModelError, Result};
pub use heads::HeadLayout;
pub use parallel::{LmHead, TensorParallel};
pub use reference::{argmax, greedy_decode, HostReference};
pub use tokenizer::{GgufTokenizer, TextStream};
pub use weights::{
    available_host_memory, BlockWeights, GgufWeights, LlamaWeights, LoadOptions, ModelTensors,
};

/// Where `scripts/fetch-model.sh` puts SmolLM2-135M-Instruct, relative to the workspace root.
pub const DEFAULT_MODEL_PATH: &str = "target/models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The real model's path: `TTMESH_MODEL` if set, else [`DEFAULT_MODEL_PATH`] under
/// `workspace_root`; `None` when that file does not exist.
pub fn real_model_path(workspace_root: &std::path::Path) -> Option<std::path::PathBuf> {
    let path = match &ttmesh_settings::settings().model {
        Some(p) => p.clone(),
        None => workspace_root.join(DEFAULT_MODEL_PATH),
    };
    path.is_file().then_some(path)
}
