//! GGUF (versions 2 and 3) reading and writing.
//!
//! Layout: magic "GGUF", version (u32), tensor count (u64), metadata count (u64), the metadata
//! key/value pairs, the tensor infos (name, dims with the fastest-varying first, type, offset
//! relative to the data section), padding to `general.alignment` (default 32), the data.
//!
//! Every size and offset in a file is untrusted: each is checked against the file's length
//! before anything is allocated for it, and every failure names the file and the key or tensor.

mod dequant;
mod writer;

pub use dequant::{quantize_q4_1, quantize_q8_0, GgmlType};
pub use writer::{GgufWriter, WriteTensor};

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::error::{ModelError, Result};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// Arrays inside arrays deeper than this are refused (the format allows nesting; no real
/// model uses more than one level).
const MAX_ARRAY_DEPTH: usize = 4;
const MAX_DIMS: u32 = 4;

/// A typed metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(MetadataArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// An array value: its element type id and its elements.
#[derive(Debug, Clone, PartialEq)]
pub struct MetadataArray {
    pub element_type: u32,
    pub values: Vec<MetadataValue>,
}

impl MetadataValue {
    pub fn type_id(&self) -> u32 {
        match self {
            Self::U8(_) => 0,
            Self::I8(_) => 1,
            Self::U16(_) => 2,
            Self::I16(_) => 3,
            Self::U32(_) => 4,
            Self::I32(_) => 5,
            Self::F32(_) => 6,
            Self::Bool(_) => 7,
            Self::String(_) => 8,
            Self::Array(_) => 9,
            Self::U64(_) => 10,
            Self::I64(_) => 11,
            Self::F64(_) => 12,
        }
    }

    pub fn type_name(&self) -> &'static str {
        value_type_name(self.type_id())
    }

    /// An array of strings (as the tokenizer keys hold).
    pub fn string_array<S: Into<String>>(values: impl IntoIterator<Item = S>) -> Self {
        Self::Array(MetadataArray {
            element_type: 8,
            values: values.into_iter().map(|s| Self::String(s.into())).collect(),
        })
    }

    /// An array of i32 (as `tokenizer.ggml.token_type` holds).
    pub fn i32_array(values: impl IntoIterator<Item = i32>) -> Self {
        Self::Array(MetadataArray {
            element_type: 5,
            values: values.into_iter().map(Self::I32).collect(),
        })
    }

    /// The value as an unsigned integer, whatever integer type the file used.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Self::I8(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::I32(v) => Some(v.into()),
            Self::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            _ => None,
        }
    }
}

fn value_type_name(id: u32) -> &'static str {
    match id {
        0 => "u8",
        1 => "i8",
        2 => "u16",
        3 => "i16",
        4 => "u32",
        5 => "i32",
        6 => "f32",
        7 => "bool",
        8 => "string",
        9 => "array",
        10 => "u64",
        11 => "i64",
        12 => "f64",
        _ => "unknown",
    }
}

/// Smallest encoded size of a value of a type (for bounding array counts by the file's size).
fn min_encoded_size(type_id: u32) -> u64 {
    match type_id {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 => 8,
        9 => 12,
        _ => 8,
    }
}

/// One tensor's header entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions, fastest-varying first (ggml's `ne`): a weight of `[in, out]` is `out` rows
    /// of `in` values.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset from the start of the data section.
    pub offset: u64,
    /// Bytes of data, checked to lie inside the file.
    pub size: u64,
}

impl TensorInfo {
    pub fn element_count(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// An open GGUF file: its metadata and tensor infos; tensor data is read on demand.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    file_len: u64,
    pub version: u32,
    pub alignment: u64,
    /// Start of the data section in the file.
    pub data_offset: u64,
    metadata: BTreeMap<String, MetadataValue>,
    tensors: Vec<TensorInfo>,
}

/// Reads the header, checking every length against what is left of the file.
struct HeaderReader<'a> {
    path: &'a Path,
    inner: BufReader<File>,
    offset: u64,
    file_len: u64,
}

impl HeaderReader<'_> {
    fn need(&self, what: &dyn Fn() -> String, n: u64) -> Result<()> {
        if !fits(self.offset, n, self.file_len) {
            return Err(ModelError::Truncated {
                path: self.path.to_path_buf(),
                what: what(),
                offset: self.offset,
                needed: n,
                file_len: self.file_len,
            });
        }
        Ok(())
    }

    fn bytes(&mut self, what: &dyn Fn() -> String, n: u64) -> Result<Vec<u8>> {
        self.need(what, n)?;
        let mut buf = vec![0u8; n as usize];
        self.inner
            .read_exact(&mut buf)
            .map_err(|source| ModelError::Io {
                path: self.path.to_path_buf(),
                source,
            })?;
        self.offset += n;
        Ok(buf)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let v = self.bytes(what, N as u64)?;
        Ok(v.try_into().expect("read exactly N bytes"))
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let len = self.u64(what)?;
        let bytes = self.bytes(what, len)?;
        String::from_utf8(bytes).map_err(|_| ModelError::BadMetadata {
            path: self.path.to_path_buf(),
            key: what(),
            problem: "string is not valid UTF-8".into(),
        })
    }

    fn value(&mut self, key: &str, type_id: u32, depth: usize) -> Result<MetadataValue> {
        let what = || format!("metadata {key}");
        Ok(match type_id {
            0 => MetadataValue::U8(self.array::<1>(&what)?[0]),
            1 => MetadataValue::I8(self.array::<1>(&what)?[0] as i8),
            2 => MetadataValue::U16(u16::from_le_bytes(self.array(&what)?)),
            3 => MetadataValue::I16(i16::from_le_bytes(self.array(&what)?)),
            4 => MetadataValue::U32(self.u32(&what)?),
            5 => MetadataValue::I32(i32::from_le_bytes(self.array(&what)?)),
            6 => MetadataValue::F32(f32::from_le_bytes(self.array(&what)?)),
            7 => match self.array::<1>(&what)?[0] {
                0 => MetadataValue::Bool(false),
                1 => MetadataValue::Bool(true),
                b => return Err(self.bad(key, format!("bool has byte value {b}"))),
            },
            8 => MetadataValue::String(self.string(&what)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(
                        self.bad(key, format!("arrays nested deeper than {MAX_ARRAY_DEPTH}"))
                    );
                }
                let element_type = self.u32(&what)?;
                if element_type > 12 {
                    return Err(self.bad(
                        key,
                        format!("array element type id {element_type} is unknown"),
                    ));
                }
                let count = self.u64(&what)?;
                // Bound the count by what the rest of the file could hold before reserving.
                let min = count.checked_mul(min_encoded_size(element_type));
                self.need(&what, min.unwrap_or(u64::MAX))?;
                let mut values = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    values.push(self.value(key, element_type, depth + 1)?);
                }
                MetadataValue::Array(MetadataArray {
                    element_type,
                    values,
                })
            }
            10 => MetadataValue::U64(self.u64(&what)?),
            11 => MetadataValue::I64(i64::from_le_bytes(self.array(&what)?)),
            12 => MetadataValue::F64(f64::from_le_bytes(self.array(&what)?)),
            other => return Err(self.bad(key, format!("value type id {other} is unknown"))),
        })
    }

    fn bad(&self, key: &str, problem: String) -> ModelError {
        ModelError::BadMetadata {
            path: self.path.to_path_buf(),
            key: key.to_string(),
            problem,
        }
    }
}

impl GgufFile {
    /// Opens `path` and reads its header (metadata and tensor infos), checking every tensor's
    /// data lies inside the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        let mut r = HeaderReader {
            path,
            inner: BufReader::new(file),
            offset: 0,
            file_len,
        };
        let magic_len = file_len.min(4);
        let magic = r.bytes(&|| "magic".into(), magic_len)?;
        if magic != MAGIC {
            return Err(ModelError::NotGguf {
                path: path.to_path_buf(),
                magic,
            });
        }
        let version = r.u32(&|| "version".into())?;
        if version != 2 && version != 3 {
            return Err(ModelError::UnsupportedVersion {
                path: path.to_path_buf(),
                version,
            });
        }
        let tensor_count = r.u64(&|| "tensor count".into())?;
        let kv_count = r.u64(&|| "metadata count".into())?;

        let mut metadata = BTreeMap::new();
        for i in 0..kv_count {
            let key = r.string(&|| format!("metadata key #{i}"))?;
            let type_id = r.u32(&|| format!("metadata {key} type"))?;
            let value = r.value(&key, type_id, 0)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(r.bad(&key, "key appears twice".into()));
            }
        }

        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => a,
                _ => {
                    return Err(r.bad(
                        "general.alignment",
                        format!("{v:?} is not a power of two up to 1 MiB"),
                    ))
                }
            },
        };

        // Each tensor info takes at least 8 (name) + 4 (dims) + 4 (type) + 8 (offset) bytes.
        r.need(&|| "tensor infos".into(), tensor_count.saturating_mul(24))?;
        let mut raw = Vec::with_capacity(tensor_count as usize);
        for i in 0..tensor_count {
            let name = r.string(&|| format!("tensor #{i} name"))?;
            let what = || format!("tensor {name} info");
            let n_dims = r.u32(&what)?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(bad_tensor(
                    path,
                    &name,
                    format!("has {n_dims} dimensions (1..={MAX_DIMS} supported)"),
                ));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(r.u64(&what)?);
            }
            let type_id = r.u32(&what)?;
            let offset = r.u64(&what)?;
            raw.push((name, dims, type_id, offset));
        }
        let data_offset = r.offset.div_ceil(alignment) * alignment;
        let data_len = file_len.saturating_sub(data_offset);

        let mut tensors = Vec::with_capacity(raw.len());
        let mut seen = std::collections::HashSet::new();
        for (name, dims, type_id, offset) in raw {
            let ty = GgmlType::from_id(type_id).map_err(|type_name| {
                ModelError::UnsupportedTensorType {
                    path: path.to_path_buf(),
                    tensor: name.clone(),
                    type_id,
                    type_name,
                }
            })?;
            if !seen.insert(name.clone()) {
                return Err(bad_tensor(path, &name, "appears twice".into()));
            }
            let count = dims
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .ok_or_else(|| bad_tensor(path, &name, format!("dims {dims:?} overflow")))?;
            if dims[0] % ty.block_len() as u64 != 0 {
                return Err(bad_tensor(
                    path,
                    &name,
                    format!(
                        "first dimension {} is not a multiple of {}'s block of {}",
                        dims[0],
                        ty.name(),
                        ty.block_len()
                    ),
                ));
            }
            let size = ty
                .bytes_for(count)
                .ok_or_else(|| bad_tensor(path, &name, format!("dims {dims:?} overflow")))?;
            if offset % alignment != 0 {
                return Err(bad_tensor(
                    path,
                    &name,
                    format!("data offset {offset} is not a multiple of the alignment {alignment}"),
                ));
            }
            if !fits(offset, size, data_len) {
                return Err(ModelError::Truncated {
                    path: path.to_path_buf(),
                    what: format!("tensor {name} ({} {dims:?})", ty.name()),
                    offset: data_offset.saturating_add(offset),
                    needed: size,
                    file_len,
                });
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ty,
                offset,
                size,
            });
        }

        Ok(Self {
            path: path.to_path_buf(),
            file_len,
            version,
            alignment,
            data_offset,
            metadata,
            tensors,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    pub fn metadata(&self) -> &BTreeMap<String, MetadataValue> {
        &self.metadata
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.metadata.get(key)
    }

    fn require(&self, key: &str, expected: &'static str) -> Result<&MetadataValue> {
        self.metadata
            .get(key)
            .ok_or_else(|| ModelError::MissingMetadata {
                path: self.path.clone(),
                key: key.to_string(),
                expected,
            })
    }

    fn type_error(&self, key: &str, expected: &'static str, v: &MetadataValue) -> ModelError {
        ModelError::MetadataType {
            path: self.path.clone(),
            key: key.to_string(),
            expected,
            found: v.type_name(),
        }
    }

    /// An unsigned integer under `key` (any integer type), required for a `model` model.
    pub fn require_u64(&self, key: &str, model: &'static str) -> Result<u64> {
        let v = self.require(key, model)?;
        v.as_u64()
            .ok_or_else(|| self.type_error(key, "unsigned integer", v))
    }

    pub fn require_f64(&self, key: &str, model: &'static str) -> Result<f64> {
        let v = self.require(key, model)?;
        v.as_f64().ok_or_else(|| self.type_error(key, "float", v))
    }

    pub fn require_str(&self, key: &str, model: &'static str) -> Result<&str> {
        match self.require(key, model)? {
            MetadataValue::String(s) => Ok(s),
            v => Err(self.type_error(key, "string", v)),
        }
    }

    pub fn require_array(&self, key: &str, model: &'static str) -> Result<&[MetadataValue]> {
        match self.require(key, model)? {
            MetadataValue::Array(a) => Ok(&a.values),
            v => Err(self.type_error(key, "array", v)),
        }
    }

    /// An array of strings under `key`.
    pub fn require_string_array(&self, key: &str, model: &'static str) -> Result<Vec<&str>> {
        self.require_array(key, model)?
            .iter()
            .map(|v| match v {
                MetadataValue::String(s) => Ok(s.as_str()),
                other => Err(self.type_error(key, "array of string", other)),
            })
            .collect()
    }

    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.metadata.get(key) {
            None => Ok(default),
            Some(MetadataValue::Bool(b)) => Ok(*b),
            Some(v) => Err(self.type_error(key, "bool", v)),
        }
    }

    /// The raw bytes of a tensor's data.
    pub fn read_tensor_bytes(&self, info: &TensorInfo) -> Result<Vec<u8>> {
        let io = |source| ModelError::Io {
            path: self.path.clone(),
            source,
        };
        let mut file = File::open(&self.path).map_err(io)?;
        // The header check bounded offset + size by the length at open; a file that shrank
        // since then shows up as a short read here.
        file.seek(SeekFrom::Start(self.data_offset + info.offset))
            .map_err(io)?;
        let mut buf = vec![0u8; info.size as usize];
        file.read_exact(&mut buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                ModelError::Truncated {
                    path: self.path.clone(),
                    what: format!("tensor {}", info.name),
                    offset: self.data_offset + info.offset,
                    needed: info.size,
                    file_len: std::fs::metadata(&self.path).map_or(0, |m| m.len()),
                }
            } else {
                io(e)
            }
        })?;
        Ok(buf)
    }

    /// A tensor dequantised to f32, in the file's element order (fastest dimension first).
    pub fn read_tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| bad_tensor(&self.path, name, "is not in the file".into()))?;
        let bytes = self.read_tensor_bytes(info)?;
        let mut out = vec![0f32; info.element_count() as usize];
        dequant::dequantize_into(info.ty, &bytes, &mut out);
        Ok(out)
    }
}

/// Dequantises whole blocks of `ty` held in `bytes`; the length must be a multiple of the
/// type's block size (it is for any tensor read from a checked file).
pub fn dequantize(ty: GgmlType, bytes: &[u8]) -> Option<Vec<f32>> {
    if !bytes.len().is_multiple_of(ty.block_bytes()) {
        return None;
    }
    let mut out = vec![0f32; bytes.len() / ty.block_bytes() * ty.block_len()];
    dequant::dequantize_into(ty, bytes, &mut out);
    Some(out)
}

/// Whether `n` bytes from `offset` lie within `len` (without overflow).
fn fits(offset: u64, n: u64, len: u64) -> bool {
    offset.checked_add(n).is_some_and(|end| end <= len)
}

fn bad_tensor(path: &Path, tensor: &str, problem: String) -> ModelError {
    ModelError::BadTensor {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        problem,
    }
}
