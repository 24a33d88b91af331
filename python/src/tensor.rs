//! `ttnn.Tensor`, `ttnn.Shape`, `ttnn.TensorSpec`, and moving data between numpy / torch and
//! the mesh. The pure-Python side (`ttmesh/ttnn/_convert.py`) turns arrays into bytes and back;
//! here bytes become host tensors, host tensors are mapped over a mesh, and device tensors are
//! read and composed.

use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};
use ttmesh::{
    CqId, HostData, HostTensor, MeshMapper, MeshShape as RShape, MeshTensor, PendingTensorRead,
    TensorSpec as RSpec,
};

use crate::device::{Device, DeviceState};
use crate::enums::{DataType, Layout};
use crate::errors::{chip_work, runtime, type_error, value_error};
use crate::mapping::{parse_composer, parse_mapper, Mapper};
use crate::memory::{opt_memory_config, MemoryConfig};

pub use crate::spec::{Shape, TensorSpec};

/// Where a host tensor's values are meant to go on a mesh.
#[derive(Clone, Debug)]
pub enum HostPlacement {
    /// One tensor (no mapper): replicated if written to a mesh of several chips.
    Whole,
    /// The same values on every chip of a mesh of this shape.
    Replicated(RShape),
    /// One part per chip (row-major) of a mesh of this shape.
    Split(RShape),
}

/// The values of a tensor on the host.
pub struct HostStore {
    pub parts: Vec<HostTensor>,
    pub placement: HostPlacement,
    pub layout: ttmesh::Layout,
}

/// A read that was enqueued (`cpu(blocking=False)`): valid once the queue reached it.
pub struct PendingStore {
    pub spec: RSpec,
    pub mesh_shape: RShape,
    pub state: Mutex<Pending>,
}

pub enum Pending {
    Waiting(Vec<PendingTensorRead>),
    Done(Arc<Vec<HostTensor>>),
    Failed(String),
}

pub enum Storage {
    Host(HostStore),
    Device(MeshTensor, Arc<DeviceState>),
    /// One device's tensor of a mesh tensor (`get_device_tensors`): readable, not an op input.
    Shard(MeshTensor, Arc<DeviceState>, usize),
    Pending(PendingStore),
}

/// `ttnn.Tensor`: on the host, or on a mesh (one tensor per chip, one spec, one address).
#[pyclass(module = "ttnn", frozen, name = "Tensor")]
pub struct Tensor {
    pub st: Storage,
    /// Values are INT32 held as UINT32 bits (ttmesh's chips have no INT32 type).
    pub int32: bool,
}

impl Drop for Tensor {
    /// Freeing a device tensor frees it on every chip of its mesh: in turn with the other
    /// threads' chip calls (see `errors::CHIP_CALLS`). The GIL is held here; a thread that
    /// holds the lock never waits for the GIL before releasing it, so this cannot deadlock.
    fn drop(&mut self) {
        if matches!(self.st, Storage::Device(..) | Storage::Shard(..)) {
            let _turn = crate::errors::CHIP_CALLS.lock();
            let emptied = Storage::Host(HostStore {
                parts: Vec::new(),
                placement: HostPlacement::Whole,
                layout: ttmesh::Layout::RowMajor,
            });
            drop(std::mem::replace(&mut self.st, emptied));
        }
    }
}

/// Bytes from Python (`kind` "f32" or "u32", native endianness) as a host tensor of `dtype`.
fn host_from_bytes(
    data: &[u8],
    shape: Vec<usize>,
    kind: &str,
    dtype: DataType,
) -> PyResult<HostTensor> {
    let vol: usize = shape.iter().product();
    if data.len() != vol * 4 {
        return Err(value_error(format!(
            "{} bytes given for shape {shape:?} ({vol} elements of 4 bytes)",
            data.len()
        )));
    }
    let words = data.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
    let r = match (kind, dtype) {
        ("u32", DataType::UINT32 | DataType::INT32) => {
            HostTensor::from_u32(shape, words.map(u32::from_ne_bytes).collect())
        }
        ("f32", DataType::BFLOAT16 | DataType::FLOAT32 | DataType::BFLOAT8_B | DataType::BFLOAT4_B) => {
            HostTensor::from_f32(shape, dtype.chip(), words.map(f32::from_ne_bytes).collect())
        }
        _ => {
            return Err(type_error(format!(
                "{kind} data cannot be held as {dtype:?}: pass integer data for ttnn.uint32 / ttnn.int32 and float data for ttnn.bfloat16 / ttnn.float32 / ttnn.bfloat8_b / ttnn.bfloat4_b"
            )))
        }
    };
    r.map_err(|e| value_error(crate::errors::chain_text(&e)))
}

/// The values as native-endian bytes, written straight into a Python bytearray (numpy views
/// it without another copy).
fn host_bytes<'py>(
    py: Python<'py>,
    h: &HostTensor,
) -> PyResult<(Bound<'py, PyByteArray>, &'static str)> {
    fn fill<T: Copy, const N: usize>(out: &mut [u8], v: &[T], bytes: fn(T) -> [u8; N]) {
        for (o, x) in out.chunks_exact_mut(N).zip(v) {
            o.copy_from_slice(&bytes(*x));
        }
    }
    match &h.data {
        HostData::F32(v) => Ok((
            PyByteArray::new_with(py, v.len() * 4, |out| {
                fill(out, v, f32::to_ne_bytes);
                Ok(())
            })?,
            "f32",
        )),
        HostData::U32(v) => Ok((
            PyByteArray::new_with(py, v.len() * 4, |out| {
                fill(out, v, u32::to_ne_bytes);
                Ok(())
            })?,
            "u32",
        )),
    }
}

impl Tensor {
    pub fn on_device(t: MeshTensor, state: &Arc<DeviceState>, int32: bool) -> Tensor {
        Tensor {
            st: Storage::Device(t, state.clone()),
            int32,
        }
    }

    /// [`Tensor::device_tensor`] for argument `name` of op `what`, naming it only on error.
    pub fn device_tensor_of(
        &self,
        what: &str,
        name: &str,
    ) -> PyResult<(&MeshTensor, &Arc<DeviceState>)> {
        match &self.st {
            Storage::Device(t, s) if s.open.load(std::sync::atomic::Ordering::Acquire) => {
                Ok((t, s))
            }
            _ => self.device_tensor(&format!("{what}: {name}")),
        }
    }

    /// The mesh tensor an op takes as `arg`, with its mesh (which must be open).
    pub fn device_tensor(&self, arg: &str) -> PyResult<(&MeshTensor, &Arc<DeviceState>)> {
        match &self.st {
            Storage::Device(t, s) => {
                s.live(arg)?;
                Ok((t, s))
            }
            Storage::Shard(..) => Err(value_error(format!(
                "{arg} is one device's tensor (from ttnn.get_device_tensors): ops take the mesh tensor itself; read this one with ttnn.to_torch"
            ))),
            Storage::Host(_) | Storage::Pending(_) => Err(value_error(format!(
                "{arg} is on the host: move it to the device first (ttnn.to_device(tensor, device) or ttnn.from_torch(..., device=device))"
            ))),
        }
    }

    /// A host tensor with another layout (values are kept logical on the host, so this only
    /// changes how they will be written); None for a device tensor.
    pub fn with_host_layout(
        &self,
        py: Python<'_>,
        layout: ttmesh::Layout,
    ) -> PyResult<Option<Tensor>> {
        let Some((parts, placement)) = self.host_parts(py)? else {
            return Ok(None);
        };
        Ok(Some(Tensor {
            st: Storage::Host(HostStore {
                parts: parts.as_ref().clone(),
                placement,
                layout,
            }),
            int32: self.int32,
        }))
    }

    fn spec_fields(
        &self,
    ) -> (
        Vec<usize>,
        ttmesh::DataType,
        ttmesh::Layout,
        ttmesh::MemoryConfig,
    ) {
        match &self.st {
            Storage::Device(t, _) | Storage::Shard(t, _, _) => {
                let s = t.spec();
                (s.shape.clone(), s.dtype, s.layout, s.memory_config.clone())
            }
            Storage::Host(h) => (
                h.parts[0].shape.clone(),
                h.parts[0].dtype,
                h.layout,
                ttmesh::MemoryConfig::DRAM,
            ),
            Storage::Pending(p) => (
                p.spec.shape.clone(),
                p.spec.dtype,
                p.spec.layout,
                p.spec.memory_config.clone(),
            ),
        }
    }

    /// The host parts of a host tensor (waiting for a non-blocking read first), and where they
    /// go on a mesh.
    fn host_parts(
        &self,
        py: Python<'_>,
    ) -> PyResult<Option<(Arc<Vec<HostTensor>>, HostPlacement)>> {
        match &self.st {
            Storage::Host(h) => Ok(Some((Arc::new(h.parts.clone()), h.placement.clone()))),
            Storage::Pending(p) => {
                let parts = resolve(py, p)?;
                let placement = if parts.len() == 1 {
                    HostPlacement::Whole
                } else {
                    HostPlacement::Split(p.mesh_shape)
                };
                Ok(Some((parts, placement)))
            }
            _ => Ok(None),
        }
    }
}

fn resolve(py: Python<'_>, p: &PendingStore) -> PyResult<Arc<Vec<HostTensor>>> {
    let mut state = p.state.lock();
    let waiting = match &*state {
        Pending::Done(parts) => return Ok(parts.clone()),
        Pending::Failed(e) => return Err(pyo3::exceptions::PyRuntimeError::new_err(e.clone())),
        Pending::Waiting(_) => std::mem::replace(&mut *state, Pending::Failed(String::new())),
    };
    let Pending::Waiting(reads) = waiting else {
        unreachable!("matched Waiting above")
    };
    match chip_work(py, move || {
        reads
            .into_iter()
            .map(|r| r.wait())
            .collect::<Result<Vec<_>, _>>()
    }) {
        Ok(parts) => {
            let parts = Arc::new(parts);
            *state = Pending::Done(parts.clone());
            Ok(parts)
        }
        Err(e) => {
            *state = Pending::Failed(e.to_string());
            Err(e)
        }
    }
}

#[pymethods]
impl Tensor {
    #[getter]
    fn shape(&self) -> Shape {
        Shape {
            dims: self.spec_fields().0,
        }
    }
    #[getter]
    fn padded_shape(&self) -> Shape {
        let (shape, dtype, layout, mc) = self.spec_fields();
        Shape {
            dims: RSpec::new(shape, dtype, layout, mc).padded_shape(),
        }
    }
    #[getter]
    fn dtype(&self) -> DataType {
        DataType::of(self.spec_fields().1, self.int32)
    }
    #[getter]
    fn layout(&self) -> Layout {
        Layout::of(self.spec_fields().2)
    }
    #[getter]
    fn spec(&self) -> TensorSpec {
        let (shape, dtype, layout, mc) = self.spec_fields();
        TensorSpec {
            spec: RSpec::new(shape, dtype, layout, mc),
            int32: self.int32,
        }
    }
    fn memory_config(&self) -> MemoryConfig {
        MemoryConfig::of(&self.spec_fields().3)
    }
    fn storage_type(&self) -> crate::enums::StorageType {
        match &self.st {
            Storage::Device(..) | Storage::Shard(..) => crate::enums::StorageType::DEVICE,
            _ => crate::enums::StorageType::HOST,
        }
    }
    fn device(&self) -> Option<Device> {
        match &self.st {
            Storage::Device(_, s) | Storage::Shard(_, s, _) => Some(Device { state: s.clone() }),
            _ => None,
        }
    }
    fn is_allocated(&self) -> bool {
        match &self.st {
            Storage::Device(t, _) | Storage::Shard(t, _, _) => t.shards()[0].is_allocated(),
            _ => true,
        }
    }
    fn buffer_address(&self) -> PyResult<u64> {
        match &self.st {
            Storage::Device(t, s) | Storage::Shard(t, s, _) => {
                s.live("buffer_address")?;
                t.buffer_address().map_err(|e| runtime(&e))
            }
            _ => Err(value_error(
                "buffer_address: the tensor is on the host and has no device buffer",
            )),
        }
    }
    #[pyo3(signature = (force = false))]
    fn deallocate(&self, py: Python<'_>, force: bool) -> PyResult<()> {
        match &self.st {
            // A closed mesh freed everything already.
            Storage::Device(_, s) if !s.open.load(std::sync::atomic::Ordering::Acquire) => Ok(()),
            Storage::Device(t, _) => chip_work(py, || t.deallocate(force)),
            _ => Ok(()),
        }
    }
    /// A host tensor with this tensor's values (`blocking=False`: the reads are only enqueued;
    /// the values are valid once the device is synchronized).
    #[pyo3(signature = (blocking = true, cq_id = 0))]
    fn cpu(&self, py: Python<'_>, blocking: bool, cq_id: u8) -> PyResult<Tensor> {
        let cq = CqId(cq_id);
        match &self.st {
            Storage::Device(t, s) => {
                s.live("cpu")?;
                let shape = t.mesh().shape();
                if blocking {
                    let parts = chip_work(py, || t.to_host_shards(cq))?;
                    let placement = if parts.len() == 1 {
                        HostPlacement::Whole
                    } else {
                        HostPlacement::Split(shape)
                    };
                    Ok(Tensor {
                        st: Storage::Host(HostStore {
                            parts,
                            placement,
                            layout: t.spec().layout,
                        }),
                        int32: self.int32,
                    })
                } else {
                    let reads = chip_work(py, || t.to_host_async(cq))?;
                    Ok(Tensor {
                        st: Storage::Pending(PendingStore {
                            spec: t.spec().clone(),
                            mesh_shape: shape,
                            state: Mutex::new(Pending::Waiting(reads)),
                        }),
                        int32: self.int32,
                    })
                }
            }
            Storage::Shard(t, s, i) => {
                s.live("cpu")?;
                let part = chip_work(py, || t.shards()[*i].to_host(cq))?;
                Ok(Tensor {
                    st: Storage::Host(HostStore {
                        parts: vec![part],
                        placement: HostPlacement::Whole,
                        layout: t.spec().layout,
                    }),
                    int32: self.int32,
                })
            }
            Storage::Host(_) | Storage::Pending(_) => {
                let (parts, placement) = self.host_parts(py)?.expect("a host tensor");
                let (_, _, layout, _) = self.spec_fields();
                Ok(Tensor {
                    st: Storage::Host(HostStore {
                        parts: parts.as_ref().clone(),
                        placement,
                        layout,
                    }),
                    int32: self.int32,
                })
            }
        }
    }
    /// TT-NN's `tensor.to(device, memory_config=None, cq_id=0)`.
    #[pyo3(signature = (device, memory_config = None, cq_id = 0))]
    fn to(
        &self,
        py: Python<'_>,
        device: &Bound<'_, Device>,
        memory_config: Option<&Bound<'_, PyAny>>,
        cq_id: u8,
    ) -> PyResult<Tensor> {
        to_device(py, self, device, memory_config, cq_id)
    }
    /// `tensor.to_torch(mesh_composer=None)`: as `ttnn.to_torch(tensor, ...)`.
    #[pyo3(signature = (mesh_composer = None))]
    fn to_torch(
        slf: &Bound<'_, Self>,
        mesh_composer: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let kwargs = pyo3::types::PyDict::new(slf.py());
        kwargs.set_item("mesh_composer", mesh_composer)?;
        let f = slf.py().import("ttmesh.ttnn")?.getattr("to_torch")?;
        Ok(f.call((slf,), Some(&kwargs))?.unbind())
    }
    fn __repr__(&self) -> String {
        let (shape, dtype, layout, mc) = self.spec_fields();
        let place = match &self.st {
            Storage::Device(_, s) => s.label(),
            Storage::Shard(_, s, i) => format!("device {i} of {}", s.label()),
            Storage::Pending(_) => "host (read pending)".into(),
            Storage::Host(_) => "host".into(),
        };
        format!(
            "ttnn.Tensor(shape=Shape({shape:?}), dtype=DataType.{:?}, layout=Layout.{:?}, memory={:?}/{:?}, on {place})",
            DataType::of(dtype, self.int32),
            Layout::of(layout),
            mc.buffer_type,
            mc.memory_layout
        )
    }
    fn __add__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        crate::ops::operator(slf, "add", other, false)
    }
    fn __sub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        crate::ops::operator(slf, "sub", other, false)
    }
    fn __mul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        crate::ops::operator(slf, "mul", other, false)
    }
    fn __radd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        crate::ops::operator(slf, "add", other, true)
    }
    fn __rsub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        crate::ops::operator(slf, "sub", other, true)
    }
    fn __rmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        crate::ops::operator(slf, "mul", other, true)
    }
    fn __matmul__(&self, py: Python<'_>, other: &Bound<'_, Tensor>) -> PyResult<Tensor> {
        crate::ops::matmul_of(py, self, other.get(), None, None, None, None, None, 0)
    }
    fn __neg__(&self, py: Python<'_>) -> PyResult<Tensor> {
        crate::ops::unary_of(py, "neg", self, None, None, 0)
    }
}

/// Host data from Python into a tensor: on the host (`device` None; with a mapper, split for
/// a mesh of `mapper_mesh`'s shape) or written to `device`.
#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (data, shape, kind, dtype, layout, device, memory_config, mapper, mapper_mesh, cq_id))]
pub fn from_host_data(
    py: Python<'_>,
    data: &Bound<'_, PyBytes>,
    shape: Vec<usize>,
    kind: &str,
    dtype: DataType,
    layout: Layout,
    device: Option<&Bound<'_, Device>>,
    memory_config: Option<&Bound<'_, PyAny>>,
    mapper: Option<&Bound<'_, PyAny>>,
    mapper_mesh: Option<&Bound<'_, Device>>,
    cq_id: u8,
) -> PyResult<Tensor> {
    let rank = shape.len();
    let host = host_from_bytes(data.as_bytes(), shape, kind, dtype)?;
    let mapper = mapper.map(|m| parse_mapper(m, rank)).transpose()?;
    let int32 = dtype == DataType::INT32;
    match device {
        Some(device) => {
            let state = device.get().state.clone();
            let mesh = state.live("from_torch(device)")?.clone();
            let mc = opt_memory_config("memory_config", memory_config)?.unwrap_or_default();
            let mapper = mapper.unwrap_or(Mapper::Replicate);
            let t = chip_work(py, || {
                MeshTensor::from_host(&host, &mesh, &mapper, layout.chip(), mc, CqId(cq_id))
            })?;
            Ok(Tensor::on_device(t, &state, int32))
        }
        None => {
            let (parts, placement) =
                match (mapper, mapper_mesh) {
                    (None, _) => (vec![host], HostPlacement::Whole),
                    (Some(_), None) => return Err(value_error(
                        "from_torch: a mesh_mapper without a device needs the mapper's mesh_device",
                    )),
                    (Some(m), Some(d)) => {
                        let s = d.get().state.mesh.shape();
                        match m {
                            Mapper::Replicate => (vec![host], HostPlacement::Replicated(s)),
                            m => (
                                m.map(&host, s)
                                    .map_err(|e| value_error(crate::errors::chain_text(&e)))?,
                                HostPlacement::Split(s),
                            ),
                        }
                    }
                };
            Ok(Tensor {
                st: Storage::Host(HostStore {
                    parts,
                    placement,
                    layout: layout.chip(),
                }),
                int32,
            })
        }
    }
}

/// The mapper that writes a host tensor's parts as they were placed.
fn placement_mapper(
    parts: &[HostTensor],
    placement: &HostPlacement,
    mesh: RShape,
    what: &str,
) -> PyResult<Mapper> {
    match placement {
        HostPlacement::Whole | HostPlacement::Replicated(_) => Ok(Mapper::Replicate),
        HostPlacement::Split(s) if *s == mesh => Ok(Mapper::Parts(parts.to_vec())),
        HostPlacement::Split(s) => Err(value_error(format!(
            "{what}: the host tensor was split for a {s} mesh; this device is {mesh}: map it again with a mapper of this mesh"
        ))),
    }
}

/// TT-NN's `to_device(tensor, device, memory_config=None, cq_id=0)`.
pub fn to_device(
    py: Python<'_>,
    t: &Tensor,
    device: &Bound<'_, Device>,
    memory_config: Option<&Bound<'_, PyAny>>,
    cq_id: u8,
) -> PyResult<Tensor> {
    let state = device.get().state.clone();
    let mesh = state.live("to_device")?.clone();
    let mc = opt_memory_config("memory_config", memory_config)?;
    let Some((parts, placement)) = t.host_parts(py)? else {
        // Already on a device: TT-NN returns it (on another mesh: an error).
        let (mt, s) = t.device_tensor("to_device(tensor)")?;
        if !Arc::ptr_eq(s, &state) {
            return Err(value_error(format!(
                "to_device: the tensor is on {}, not on {}; read it with ttnn.from_device first",
                s.label(),
                state.label()
            )));
        }
        return match mc {
            Some(mc) if mc != mt.spec().memory_config => {
                let mt = mt.clone();
                let out = chip_work(py, move || {
                    ttmesh::ops::to_memory_config(&mt, &mc, &Default::default())
                })?;
                Ok(Tensor::on_device(out, &state, t.int32))
            }
            _ => Ok(Tensor::on_device(mt.clone(), &state, t.int32)),
        };
    };
    let (_, _, layout, _) = t.spec_fields();
    let mapper = placement_mapper(&parts, &placement, mesh.shape(), "to_device")?;
    let out = chip_work(py, || {
        MeshTensor::from_host(
            &parts[0],
            &mesh,
            &mapper,
            layout,
            mc.unwrap_or_default(),
            CqId(cq_id),
        )
    })?;
    Ok(Tensor::on_device(out, &state, t.int32))
}

#[pyfunction]
#[pyo3(name = "to_device", signature = (tensor, device, memory_config = None, cq_id = 0))]
pub fn py_to_device(
    py: Python<'_>,
    tensor: &Bound<'_, Tensor>,
    device: &Bound<'_, Device>,
    memory_config: Option<&Bound<'_, PyAny>>,
    cq_id: u8,
) -> PyResult<Tensor> {
    to_device(py, tensor.get(), device, memory_config, cq_id)
}

/// The values of any tensor as `(bytes, shape, kind)`, composed with `composer` when it has one
/// part per chip.
#[pyfunction]
#[pyo3(signature = (tensor, composer, cq_id))]
pub fn read_data<'py>(
    py: Python<'py>,
    tensor: &Bound<'py, Tensor>,
    composer: Option<&Bound<'py, PyAny>>,
    cq_id: u8,
) -> PyResult<(Bound<'py, PyByteArray>, Vec<usize>, &'static str)> {
    let t = tensor.get();
    let rank = t.spec_fields().0.len();
    let composer = composer.map(|c| parse_composer(c, rank)).transpose()?;
    let cq = CqId(cq_id);
    let need_composer = |n: usize| {
        value_error(format!(
            "to_torch: the tensor has one part on each of {n} devices; pass mesh_composer=ttnn.ConcatMeshToTensor(mesh_device, dim=0) (or another composer), or read one device's part from ttnn.get_device_tensors(tensor)"
        ))
    };
    let host: HostTensor = match &t.st {
        Storage::Device(mt, s) => {
            s.live("to_torch")?;
            let shape = mt.mesh().shape();
            match composer {
                Some(c) => chip_work(py, || {
                    let parts = mt.to_host_shards(cq)?;
                    c.compose(parts, shape)
                })?,
                None if shape.num_devices() == 1 => {
                    chip_work(py, || mt.to_host_shards(cq))?.remove(0)
                }
                None => return Err(need_composer(shape.num_devices())),
            }
        }
        Storage::Shard(mt, s, i) => {
            s.live("to_torch")?;
            chip_work(py, || mt.shards()[*i].to_host(cq))?
        }
        Storage::Host(_) | Storage::Pending(_) => {
            let (parts, placement) = t.host_parts(py)?.expect("a host tensor");
            match (composer, &placement) {
                (_, HostPlacement::Whole) => parts[0].clone(),
                (None, HostPlacement::Replicated(_)) => parts[0].clone(),
                (Some(c), HostPlacement::Replicated(s)) => c
                    .compose(vec![parts[0].clone(); s.num_devices()], *s)
                    .map_err(|e| runtime(&e))?,
                (Some(c), HostPlacement::Split(s)) => c
                    .compose(parts.as_ref().clone(), *s)
                    .map_err(|e| runtime(&e))?,
                (None, HostPlacement::Split(s)) => return Err(need_composer(s.num_devices())),
            }
        }
    };
    let (bytes, kind) = host_bytes(py, &host)?;
    Ok((bytes, host.shape, kind))
}

/// TT-NN's `get_device_tensors(tensor)`: each device's tensor, in mesh order.
#[pyfunction]
pub fn get_device_tensors(py: Python<'_>, tensor: &Bound<'_, Tensor>) -> PyResult<Vec<Tensor>> {
    let t = tensor.get();
    match &t.st {
        Storage::Device(mt, s) => Ok((0..mt.shards().len())
            .map(|i| Tensor {
                st: Storage::Shard(mt.clone(), s.clone(), i),
                int32: t.int32,
            })
            .collect()),
        Storage::Shard(..) => Err(value_error(
            "get_device_tensors: the tensor is already one device's tensor",
        )),
        Storage::Host(_) | Storage::Pending(_) => {
            let (parts, _) = t.host_parts(py)?.expect("a host tensor");
            let (_, _, layout, _) = t.spec_fields();
            Ok(parts
                .iter()
                .map(|p| Tensor {
                    st: Storage::Host(HostStore {
                        parts: vec![p.clone()],
                        placement: HostPlacement::Whole,
                        layout,
                    }),
                    int32: t.int32,
                })
                .collect())
        }
    }
}

/// TT-NN's `allocate_tensor_on_device(spec, device)`: a tensor with no values written, at the
/// address the allocator gives (what traces need for their inputs).
#[pyfunction]
pub fn allocate_tensor_on_device(
    py: Python<'_>,
    spec: &Bound<'_, TensorSpec>,
    device: &Bound<'_, Device>,
) -> PyResult<Tensor> {
    let state = device.get().state.clone();
    let mesh = state.live("allocate_tensor_on_device")?.clone();
    let s = spec.get();
    let rspec = s.spec.clone();
    let t = chip_work(py, move || ttmesh::allocate_tensor_on_device(&rspec, &mesh))?;
    Ok(Tensor::on_device(t, &state, s.int32))
}

/// TT-NN's `copy_host_to_device_tensor(host_tensor, device_tensor, cq_id=0)`.
#[pyfunction]
#[pyo3(signature = (host_tensor, device_tensor, cq_id = 0))]
pub fn copy_host_to_device_tensor(
    py: Python<'_>,
    host_tensor: &Bound<'_, Tensor>,
    device_tensor: &Bound<'_, Tensor>,
    cq_id: u8,
) -> PyResult<()> {
    let (dst, state) = device_tensor
        .get()
        .device_tensor("copy_host_to_device_tensor(device_tensor)")?;
    let Some((parts, placement)) = host_tensor.get().host_parts(py)? else {
        return Err(value_error(
            "copy_host_to_device_tensor: host_tensor is on a device; pass a host tensor (ttnn.from_torch(...) without device=, or tensor.cpu())",
        ));
    };
    let (hs, hd, _, _) = host_tensor.get().spec_fields();
    let spec = dst.spec();
    if hs != spec.shape || hd != spec.dtype {
        return Err(value_error(format!(
            "copy_host_to_device_tensor: host_tensor is {hs:?} {hd}, device_tensor is {:?} {}; they must match (make the host tensor with the device tensor's shape and dtype)",
            spec.shape, spec.dtype
        )));
    }
    let mapper = placement_mapper(
        &parts,
        &placement,
        state.mesh.shape(),
        "copy_host_to_device_tensor",
    )?;
    chip_work(py, || {
        ttmesh::copy_host_to_device_tensor(&parts[0], dst, &mapper, CqId(cq_id))
    })
}
