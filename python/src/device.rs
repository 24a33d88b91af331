//! `ttnn.MeshDevice`: an open mesh (or one device, a 1x1 mesh, as TT-NN's `open_device` gives),
//! with the calls TT-NN offers on it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use ttmesh::{InspectMemory, MeshConfig, MeshDevice as RMesh, MeshShape as RShape};

use crate::enums::{BufferType, FabricConfig};
use crate::errors::{chip_work, runtime, value_error};
use crate::memory::CoreCoord;

/// One open mesh as the Python objects made on it see it. Tensors keep it, so using a tensor
/// after its mesh was closed, or with a tensor of another mesh, is named as such.
pub struct DeviceState {
    pub mesh: RMesh,
    pub open: AtomicBool,
    /// Process-unique, for messages ("mesh #3").
    pub serial: u64,
    /// What TT-NN calls the device ids: the requested id for `open_device`, the chips' ids
    /// for a mesh.
    pub device_ids: Vec<u32>,
}

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

impl DeviceState {
    pub fn label(&self) -> String {
        format!(
            "mesh #{} ({}, {})",
            self.serial,
            self.mesh.shape(),
            self.mesh.cluster().name()
        )
    }

    /// The mesh, or the error TT-NN users need when it was closed.
    pub fn live(&self, what: &str) -> PyResult<&RMesh> {
        if self.open.load(Ordering::Acquire) {
            Ok(&self.mesh)
        } else {
            Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "{what}: {} was closed (ttnn.close_device / close_mesh_device); open a device again and create the tensors on it",
                self.label()
            )))
        }
    }
}

/// `ttnn.MeshShape(rows, cols)`.
#[pyclass(module = "ttnn", frozen, eq, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MeshShape {
    #[pyo3(get)]
    pub rows: usize,
    #[pyo3(get)]
    pub cols: usize,
}

#[pymethods]
impl MeshShape {
    #[new]
    #[pyo3(signature = (*dims))]
    fn new(dims: Vec<usize>) -> PyResult<Self> {
        match dims[..] {
            [n] => Ok(MeshShape { rows: 1, cols: n }),
            [r, c] => Ok(MeshShape { rows: r, cols: c }),
            _ => Err(value_error(format!(
                "MeshShape takes (rows, cols) or (num_devices,); got {} values: {dims:?}",
                dims.len()
            ))),
        }
    }
    fn __len__(&self) -> usize {
        2
    }
    fn __getitem__(&self, i: isize) -> PyResult<usize> {
        match i {
            0 | -2 => Ok(self.rows),
            1 | -1 => Ok(self.cols),
            _ => Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "MeshShape index {i} is out of range: a mesh shape has 2 dims (rows, cols)"
            ))),
        }
    }
    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let list = pyo3::types::PyList::new(py, [self.rows, self.cols])?;
        Ok(list.try_iter()?.into_any().unbind())
    }
    fn mesh_size(&self) -> usize {
        self.rows * self.cols
    }
    fn dims(&self) -> usize {
        2
    }
    fn __repr__(&self) -> String {
        format!("MeshShape([{}, {}])", self.rows, self.cols)
    }
}

/// `ttnn.MeshDevice` (also what `open_device` returns, a 1x1 mesh).
#[pyclass(module = "ttnn", frozen, name = "MeshDevice")]
pub struct Device {
    pub state: Arc<DeviceState>,
}

/// What `ttnn.open_mesh_device` and `ttnn.open_device` pass down.
#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (topology, mesh_shape, l1_small_size, trace_region_size, num_command_queues, worker_l1_size, fabric_config, device_id = None))]
pub fn open_mesh(
    py: Python<'_>,
    topology: String,
    mesh_shape: Option<MeshShape>,
    l1_small_size: u64,
    trace_region_size: u64,
    num_command_queues: u8,
    worker_l1_size: u64,
    fabric_config: FabricConfig,
    device_id: Option<u32>,
) -> PyResult<Device> {
    let config = MeshConfig {
        topology,
        mesh_shape: mesh_shape.map(|s| RShape::new(s.rows, s.cols)),
        trace_region_size,
        l1_small_size,
        worker_l1_size: (worker_l1_size > 0).then_some(worker_l1_size),
        num_command_queues,
        fabric_config: fabric_config.chip()?,
        ..Default::default()
    };
    let mesh = chip_work(py, move || RMesh::open(config))?;
    let device_ids = match device_id {
        Some(id) => vec![id],
        None => mesh.chips().iter().map(|c| c.id()).collect(),
    };
    Ok(Device {
        state: Arc::new(DeviceState {
            mesh,
            open: AtomicBool::new(true),
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            device_ids,
        }),
    })
}

/// `(arch name, rows, cols, chips)` of a topology, without opening it.
#[pyfunction]
pub fn system_info(topology: &str) -> PyResult<(String, usize, usize, usize)> {
    let c = ttmesh_topologies::load(topology).map_err(|e| runtime(&e))?;
    let (rows, cols) = c.mesh_shape();
    let arch = match c.arch() {
        ttmesh_topologies::ArchName::WormholeB0 => "wormhole_b0",
        ttmesh_topologies::ArchName::Blackhole => "blackhole",
    };
    Ok((arch.into(), rows, cols, c.num_chips()))
}

/// Ends this process's part of an MPI job (under `mpirun`; nothing otherwise), as a Rust
/// program's last call: `error` None finalises MPI once every rank got here, an error ends
/// the whole job at once (`MPI_Abort`, so mpirun exits non-zero). `ttmesh/__init__.py` calls
/// it at exit and from its exception hook.
#[pyfunction]
#[pyo3(signature = (error=None))]
pub fn end_of_job(py: Python<'_>, error: Option<String>) {
    let result = error.map_or(Ok(()), Err);
    py.detach(|| ttmesh::ranks::end_of_job(&result));
}

/// `allocator.get_statistics(buffer_type)`'s answer (per bank, as tt-metal's).
#[pyclass(module = "ttnn", frozen, get_all)]
pub struct Statistics {
    total_allocatable_size_bytes: u64,
    total_allocated_bytes: u64,
    total_free_bytes: u64,
    largest_free_block_bytes: u64,
    largest_free_block_addrs: Vec<u64>,
}

#[pymethods]
impl Statistics {
    fn __repr__(&self) -> String {
        format!(
            "Statistics(total_allocatable_size_bytes={}, total_allocated_bytes={}, total_free_bytes={}, largest_free_block_bytes={})",
            self.total_allocatable_size_bytes,
            self.total_allocated_bytes,
            self.total_free_bytes,
            self.largest_free_block_bytes
        )
    }
}

/// `allocator.get_config()`'s answer: the sizes the device was opened with.
#[pyclass(module = "ttnn", frozen, get_all)]
pub struct AllocatorConfig {
    trace_region_size: u64,
    l1_small_size: u64,
    worker_l1_size: u64,
    num_dram_channels: u64,
    dram_bank_size: u64,
    l1_bank_size: u64,
}

/// `device.allocator()`: statistics of the device (the tightest chip of a mesh).
#[pyclass(module = "ttnn", frozen)]
pub struct Allocator {
    state: Arc<DeviceState>,
}

#[pymethods]
impl Allocator {
    fn get_statistics(&self, py: Python<'_>, buffer_type: BufferType) -> PyResult<Statistics> {
        let mesh = self.state.live("allocator.get_statistics")?.clone();
        let view = chip_work(py, move || mesh.memory_view(buffer_type.chip()))?;
        let base = {
            let mesh = self.state.mesh.clone();
            chip_work(py, move || mesh.region_base(buffer_type.chip())).unwrap_or(0)
        };
        // The largest free block's address: the block table's offsets from the region base.
        let addrs = view
            .block_table
            .iter()
            .filter(|b| {
                !b.allocated && b.size == view.largest_contiguous_bytes_free_per_bank && b.size > 0
            })
            .map(|b| base + b.address)
            .collect();
        Ok(Statistics {
            total_allocatable_size_bytes: view.total_bytes_per_bank,
            total_allocated_bytes: view.total_bytes_allocated_per_bank,
            total_free_bytes: view.total_bytes_free_per_bank,
            largest_free_block_bytes: view.largest_contiguous_bytes_free_per_bank,
            largest_free_block_addrs: addrs,
        })
    }
    fn get_config(&self) -> AllocatorConfig {
        let c = self.state.mesh.config();
        let arch = self.state.mesh.arch();
        AllocatorConfig {
            trace_region_size: c.trace_region_size,
            l1_small_size: c.l1_small_size,
            worker_l1_size: c
                .worker_l1_size
                .unwrap_or(arch.l1_size_per_core - arch.l1_reserved_base),
            num_dram_channels: arch.num_dram_banks as u64,
            dram_bank_size: arch.dram_bank_size,
            l1_bank_size: arch.l1_size_per_core,
        }
    }
}

#[pymethods]
impl Device {
    /// Number of chips in the mesh.
    fn get_num_devices(&self) -> usize {
        self.state.mesh.num_devices()
    }
    #[getter]
    fn shape(&self) -> MeshShape {
        let s = self.state.mesh.shape();
        MeshShape {
            rows: s.rows,
            cols: s.cols,
        }
    }
    fn get_device_ids(&self) -> Vec<u32> {
        self.state.device_ids.clone()
    }
    /// The first device's id (TT-NN's `device.id()`).
    fn id(&self) -> u32 {
        self.state.device_ids[0]
    }
    fn arch(&self) -> String {
        self.state.mesh.arch().name.to_string()
    }
    fn compute_with_storage_grid_size(&self) -> CoreCoord {
        let c = ttmesh::compute_with_storage_grid_size(&self.state.mesh);
        CoreCoord { x: c.x, y: c.y }
    }
    fn dram_grid_size(&self) -> CoreCoord {
        let c = ttmesh::dram_grid_size(&self.state.mesh);
        CoreCoord { x: c.x, y: c.y }
    }
    fn allocator(&self) -> Allocator {
        Allocator {
            state: self.state.clone(),
        }
    }
    /// Bytes of live traces on the device (the largest chip's; every chip holds the same).
    fn get_trace_buffers_size(&self) -> u64 {
        self.state
            .mesh
            .reports()
            .iter()
            .map(|r| r.trace_allocated)
            .max()
            .unwrap_or(0)
    }
    /// TT-NN's program cache is always on here (trace capture needs it).
    fn enable_program_cache(&self) {}
    fn disable_and_clear_program_cache(&self) {}
    /// Programs compiled on the first chip (every chip compiles the same).
    fn num_program_cache_entries(&self) -> usize {
        self.state.mesh.chips()[0].program_cache().table().len()
    }
    #[getter]
    fn is_open(&self) -> bool {
        self.state.open.load(Ordering::Acquire)
    }
    /// Per chip: id, (row, col), DRAM / L1 / L1_SMALL / TRACE bytes allocated and capacity.
    fn memory_report<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.state
            .mesh
            .reports()
            .into_iter()
            .map(|r| {
                let d = PyDict::new(py);
                d.set_item("id", r.id)?;
                d.set_item("coord", (r.coord.row, r.coord.col))?;
                d.set_item("dram_allocated", r.dram_allocated)?;
                d.set_item("dram_capacity", r.dram_capacity)?;
                d.set_item("l1_allocated", r.l1_allocated)?;
                d.set_item("l1_capacity", r.l1_capacity)?;
                d.set_item("l1_small_allocated", r.l1_small_allocated)?;
                d.set_item("l1_small_capacity", r.l1_small_capacity)?;
                d.set_item("trace_allocated", r.trace_allocated)?;
                d.set_item("trace_region_size", r.trace_region_size)?;
                d.set_item("live_traces", r.live_traces)?;
                d.set_item("trace_replays", r.trace_replays)?;
                Ok(d)
            })
            .collect()
    }
    /// The shared-memory segment `ttmesh monitor` reads, if publishing.
    fn monitor_segment(&self) -> Option<String> {
        self.state.mesh.monitor_segment()
    }
    fn __repr__(&self) -> String {
        let state = if self.is_open() { "open" } else { "closed" };
        format!(
            "MeshDevice(shape={}, ids={:?}, {}, {state})",
            self.state.mesh.shape(),
            self.state.device_ids,
            self.state.mesh.arch().name
        )
    }
    /// Same object, same mesh (`==` between two handles of one mesh).
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Device>()
            .map(|o| Arc::ptr_eq(&o.get().state, &self.state))
            .unwrap_or(false)
    }
    fn __hash__(&self) -> u64 {
        self.state.serial
    }
}

impl Device {
    pub fn live(&self, what: &str) -> PyResult<&RMesh> {
        self.state.live(what)
    }
}

/// Closes the mesh: waits for its queues, stops its threads and frees its memory. Closing twice
/// is allowed (the second does nothing).
#[pyfunction]
pub fn close_mesh(py: Python<'_>, device: &Bound<'_, Device>) -> PyResult<()> {
    let state = device.get().state.clone();
    if !state.open.swap(false, Ordering::AcqRel) {
        return Ok(());
    }
    let mesh = state.mesh.clone();
    chip_work(py, move || mesh.close())
}

#[pyfunction]
#[pyo3(signature = (device, cq_id = None))]
pub fn synchronize_device(
    py: Python<'_>,
    device: &Bound<'_, Device>,
    cq_id: Option<u8>,
) -> PyResult<()> {
    let mesh = device.get().live("synchronize_device")?.clone();
    chip_work(py, move || match cq_id {
        None => mesh.synchronize_device(),
        Some(cq) => mesh.finish(ttmesh::CqId(cq)),
    })
}

#[pyfunction]
pub fn get_max_worker_l1_unreserved_size(device: &Bound<'_, Device>) -> PyResult<u64> {
    Ok(ttmesh::get_max_worker_l1_unreserved_size(
        device.get().live("get_max_worker_l1_unreserved_size")?,
    ))
}

/// TT-NN's `get_memory_view(device, buffer_type)`: per-bank figures and the block table.
#[pyfunction]
pub fn get_memory_view<'py>(
    py: Python<'py>,
    device: &Bound<'py, Device>,
    buffer_type: BufferType,
) -> PyResult<Bound<'py, PyDict>> {
    let mesh = device.get().live("get_memory_view")?.clone();
    let v = chip_work(py, move || {
        ttmesh::get_memory_view(&mesh, buffer_type.chip())
    })?;
    let d = PyDict::new(py);
    d.set_item("num_banks", v.num_banks)?;
    d.set_item("total_bytes_per_bank", v.total_bytes_per_bank)?;
    d.set_item(
        "total_bytes_allocated_per_bank",
        v.total_bytes_allocated_per_bank,
    )?;
    d.set_item("total_bytes_free_per_bank", v.total_bytes_free_per_bank)?;
    d.set_item(
        "largest_contiguous_bytes_free_per_bank",
        v.largest_contiguous_bytes_free_per_bank,
    )?;
    let table = v
        .block_table
        .iter()
        .map(|b| {
            let row = PyDict::new(py);
            for (k, val) in b.to_ttnn_entry() {
                row.set_item(k, val)?;
            }
            Ok(row)
        })
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("block_table", table)?;
    Ok(d)
}

/// TT-NN's `dump_device_memory_state(device, prefix="")`: writes the memory reports; returns
/// the paths written.
#[pyfunction]
#[pyo3(signature = (device, prefix = String::new()))]
pub fn dump_device_memory_state(
    py: Python<'_>,
    device: &Bound<'_, Device>,
    prefix: String,
) -> PyResult<Vec<String>> {
    let mesh = device.get().live("dump_device_memory_state")?.clone();
    let paths = chip_work(py, move || ttmesh::dump_device_memory_state(&mesh, &prefix))?;
    Ok(paths.into_iter().map(|p| p.display().to_string()).collect())
}
