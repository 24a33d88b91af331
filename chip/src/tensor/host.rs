//! Host tensors and the codec between their logical values and device pages.
//!
//! A host tensor keeps logical row-major values. Float dtypes are held as f32 already rounded to
//! the dtype (bf16 on creation; bfloat8_b when the tiles are packed, since its rounding depends on
//! the tile's blocks); UINT32 is held exactly.

use crate::par;

use super::spec::{DataType, Layout, TensorSpec};
use crate::error::{ChipError, Result};
use crate::format::{self, BFP4_TILE_BYTES, BFP8_TILE_BYTES, TILE_ELEMS};

#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    F32(Vec<f32>),
    U32(Vec<u32>),
}

impl HostData {
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::U32(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub dtype: DataType,
    pub data: HostData,
}

impl HostTensor {
    /// A float tensor; values are rounded to `dtype` now (bfloat8_b later, per tile block).
    pub fn from_f32(
        shape: impl Into<Vec<usize>>,
        dtype: DataType,
        mut data: Vec<f32>,
    ) -> Result<HostTensor> {
        let shape = shape.into();
        check_volume(&shape, data.len())?;
        match dtype {
            DataType::UInt32 => {
                return Err(ChipError::Data(
                    "UINT32 tensors take integer data: use HostTensor::from_u32".into(),
                ))
            }
            DataType::BFloat16 => {
                let n = data.len();
                par::chunks_indexed(&mut data, 1 << 14, 1, n, |_, c| {
                    c.iter_mut().for_each(|x| *x = format::round_bf16(*x))
                });
            }
            DataType::Float32 | DataType::BFloat8B | DataType::BFloat4B => {}
        }
        Ok(HostTensor {
            shape,
            dtype,
            data: HostData::F32(data),
        })
    }

    pub fn from_u32(shape: impl Into<Vec<usize>>, data: Vec<u32>) -> Result<HostTensor> {
        let shape = shape.into();
        check_volume(&shape, data.len())?;
        Ok(HostTensor {
            shape,
            dtype: DataType::UInt32,
            data: HostData::U32(data),
        })
    }

    pub fn zeros(shape: impl Into<Vec<usize>>, dtype: DataType) -> HostTensor {
        let shape = shape.into();
        let n = shape.iter().product();
        let data = if dtype == DataType::UInt32 {
            HostData::U32(vec![0; n])
        } else {
            HostData::F32(vec![0.0; n])
        };
        HostTensor { shape, dtype, data }
    }

    /// Values as f32 (UINT32 converted, possibly inexactly above 2^24).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &self.data {
            HostData::F32(v) => v.clone(),
            HostData::U32(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            HostData::F32(v) => Some(v),
            HostData::U32(_) => None,
        }
    }

    pub fn volume(&self) -> usize {
        self.shape.iter().product()
    }
}

fn check_volume(shape: &[usize], len: usize) -> Result<()> {
    let vol: usize = shape.iter().product();
    if shape.is_empty() || vol != len {
        return Err(ChipError::Data(format!(
            "shape {shape:?} holds {vol} elements but {len} were given; pass exactly one value per element"
        )));
    }
    Ok(())
}

/// Encodes logical values into the bytes of all pages, in logical page order.
pub fn encode_pages(spec: &TensorSpec, data: &HostData) -> Result<Vec<u8>> {
    let page = spec.page_size() as usize;
    let mut out = vec![0u8; spec.num_pages() as usize * page];
    match (spec.layout, data) {
        (Layout::Tile, HostData::F32(v)) => {
            let tiled = format::tilize(v, &spec.shape)?;
            encode_float_tiles(spec.dtype, &tiled, &mut out)?;
        }
        (Layout::Tile, HostData::U32(v)) => {
            let tiled = format::tilize(v, &spec.shape)?;
            encode_words(&tiled, &mut out, |x: u32| x.to_le_bytes());
        }
        (Layout::RowMajor, HostData::F32(v)) => encode_elems(spec.dtype, v, &mut out)?,
        (Layout::RowMajor, HostData::U32(v)) => encode_words(v, &mut out, |x: u32| x.to_le_bytes()),
    }
    Ok(out)
}

/// Each value of `v` as the `N` bytes `conv` makes of it, into `out`.
fn encode_words<const N: usize, T: Copy + Sync>(
    v: &[T],
    out: &mut [u8],
    conv: impl Fn(T) -> [u8; N] + Sync + Send,
) {
    const CHUNK: usize = 4096;
    par::zip_chunks(out, N * CHUNK, v, CHUNK, v.len(), |o, x| {
        for (b, &x) in o.chunks_exact_mut(N).zip(x) {
            b.copy_from_slice(&conv(x));
        }
    });
}

fn encode_float_tiles(dtype: DataType, tiled: &[f32], out: &mut [u8]) -> Result<()> {
    match dtype {
        DataType::BFloat8B => Ok(format::pack_bfp8_tiles(tiled, out)?),
        DataType::BFloat4B => Ok(format::pack_bfp4_tiles(tiled, out)?),
        _ => encode_elems(dtype, tiled, out),
    }
}

fn encode_elems(dtype: DataType, v: &[f32], out: &mut [u8]) -> Result<()> {
    match dtype {
        DataType::BFloat16 => encode_words(v, out, |f: f32| {
            half::bf16::from_f32(f).to_bits().to_le_bytes()
        }),
        DataType::Float32 => encode_words(v, out, f32::to_le_bytes),
        DataType::UInt32 => encode_words(v, out, |f: f32| (f as u32).to_le_bytes()),
        DataType::BFloat8B | DataType::BFloat4B => {
            return Err(ChipError::Data(format!(
                "{dtype} exists only in TILE layout"
            )));
        }
    }
    Ok(())
}

/// Decodes all pages (logical page order) back into logical values.
pub fn decode_pages(spec: &TensorSpec, bytes: &[u8]) -> Result<HostData> {
    let expected = spec.num_pages() as usize * spec.page_size() as usize;
    if bytes.len() != expected {
        return Err(ChipError::Data(format!(
            "{} bytes of pages, expected {expected} for {spec}",
            bytes.len()
        )));
    }
    if spec.dtype == DataType::UInt32 {
        let vals: Vec<u32> = decode_words(bytes, u32::from_le_bytes);
        return Ok(HostData::U32(match spec.layout {
            Layout::Tile => format::untilize(&vals, &spec.shape)?,
            Layout::RowMajor => vals,
        }));
    }
    let vals = decode_floats(spec.dtype, bytes)?;
    Ok(HostData::F32(match spec.layout {
        Layout::Tile => format::untilize(&vals, &spec.shape)?,
        Layout::RowMajor => vals,
    }))
}

/// Decodes float pages to f32 in page order (TILE layout stays tiled).
pub fn decode_floats(dtype: DataType, bytes: &[u8]) -> Result<Vec<f32>> {
    Ok(match dtype {
        DataType::BFloat16 => decode_words(bytes, |x: [u8; 2]| {
            half::bf16::from_bits(u16::from_le_bytes(x)).to_f32()
        }),
        DataType::Float32 => decode_words(bytes, f32::from_le_bytes),
        DataType::UInt32 => decode_words(bytes, |x| u32::from_le_bytes(x) as f32),
        DataType::BFloat8B => {
            let mut out = vec![0f32; bytes.len() / BFP8_TILE_BYTES * TILE_ELEMS];
            format::unpack_bfp8_tiles(bytes, &mut out)?;
            out
        }
        DataType::BFloat4B => {
            let mut out = vec![0f32; bytes.len() / BFP4_TILE_BYTES * TILE_ELEMS];
            format::unpack_bfp4_tiles(bytes, &mut out)?;
            out
        }
    })
}

/// Every whole `N`-byte word of `bytes`, through `conv`.
fn decode_words<const N: usize, T: Copy + Default + Send>(
    bytes: &[u8],
    conv: impl Fn([u8; N]) -> T + Sync + Send,
) -> Vec<T> {
    const CHUNK: usize = 4096;
    let mut out = vec![T::default(); bytes.len() / N];
    let n = out.len();
    par::zip_chunks(&mut out, CHUNK, bytes, N * CHUNK, n, |o, b| {
        for (v, x) in o.iter_mut().zip(b.chunks_exact(N)) {
            let mut word = [0u8; N];
            word.copy_from_slice(x);
            *v = conv(word);
        }
    });
    out
}
