//! The GPT-2 byte-level BPE tokenizer whose vocabulary and merges a GGUF carries
//! (`tokenizer.ggml.*`), on Hugging Face's `tokenizers` crate: its BPE model, ByteLevel
//! pre-tokenizer (GPT-2's split regex) and ByteLevel decoder. The pre-tokenizer follows the
//! file's `tokenizer.ggml.pre`: SmolLM2's "smollm" (and the StarCoder family's) first split every
//! digit on its own, then apply GPT-2's split; "gpt2" uses GPT-2's split alone. No BOS or EOS is
//! added: SmolLM2's file says `add_bos_token = false`, and ttmesh adds what the caller passes.

use std::path::{Path, PathBuf};

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, PreTokenizerWrapper, Tokenizer};

use crate::error::{ModelError, Result};
use crate::gguf::{GgufFile, MetadataValue};

/// `tokenizer.ggml.token_type` of control tokens (`<|im_start|>`, `<|endoftext|>`, ...), which
/// are matched whole in the input and never split by BPE.
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Pre-tokenizer families (`tokenizer.ggml.pre`) that split digits individually before GPT-2's
/// regex.
const DIGIT_SPLITTING_PRE: &[&str] = &["smollm", "starcoder", "refact", "codeshell"];
const GPT2_PRE: &[&str] = &["gpt2", "default"];

/// A byte-level BPE tokenizer built from a GGUF's vocabulary.
pub struct GgufTokenizer {
    path: PathBuf,
    inner: Tokenizer,
    vocab_size: usize,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    pub add_bos: bool,
}

impl std::fmt::Debug for GgufTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufTokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos_token_id", &self.bos_token_id)
            .field("eos_token_id", &self.eos_token_id)
            .finish()
    }
}

impl GgufTokenizer {
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let path = file.path();
        let bad = |problem: String| ModelError::Tokenizer {
            path: path.to_path_buf(),
            problem,
        };
        let library = |source| ModelError::TokenizerLibrary {
            path: path.to_path_buf(),
            source,
        };
        const KIND: &str = "byte-level BPE";
        let model = file.require_str("tokenizer.ggml.model", KIND)?;
        if model != "gpt2" {
            return Err(bad(format!(
                "tokenizer.ggml.model is \"{model}\"; only \"gpt2\" (byte-level BPE) is supported"
            )));
        }
        let pre = match file.get("tokenizer.ggml.pre") {
            None => "default",
            Some(_) => file.require_str("tokenizer.ggml.pre", KIND)?,
        };
        let split_digits = if DIGIT_SPLITTING_PRE.contains(&pre) {
            true
        } else if GPT2_PRE.contains(&pre) {
            false
        } else {
            return Err(bad(format!(
                "tokenizer.ggml.pre is \"{pre}\"; supported: {}",
                [DIGIT_SPLITTING_PRE, GPT2_PRE].concat().join(", ")
            )));
        };

        let tokens = file.require_string_array("tokenizer.ggml.tokens", KIND)?;
        if tokens.is_empty() || tokens.len() > u32::MAX as usize {
            return Err(bad(format!(
                "tokenizer.ggml.tokens has {} entries",
                tokens.len()
            )));
        }
        let merges_text = file.require_string_array("tokenizer.ggml.merges", KIND)?;
        let token_types: Vec<i64> = match file.get("tokenizer.ggml.token_type") {
            None => vec![1; tokens.len()],
            Some(_) => file
                .require_array("tokenizer.ggml.token_type", KIND)?
                .iter()
                .map(|v| v.as_i64().unwrap_or(0))
                .collect(),
        };
        if token_types.len() != tokens.len() {
            return Err(bad(format!(
                "tokenizer.ggml.token_type has {} entries for {} tokens",
                token_types.len(),
                tokens.len()
            )));
        }

        let mut vocab = Vocab::default();
        for (id, token) in tokens.iter().enumerate() {
            if vocab.insert(token.to_string(), id as u32).is_some() {
                return Err(bad(format!(
                    "token {token:?} (id {id}) appears twice in tokenizer.ggml.tokens"
                )));
            }
        }
        let mut merges = Vec::with_capacity(merges_text.len());
        for (i, merge) in merges_text.iter().enumerate() {
            let (a, b) = merge
                .split_once(' ')
                .filter(|(a, b)| !a.is_empty() && !b.is_empty() && !b.contains(' '))
                .ok_or_else(|| {
                    bad(format!(
                        "merge #{i} {merge:?} is not two tokens separated by one space"
                    ))
                })?;
            for part in [a, b] {
                if !vocab.contains_key(part) {
                    return Err(bad(format!(
                        "merge #{i} {merge:?} uses {part:?}, which is not in the vocabulary"
                    )));
                }
            }
            merges.push((a.to_string(), b.to_string()));
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(library)?;

        let mut inner = Tokenizer::new(bpe);
        let byte_level = ByteLevel::new(false, true, true);
        let pre_tokenizer: PreTokenizerWrapper = if split_digits {
            Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into()
        } else {
            byte_level.into()
        };
        inner.with_pre_tokenizer(Some(pre_tokenizer));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let special: Vec<AddedToken> = tokens
            .iter()
            .zip(&token_types)
            .filter(|(_, &t)| t == TOKEN_TYPE_CONTROL || t == TOKEN_TYPE_USER_DEFINED)
            .map(|(token, _)| AddedToken::from(token.to_string(), true))
            .collect();
        inner.add_special_tokens(&special);

        let id_key = |key: &str| -> Option<u32> {
            file.get(key)
                .and_then(MetadataValue::as_u64)
                .and_then(|v| u32::try_from(v).ok())
                .filter(|&v| (v as usize) < tokens.len())
        };
        Ok(Self {
            path: path.to_path_buf(),
            inner,
            vocab_size: tokens.len(),
            bos_token_id: id_key("tokenizer.ggml.bos_token_id"),
            eos_token_id: id_key("tokenizer.ggml.eos_token_id"),
            add_bos: file.bool_or("tokenizer.ggml.add_bos_token", false)?,
        })
    }

    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::from_gguf(&GgufFile::open(path)?)
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Token ids of `text`, with the BOS token first when the file asks for it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|source| self.library_error(source))?;
        let mut ids = Vec::with_capacity(encoding.len() + 1);
        if let (true, Some(bos)) = (self.add_bos, self.bos_token_id) {
            ids.push(bos);
        }
        ids.extend_from_slice(encoding.get_ids());
        Ok(ids)
    }

    /// The text of `ids` (bytes that do not form valid UTF-8 become U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        if let Some(&token) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(ModelError::TokenOutOfRange {
                token,
                vocab_size: self.vocab_size,
            });
        }
        self.inner
            .decode(ids, false)
            .map_err(|source| self.library_error(source))
    }

    fn library_error(&self, source: tokenizers::Error) -> ModelError {
        ModelError::TokenizerLibrary {
            path: self.path.clone(),
            source,
        }
    }
}

/// Turns generated ids into text as they arrive, for streaming: a character whose UTF-8 bytes
/// span several byte-level tokens is held back until its last byte has come.
#[derive(Debug)]
pub struct TextStream<'t> {
    tokenizer: &'t GgufTokenizer,
    ids: Vec<u32>,
    emitted: usize,
}

impl<'t> TextStream<'t> {
    pub fn new(tokenizer: &'t GgufTokenizer) -> Self {
        Self {
            tokenizer,
            ids: Vec::new(),
            emitted: 0,
        }
    }

    /// The text `id` completes (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids)?;
        if text.ends_with(char::REPLACEMENT_CHARACTER) {
            return Ok(String::new());
        }
        Ok(self.take_new(text))
    }

    /// Whatever is still held back (an incomplete character shows as U+FFFD).
    pub fn finish(&mut self) -> Result<String> {
        let text = self.tokenizer.decode(&self.ids)?;
        Ok(self.take_new(text))
    }

    fn take_new(&mut self, text: String) -> String {
        let new = text.get(self.emitted..).unwrap_or_default().to_string();
        self.emitted = text.len();
        new
    }
}
