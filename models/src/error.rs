use std::path::PathBuf;

/// Everything that can go wrong reading a model file, building its tokenizer or running the host
/// reference. Every variant names the file, key, tensor or limit involved and, where there is
/// one, the fix.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read model file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a GGUF file (first 4 bytes {magic:02x?}, expected \"GGUF\"); pass a .gguf model file")]
    NotGguf { path: PathBuf, magic: Vec<u8> },
    #[error("{path}: GGUF version {version} is not supported (supported: 2 and 3); re-convert the model with a current llama.cpp")]
    UnsupportedVersion { path: PathBuf, version: u32 },
    #[error("{path} is truncated or corrupt: {what} needs {needed} bytes at offset {offset}, but the file has {file_len} bytes; download the file again")]
    Truncated {
        path: PathBuf,
        what: String,
        offset: u64,
        needed: u64,
        file_len: u64,
    },
    #[error("{path}: metadata {key}: {problem}")]
    BadMetadata {
        path: PathBuf,
        key: String,
        problem: String,
    },
    #[error("{path}: metadata key {key} is missing; the file is not a complete {expected} model")]
    MissingMetadata {
        path: PathBuf,
        key: String,
        expected: &'static str,
    },
    #[error("{path}: metadata {key} has type {found}, expected {expected}")]
    MetadataType {
        path: PathBuf,
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{path}: tensor {tensor} has ggml type {type_name} (id {type_id}), which ttmesh cannot dequantise (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K); re-quantise the model to one of those")]
    UnsupportedTensorType {
        path: PathBuf,
        tensor: String,
        type_id: u32,
        type_name: &'static str,
    },
    #[error("{path}: tensor {tensor}: {problem}")]
    BadTensor {
        path: PathBuf,
        tensor: String,
        problem: String,
    },
    #[error("{path}: tensor {tensor} is missing; a {architecture} model needs it")]
    MissingTensor {
        path: PathBuf,
        tensor: String,
        architecture: &'static str,
    },
    #[error("{path}: architecture \"{architecture}\" is not supported (supported: llama); use a llama-architecture GGUF such as SmolLM2 or TinyLlama")]
    UnsupportedArchitecture { path: PathBuf, architecture: String },
    #[error("{path}: the model needs {needed_bytes} bytes of host memory as f32 (weights {weight_bytes} + KV cache {kv_cache_bytes}), but only {available_bytes} are available; use a smaller model or a shorter context")]
    HostMemory {
        path: PathBuf,
        needed_bytes: u64,
        weight_bytes: u64,
        kv_cache_bytes: u64,
        available_bytes: u64,
    },
    #[error("{path}: tokenizer: {problem}")]
    Tokenizer { path: PathBuf, problem: String },
    #[error("tokenizer of {path}: {source}")]
    TokenizerLibrary {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("token id {token} is outside the vocabulary (size {vocab_size})")]
    TokenOutOfRange { token: u32, vocab_size: usize },
    #[error("position {position} is outside the context the KV cache was sized for ({max_positions}); raise the context length or shorten the prompt")]
    PositionOutOfRange {
        position: usize,
        max_positions: usize,
    },
    #[error("a host KV cache for {batch} users x {positions} positions needs {needed_bytes} bytes, but only {available_bytes} are available; use a smaller batch or fewer positions")]
    KvCacheMemory {
        batch: usize,
        positions: usize,
        needed_bytes: u64,
        available_bytes: u64,
    },
    #[error("{positions} KV cache positions exceed the model's context length {context_length}; ask for at most {context_length}")]
    BeyondContext {
        positions: usize,
        context_length: usize,
    },
    #[error("{head_count} query heads do not form equal groups over {kv_head_count} KV heads")]
    UnevenHeads {
        head_count: usize,
        kv_head_count: usize,
    },
    #[error("a head layout planned for {layout_heads} query heads over {layout_kv_heads} KV heads does not fit a model with {model_heads} over {model_kv_heads}; plan it from this model's config")]
    HeadLayoutMismatch {
        layout_heads: usize,
        layout_kv_heads: usize,
        model_heads: usize,
        model_kv_heads: usize,
    },
    #[error("the model's {what} cannot be split over the {mesh} mesh: {reason}; what would work: {works}")]
    CannotSplit {
        what: String,
        mesh: String,
        reason: String,
        works: String,
    },
    #[error("{tensor} does not fit in the device's DRAM: {source}; split the model over more chips (--mesh t3k), use a smaller dtype (bfp8_b), fewer KV cache positions or a smaller trace region")]
    DoesNotFit {
        tensor: String,
        #[source]
        source: Box<ttmesh::MeshError>,
    },
    #[error("device: {context}: {source}")]
    Device {
        context: String,
        #[source]
        source: Box<ttmesh::MeshError>,
    },
    #[error("host tensor {name}: {source}")]
    HostTensor {
        name: String,
        #[source]
        source: Box<ttmesh_chip::ChipError>,
    },
    #[error("a batch of {batch} users is not supported on the device (1..={max}: one user per row of a tile); split the users into batches of at most {max}")]
    BatchTooLarge { batch: usize, max: usize },
    #[error("batch of {got} users given to a model set up for a batch of {expected}")]
    BatchMismatch { got: usize, expected: usize },
    #[error("{what} must not be empty")]
    Empty { what: &'static str },
    #[error("cannot write GGUF file {path}: {problem}")]
    Write { path: PathBuf, problem: String },
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;
