//! `ttmesh._ttmesh`: the native half of `ttmesh.ttnn`, TT-NN's Python API backed by the
//! emulated mesh. It uses the `ttmesh` crate's public API only (as `bin` does). The Python
//! package (`python/ttmesh/ttnn/`) gives TT-NN's names, keywords and defaults, and converts
//! numpy / torch arrays; everything that touches a chip is here, with the GIL released.

#![forbid(unsafe_code)]

mod device;
mod enums;
mod errors;
mod graph;
mod mapping;
mod memory;
mod ops;
mod reports;
mod spec;
mod tensor;
mod trace;

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
    m.add_function(wrap_pyfunction!(device::end_of_job, m)?)?;
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
    m.add_function(wrap_pyfunction!(ops::rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(ops::typecast, m)?)?;
    m.add_function(wrap_pyfunction!(ops::to_memory_config, m)?)?;
    m.add_function(wrap_pyfunction!(ops::to_layout, m)?)?;
    m.add_function(wrap_pyfunction!(ops::reshard, m)?)?;
    m.add_function(wrap_pyfunction!(ops::reshape, m)?)?;
    m.add_function(wrap_pyfunction!(ops::slice, m)?)?;
    m.add_function(wrap_pyfunction!(ops::concat, m)?)?;
    m.add_function(wrap_pyfunction!(ops::transpose, m)?)?;
    m.add_function(wrap_pyfunction!(ops::permute, m)?)?;
    m.add_function(wrap_pyfunction!(ops::embedding, m)?)?;
    m.add_function(wrap_pyfunction!(ops::rotary_embedding, m)?)?;
    m.add_function(wrap_pyfunction!(ops::update_cache, m)?)?;
    m.add_function(wrap_pyfunction!(ops::sdpa_decode, m)?)?;
    m.add_function(wrap_pyfunction!(ops::argmax, m)?)?;
    m.add_function(wrap_pyfunction!(ops::collective, m)?)?;
    m.add_class::<trace::MeshTraceId_>()?;
    m.add_class::<trace::Event>()?;
    m.add_function(wrap_pyfunction!(trace::begin_trace_capture, m)?)?;
    m.add_function(wrap_pyfunction!(trace::end_trace_capture, m)?)?;
    m.add_function(wrap_pyfunction!(trace::execute_trace, m)?)?;
    m.add_function(wrap_pyfunction!(trace::release_trace, m)?)?;
    m.add_function(wrap_pyfunction!(trace::create_event, m)?)?;
    m.add_function(wrap_pyfunction!(trace::record_event, m)?)?;
    m.add_function(wrap_pyfunction!(trace::wait_for_event, m)?)?;
    m.add_function(wrap_pyfunction!(trace::event_synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(trace::last_replay, m)?)?;
    m.add_function(wrap_pyfunction!(trace::trace_info, m)?)?;
    m.add_class::<graph::Graph>()?;
    m.add_function(wrap_pyfunction!(graph::begin_graph_capture, m)?)?;
    m.add_function(wrap_pyfunction!(graph::end_graph_capture, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_from_json, m)?)?;
    m.add_function(wrap_pyfunction!(graph::set_stack_traces, m)?)?;
    m.add_function(wrap_pyfunction!(graph::is_stack_trace_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(graph::set_buffer_pages, m)?)?;
    m.add_function(wrap_pyfunction!(graph::is_capturing, m)?)?;
    m.add_function(wrap_pyfunction!(graph::capture_left_open_warning, m)?)?;
    m.add_class::<reports::Profile>()?;
    m.add_function(wrap_pyfunction!(reports::profile_start, m)?)?;
    m.add_function(wrap_pyfunction!(reports::import_report, m)?)?;
    Ok(())
}
