//! Tensors: specs and page arithmetic, host tensors and their page codec, device tensors.

mod device;
mod host;
mod shard_config;
mod spec;

pub use device::{
    allocate_tensor_on_device, copy_host_to_device_tensor, Blocking, PendingTensorRead, Tensor,
};
pub use host::{decode_floats, decode_pages, encode_pages, HostData, HostTensor};
pub use shard_config::{create_sharded_memory_config, CoreGrid, ShardCores, ShardStrategy};
pub use spec::{
    CoreRange, DataType, Layout, MemoryConfig, PageGrid, ShardOrientation, ShardSpec,
    TensorMemoryLayout, TensorPages, TensorSpec, TILE,
};
