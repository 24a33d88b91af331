//! How a recorded buffer or tensor becomes a node's params, as TT-NN 0.81.1 writes them
//! (flags, core range sets, layouts, page views for the report's buffer pages).

use super::*;

/// A flag as TT-NN writes `globally_allocated` and `borrows_memory`: "0" or "1".
pub(super) fn flag(on: bool) -> &'static str {
    if on {
        "1"
    } else {
        "0"
    }
}

/// `cores` worker cores of a `grid` (columns, rows), filled row by row from (0, 0), as a
/// CoreRangeSet prints: `{[x-y - x-y], ...}`.
pub(super) fn core_range_set(cores: u32, grid: (u32, u32)) -> String {
    let width = grid.0.max(1);
    let cores = cores.clamp(1, width * grid.1.max(1));
    let (full_rows, rest) = (cores / width, cores % width);
    let mut ranges = Vec::new();
    if full_rows > 0 {
        ranges.push(format!("[0-0 - {}-{}]", width - 1, full_rows - 1));
    }
    if rest > 0 {
        ranges.push(format!("[0-{full_rows} - {}-{full_rows}]", rest - 1));
    }
    format!("{{{}}}", ranges.join(", "))
}

pub(super) fn layout_name(sharded: bool) -> &'static str {
    if sharded {
        "SHARDED"
    } else {
        "INTERLEAVED"
    }
}

pub(super) fn buffer_params(b: &BufferRec, _allocate: bool) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("buffer_type".into(), json!(b.buffer_type as u8));
    p.insert("device_id".into(), json!(0));
    p.insert("layout".into(), json!(layout_name(b.sharded)));
    p.insert("size".into(), json!(b.size));
    p.insert("type".into(), json!(b.buffer_type.as_str()));
    p
}

pub(super) fn tensor_params(t: &TensorInfo, zero: bool) -> Map<String, Value> {
    let addr = |a: u64| if zero { 0 } else { a };
    let first = t.places.first().map_or(0, |p| p.1);
    let device_tensors: Vec<Value> = t
        .places
        .iter()
        .map(|(chip, a)| json!({"address": addr(*a), "device_id": chip, "mesh_device_id": 0}))
        .collect();
    let mut p = Map::new();
    p.insert("address".into(), json!(addr(first)));
    p.insert("buffer_type".into(), json!(t.buffer_type as u8));
    p.insert("device_id".into(), json!(0));
    p.insert(
        "device_tensors".into(),
        json!(Value::Array(device_tensors).to_string()),
    );
    p.insert("dtype".into(), json!(format!("DataType::{}", t.dtype)));
    p.insert("layout".into(), json!(describe::layout(t.layout)));
    p.insert(
        "memory_config".into(),
        json!(describe::memory_config(&t.memory_config)),
    );
    p.insert("shape".into(), json!(describe::shape(&t.shape)));
    p.insert("size".into(), json!(t.size));
    p.insert("storage_type".into(), json!("DEVICE"));
    p.insert("tensor_id".into(), json!(t.tensor_id));
    p
}

/// What buffer pages need of a buffer.
pub(crate) struct PagesOf {
    pub device_id: u32,
    pub address: u64,
    pub page_size: u64,
    pub size: u64,
    pub per_bank: u64,
    pub num_banks: u32,
    pub buffer_type: BufferType,
}

pub(super) fn rec_view(b: &BufferRec) -> PagesOf {
    PagesOf {
        device_id: b.chips.first().copied().unwrap_or(0),
        address: if b.zero { 0 } else { b.address },
        page_size: b.page_size,
        size: b.size,
        per_bank: b.per_bank,
        num_banks: b.num_banks,
        buffer_type: b.buffer_type,
    }
}
