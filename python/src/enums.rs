//! TT-NN's enums with TT-NN's member names and values, and their ttmesh counterparts.
#![allow(non_camel_case_types, clippy::upper_case_acronyms)]

use pyo3::prelude::*;
use ttmesh::{BufferType as RBuf, DataType as RDt, Layout as RLayout, TensorMemoryLayout as RTml};

/// `ttnn.DataType` (INT32 is held on the chips as UINT32 bits; see `Tensor`).
#[pyclass(eq, eq_int, module = "ttnn", frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    BFLOAT16 = 0,
    FLOAT32 = 1,
    UINT32 = 2,
    BFLOAT8_B = 3,
    BFLOAT4_B = 4,
    INT32 = 7,
}

impl DataType {
    pub fn chip(self) -> RDt {
        match self {
            DataType::BFLOAT16 => RDt::BFloat16,
            DataType::FLOAT32 => RDt::Float32,
            DataType::UINT32 | DataType::INT32 => RDt::UInt32,
            DataType::BFLOAT8_B => RDt::BFloat8B,
            DataType::BFLOAT4_B => RDt::BFloat4B,
        }
    }
    pub fn of(d: RDt, int32: bool) -> DataType {
        match d {
            RDt::BFloat16 => DataType::BFLOAT16,
            RDt::Float32 => DataType::FLOAT32,
            RDt::UInt32 if int32 => DataType::INT32,
            RDt::UInt32 => DataType::UINT32,
            RDt::BFloat8B => DataType::BFLOAT8_B,
            RDt::BFloat4B => DataType::BFLOAT4_B,
        }
    }
}

#[pymethods]
impl DataType {
    fn __str__(&self) -> String {
        format!("DataType.{self:?}")
    }
}

/// `ttnn.Layout`.
#[pyclass(eq, eq_int, module = "ttnn", frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    ROW_MAJOR = 0,
    TILE = 1,
}

impl Layout {
    pub fn chip(self) -> RLayout {
        match self {
            Layout::ROW_MAJOR => RLayout::RowMajor,
            Layout::TILE => RLayout::Tile,
        }
    }
    pub fn of(l: RLayout) -> Layout {
        match l {
            RLayout::RowMajor => Layout::ROW_MAJOR,
            RLayout::Tile => Layout::TILE,
        }
    }
}

#[pymethods]
impl Layout {
    fn __str__(&self) -> String {
        format!("Layout.{self:?}")
    }
}

/// `ttnn.BufferType` (values as tt-metal's).
#[pyclass(eq, eq_int, module = "ttnn", frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferType {
    DRAM = 0,
    L1 = 1,
    SYSTEM_MEMORY = 2,
    L1_SMALL = 3,
    TRACE = 4,
}

impl BufferType {
    pub fn chip(self) -> RBuf {
        match self {
            BufferType::DRAM => RBuf::Dram,
            BufferType::L1 => RBuf::L1,
            BufferType::SYSTEM_MEMORY => RBuf::SystemMemory,
            BufferType::L1_SMALL => RBuf::L1Small,
            BufferType::TRACE => RBuf::Trace,
        }
    }
    pub fn of(b: RBuf) -> BufferType {
        match b {
            RBuf::Dram => BufferType::DRAM,
            RBuf::L1 => BufferType::L1,
            RBuf::SystemMemory => BufferType::SYSTEM_MEMORY,
            RBuf::L1Small => BufferType::L1_SMALL,
            RBuf::Trace => BufferType::TRACE,
        }
    }
}

#[pymethods]
impl BufferType {
    fn __str__(&self) -> String {
        format!("BufferType.{self:?}")
    }
}

/// `ttnn.TensorMemoryLayout`.
#[pyclass(eq, eq_int, module = "ttnn", frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorMemoryLayout {
    INTERLEAVED = 0,
    HEIGHT_SHARDED = 2,
    WIDTH_SHARDED = 3,
    BLOCK_SHARDED = 4,
}

impl TensorMemoryLayout {
    pub fn chip(self) -> RTml {
        match self {
            TensorMemoryLayout::INTERLEAVED => RTml::Interleaved,
            TensorMemoryLayout::HEIGHT_SHARDED => RTml::HeightSharded,
            TensorMemoryLayout::WIDTH_SHARDED => RTml::WidthSharded,
            TensorMemoryLayout::BLOCK_SHARDED => RTml::BlockSharded,
        }
    }
    pub fn of(l: RTml) -> TensorMemoryLayout {
        match l {
            RTml::Interleaved => TensorMemoryLayout::INTERLEAVED,
            RTml::HeightSharded => TensorMemoryLayout::HEIGHT_SHARDED,
            RTml::WidthSharded => TensorMemoryLayout::WIDTH_SHARDED,
            RTml::BlockSharded => TensorMemoryLayout::BLOCK_SHARDED,
        }
    }
}

#[pymethods]
impl TensorMemoryLayout {
    fn __str__(&self) -> String {
        format!("TensorMemoryLayout.{self:?}")
    }
}

/// `ttnn.ShardStrategy`.
#[pyclass(eq, eq_int, module = "ttnn", frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShardStrategy {
    HEIGHT = 0,
    WIDTH = 1,
    BLOCK = 2,
}

/// `ttnn.ShardOrientation`.
#[pyclass(eq, eq_int, module = "ttnn", frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShardOrientation {
    ROW_MAJOR = 0,
    COL_MAJOR = 1,
}

impl ShardOrientation {
    pub fn chip(self) -> ttmesh::ShardOrientation {
        match self {
            ShardOrientation::ROW_MAJOR => ttmesh::ShardOrientation::RowMajor,
            ShardOrientation::COL_MAJOR => ttmesh::ShardOrientation::ColMajor,
        }
    }
    pub fn of(o: ttmesh::ShardOrientation) -> ShardOrientation {
        match o {
            ttmesh::ShardOrientation::RowMajor => ShardOrientation::ROW_MAJOR,
            ttmesh::ShardOrientation::ColMajor => ShardOrientation::COL_MAJOR,
        }
    }
}

/// `ttnn.FabricConfig`, with tt-metal's values (FACTS.md). ttmesh builds DISABLED, FABRIC_1D and
/// FABRIC_1D_RING; the others are refused at open with the reason.
#[pyclass(eq, eq_int, module = "ttnn", frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FabricConfig {
    DISABLED = 0,
    FABRIC_1D_NEIGHBOR_EXCHANGE = 1,
    FABRIC_1D = 2,
    FABRIC_1D_RING = 3,
    FABRIC_2D = 4,
    FABRIC_2D_TORUS_X = 5,
    FABRIC_2D_TORUS_Y = 6,
    FABRIC_2D_TORUS_XY = 7,
    CUSTOM = 8,
}

impl FabricConfig {
    pub fn chip(self) -> PyResult<ttmesh::FabricConfig> {
        match self {
            FabricConfig::DISABLED => Ok(ttmesh::FabricConfig::Disabled),
            FabricConfig::FABRIC_1D => Ok(ttmesh::FabricConfig::Fabric1D),
            FabricConfig::FABRIC_1D_RING => Ok(ttmesh::FabricConfig::Fabric1DRing),
            other => Err(crate::errors::value_error(format!(
                "FabricConfig.{other:?} is not emulated by ttmesh: use FabricConfig.FABRIC_1D (a line; rings use it too) or FabricConfig.FABRIC_1D_RING"
            ))),
        }
    }
}

/// `ttnn.Topology`.
#[pyclass(eq, eq_int, module = "ttnn", frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Topology {
    Ring = 0,
    Linear = 1,
}

/// `ttnn.graph.RunMode`.
#[pyclass(eq, eq_int, module = "ttnn.graph", frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunMode {
    NORMAL = 0,
    NO_DISPATCH = 1,
}

/// `ttnn.StorageType`.
#[pyclass(eq, eq_int, module = "ttnn", frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StorageType {
    HOST = 0,
    DEVICE = 1,
}
