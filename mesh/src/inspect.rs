//! TT-NN's memory inspection calls on a mesh: `get_memory_view(&mesh, ..)` and the rest of
//! `ttmesh_chip::inspect` answer for a [`MeshDevice`] as TT-NN's do for a MeshDevice.
//!
//! A mesh's chips are identical and allocate in lockstep (a mesh buffer sits at the same address
//! on every chip), so their views normally agree and a mesh-wide call gives that one view.
//! They can differ when something was allocated on some chips only (a chip's own API, a failed
//! lockstep allocation being rolled back). Then the mesh-wide view is that of the chip with the
//! least largest contiguous free block per bank (the lowest mesh index among equals): the
//! tightest chip, which bounds what a mesh-wide allocation can still get. Use
//! [`MeshDevice::memory_views_per_chip`] to see every chip.

use ttmesh_chip::inspect::{InspectMemory, MemoryView};
use ttmesh_chip::{ArchSpec, BufferType, ChipError};

use crate::device::{MeshCoordinate, MeshDevice};
use crate::error::{on_chip, MeshError, Result};

impl MeshDevice {
    /// Every chip's view of one buffer type, in mesh row-major order.
    pub fn memory_views_per_chip(
        &self,
        buffer_type: BufferType,
    ) -> Result<Vec<(MeshCoordinate, MemoryView)>> {
        self.chips()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let view = c.memory_view(buffer_type).map_err(on_chip(c.id()))?;
                Ok((self.coord_of_index(i), view))
            })
            .collect()
    }

    fn first_chip_id(&self) -> u32 {
        self.chips().first().map_or(0, |c| c.id())
    }
}

impl InspectMemory for MeshDevice {
    type Error = MeshError;

    fn device_error(&self, e: ChipError) -> MeshError {
        on_chip(self.first_chip_id())(e)
    }

    fn arch_spec(&self) -> &ArchSpec {
        self.arch()
    }

    /// The tightest chip's view (see the module docs); the same view on every chip in lockstep.
    fn memory_view(&self, buffer_type: BufferType) -> Result<MemoryView> {
        let views = self.memory_views_per_chip(buffer_type)?;
        views
            .into_iter()
            .map(|(_, v)| v)
            .reduce(|best, v| {
                if v.largest_contiguous_bytes_free_per_bank
                    < best.largest_contiguous_bytes_free_per_bank
                {
                    v
                } else {
                    best
                }
            })
            .ok_or_else(|| crate::error::invalid("get_memory_view", "the mesh has no chips"))
    }

    /// Every chip is opened with the same sizes, so the first chip's bases are all chips'.
    fn region_base(&self, buffer_type: BufferType) -> Result<u64> {
        let chip = self.chips().first().ok_or_else(|| {
            crate::error::invalid("get_allocator_base_address", "the mesh has no chips")
        })?;
        chip.region_base(buffer_type).map_err(on_chip(chip.id()))
    }

    fn device_label(&self) -> String {
        let s = self.shape();
        format!("mesh {s}")
    }
}
