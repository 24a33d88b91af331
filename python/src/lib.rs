//! `ttmesh._ttmesh`: the native half of `ttmesh.ttnn`, TT-NN's Python API backed by the
//! emulated mesh. It uses the `ttmesh` crate's public API only (as `bin` does). The Python
//! package (`python/ttmesh/ttnn/`) gives TT-NN's names, keywords and defaults, and converts
//! numpy / torch arrays; everything that touches a chip is here, with the GIL released.

#![forbid(unsafe_code)]

mod device;
mod enums;
mod errors;
mod memory;
mod ops;
mod tensor;

use pyo3::prelude::*;

#[pymodule]
fn _ttmesh(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<enums::DataType>()?;
    m.add_class::<enums::Layout>()?;
    m.add_class::<enums::BufferType>()?;
    m.add_class::<enums::TensorMemoryLayout>()?;
    m.add_class::<enums::ShardStrategy>()?;
    m.add_class::<enums::ShardOrientation>()?;
    m.add_class::<enums::FabricConfig>()?;
    m.add_class::<enums::Topology>()?;
    m.add_class::<enums::RunMode>()?;
    m.add_class::<enums::StorageType>()?;
    m.add_class::<memory::CoreCoord>()?;
    m.add_class::<memory::CoreRange>()?;
    m.add_class::<memory::CoreRangeSet>()?;
    m.add_class::<memory::CoreGrid>()?;
    m.add_class::<memory::ShardSpec>()?;
    m.add_class::<memory::MemoryConfig>()?;
    m.add_function(wrap_pyfunction!(memory::create_sharded_memory_config, m)?)?;
    m.add_class::<device::MeshShape>()?;
    m.add_class::<device::Device>()?;
    m.add_class::<device::Allocator>()?;
    m.add_class::<device::Statistics>()?;
    m.add_class::<device::AllocatorConfig>()?;
    m.add_function(wrap_pyfunction!(device::open_mesh, m)?)?;
    m.add_function(wrap_pyfunction!(device::close_mesh, m)?)?;
    m.add_function(wrap_pyfunction!(device::system_info, m)?)?;
    m.add_function(wrap_pyfunction!(device::synchronize_device, m)?)?;
    m.add_function(wrap_pyfunction!(
        device::get_max_worker_l1_unreserved_size,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(device::get_memory_view, m)?)?;
    m.add_function(wrap_pyfunction!(device::dump_device_memory_state, m)?)?;
    m.add_class::<tensor::Shape>()?;
    m.add_class::<tensor::TensorSpec>()?;
    m.add_class::<tensor::Tensor>()?;
    m.add_function(wrap_pyfunction!(tensor::from_host_data, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::py_to_device, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::read_data, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::get_device_tensors, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::allocate_tensor_on_device, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::copy_host_to_device_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(ops::unary, m)?)?;
    m.add_function(wrap_pyfunction!(ops::binary, m)?)?;
    m.add_function(wrap_pyfunction!(ops::matmul, m)?)?;
    Ok(())
}
