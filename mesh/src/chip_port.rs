//! The mesh's `ChipMemory`: how fabric deliveries land in a chip of this mesh, and how two
//! chips of the mesh copy between them in one pass.

use std::sync::Arc;

use ttmesh_chip::memory::DeviceMemory;
use ttmesh_chip::memory::HeldBank;
use ttmesh_chip::{Chip, ChipError};
use ttmesh_fabric::{ChipMemory, ComputedFill, HeldMemory, MemoryError, NocAddr};

type Result<T> = std::result::Result<T, MemoryError>;

/// The chips of a mesh by fabric chip id (a cluster chip outside the mesh is None): what a
/// port looks up to copy from another chip.
type Registry = Arc<[Option<Arc<Chip>>]>;

/// Chip `id`'s memory as the fabric reaches it.
pub(crate) struct ChipPort {
    chips: Registry,
    id: u32,
}

impl ChipPort {
    /// One port per fabric chip id `0..num_chips`, each able to reach every chip of `chips`.
    pub(crate) fn for_fabric(num_chips: u32, chips: &[Arc<Chip>]) -> Vec<Arc<dyn ChipMemory>> {
        let registry: Registry = (0..num_chips)
            .map(|id| chips.iter().find(|c| c.id() == id).cloned())
            .collect();
        (0..num_chips)
            .map(|id| {
                Arc::new(ChipPort {
                    chips: registry.clone(),
                    id,
                }) as Arc<dyn ChipMemory>
            })
            .collect()
    }

    fn memory_of(&self, id: u32) -> Result<&DeviceMemory> {
        match self.chips.get(id as usize) {
            Some(Some(chip)) => Ok(chip.memory()),
            _ => Err(format!("chip {id} is not part of this mesh").into()),
        }
    }

    fn memory(&self) -> Result<&DeviceMemory> {
        self.memory_of(self.id)
    }
}

/// A chip bank held by a computed write, as the fabric's fills read it.
struct HeldChipBank<'a, 'b>(&'a HeldBank<'b>);

impl HeldMemory for HeldChipBank<'_, '_> {
    fn try_read_held(
        &self,
        at: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<bool> {
        if at.space != self.0.space() || at.bank != self.0.bank() {
            return Ok(false);
        }
        self.0
            .read_in_place(at.addr, len, f)
            .map_err(MemoryError::new)
    }
}

/// A chip's refusal of a fabric delivery into its memory, naming the delivery as what wrote
/// when it would have landed in a live trace.
fn delivery_refused(e: ChipError) -> MemoryError {
    MemoryError::new(e.written_by(|| "a fabric delivery".into()))
}

impl ChipMemory for ChipPort {
    fn write(&self, dest: NocAddr, data: &[u8]) -> Result<()> {
        self.memory()?
            .write(dest.space, dest.bank, dest.addr, data)
            .map_err(delivery_refused)
    }

    fn read(&self, src: NocAddr, out: &mut [u8]) -> Result<()> {
        self.memory()?
            .read(src.space, src.bank, src.addr, out)
            .map_err(MemoryError::new)
    }

    fn read_with(&self, src: NocAddr, len: usize, f: &mut dyn FnMut(usize, &[u8])) -> Result<()> {
        self.memory()?
            .read_in_place(src.space, src.bank, src.addr, len, f)
            .map_err(MemoryError::new)
    }

    fn try_read_with(
        &self,
        src: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<bool> {
        self.memory()?
            .try_read_in_place(src.space, src.bank, src.addr, len, f)
            .map_err(MemoryError::new)
    }

    fn write_with(
        &self,
        dest: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        self.memory()?
            .write_with(dest.space, dest.bank, dest.addr, len, f)
            .map_err(delivery_refused)
    }

    fn write_trying(&self, dest: NocAddr, len: usize, f: &mut ComputedFill) -> Result<()> {
        self.memory()?
            .write_trying(
                dest.space,
                dest.bank,
                dest.addr,
                len,
                |o, out, held| match held {
                    Some(held) => f(o, out, Some(&HeldChipBank(held))),
                    None => f(o, out, None),
                },
            )
            .map_err(delivery_refused)
    }

    /// Every chip of the mesh is in this process, so any source chip is copied in one pass.
    fn copy_from(&self, dest: NocAddr, src_chip: u32, from: NocAddr, len: usize) -> Result<bool> {
        self.memory()?
            .copy_from(
                (dest.space, dest.bank, dest.addr),
                self.memory_of(src_chip)?,
                (from.space, from.bank, from.addr),
                len,
            )
            .map_err(delivery_refused)?;
        Ok(true)
    }

    fn prefetch(&self, src: NocAddr, len: usize) {
        if let Ok(memory) = self.memory() {
            memory.prefetch(src.space, src.bank, src.addr, len);
        }
    }
}
