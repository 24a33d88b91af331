//! A chip's own memory, read and written by a thread that runs the chip's part of an
//! algorithm (no link crossed, no packet counted).

use super::{Fabric, Result};
use crate::FabricError;
use crate::NocAddr;

impl Fabric {
    /// Reads `chip`'s own memory at `src`, as a kernel on `chip` would (no link is crossed):
    /// for a thread that runs `chip`'s part of an algorithm while `chip`'s kernel waits.
    pub fn read_local(&self, chip: u32, src: NocAddr, out: &mut [u8]) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.mems[chip as usize]
            .read(src, out)
            .map_err(FabricError::read_failed(chip, src))
    }

    /// Like [`Fabric::read_local`], handing the bytes to `f` in place (`ChipMemory::read_with`).
    pub fn read_local_with(
        &self,
        chip: u32,
        src: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.mems[chip as usize]
            .read_with(src, len, f)
            .map_err(FabricError::read_failed(chip, src))
    }

    /// [`Fabric::read_local_with`] that never waits for a lock (`ChipMemory::try_read_with`):
    /// Ok(false) when the bytes cannot be had at once. For a fill running under another
    /// chip's memory lock (`FabricSender::write_with_and_inc`).
    pub fn try_read_local_with(
        &self,
        chip: u32,
        src: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<bool> {
        self.check_chip(chip)?;
        self.inner.mems[chip as usize]
            .try_read_with(src, len, f)
            .map_err(FabricError::read_failed(chip, src))
    }

    /// Hands `chip`'s `len` bytes at `dest` to `f` to fill in place (`ChipMemory::write_with`),
    /// as a kernel on `chip` computing its output straight into its memory would: the local
    /// counterpart of [`Fabric::read_local_with`] (no link is crossed, no packet counted).
    pub fn write_local_with(
        &self,
        chip: u32,
        dest: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.mems[chip as usize]
            .write_with(dest, len, f)
            .map_err(|source| FabricError::WriteFailed {
                chip,
                src: chip,
                addr: dest.to_string(),
                source,
            })
    }

    /// Hints that `chip`'s `len` bytes at `src` will be read soon (`ChipMemory::prefetch`);
    /// an unknown chip is ignored, as the hint reads nothing.
    pub fn prefetch_local(&self, chip: u32, src: NocAddr, len: usize) {
        if let Some(m) = self.inner.mems.get(chip as usize) {
            m.prefetch(src, len);
        }
    }

    /// Writes `chip`'s own memory at `dest`, as a kernel on `chip` would (no link is crossed,
    /// no packet counted): the local counterpart of [`Fabric::read_local`].
    pub fn write_local(&self, chip: u32, dest: NocAddr, data: &[u8]) -> Result<()> {
        self.check_chip(chip)?;
        self.inner.mems[chip as usize]
            .write(dest, data)
            .map_err(|source| FabricError::WriteFailed {
                chip,
                src: chip,
                addr: dest.to_string(),
                source,
            })
    }
}
