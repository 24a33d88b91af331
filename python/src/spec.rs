//! `ttnn.Shape` and `ttnn.TensorSpec`: a tensor's dims and its full spec as Python sees them,
//! converted to and from the library's `TensorSpec`.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use ttmesh::TensorSpec as RSpec;

use crate::enums::{DataType, Layout};
use crate::memory::{opt_memory_config, shape_arg, MemoryConfig};

/// `ttnn.Shape([...])`: a tensor's dims, usable as a sequence.
#[pyclass(module = "ttnn", frozen, from_py_object)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub dims: Vec<usize>,
}

#[pymethods]
impl Shape {
    #[new]
    fn new(dims: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Shape {
            dims: shape_arg("Shape(dims)", dims)?,
        })
    }
    #[getter]
    fn rank(&self) -> usize {
        self.dims.len()
    }
    fn __len__(&self) -> usize {
        self.dims.len()
    }
    fn __getitem__(&self, py: Python<'_>, i: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        if let Ok(i) = i.extract::<isize>() {
            let n = self.dims.len() as isize;
            let k = if i < 0 { i + n } else { i };
            if k < 0 || k >= n {
                return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                    "Shape index {i} is out of range for rank {n}"
                )));
            }
            return Ok(self.dims[k as usize].into_pyobject(py)?.into_any().unbind());
        }
        // A slice: as a tuple of ints.
        let t = PyTuple::new(py, &self.dims)?;
        Ok(t.as_any().get_item(i)?.unbind())
    }
    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(PyTuple::new(py, &self.dims)?
            .try_iter()?
            .into_any()
            .unbind())
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        if let Ok(s) = other.cast::<Shape>() {
            return s.get().dims == self.dims;
        }
        other
            .extract::<Vec<usize>>()
            .map(|d| d == self.dims)
            .unwrap_or(false)
    }
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        PyTuple::new(py, &self.dims)?.hash()
    }
    fn volume(&self) -> usize {
        self.dims.iter().product()
    }
    fn __repr__(&self) -> String {
        format!("Shape({:?})", self.dims)
    }
}

/// `ttnn.TensorSpec(shape, dtype, layout, memory_config=DRAM, buffer_type=None)`.
#[pyclass(module = "ttnn", frozen, eq, from_py_object)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub spec: RSpec,
    pub int32: bool,
}

#[pymethods]
impl TensorSpec {
    #[new]
    #[pyo3(signature = (shape, dtype, layout, memory_config = None, buffer_type = None))]
    fn new(
        shape: &Bound<'_, PyAny>,
        dtype: DataType,
        layout: Layout,
        memory_config: Option<&Bound<'_, PyAny>>,
        buffer_type: Option<crate::enums::BufferType>,
    ) -> PyResult<Self> {
        let mut mc =
            opt_memory_config("TensorSpec(memory_config)", memory_config)?.unwrap_or_default();
        if let Some(b) = buffer_type {
            mc.buffer_type = b.chip();
        }
        Ok(TensorSpec {
            spec: RSpec::new(
                shape_arg("TensorSpec(shape)", shape)?,
                dtype.chip(),
                layout.chip(),
                mc,
            ),
            int32: dtype == DataType::INT32,
        })
    }
    #[getter]
    fn shape(&self) -> Shape {
        Shape {
            dims: self.spec.shape.clone(),
        }
    }
    #[getter]
    fn padded_shape(&self) -> Shape {
        Shape {
            dims: self.spec.padded_shape(),
        }
    }
    #[getter]
    fn dtype(&self) -> DataType {
        DataType::of(self.spec.dtype, self.int32)
    }
    #[getter]
    fn layout(&self) -> Layout {
        Layout::of(self.spec.layout)
    }
    #[getter]
    fn memory_config(&self) -> MemoryConfig {
        MemoryConfig::of(&self.spec.memory_config)
    }
    fn __repr__(&self) -> String {
        format!("TensorSpec({})", self.spec)
    }
}
