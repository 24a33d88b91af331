//! TT-NN's text for shapes, layouts, memory configs and tensors, as its graph params show them.

use ttmesh_chip::tensor::{TensorMemoryLayout, TensorSpec};
use ttmesh_chip::{Layout, MemoryConfig};

use super::TensorInfo;

pub(crate) fn shape(s: &[usize]) -> String {
    format!(
        "Shape([{}])",
        s.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

pub(crate) fn layout(l: Layout) -> &'static str {
    match l {
        Layout::Tile => "Layout::TILE",
        Layout::RowMajor => "Layout::ROW_MAJOR",
    }
}

fn memory_layout(l: TensorMemoryLayout) -> &'static str {
    match l {
        TensorMemoryLayout::Interleaved => "INTERLEAVED",
        TensorMemoryLayout::HeightSharded => "HEIGHT_SHARDED",
        TensorMemoryLayout::WidthSharded => "WIDTH_SHARDED",
        TensorMemoryLayout::BlockSharded => "BLOCK_SHARDED",
    }
}

pub(crate) fn memory_config(mc: &MemoryConfig) -> String {
    let shard = match &mc.shard_spec {
        None => "std::nullopt".to_string(),
        Some(s) => format!(
            "ShardSpec(grid={{{}}},shape={{{}, {}}})",
            s.grid
                .iter()
                .map(|r| format!(
                    "[({},{}) - ({},{})]",
                    r.start.0, r.start.1, r.end.0, r.end.1
                ))
                .collect::<Vec<_>>()
                .join(", "),
            s.shape[0],
            s.shape[1]
        ),
    };
    format!(
        "MemoryConfig(memory_layout=TensorMemoryLayout::{},buffer_type=BufferType::{},shard_spec={},nd_shard_spec=std::nullopt,created_with_nd_shard_spec=0,per_core_allocation=0,range_lockstep_allocation=0)",
        memory_layout(mc.memory_layout),
        mc.buffer_type.as_str(),
        shard
    )
}

/// A tensor as TT-NN prints an operation's tensor arguments.
pub(crate) fn tensor_repr(t: &TensorInfo) -> String {
    let page = match t.layout {
        Layout::Tile => {
            "TilePageConfig(tile=Tile(tile_shape={32, 32},face_shape={16, 16},num_faces=4))"
        }
        Layout::RowMajor => {
            "RowMajorPageConfig(tile=Tile(tile_shape={32, 32},face_shape={16, 16},num_faces=4))"
        }
    };
    format!(
        "Tensor(storage=DeviceStorage(),tensor_spec=TensorSpec(logical_shape={},tensor_layout=TensorLayout(dtype=DataType::{},page_config=PageConfig(config={}),memory_config={},alignment=Alignment([32, 32]))))",
        shape(&t.shape),
        t.dtype,
        page,
        memory_config(&t.memory_config)
    )
}

/// `create_device_tensor`'s five arguments as TT-NN serialises them: shape, dtype, layout, the
/// device (a pointer, which TT-NN prints as its address) and the memory config.
pub(crate) fn create_device_tensor_arguments(spec: &TensorSpec, device: usize) -> Vec<String> {
    vec![
        shape(&spec.shape),
        format!("DataType::{}", spec.dtype),
        layout(spec.layout).to_string(),
        format!("{device:#x}"),
        memory_config(&spec.memory_config),
    ]
}
