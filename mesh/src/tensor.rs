//! Mesh tensors: one tensor per chip, all with the same spec and the same address, plus the
//! mappers that split a host tensor over the mesh and the composers that join it back.

use std::borrow::Cow;

use ttmesh_chip::tensor::{HostData, PendingTensorRead, Tensor};
use ttmesh_chip::{CqId, HostTensor, Layout, MemoryConfig, TensorSpec};

use crate::device::{MeshDevice, MeshShape};
use crate::error::{invalid, on_chip, Result};

/// Splits one host tensor into one host tensor per chip (mesh row-major order).
pub trait MeshMapper {
    fn map(&self, host: &HostTensor, shape: MeshShape) -> Result<Vec<HostTensor>>;

    /// The same split without copies of what repeats: the distinct parts, and for each chip
    /// (row-major) the index of its part. Writing a mesh tensor encodes each distinct part
    /// once: a replicated 113 MB embedding table is then neither cloned nor tilized eight
    /// times on a T3K. By default every chip's part is its own.
    fn map_distinct<'a>(
        &self,
        host: &'a HostTensor,
        shape: MeshShape,
    ) -> Result<DistinctParts<'a>> {
        Ok(DistinctParts::one_per_chip(self.map(host, shape)?))
    }
}

/// What [`MeshMapper::map_distinct`] gives: `parts[of_chip[i]]` is chip `i`'s.
pub struct DistinctParts<'a> {
    pub parts: Vec<Cow<'a, HostTensor>>,
    pub of_chip: Vec<usize>,
}

impl<'a> DistinctParts<'a> {
    /// Every chip's part its own (what `map` gives, in chip order).
    pub fn one_per_chip(parts: Vec<HostTensor>) -> DistinctParts<'a> {
        DistinctParts {
            of_chip: (0..parts.len()).collect(),
            parts: parts.into_iter().map(Cow::Owned).collect(),
        }
    }

    /// One part for all `chips`.
    fn shared(part: Cow<'a, HostTensor>, chips: usize) -> DistinctParts<'a> {
        DistinctParts {
            parts: vec![part],
            of_chip: vec![0; chips],
        }
    }
}

/// Joins one host tensor per chip back into one.
pub trait MeshComposer {
    fn compose(&self, shards: Vec<HostTensor>, shape: MeshShape) -> Result<HostTensor>;
}

/// Split along `dim` over all chips (row-major order).
#[derive(Clone, Copy, Debug)]
pub struct ShardTensorToMesh(pub usize);
/// The same tensor on every chip.
#[derive(Clone, Copy, Debug)]
pub struct ReplicateTensorToMesh;
/// Split along `dims[0]` over mesh rows and `dims[1]` over mesh columns; None replicates.
#[derive(Clone, Copy, Debug)]
pub struct ShardTensor2dMesh(pub [Option<usize>; 2]);
/// Concatenate every chip's tensor along `dim` (row-major order).
#[derive(Clone, Copy, Debug)]
pub struct ConcatMeshToTensor(pub usize);
/// Concatenate along `dims[0]` over rows and `dims[1]` over columns.
#[derive(Clone, Copy, Debug)]
pub struct ConcatMesh2dToTensor(pub [usize; 2]);

/// Splits `host` into `n` equal parts along `dim`.
pub fn split(host: &HostTensor, dim: usize, n: usize) -> Result<Vec<HostTensor>> {
    let shape = &host.shape;
    if dim >= shape.len() {
        return Err(invalid(
            "ShardTensorToMesh",
            format!("dim {dim} is out of range for shape {shape:?}"),
        ));
    }
    if !shape[dim].is_multiple_of(n) {
        return Err(invalid(
            "ShardTensorToMesh",
            format!(
                "dim {dim} of {shape:?} ({}) does not split evenly over {n} chips",
                shape[dim]
            ),
        ));
    }
    let outer: usize = shape[..dim].iter().product();
    let inner: usize = shape[dim + 1..].iter().product();
    let part = shape[dim] / n;
    let mut out_shape = shape.clone();
    out_shape[dim] = part;
    let pick = |j: usize| -> HostData {
        fn take<T: Copy>(
            v: &[T],
            outer: usize,
            extent: usize,
            part: usize,
            inner: usize,
            j: usize,
        ) -> Vec<T> {
            let mut o = Vec::with_capacity(outer * part * inner);
            for k in 0..outer {
                let start = (k * extent + j * part) * inner;
                o.extend_from_slice(&v[start..start + part * inner]);
            }
            o
        }
        match &host.data {
            HostData::F32(v) => HostData::F32(take(v, outer, shape[dim], part, inner, j)),
            HostData::U32(v) => HostData::U32(take(v, outer, shape[dim], part, inner, j)),
        }
    };
    Ok((0..n)
        .map(|j| HostTensor {
            shape: out_shape.clone(),
            dtype: host.dtype,
            data: pick(j),
        })
        .collect())
}

/// Concatenates host tensors along `dim`.
pub fn concat(parts: &[HostTensor], dim: usize) -> Result<HostTensor> {
    let first = parts
        .first()
        .ok_or_else(|| invalid("ConcatMeshToTensor", "no tensors to concatenate"))?;
    if dim >= first.shape.len() {
        return Err(invalid(
            "ConcatMeshToTensor",
            format!("dim {dim} is out of range for shape {:?}", first.shape),
        ));
    }
    for p in parts {
        let mut a = p.shape.clone();
        let mut b = first.shape.clone();
        a[dim] = 0;
        b[dim] = 0;
        if a != b || p.dtype != first.dtype {
            return Err(invalid(
                "ConcatMeshToTensor",
                format!(
                    "shapes {:?} and {:?} differ outside dim {dim}",
                    p.shape, first.shape
                ),
            ));
        }
    }
    let outer: usize = first.shape[..dim].iter().product();
    let inner: usize = first.shape[dim + 1..].iter().product();
    let mut shape = first.shape.clone();
    shape[dim] = parts.iter().map(|p| p.shape[dim]).sum();
    fn join<T: Copy>(parts: &[&[T]], extents: &[usize], outer: usize, inner: usize) -> Vec<T> {
        let mut o = Vec::new();
        for k in 0..outer {
            for (p, e) in parts.iter().zip(extents) {
                o.extend_from_slice(&p[k * e * inner..(k + 1) * e * inner]);
            }
        }
        o
    }
    let extents: Vec<usize> = parts.iter().map(|p| p.shape[dim]).collect();
    let data = match &first.data {
        HostData::F32(_) => {
            let v: Vec<&[f32]> = parts.iter().map(|p| p.as_f32().unwrap_or(&[])).collect();
            HostData::F32(join(&v, &extents, outer, inner))
        }
        HostData::U32(_) => {
            let v: Vec<&[u32]> = parts
                .iter()
                .map(|p| {
                    if let HostData::U32(x) = &p.data {
                        x.as_slice()
                    } else {
                        &[]
                    }
                })
                .collect();
            HostData::U32(join(&v, &extents, outer, inner))
        }
    };
    Ok(HostTensor {
        shape,
        dtype: first.dtype,
        data,
    })
}

impl MeshMapper for ShardTensorToMesh {
    fn map(&self, host: &HostTensor, shape: MeshShape) -> Result<Vec<HostTensor>> {
        split(host, self.0, shape.num_devices())
    }
}

impl MeshMapper for ReplicateTensorToMesh {
    fn map(&self, host: &HostTensor, shape: MeshShape) -> Result<Vec<HostTensor>> {
        Ok(vec![host.clone(); shape.num_devices()])
    }

    fn map_distinct<'a>(
        &self,
        host: &'a HostTensor,
        shape: MeshShape,
    ) -> Result<DistinctParts<'a>> {
        Ok(DistinctParts::shared(
            Cow::Borrowed(host),
            shape.num_devices(),
        ))
    }
}

impl MeshMapper for ShardTensor2dMesh {
    fn map(&self, host: &HostTensor, shape: MeshShape) -> Result<Vec<HostTensor>> {
        let rows = match self.0[0] {
            Some(d) => split(host, d, shape.rows)?,
            None => vec![host.clone(); shape.rows],
        };
        let mut out = Vec::with_capacity(shape.num_devices());
        for r in rows {
            match self.0[1] {
                Some(d) => out.extend(split(&r, d, shape.cols)?),
                None => out.extend(std::iter::repeat_n(r, shape.cols)),
            }
        }
        Ok(out)
    }

    fn map_distinct<'a>(
        &self,
        host: &'a HostTensor,
        shape: MeshShape,
    ) -> Result<DistinctParts<'a>> {
        let (rows, cols) = (shape.rows, shape.cols);
        // Split over one axis, the same along the other: one part per row or column.
        let along = |d, n, index: fn(usize, usize) -> usize| -> Result<DistinctParts<'a>> {
            Ok(DistinctParts {
                parts: split(host, d, n)?.into_iter().map(Cow::Owned).collect(),
                of_chip: (0..rows * cols).map(|i| index(i, cols)).collect(),
            })
        };
        match self.0 {
            [None, None] => Ok(DistinctParts::shared(Cow::Borrowed(host), rows * cols)),
            [Some(d), None] => along(d, rows, |i, cols| i / cols),
            [None, Some(d)] => along(d, cols, |i, cols| i % cols),
            [Some(_), Some(_)] => Ok(DistinctParts::one_per_chip(self.map(host, shape)?)),
        }
    }
}

impl MeshComposer for ConcatMeshToTensor {
    fn compose(&self, shards: Vec<HostTensor>, _shape: MeshShape) -> Result<HostTensor> {
        concat(&shards, self.0)
    }
}

impl MeshComposer for ConcatMesh2dToTensor {
    fn compose(&self, shards: Vec<HostTensor>, shape: MeshShape) -> Result<HostTensor> {
        let rows: Vec<HostTensor> = shards
            .chunks(shape.cols)
            .map(|row| concat(row, self.0[1]))
            .collect::<Result<_>>()?;
        concat(&rows, self.0[0])
    }
}

/// One tensor per chip of a mesh, in mesh row-major order.
#[derive(Clone)]
pub struct MeshTensor {
    pub(crate) mesh: MeshDevice,
    pub(crate) shards: Vec<Tensor>,
}

impl std::fmt::Debug for MeshTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MeshTensor({} on {} chips)",
            self.spec(),
            self.shards.len()
        )
    }
}

impl MeshTensor {
    pub(crate) fn from_shards(mesh: &MeshDevice, shards: Vec<Tensor>) -> Result<MeshTensor> {
        let first = shards
            .first()
            .ok_or_else(|| invalid("mesh tensor", "no shards"))?;
        crate::lockstep::check_tensors(&format_args!("mesh tensor {}", first.spec()), &shards)?;
        Ok(MeshTensor {
            mesh: mesh.clone(),
            shards,
        })
    }

    /// [`allocate_tensor_on_device`](crate::allocate_tensor_on_device).
    pub fn allocate(mesh: &MeshDevice, spec: &TensorSpec) -> Result<MeshTensor> {
        crate::graph::create_device_tensor(mesh, spec, || {
            let shards =
                crate::lockstep::allocate(&"allocate_tensor_on_device", mesh.chips(), spec)?;
            Ok(MeshTensor {
                mesh: mesh.clone(),
                shards,
            })
        })
    }

    /// Maps `host` over the mesh and writes every chip's part through `cq`.
    pub fn from_host(
        host: &HostTensor,
        mesh: &MeshDevice,
        mapper: &dyn MeshMapper,
        layout: Layout,
        memory_config: MemoryConfig,
        cq: CqId,
    ) -> Result<MeshTensor> {
        let parts = mapper.map_distinct(host, mesh.shape())?;
        let first = parts.parts.first().ok_or_else(|| {
            invalid(
                "MeshTensor::from_host",
                "the mapper gave no part for any chip",
            )
        })?;
        let spec = TensorSpec::new(first.shape.clone(), host.dtype, layout, memory_config);
        let t = MeshTensor::allocate(mesh, &spec)?;
        t.write_parts(&parts, cq)?;
        Ok(t)
    }

    /// [`copy_host_to_device_tensor`](crate::copy_host_to_device_tensor) as a method.
    pub fn copy_from_host(
        &self,
        host: &HostTensor,
        mapper: &dyn MeshMapper,
        cq: CqId,
    ) -> Result<()> {
        let parts = mapper.map_distinct(host, self.mesh.shape())?;
        self.write_parts(&parts, cq)
    }

    /// Encodes each distinct part once (every chip's tensor has the same spec) and writes it
    /// to the chips that take it.
    fn write_parts(&self, parts: &DistinctParts<'_>, cq: CqId) -> Result<()> {
        if parts.of_chip.len() != self.shards.len() {
            return Err(invalid(
                "copy_host_to_device_tensor",
                format!(
                    "the mapper gave parts for {} chips; the mesh has {}",
                    parts.of_chip.len(),
                    self.shards.len()
                ),
            ));
        }
        let mut encoded: Vec<Option<Vec<u8>>> = vec![None; parts.parts.len()];
        for (s, &p) in self.shards.iter().zip(&parts.of_chip) {
            let part = parts.parts.get(p).ok_or_else(|| {
                invalid(
                    "copy_host_to_device_tensor",
                    format!("the mapper named part {p} of {}", parts.parts.len()),
                )
            })?;
            let bytes = match &mut encoded[p] {
                Some(b) => b,
                slot => slot.insert(s.encode_host(part).map_err(on_chip(s.chip().id()))?),
            };
            s.copy_encoded_from_host(bytes, cq)
                .map_err(on_chip(s.chip().id()))?;
        }
        Ok(())
    }

    /// Reads every chip's tensor and composes them.
    pub fn to_host(&self, composer: &dyn MeshComposer, cq: CqId) -> Result<HostTensor> {
        composer.compose(self.to_host_shards(cq)?, self.mesh.shape())
    }

    /// Enqueues the reads (non-blocking); data is valid once each wait returns. On a mesh
    /// over MPI ranks, only this rank's chips can be read this way: use `to_host_shards` or
    /// `to_host`, which gather the others' from their ranks.
    pub fn to_host_async(&self, cq: CqId) -> Result<Vec<PendingTensorRead>> {
        self.shards
            .iter()
            .map(|s| s.to_host_async(cq).map_err(on_chip(s.chip().id())))
            .collect()
    }

    /// Every chip's tensor, uncomposed. On a mesh over MPI ranks every rank must call it
    /// (each reads its own chips, and they exchange what they read).
    pub fn to_host_shards(&self, cq: CqId) -> Result<Vec<HostTensor>> {
        let Some(ranks) = self.mesh.ranks() else {
            return self
                .to_host_async(cq)?
                .into_iter()
                .zip(&self.shards)
                .map(|(p, s)| p.wait().map_err(on_chip(s.chip().id())))
                .collect();
        };
        let mut mine = Vec::new();
        for s in self.shards.iter().filter(|s| !s.chip().held_elsewhere()) {
            let id = s.chip().id();
            let read = s.to_host_async(cq).map_err(on_chip(id))?;
            mine.push((id, read.wait().map_err(on_chip(id))?));
        }
        let timeout = self.shards[0].chip().operation_timeout();
        let all = ranks.exchange(
            "reading a mesh tensor",
            crate::ranks::encode_shards(&mine),
            timeout,
        )?;
        crate::ranks::gather_shards(&self.shards, mine, &all)
    }

    /// [`crate::ranks::bits_digest`] of every chip's tensor, each chip digested where it is
    /// held, then those digests digested in chip order: on a mesh over MPI ranks only the
    /// digests cross between ranks, where `to_host_shards` would gather the whole tensor on
    /// every rank (a 1 GiB result is then 1 GiB per rank). Two runs computed the same bits if
    /// their digests are equal. Every rank must call it.
    pub fn bits_digest(&self, cq: CqId) -> Result<u64> {
        let mut mine = Vec::new();
        for s in self.shards.iter().filter(|s| !s.chip().held_elsewhere()) {
            let id = s.chip().id();
            let shard = s.to_host_async(cq).map_err(on_chip(id))?;
            let shard = shard.wait().map_err(on_chip(id))?;
            mine.push((id, crate::ranks::bits_digest([&shard])));
        }
        let all = match self.mesh.ranks() {
            None => vec![crate::ranks::encode_digests(&mine)],
            Some(ranks) => ranks.exchange(
                "digesting a mesh tensor",
                crate::ranks::encode_digests(&mine),
                self.shards[0].chip().operation_timeout(),
            )?,
        };
        let chips: Vec<u32> = self.shards.iter().map(|s| s.chip().id()).collect();
        crate::ranks::combine_digests(&chips, &all)
    }

    pub fn shards(&self) -> &[Tensor] {
        &self.shards
    }
    pub fn mesh(&self) -> &MeshDevice {
        &self.mesh
    }
    /// The per-chip spec.
    pub fn spec(&self) -> &TensorSpec {
        self.shards[0].spec()
    }
    pub fn shape(&self) -> &[usize] {
        self.shards[0].shape()
    }
    pub fn buffer_address(&self) -> Result<u64> {
        self.shards[0]
            .buffer_address()
            .map_err(on_chip(self.shards[0].chip().id()))
    }

    pub fn deallocate(&self, force: bool) -> Result<()> {
        for s in &self.shards {
            s.deallocate(force).map_err(on_chip(s.chip().id()))?;
        }
        Ok(())
    }
}

/// TT-NN's `allocate_tensor_on_device` on a mesh: one tensor of `spec` per chip, all at one
/// address.
pub fn allocate_tensor_on_device(spec: &TensorSpec, mesh: &MeshDevice) -> Result<MeshTensor> {
    MeshTensor::allocate(mesh, spec)
}

/// TT-NN's `copy_host_to_device_tensor` on a mesh: maps `host` over the mesh with `mapper` and
/// writes every chip's part into `tensor` through `cq`.
pub fn copy_host_to_device_tensor(
    host: &HostTensor,
    tensor: &MeshTensor,
    mapper: &dyn MeshMapper,
    cq: CqId,
) -> Result<()> {
    tensor.copy_from_host(host, mapper, cq)
}
