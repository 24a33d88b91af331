//! TT-NN's memory descriptions: `CoreCoord`, `CoreRange`, `CoreRangeSet`, `CoreGrid`,
//! `ShardSpec`, `MemoryConfig` and `create_sharded_memory_config`.

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::enums::{BufferType, ShardOrientation, ShardStrategy, TensorMemoryLayout};
use crate::errors::{runtime, type_error};

/// `ttnn.CoreCoord(x, y)`.
#[pyclass(module = "ttnn", frozen, eq, hash)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoreCoord {
    #[pyo3(get)]
    pub x: u32,
    #[pyo3(get)]
    pub y: u32,
}

#[pymethods]
impl CoreCoord {
    #[new]
    fn new(x: u32, y: u32) -> Self {
        CoreCoord { x, y }
    }
    fn __repr__(&self) -> String {
        format!("(x={},y={})", self.x, self.y)
    }
}

/// `ttnn.CoreRange(start, end)`: an inclusive rectangle of cores.
#[pyclass(module = "ttnn", frozen, eq, hash)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoreRange {
    #[pyo3(get)]
    pub start: CoreCoord,
    #[pyo3(get)]
    pub end: CoreCoord,
}

#[pymethods]
impl CoreRange {
    #[new]
    fn new(start: &Bound<'_, CoreCoord>, end: &Bound<'_, CoreCoord>) -> Self {
        CoreRange {
            start: *start.get(),
            end: *end.get(),
        }
    }
    fn __repr__(&self) -> String {
        format!(
            "CoreRange(start={}, end={})",
            self.start.__repr__(),
            self.end.__repr__()
        )
    }
    fn num_cores(&self) -> u32 {
        (self.end.x + 1).saturating_sub(self.start.x)
            * (self.end.y + 1).saturating_sub(self.start.y)
    }
}

impl CoreRange {
    fn chip(&self) -> ttmesh::CoreRange {
        ttmesh::CoreRange::new((self.start.x, self.start.y), (self.end.x, self.end.y))
    }
    fn of(r: &ttmesh::CoreRange) -> CoreRange {
        CoreRange {
            start: CoreCoord {
                x: r.start.0,
                y: r.start.1,
            },
            end: CoreCoord {
                x: r.end.0,
                y: r.end.1,
            },
        }
    }
}

/// `ttnn.CoreRangeSet({CoreRange, ...})`.
#[pyclass(module = "ttnn", frozen, eq)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreRangeSet {
    pub ranges: Vec<CoreRange>,
}

#[pymethods]
impl CoreRangeSet {
    #[new]
    fn new(ranges: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut out = Vec::new();
        if let Ok(r) = ranges.cast::<CoreRange>() {
            out.push(*r.get());
        } else {
            for item in ranges.try_iter()? {
                let item = item?;
                let r = item.cast::<CoreRange>().map_err(|_| {
                    type_error("CoreRangeSet(ranges): every item must be a ttnn.CoreRange")
                })?;
                out.push(*r.get());
            }
        }
        // A set in Python has no order; cores are numbered by range start.
        out.sort_by_key(|r| (r.start.y, r.start.x));
        Ok(CoreRangeSet { ranges: out })
    }
    fn ranges(&self) -> Vec<CoreRange> {
        self.ranges.clone()
    }
    fn num_cores(&self) -> u32 {
        self.ranges.iter().map(|r| r.num_cores()).sum()
    }
    fn __repr__(&self) -> String {
        let parts: Vec<String> = self.ranges.iter().map(|r| r.__repr__()).collect();
        format!("CoreRangeSet({{{}}})", parts.join(", "))
    }
}

/// `ttnn.CoreGrid(y=, x=)`: `x` columns by `y` rows from core (0, 0).
#[pyclass(module = "ttnn", frozen, eq, hash)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoreGrid {
    #[pyo3(get)]
    pub x: u32,
    #[pyo3(get)]
    pub y: u32,
}

#[pymethods]
impl CoreGrid {
    #[new]
    #[pyo3(signature = (y, x))]
    fn new(y: u32, x: u32) -> Self {
        CoreGrid { x, y }
    }
    #[getter]
    fn num_cores(&self) -> u32 {
        self.x * self.y
    }
    fn __repr__(&self) -> String {
        format!("ttnn.CoreGrid(x={}, y={})", self.x, self.y)
    }
}

/// `ttnn.ShardSpec(grid, shard_shape, shard_orientation)`.
#[pyclass(module = "ttnn", frozen, eq)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSpec {
    #[pyo3(get)]
    pub grid: CoreRangeSet,
    #[pyo3(get)]
    pub shape: [usize; 2],
    #[pyo3(get)]
    pub orientation: ShardOrientation,
}

#[pymethods]
impl ShardSpec {
    #[new]
    #[pyo3(signature = (grid, shard_shape, shard_orientation = ShardOrientation::ROW_MAJOR))]
    fn new(
        grid: &Bound<'_, CoreRangeSet>,
        shard_shape: [usize; 2],
        shard_orientation: ShardOrientation,
    ) -> Self {
        ShardSpec {
            grid: grid.get().clone(),
            shape: shard_shape,
            orientation: shard_orientation,
        }
    }
    fn num_cores(&self) -> u32 {
        self.grid.num_cores()
    }
    fn __repr__(&self) -> String {
        format!(
            "ShardSpec(grid={}, shape={:?}, orientation=ShardOrientation.{:?})",
            self.grid.__repr__(),
            self.shape,
            self.orientation
        )
    }
}

impl ShardSpec {
    fn chip(&self) -> ttmesh::ShardSpec {
        ttmesh::ShardSpec {
            grid: self.grid.ranges.iter().map(CoreRange::chip).collect(),
            shape: self.shape,
            orientation: self.orientation.chip(),
        }
    }
}

/// `ttnn.MemoryConfig(memory_layout, buffer_type, shard_spec)`.
#[pyclass(module = "ttnn", frozen, eq)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryConfig {
    #[pyo3(get)]
    pub memory_layout: TensorMemoryLayout,
    #[pyo3(get)]
    pub buffer_type: BufferType,
    #[pyo3(get)]
    pub shard_spec: Option<ShardSpec>,
}

#[pymethods]
impl MemoryConfig {
    #[new]
    #[pyo3(signature = (memory_layout = TensorMemoryLayout::INTERLEAVED, buffer_type = BufferType::DRAM, shard_spec = None))]
    fn new(
        memory_layout: TensorMemoryLayout,
        buffer_type: BufferType,
        shard_spec: Option<&Bound<'_, ShardSpec>>,
    ) -> Self {
        MemoryConfig {
            memory_layout,
            buffer_type,
            shard_spec: shard_spec.map(|s| s.get().clone()),
        }
    }
    fn is_sharded(&self) -> bool {
        self.memory_layout != TensorMemoryLayout::INTERLEAVED
    }
    fn __repr__(&self) -> String {
        format!(
            "MemoryConfig(memory_layout=TensorMemoryLayout.{:?},buffer_type=BufferType.{:?},shard_spec={})",
            self.memory_layout,
            self.buffer_type,
            self.shard_spec
                .as_ref()
                .map_or("std::nullopt".to_string(), |s| s.__repr__())
        )
    }
}

impl MemoryConfig {
    pub fn chip(&self) -> ttmesh::MemoryConfig {
        ttmesh::MemoryConfig {
            memory_layout: self.memory_layout.chip(),
            buffer_type: self.buffer_type.chip(),
            shard_spec: self.shard_spec.as_ref().map(ShardSpec::chip),
        }
    }
    pub fn of(m: &ttmesh::MemoryConfig) -> MemoryConfig {
        MemoryConfig {
            memory_layout: TensorMemoryLayout::of(m.memory_layout),
            buffer_type: BufferType::of(m.buffer_type),
            shard_spec: m.shard_spec.as_ref().map(|s| ShardSpec {
                grid: CoreRangeSet {
                    ranges: s.grid.iter().map(CoreRange::of).collect(),
                },
                shape: s.shape,
                orientation: ShardOrientation::of(s.orientation),
            }),
        }
    }
}

/// An optional `memory_config=` argument, checked with the argument's name in the error.
pub fn opt_memory_config(
    arg: &str,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<ttmesh::MemoryConfig>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v
            .cast::<MemoryConfig>()
            .map(|m| Some(m.get().chip()))
            .map_err(|_| {
                type_error(format!(
                    "{arg} must be a ttnn.MemoryConfig (e.g. ttnn.DRAM_MEMORY_CONFIG or ttnn.L1_MEMORY_CONFIG), not {}",
                    type_name(v)
                ))
            }),
    }
}

pub fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// TT-NN's `create_sharded_memory_config(shape, core_grid, strategy, orientation=None,
/// use_height_and_width_as_shard_shape=False)`.
#[pyfunction]
#[pyo3(signature = (shape, core_grid, strategy, orientation = None, use_height_and_width_as_shard_shape = false))]
pub fn create_sharded_memory_config(
    shape: &Bound<'_, PyAny>,
    core_grid: &Bound<'_, PyAny>,
    strategy: ShardStrategy,
    orientation: Option<ShardOrientation>,
    use_height_and_width_as_shard_shape: bool,
) -> PyResult<MemoryConfig> {
    let dims: Vec<usize> = shape_arg("shape", shape)?;
    let cores: ttmesh::ShardCores = if let Ok(g) = core_grid.cast::<CoreGrid>() {
        ttmesh::CoreGrid::new(g.get().x, g.get().y).into()
    } else if let Ok(s) = core_grid.cast::<CoreRangeSet>() {
        s.get()
            .ranges
            .iter()
            .map(CoreRange::chip)
            .collect::<Vec<_>>()
            .into()
    } else if let Ok(r) = core_grid.cast::<CoreRange>() {
        r.get().chip().into()
    } else {
        return Err(type_error(format!(
            "create_sharded_memory_config: core_grid must be a ttnn.CoreGrid(y=, x=) or a ttnn.CoreRangeSet, not {}",
            type_name(core_grid)
        )));
    };
    let strategy = match strategy {
        ShardStrategy::HEIGHT => ttmesh::ShardStrategy::Height,
        ShardStrategy::WIDTH => ttmesh::ShardStrategy::Width,
        ShardStrategy::BLOCK => ttmesh::ShardStrategy::Block,
    };
    ttmesh::create_sharded_memory_config(
        &dims,
        cores,
        strategy,
        orientation.map(|o| o.chip()),
        use_height_and_width_as_shard_shape,
    )
    .map(|m| MemoryConfig::of(&m))
    .map_err(|e| runtime(&e))
}

/// A shape argument: a `ttnn.Shape`, a tuple or list of ints, or a torch.Size.
pub fn shape_arg(arg: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    if let Ok(s) = v.cast::<crate::tensor::Shape>() {
        return Ok(s.get().dims.clone());
    }
    if v.is_instance_of::<PyTuple>() || v.hasattr("__len__")? {
        if let Ok(dims) = v.extract::<Vec<usize>>() {
            return Ok(dims);
        }
    }
    Err(type_error(format!(
        "{arg} must be a sequence of non-negative ints (a ttnn.Shape, tuple or list), not {}",
        type_name(v)
    )))
}
