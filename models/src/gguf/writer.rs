//! A small GGUF v3 writer: enough to write the synthetic models (and test files) that the
//! reader then loads like any other model.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use half::f16;

use super::{quantize_q4_1, quantize_q8_0, GgmlType, MetadataValue, DEFAULT_ALIGNMENT, MAGIC};
use crate::error::{ModelError, Result};

/// A tensor to write: f32 values encoded as `ty` (F32, F16, Q8_0 or Q4_1).
#[derive(Debug, Clone)]
pub struct WriteTensor {
    pub name: String,
    /// Fastest-varying first, as in the file.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    pub values: Vec<f32>,
}

/// Collects metadata and tensors, then writes them as one GGUF v3 file.
#[derive(Debug, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetadataValue)>,
    tensors: Vec<EncodedTensor>,
    /// Where tensor data goes as it is given, when not kept in memory.
    spill: Option<Spill>,
}

/// A tensor as the file stores it, encoded when given: the writer holds the file's bytes (or
/// none, spilling) rather than four bytes a value. A tensor that cannot be encoded or spilled
/// is reported when the file is written.
#[derive(Debug)]
struct EncodedTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Stored,
}

#[derive(Debug)]
enum Stored {
    Bytes(Vec<u8>),
    /// This many bytes, padded to the alignment, in the spill file.
    Spilled(u64),
    Refused(String),
}

/// The data section written ahead of its header, to a file beside the one being made: a
/// model of many GB is written holding one tensor at a time. Removed when the writer goes.
#[derive(Debug)]
struct Spill {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
}

impl Drop for Spill {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Zeros after `len` bytes up to the data alignment.
fn padding(len: usize) -> usize {
    (len as u64).next_multiple_of(DEFAULT_ALIGNMENT) as usize - len
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// A writer whose tensors' data goes to `spill_path` as each is given (then into the file
    /// [`GgufWriter::write`] makes, and the spill file is removed).
    pub fn spilling_to(spill_path: &Path) -> Result<Self> {
        let file = std::fs::File::create(spill_path).map_err(|source| ModelError::Io {
            path: spill_path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            spill: Some(Spill {
                path: spill_path.to_path_buf(),
                out: std::io::BufWriter::new(file),
            }),
            ..Self::default()
        })
    }

    pub fn metadata(&mut self, key: &str, value: MetadataValue) -> &mut Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    pub fn tensor(&mut self, tensor: WriteTensor) -> &mut Self {
        let data = match (encode(&tensor), &mut self.spill) {
            (Err(problem), _) => Stored::Refused(problem),
            (Ok(bytes), None) => Stored::Bytes(bytes),
            (Ok(bytes), Some(spill)) => {
                let zeros = [0u8; DEFAULT_ALIGNMENT as usize];
                match spill
                    .out
                    .write_all(&bytes)
                    .and_then(|()| spill.out.write_all(&zeros[..padding(bytes.len())]))
                    .and_then(|()| spill.out.flush())
                {
                    Ok(()) => Stored::Spilled(bytes.len() as u64),
                    Err(e) => Stored::Refused(format!(
                        "tensor {}: writing it to {}: {e}",
                        tensor.name,
                        spill.path.display()
                    )),
                }
            }
        };
        self.tensors.push(EncodedTensor {
            name: tensor.name,
            dims: tensor.dims,
            ty: tensor.ty,
            data,
        });
        self
    }

    /// The encoded file (of a writer that keeps its tensors in memory).
    pub fn to_bytes(&self) -> std::result::Result<Vec<u8>, String> {
        let mut out = self.header()?;
        for t in &self.tensors {
            match &t.data {
                Stored::Bytes(b) => out.extend_from_slice(b),
                Stored::Spilled(_) => {
                    return Err(format!(
                        "tensor {} was spilled to a file: make the GGUF with write()",
                        t.name
                    ))
                }
                Stored::Refused(problem) => return Err(problem.clone()),
            }
            pad(&mut out);
        }
        Ok(out)
    }

    /// Everything before the data section (magic, counts, metadata, tensor infos), padded to
    /// the alignment the data starts at.
    fn header(&self) -> std::result::Result<Vec<u8>, String> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key);
            out.extend_from_slice(&value.type_id().to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            let len = match &t.data {
                Stored::Bytes(b) => b.len() as u64,
                Stored::Spilled(len) => *len,
                Stored::Refused(problem) => return Err(problem.clone()),
            };
            put_string(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset += len.div_ceil(DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT;
        }
        pad(&mut out);
        Ok(out)
    }

    /// Writes the file piece by piece (a model's file can be GBs; no second copy is built).
    pub fn write(&self, path: &Path) -> Result<()> {
        let problem = |problem| ModelError::Write {
            path: path.to_path_buf(),
            problem,
        };
        let io = |source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        };
        let header = self.header().map_err(problem)?;
        let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
        out.write_all(&header).map_err(io)?;
        if let Some(spill) = &self.spill {
            // Every tensor's bytes were flushed as it was given.
            let mut data = std::fs::File::open(&spill.path).map_err(|source| ModelError::Io {
                path: spill.path.clone(),
                source,
            })?;
            std::io::copy(&mut data, &mut out).map_err(io)?;
        } else {
            let zeros = [0u8; DEFAULT_ALIGNMENT as usize];
            for t in &self.tensors {
                if let Stored::Bytes(b) = &t.data {
                    out.write_all(b).map_err(io)?;
                    out.write_all(&zeros[..padding(b.len())]).map_err(io)?;
                }
            }
        }
        out.flush().map_err(io)
    }
}

fn pad(buf: &mut Vec<u8>) {
    let aligned = (buf.len() as u64).div_ceil(DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT;
    buf.resize(aligned as usize, 0);
}

fn encode(t: &WriteTensor) -> std::result::Result<Vec<u8>, String> {
    let count: u64 = t.dims.iter().product();
    if count != t.values.len() as u64 {
        return Err(format!(
            "tensor {}: dims {:?} hold {count} values, given {}",
            t.name,
            t.dims,
            t.values.len()
        ));
    }
    if t.dims.first().copied().unwrap_or(0) % t.ty.block_len() as u64 != 0 {
        return Err(format!(
            "tensor {}: first dimension {:?} is not a multiple of {}'s block",
            t.name,
            t.dims.first(),
            t.ty.name()
        ));
    }
    Ok(match t.ty {
        GgmlType::F32 => t.values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => t
            .values
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect(),
        GgmlType::Q8_0 => quantize_q8_0(&t.values),
        GgmlType::Q4_1 => quantize_q4_1(&t.values),
        other => {
            return Err(format!(
                "tensor {}: the writer does not encode {}",
                t.name,
                other.name()
            ))
        }
    })
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &MetadataValue) {
    match value {
        MetadataValue::U8(v) => out.push(*v),
        MetadataValue::I8(v) => out.push(*v as u8),
        MetadataValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::Bool(v) => out.push(u8::from(*v)),
        MetadataValue::String(s) => put_string(out, s),
        MetadataValue::Array(a) => {
            out.extend_from_slice(&a.element_type.to_le_bytes());
            out.extend_from_slice(&(a.values.len() as u64).to_le_bytes());
            for v in &a.values {
                put_value(out, v);
            }
        }
        MetadataValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}
