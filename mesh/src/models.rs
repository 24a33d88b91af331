//! Small model pieces users of the mesh run: the tensor-parallel MLP block of an LLM layer
//! (what `ttmesh run` and the benchmarks drive), with its host reference, and a deterministic
//! data generator so every caller builds the same tensors from a seed.

use ttmesh_chip::compute::{reference, Activation};
use ttmesh_chip::{CqId, DataType, HostTensor, Layout, MemoryConfig};

use crate::ccl::CclArgs;
use crate::device::MeshDevice;
use crate::error::{invalid, Result};
use crate::ops::{self, MeshMatmulConfig};
use crate::tensor::{MeshTensor, ShardTensorToMesh};

/// Uniform values in [-scale, scale) from a xorshift stream seeded by `seed`, rounded to `dtype`.
pub fn random_host(shape: &[usize], dtype: DataType, seed: u64, scale: f32) -> Result<HostTensor> {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect();
    HostTensor::from_f32(shape.to_vec(), dtype, v)
        .map_err(|e| invalid("random_host", e.to_string()))
}

/// `gelu(x W1) W2` split over every chip: W1 column-parallel (sharded on its output dim), W2
/// row-parallel (sharded on its input dim), partial sums joined by all_reduce.
pub struct TpMlp {
    pub hidden: usize,
    pub ffn: usize,
    pub w1: MeshTensor,
    pub w2: MeshTensor,
    w1_host: HostTensor,
    w2_host: HostTensor,
}

impl TpMlp {
    /// Random bf16 weights (scaled by 1/sqrt(fan-in)) placed on the mesh.
    pub fn new(mesh: &MeshDevice, hidden: usize, ffn: usize, seed: u64) -> Result<TpMlp> {
        let n = mesh.num_devices();
        if !ffn.is_multiple_of(32 * n) || !hidden.is_multiple_of(32) || hidden == 0 {
            return Err(invalid(
                "TpMlp",
                format!(
                    "ffn {ffn} must split into tile-aligned slices over {n} chips (a multiple of {}), and hidden {hidden} must be a multiple of 32",
                    32 * n
                ),
            ));
        }
        let w1_host = random_host(
            &[hidden, ffn],
            DataType::BFloat16,
            seed,
            1.0 / (hidden as f32).sqrt(),
        )?;
        let w2_host = random_host(
            &[ffn, hidden],
            DataType::BFloat16,
            seed + 1,
            1.0 / (ffn as f32).sqrt(),
        )?;
        let place = |h: &HostTensor, dim| {
            MeshTensor::from_host(
                h,
                mesh,
                &ShardTensorToMesh(dim),
                Layout::Tile,
                MemoryConfig::DRAM,
                CqId(0),
            )
        };
        Ok(TpMlp {
            hidden,
            ffn,
            w1: place(&w1_host, 1)?,
            w2: place(&w2_host, 0)?,
            w1_host,
            w2_host,
        })
    }

    /// The block as a user writes it: every op enqueued on every chip, nothing waits.
    pub fn forward(&self, x: &MeshTensor) -> Result<MeshTensor> {
        let up = MeshMatmulConfig {
            activation: Some(Activation::Gelu { approximate: false }),
            ..Default::default()
        };
        let h = ops::column_parallel_matmul(x, &self.w1, &up, None)?;
        ops::row_parallel_matmul(
            &h,
            &self.w2,
            &MeshMatmulConfig::default(),
            &CclArgs::default(),
        )
    }

    /// The same block on the host in f64, from the bf16 values the device holds.
    pub fn host_reference(&self, x: &HostTensor) -> Result<Vec<f32>> {
        let e = |e: ttmesh_chip::compute::ComputeError| invalid("TpMlp reference", e.to_string());
        let tokens = x.volume() / self.hidden;
        let xv = x.to_f32_vec();
        let up = reference::matmul(
            &xv,
            &self.w1_host.to_f32_vec(),
            1,
            1,
            tokens,
            self.hidden,
            self.ffn,
        )
        .map_err(e)?;
        let act = reference::unary(Activation::Gelu { approximate: false }, &up);
        reference::matmul(
            &act,
            &self.w2_host.to_f32_vec(),
            1,
            1,
            tokens,
            self.ffn,
            self.hidden,
        )
        .map_err(e)
    }
}
