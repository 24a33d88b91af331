//! Kernel-side access to tensors in device memory, knowing only the spec and the address.

use crate::error::Result;
use crate::program::KernelContext;
use crate::tensor::{decode_pages, encode_pages, HostData, TensorSpec};

/// Reads every page of a tensor at `address` and decodes its logical values.
pub fn read_logical(ctx: &KernelContext, spec: &TensorSpec, address: u32) -> Result<HostData> {
    let pages = spec.page_map(ctx.arch, address as u64)?;
    let page = pages.map.page_size as usize;
    let mut bytes = vec![0u8; pages.map.num_pages as usize * page];
    for (p, dst) in bytes.chunks_exact_mut(page).enumerate() {
        let (bank, addr) = pages.location(p as u64);
        ctx.memory.read(pages.map.space, bank, addr, dst)?;
    }
    decode_pages(spec, &bytes)
}

/// Encodes logical values into a tensor's pages at `address`.
pub fn write_logical(
    ctx: &KernelContext,
    spec: &TensorSpec,
    address: u32,
    data: &HostData,
) -> Result<()> {
    let pages = spec.page_map(ctx.arch, address as u64)?;
    let page = pages.map.page_size as usize;
    let bytes = encode_pages(spec, data)?;
    for (p, src) in bytes.chunks_exact(page).enumerate() {
        let (bank, addr) = pages.location(p as u64);
        ctx.memory.write(pages.map.space, bank, addr, src)?;
    }
    Ok(())
}

/// Reads a float tensor as f32 values.
pub(crate) fn read_f32(ctx: &KernelContext, spec: &TensorSpec, address: u32) -> Result<Vec<f32>> {
    Ok(match read_logical(ctx, spec, address)? {
        HostData::F32(v) => v,
        HostData::U32(v) => v.into_iter().map(|x| x as f32).collect(),
    })
}
