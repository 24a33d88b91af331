//! `ChipMemory`: the one seam through which the fabric reaches a chip's memory.
//!
//! The fabric knows no chip: whoever opens it (the mesh) hands it one `ChipMemory` per chip,
//! indexed by the chip ids of the `FabricSpec`, and every byte the fabric moves into or out
//! of a chip goes through it. A chip in this process (the mesh's port onto `ttmesh-chip`'s
//! memory), a chip in another process (a link to another MPI rank) and a test's plain byte
//! map are all the same to the fabric.
//!
//! # Contract
//!
//! **Who calls, from which threads.** Any thread, concurrently, for one chip:
//! - the receiving chip's router threads, delivering packets (`write`);
//! - the thread of a sender on another chip (a kernel on its dispatcher or the host's
//!   thread, or ccl's helper) delivering a whole message itself when the path is free
//!   (`write`, `write_trying`, `copy_from`), and reading its own chip's memory for a message
//!   whose payload is chip memory (`read`);
//! - a chip's own kernel, or a thread running its part of a collective, through
//!   `Fabric::read_local`, `write_local` and their `_with` forms (`read`, `read_with`,
//!   `try_read_with`, `write`, `write_with`, `prefetch`).
//!
//! **What it may block on.** Only the memory's own short locks (a bank's lock while bytes
//! are copied). Never on a fabric operation (a semaphore, a credit, a flush): the router
//! that would release it may be the very thread calling. A remote memory may wait for its
//! transport, bounded by its own timeout, and reports a timeout as an error.
//!
//! **Locks.** A thread holding one of this memory's locks never waits for a second lock,
//! of this memory or another's: two chips copy and reduce into each other at once. So a fill
//! run under a held lock (`write_trying`) only *tries* other memory (`try_read_with`), and a
//! copy between two chips (`copy_from`) only tries the source's lock while it holds the
//! destination's.
//!
//! **Errors.** An `Err` is the chip refusing the access (out of its banks, into a live
//! trace, a chip not in the mesh, a broken transport); its text names what and where. The
//! fabric does not retry: a refused delivery becomes the sender's `FabricError::WriteFailed`
//! (naming both chips and the address) at its flush, the packet's semaphore is recorded as
//! lost so a waiter fails at once, and a refused local read or write is the caller's error.
//! Nothing here panics on a bad address.

use crate::{MemoryError, NocAddr};

/// A fill that computes a message's bytes where they land (`ChipMemory::write_trying`):
/// `(offset, bytes, held) -> done`.
pub type ComputedFill<'a> = dyn FnMut(usize, &mut [u8], Option<&dyn HeldMemory>) -> bool + 'a;

/// The bank of a destination memory whose lock a computed write holds while its fill runs
/// (`ChipMemory::write_trying`): the fill cannot lock it again, but may read its other bytes
/// here (a reduction's last hop reads the owner's input beside the output it writes).
pub trait HeldMemory {
    /// Hands `f(offset, bytes)` the `len` bytes at `at` in place, if they lie in the held
    /// bank outside the bytes being filled; Ok(false), handing nothing, if not.
    fn try_read_held(
        &self,
        at: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<bool, MemoryError>;
}

/// A chip's memory as the fabric sees it (see the module docs for who calls it, from which
/// threads, and its lock and error rules). Only `write` is required; the other methods have
/// plain defaults built on `write` and `read`, which a memory overrides to save a copy.
pub trait ChipMemory: Send + Sync {
    /// Writes `data` at `dest`: a packet's or a message's payload landing.
    fn write(&self, dest: NocAddr, data: &[u8]) -> Result<(), MemoryError>;

    /// Reads `out.len()` bytes at `src`: what a kernel on this chip reads from its own
    /// memory. Users of the fabric that run a chip's part of an algorithm on another thread
    /// (the collectives' line runner) read through it; memories that never serve one need
    /// not support it.
    fn read(&self, src: NocAddr, out: &mut [u8]) -> Result<(), MemoryError> {
        let _ = out;
        Err(format!("this chip memory does not serve reads (asked for {src})").into())
    }

    /// Hands the `len` bytes at `src` to `f` in place, in order, as `(offset, bytes)` runs:
    /// a reader that only consumes them (adds, decodes) then needs no copy. By default one
    /// run, read through `read`.
    fn read_with(
        &self,
        src: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), MemoryError> {
        let mut buf = vec![0u8; len];
        self.read(src, &mut buf)?;
        f(0, &buf);
        Ok(())
    }

    /// `read_with` that never waits for a lock: Ok(false) when the bytes cannot be had at
    /// once (some runs may have been handed to `f` already). A fill under another memory's
    /// lock reads through it (`write_trying`). By default always false, so such fills take
    /// their buffered path.
    fn try_read_with(
        &self,
        src: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<bool, MemoryError> {
        let _ = (src, len, f);
        Ok(false)
    }

    /// Hands `f` the `len` bytes at `dest` to fill in place, in order, as `(offset, bytes)`
    /// runs: what a kernel on this chip writes when it computes its output straight into
    /// memory. `f` must overwrite every byte it is handed. By default one run, filled in a
    /// buffer and written through `write`.
    fn write_with(
        &self,
        dest: NocAddr,
        len: usize,
        f: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<(), MemoryError> {
        let mut buf = vec![0u8; len];
        f(0, &mut buf);
        self.write(dest, &buf)
    }

    /// `write_with` for a fill that reads other chips' memory (a reduction summing its own
    /// input and partials straight into a neighbour's slot): `f(offset, bytes, held)`. With
    /// `held` given it runs under this memory's lock: it may read the rest of the locked
    /// bank through `held`, may only *try* other memories (`try_read_with`), and returns
    /// false if one is busy; the same bytes are then handed again, through a buffer, with
    /// `held` None, when `f` may wait and must return true. Bytes handed back with false may
    /// show half-written until then, so fill only memory nobody reads before the write is
    /// signalled. By default one run, filled in a buffer with `held` None and written
    /// through `write`.
    fn write_trying(
        &self,
        dest: NocAddr,
        len: usize,
        f: &mut ComputedFill,
    ) -> Result<(), MemoryError> {
        let mut buf = vec![0u8; len];
        f(0, &mut buf, None);
        self.write(dest, &buf)
    }

    /// Copies `len` bytes of chip `src_chip`'s memory at `from` to `dest` in one pass, if
    /// this memory can reach that chip's memory directly (a gather passing its output on to
    /// a neighbour in the same process): Ok(true) when done. Ok(false), touching nothing,
    /// leaves the copy to the fabric, which reads the source through its own `ChipMemory`
    /// into a buffer and `write`s it here; that is the default. `src_chip` is the fabric's
    /// id of the chip, as in the `FabricSpec`. The destination's lock may be held while the
    /// source's is only tried (see the module's lock rule).
    fn copy_from(
        &self,
        dest: NocAddr,
        src_chip: u32,
        from: NocAddr,
        len: usize,
    ) -> Result<bool, MemoryError> {
        let _ = (dest, src_chip, from, len);
        Ok(false)
    }

    /// Asks the host's cache to start loading the `len` bytes at `src` (a hint: nothing is
    /// read or checked). A reader that jumps between banks calls it a few runs ahead. By
    /// default nothing.
    fn prefetch(&self, src: NocAddr, len: usize) {
        let _ = (src, len);
    }
}

/// Copies chip memory to chip memory: in one pass if `dst` can (`ChipMemory::copy_from`),
/// else `src.read` into a buffer, then `dst.write`.
pub(crate) fn copy_between(
    dst: &dyn ChipMemory,
    dest: NocAddr,
    (src_chip, src): (u32, &dyn ChipMemory),
    from: NocAddr,
    len: usize,
) -> Result<(), MemoryError> {
    if dst.copy_from(dest, src_chip, from, len)? {
        return Ok(());
    }
    let mut buf = vec![0u8; len];
    src.read(from, &mut buf)?;
    dst.write(dest, &buf)
}
