//! Chunks of the same contents stored once on the host, whichever chips hold them.
//!
//! A replicated tensor (the embedding, norms and RoPE tables on every chip of a Galaxy) and
//! the weights of a data-parallel mesh's replicas are the same bytes on many chips; a KV cache
//! written with zeros is bytes nobody needs. After a host write (`WriteLinear`, `WritePaged`)
//! of at least a chunk's bytes, every chunk it touched is looked up by contents in one
//! process-wide table: an all-zero chunk is dropped (unwritten memory reads as zero), a chunk
//! equal to one already stored takes that one's buffer, and any other becomes the stored one
//! for the chunks after it. The first write to a shared chunk gives the writer its own copy
//! (`Chunk::all_mut`), or takes it back uncopied when no other chunk holds it. Chunks only
//! partly written are looked up too: a weight spread over 12 DRAM banks fills less than a
//! chunk of each, and the chunk is equal on every replica once its neighbours are written.
//!
//! Granularity is the bank's chunk (64 KiB in DRAM, 16 KiB in L1: `chunk_size`), the unit the
//! sparse store already allocates, locks and frees, so sharing adds no second map and a write
//! copies at most one chunk. Only host writes are looked up: a kernel's output is rarely equal
//! to another chip's, and hashing it would cost every op; the small per-token host writes
//! (token ids, positions) are below a chunk and cost one compare.
//!
//! Addresses, allocation, statistics and every rule are those of the chip's own memory: only
//! where the bytes live on the host changes. A chunk is compared byte for byte before it
//! takes another's buffer (the hash only finds candidates), so equal contents are all that
//! is ever shared.

use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use super::{chunk_size, write_soon, Chunk, ChunkData, DeviceMemory};
use crate::allocator::MemSpace;

/// A chunk's bytes held by one or more chunks (on any chips); dropped with the last of them.
pub(super) struct SharedBytes {
    bytes: Box<[u8]>,
}

impl SharedBytes {
    pub(super) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes as a buffer of one's own: taken when no other chunk holds them, else copied.
    pub(super) fn unshare(shared: Arc<SharedBytes>) -> Box<[u8]> {
        match Arc::try_unwrap(shared) {
            Ok(only) => only.bytes,
            Err(shared) => shared.bytes.clone(),
        }
    }
}

/// Stored chunks by the hash of their contents. Entries are weak: the table never keeps a
/// buffer alive, and a dead entry costs a few bytes until the next sweep.
#[derive(Default)]
struct Table {
    by_hash: FxHashMap<u64, Vec<Weak<SharedBytes>>>,
    entries: usize,
    /// Entries past which the next insert sweeps out the dead ones.
    sweep_at: usize,
}

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(Mutex::default);

/// Entries the table may hold before its first sweep (and above twice the live ones after).
const MIN_SWEEP: usize = 1 << 14;

impl Table {
    /// Live stored chunks with this hash and length.
    fn candidates(&self, hash: u64, len: usize) -> Vec<Arc<SharedBytes>> {
        self.by_hash.get(&hash).map_or_else(Vec::new, |v| {
            v.iter()
                .filter_map(Weak::upgrade)
                .filter(|s| s.bytes.len() == len)
                .collect()
        })
    }

    fn insert(&mut self, hash: u64, shared: &Arc<SharedBytes>) {
        self.by_hash
            .entry(hash)
            .or_default()
            .push(Arc::downgrade(shared));
        self.entries += 1;
        if self.entries > self.sweep_at.max(MIN_SWEEP) {
            self.by_hash.retain(|_, v| {
                v.retain(|w| w.strong_count() > 0);
                !v.is_empty()
            });
            self.entries = self.by_hash.values().map(Vec::len).sum();
            self.sweep_at = 2 * self.entries;
        }
    }
}

impl DeviceMemory {
    /// Looks up by contents every chunk the pages just written touched (`pages`: (bank,
    /// address) of `page_size` bytes each, in any order), when they are at least a chunk's
    /// bytes: see the module docs.
    pub fn share_written(
        &self,
        space: MemSpace,
        page_size: u32,
        pages: impl Iterator<Item = (u32, u64)>,
    ) {
        let chunk = chunk_size(space);
        let page = u64::from(page_size);
        let mut pages: Vec<(u32, u64)> = pages.collect();
        if (pages.len() as u64).saturating_mul(page) < chunk {
            return;
        }
        pages.sort_unstable();
        // Chunks touched, bank by bank, each once: a weight spread over 12 DRAM banks covers
        // less than a chunk in each, beside its neighbours, which are the same on every
        // replica too once they are written (and looked up again then).
        let mut last = None;
        for (bank, addr) in pages {
            let end = addr + page.max(1) - 1;
            for index in addr / chunk..=end / chunk {
                if last != Some((bank, index)) {
                    self.share_chunk(space, bank, index);
                    last = Some((bank, index));
                }
            }
        }
    }

    /// Looks one chunk up by contents (see the module docs). The bank's lock is never held
    /// while the table's is waited for: the chunk is hashed under the bank's lock, the table
    /// asked with no bank lock held, and the answer checked byte for byte under the bank's
    /// lock again, where a write in between simply makes it not match.
    fn share_chunk(&self, space: MemSpace, bank: u32, index: u64) {
        let Ok(lock) = self.bank(space, bank, 0, 0) else {
            return;
        };
        let len = chunk_size(space) as usize;
        let hash = {
            let mut b = write_soon(lock);
            let Some(c) = b.chunks.get_mut(&index) else {
                return;
            };
            if !matches!(c.data, ChunkData::Own(_)) {
                return;
            }
            // Zeros past the valid bytes, so equal contents are equal buffers.
            c.fill(len, 0);
            hash_of(c.all())
        };
        let candidates = match hash == zero_hash(len) {
            true => Vec::new(),
            false => TABLE.lock().candidates(hash, len),
        };
        let Some(new) = self.take_equal(lock, space, (bank, index), candidates) else {
            return;
        };
        // Stored unless an equal chunk was stored meanwhile (two chips writing the same
        // weight at once): then that one is taken, as if it had been there first.
        let earlier = {
            let mut table = TABLE.lock();
            let found = table
                .candidates(hash, len)
                .into_iter()
                .find(|s| s.bytes() == new.bytes());
            if found.is_none() {
                table.insert(hash, &new);
            }
            found
        };
        if let Some(earlier) = earlier {
            let mut b = write_soon(lock);
            if let Some(c) = b.chunks.get_mut(&index) {
                if matches!(&c.data, ChunkData::Shared(s) if Arc::ptr_eq(s, &new)) {
                    c.data = ChunkData::Shared(earlier);
                }
            }
        }
    }

    /// Under the bank's write lock: drops the chunk if it is all zeros, else gives it the
    /// buffer of an equal candidate, else makes its own buffer shareable and returns it (to
    /// be stored). Nothing when the chunk was written or dropped since it was hashed.
    fn take_equal(
        &self,
        lock: &parking_lot::RwLock<super::Bank>,
        space: MemSpace,
        (bank, index): (u32, u64),
        candidates: Vec<Arc<SharedBytes>>,
    ) -> Option<Arc<SharedBytes>> {
        let len = chunk_size(space) as usize;
        let mut b = write_soon(lock);
        let c = b.chunks.get_mut(&index)?;
        if !matches!(c.data, ChunkData::Own(_)) || c.valid != len {
            return None;
        }
        if c.all().iter().all(|&x| x == 0) {
            b.chunks.remove(&index);
            self.resident.add(space, bank, index, -1);
            return None;
        }
        if let Some(equal) = candidates.into_iter().find(|s| s.bytes() == c.all()) {
            // Not pooled: after a replicated write every chip would fill its pool.
            c.data = ChunkData::Shared(equal);
            return None;
        }
        let ChunkData::Own(bytes) = std::mem::replace(&mut c.data, ChunkData::Own(Box::new([])))
        else {
            return None;
        };
        let shared = Arc::new(SharedBytes { bytes });
        c.data = ChunkData::Shared(shared.clone());
        Some(shared)
    }

    /// Host bytes this chip's memory uses: its own chunks, and an equal share of each chunk
    /// it holds with others (so the sum over all chips is the host memory of all of them).
    pub fn host_bytes(&self) -> u64 {
        [&self.dram, &self.l1, &self.host]
            .iter()
            .flat_map(|banks| banks.iter())
            .map(|b| b.read().chunks.values().map(Chunk::host_bytes).sum::<u64>())
            .sum()
    }
}

/// Caps glibc's malloc arenas at one per core; a program opening many chips calls it first
/// thing, before any thread starts. glibc's default, eight per core, gives every dispatcher
/// thread of a Galaxy an arena of its own, and each keeps what its thread freed: placing
/// SmolLM2 f32 on a Galaxy (each chip's copy of a chunk freed once found equal to a stored
/// one) peaked at 3.7 GB against 2.3 GB with 2 arenas (MALLOC_ARENA_MAX=2), no slower
/// (22.4 s against 20.7 s, `ttmesh decode --mesh galaxy --dtype f32 --max-new-tokens 8`).
pub fn cap_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let cores = std::ffi::c_int::try_from(cores).unwrap_or(std::ffi::c_int::MAX);
        // SAFETY: mallopt only sets an allocator parameter, and takes no pointer.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, cores) };
    }
}

fn hash_of(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// The hash of a chunk of `len` zero bytes (DRAM's or L1's chunk size), computed once each.
fn zero_hash(len: usize) -> u64 {
    static DRAM: LazyLock<u64> =
        LazyLock::new(|| hash_of(&vec![0; chunk_size(MemSpace::Dram) as usize]));
    static L1: LazyLock<u64> =
        LazyLock::new(|| hash_of(&vec![0; chunk_size(MemSpace::L1) as usize]));
    match len as u64 == chunk_size(MemSpace::Dram) {
        true => *DRAM,
        false => *L1,
    }
}

#[cfg(test)]
mod tests;
