//! Tensors: specs and page arithmetic, host tensors and their page codec, device tensors.

mod device;
mod host;
mod spec;

pub use device::{Blocking, PendingTensorRead, Tensor};
pub use host::{decode_floats, decode_pages, encode_pages, HostData, HostTensor};
pub use spec::{
    CoreRange, DataType, Layout, MemoryConfig, PageGrid, ShardOrientation, ShardSpec,
    TensorMemoryLayout, TensorPages, TensorSpec, TILE,
};
