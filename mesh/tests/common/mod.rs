//! Shared helpers for the mesh tests: deterministic data, mesh openers and host references
//! written independently of the crate (plain index arithmetic), so a bug in the crate's own
//! split/concat cannot hide in the reference.
#![allow(dead_code)]

use ttmesh::*;

/// xorshift64: deterministic, seedable, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1) with 24 random bits.
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Values k/16 in [-1/2, 1/2): every partial sum of up to 32 of them is k/16 with |k| <= 256,
/// exact in bf16 (8 significant bits) as in f32 whatever the order, so a reduction has one
/// right answer however often its partial sums are rounded on the way.
pub fn exact(shape: &[usize], dtype: DataType, seed: u64) -> HostTensor {
    let mut r = Rng::new(seed);
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|_| (r.next() % 16) as f32 / 16.0 - 0.5)
        .collect();
    HostTensor::from_f32(shape.to_vec(), dtype, v).unwrap()
}

/// Full-precision values in [-1, 1) (rounded to `dtype`).
pub fn random(shape: &[usize], dtype: DataType, seed: u64) -> HostTensor {
    let mut r = Rng::new(seed);
    let n: usize = shape.iter().product();
    let v = (0..n).map(|_| r.unit()).collect();
    HostTensor::from_f32(shape.to_vec(), dtype, v).unwrap()
}

pub fn open(topology: &str, fabric: FabricConfig) -> MeshDevice {
    open_with(MeshConfig {
        topology: topology.into(),
        fabric_config: fabric,
        ..Default::default()
    })
}

pub fn open_with(config: MeshConfig) -> MeshDevice {
    let name = config.topology.clone();
    MeshDevice::open(config).unwrap_or_else(|e| panic!("opening {name}: {e}"))
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Concatenation of `parts` along `dim`, element by element.
pub fn concat_ref(parts: &[&[f32]], shape: &[usize], dim: usize) -> (Vec<usize>, Vec<f32>) {
    let n = parts.len();
    let mut out_shape = shape.to_vec();
    out_shape[dim] *= n;
    let (os, is) = (strides(&out_shape), strides(shape));
    let total: usize = out_shape.iter().product();
    let mut out = vec![0f32; total];
    for (flat, o) in out.iter_mut().enumerate() {
        let mut src = 0;
        let mut part = 0;
        for d in 0..shape.len() {
            let mut i = flat / os[d] % out_shape[d];
            if d == dim {
                part = i / shape[d];
                i %= shape[d];
            }
            src += i * is[d];
        }
        *o = parts[part][src];
    }
    (out_shape, out)
}

/// Chunk `j` of `n` equal chunks of `data` (shape `shape`) along `dim`.
pub fn chunk_ref(data: &[f32], shape: &[usize], dim: usize, n: usize, j: usize) -> Vec<f32> {
    let mut cs = shape.to_vec();
    cs[dim] /= n;
    let (cst, ist) = (strides(&cs), strides(shape));
    let total: usize = cs.iter().product();
    (0..total)
        .map(|flat| {
            let mut src = 0;
            for d in 0..shape.len() {
                let mut i = flat / cst[d] % cs[d];
                if d == dim {
                    i += j * cs[d];
                }
                src += i * ist[d];
            }
            data[src]
        })
        .collect()
}

pub fn round_to(dtype: DataType, v: f32) -> f32 {
    if dtype == DataType::BFloat16 {
        ttmesh_chip::format::round_bf16(v)
    } else {
        v
    }
}

/// Element-wise f64 sum of `parts`.
pub fn sum_f64(parts: &[&[f32]]) -> Vec<f64> {
    let mut s = vec![0f64; parts[0].len()];
    for p in parts {
        for (a, b) in s.iter_mut().zip(p.iter()) {
            *a += *b as f64;
        }
    }
    s
}

/// The documented reduction order of a reduce_scatter's chunk `owner` (ttmesh_ccl docs): on a
/// ring, start at chip owner+1 and add forward, ending with the owner; on a line, sum from the
/// left end up to the owner, from the right end down to owner+1, then left + right. f32 adds;
/// a partial sum that crosses a link travels in the tensor's format, so for bf16 it is rounded
/// to bf16 at every send (what arrives at the owner is added in f32 and rounded by the caller).
pub fn ordered_sum(parts: &[&[f32]], owner: usize, ring: bool, dtype: DataType) -> Vec<f32> {
    let n = parts.len();
    let len = parts[0].len();
    let sent = |v: f32| round_to(dtype, v);
    (0..len)
        .map(|e| {
            if ring {
                let mut s = parts[(owner + 1) % n][e];
                for k in 2..=n {
                    s = sent(s) + parts[(owner + k) % n][e];
                }
                s
            } else {
                let mut left = parts[0][e];
                for p in parts.iter().take(owner + 1).skip(1) {
                    left = sent(left) + p[e];
                }
                if owner + 1 < n {
                    let mut right = parts[n - 1][e];
                    for p in parts[owner + 1..n - 1].iter().rev() {
                        right = sent(right) + p[e];
                    }
                    left + sent(right)
                } else {
                    left
                }
            }
        })
        .collect()
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Asserts |got - want| <= rtol * |want| + atol element-wise, naming the first bad element.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (*g as f64 - w).abs();
        assert!(
            err <= rtol * w.abs() + atol,
            "{what}: element {i}: got {g}, want {w} (error {err:e})"
        );
    }
}

/// Every chip's tensor as f32 values, in mesh order.
pub fn shards_f32(t: &MeshTensor) -> Vec<Vec<f32>> {
    t.to_host_shards(CqId(0))
        .unwrap()
        .into_iter()
        .map(|h| h.to_f32_vec())
        .collect()
}

/// The per-chip host tensors `mapper` gives for `host`, as f32 values.
pub fn mapped_f32(mesh: &MeshDevice, host: &HostTensor, mapper: &dyn MeshMapper) -> Vec<Vec<f32>> {
    mapper
        .map(host, mesh.shape())
        .unwrap()
        .into_iter()
        .map(|h| h.to_f32_vec())
        .collect()
}

/// Hands each chip its own host tensor (the test decides every chip's data).
pub struct PerChip(pub Vec<HostTensor>);

impl MeshMapper for PerChip {
    fn map(&self, _host: &HostTensor, _shape: MeshShape) -> Result<Vec<HostTensor>> {
        Ok(self.0.clone())
    }
}

/// A mesh tensor whose chip `i` holds `parts[i]`.
pub fn per_chip(mesh: &MeshDevice, parts: &[HostTensor], layout: Layout) -> MeshTensor {
    MeshTensor::from_host(
        &parts[0],
        mesh,
        &PerChip(parts.to_vec()),
        layout,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    AllGather,
    ReduceScatter,
    AllReduce,
}

/// What every chip (mesh order) must hold after `op` on per-chip inputs `data` (shape `shape`):
/// gathers exact; reduce_scatter in its documented order; all_reduce as the exact sum rounded
/// once to `dtype` (so pass data whose sums are exact, see [`exact`]).
#[allow(clippy::too_many_arguments)]
pub fn reference(
    mesh: &MeshDevice,
    op: Op,
    axis: Option<usize>,
    topology: Option<Topology>,
    shape: &[usize],
    dim: usize,
    dtype: DataType,
    data: &[Vec<f32>],
) -> Vec<Vec<f32>> {
    let mut out = vec![Vec::new(); mesh.num_devices()];
    for (line, idx) in mesh.ccl_lines(axis).unwrap() {
        let n = idx.len();
        let ring = line.is_ring
            && n > 2
            && mesh.fabric_config() == FabricConfig::Fabric1DRing
            && topology != Some(Topology::Linear);
        // Results are in mesh order: a line's chips ranked by mesh index.
        let mut sorted = idx.clone();
        sorted.sort_unstable();
        let rank = |i: usize| sorted.iter().position(|&j| j == i).unwrap();
        let ins: Vec<&[f32]> = idx.iter().map(|&i| data[i].as_slice()).collect();
        let by_mesh: Vec<&[f32]> = sorted.iter().map(|&i| data[i].as_slice()).collect();
        for (pos, &i) in idx.iter().enumerate() {
            out[i] = match op {
                Op::AllGather => concat_ref(&by_mesh, shape, dim).1,
                Op::ReduceScatter => {
                    // Summed in line order (the documented order), chunk = the chip's rank.
                    let chunks: Vec<Vec<f32>> = ins
                        .iter()
                        .map(|d| chunk_ref(d, shape, dim, n, rank(i)))
                        .collect();
                    let refs: Vec<&[f32]> = chunks.iter().map(|v| v.as_slice()).collect();
                    ordered_sum(&refs, pos, ring, dtype)
                        .into_iter()
                        .map(|v| round_to(dtype, v))
                        .collect()
                }
                Op::AllReduce => sum_f64(&ins)
                    .into_iter()
                    .map(|v| round_to(dtype, v as f32))
                    .collect(),
            };
        }
    }
    out
}

/// Bitwise equality, reporting the first differing element rather than both vectors.
pub fn assert_bits_eq(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        let diffs = (0..got.len())
            .filter(|&i| got[i].to_bits() != want[i].to_bits())
            .count();
        panic!(
            "{what}: element {i} is {} but should be {} ({diffs} of {} elements differ)",
            got[i],
            want[i],
            got.len()
        );
    }
}

/// Waits (30 s at most) until every command queue of every chip has run all it was given, so
/// each chip's errors are there to take: a chip whose finish timed out during the mesh's
/// synchronize is still running a kernel that fails later on its own timeout.
pub fn wait_until_idle(mesh: &MeshDevice) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for c in mesh.chips() {
        for cq in 0..c.num_command_queues() {
            while !c.queue_idle(ttmesh_chip::CqId(cq)) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "chip {} CQ {cq} still busy after 30 s",
                    c.id()
                );
                std::thread::yield_now();
            }
        }
    }
}
