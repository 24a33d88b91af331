//! Byte offsets of segment version 2 (documented in lib.rs). Only this file knows them.

/// `b"TTMESHMN"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"TTMESHMN");
/// The layout version this crate writes and reads.
pub const LAYOUT_VERSION: u32 = 2;
/// Most chips one segment holds: a whole four-Galaxy mesh (128 chips) in one process, so the
/// single-process run a split mesh is compared with publishes too.
pub const MAX_CHIPS: usize = 128;
/// Most link slots (one per direction) one segment holds: a four-Galaxy mesh in one process
/// has 928 links with 4 per neighbour pair, 1856 directions.
pub const MAX_LINKS: usize = 2048;

pub(crate) const HEADER_SIZE: usize = 128;
pub(crate) const INFO_OFFSET: usize = 128;
pub(crate) const INFO_CAPACITY: usize = 1024;
pub(crate) const CHIPS_OFFSET: usize = INFO_OFFSET + INFO_CAPACITY;
pub(crate) const CHIP_SLOT_SIZE: usize = 256;
pub(crate) const LINK_SLOT_SIZE: usize = 128;

// Header field offsets. 0..40 are frozen across versions.
pub(crate) const H_MAGIC: usize = 0;
pub(crate) const H_VERSION: usize = 8;
pub(crate) const H_HEADER_SIZE: usize = 12;
pub(crate) const H_TOTAL_SIZE: usize = 16;
pub(crate) const H_PID: usize = 24;
pub(crate) const H_START_TIME: usize = 32;
/// Bytes a reader needs to name the version, size and owner of any version's segment.
pub(crate) const FROZEN_PREFIX: usize = 40;
pub(crate) const H_NUM_CHIPS: usize = 40;
pub(crate) const H_NUM_LINKS: usize = 44;
pub(crate) const H_CHIP_SLOT: usize = 48;
pub(crate) const H_LINK_SLOT: usize = 52;
pub(crate) const H_INFO_OFFSET: usize = 56;
pub(crate) const H_INFO_LEN: usize = 60;
pub(crate) const H_CHIPS_OFFSET: usize = 64;
pub(crate) const H_LINKS_OFFSET: usize = 68;
pub(crate) const H_CREATED_MS: usize = 72;
/// The publishing process's rank in its mesh, and how many ranks the mesh spans (0 and 1 for a
/// mesh wholly in one process).
pub(crate) const H_RANK: usize = 80;
pub(crate) const H_RANKS: usize = 84;

// Chip slot words.
pub(crate) const CHIP_WORDS: usize = CHIP_SLOT_SIZE / 8;
pub(crate) const C_SEQ: usize = 0;
pub(crate) const C_ID: usize = 1;
pub(crate) const C_ROW: usize = 2;
pub(crate) const C_COL: usize = 3;
/// First memory word; kind `k` occupies `C_MEM + 5k .. C_MEM + 5k + 5`.
pub(crate) const C_MEM: usize = 4;
pub(crate) const MEM_WORDS: usize = 5;
pub(crate) const M_ALLOCATED: usize = 0;
pub(crate) const M_CAPACITY: usize = 1;
pub(crate) const M_LIVE: usize = 2;
pub(crate) const M_PEAK: usize = 3;
pub(crate) const M_LARGEST_FREE: usize = 4;
pub(crate) const C_TRACES: usize = 24;
pub(crate) const C_TRACE_BYTES: usize = 25;
pub(crate) const C_REPLAYS: usize = 26;
/// Bytes the program labelled as model weights / as KV cache (zero when it labels nothing).
pub(crate) const C_WEIGHTS: usize = 27;
pub(crate) const C_KV_CACHE: usize = 28;
/// Host bytes behind the chip's memory (its share of chunks stored once for many chips).
pub(crate) const C_HOST_BYTES: usize = 29;
/// The rank holding the chip (the segment's rank: a slot names it so it reads on its own).
pub(crate) const C_RANK: usize = 30;
/// Words a reader copies (the rest are reserved).
pub(crate) const CHIP_USED_WORDS: usize = 31;

// Link slot words.
pub(crate) const LINK_WORDS: usize = LINK_SLOT_SIZE / 8;
pub(crate) const L_SEQ: usize = 0;
pub(crate) const L_A_CHIP: usize = 1;
pub(crate) const L_A_PORT: usize = 2;
pub(crate) const L_B_CHIP: usize = 3;
pub(crate) const L_B_PORT: usize = 4;
pub(crate) const L_PACKETS: usize = 5;
pub(crate) const L_BYTES: usize = 6;
pub(crate) const L_STALLS: usize = 7;
pub(crate) const L_ERRORS: usize = 8;
pub(crate) const LINK_USED_WORDS: usize = 9;

pub(crate) fn links_offset(num_chips: usize) -> usize {
    CHIPS_OFFSET + CHIP_SLOT_SIZE * num_chips
}

pub(crate) fn total_size(num_chips: usize, num_links: usize) -> usize {
    links_offset(num_chips) + LINK_SLOT_SIZE * num_links
}

pub(crate) fn chip_offset(i: usize) -> usize {
    CHIPS_OFFSET + CHIP_SLOT_SIZE * i
}

pub(crate) fn link_offset(num_chips: usize, j: usize) -> usize {
    links_offset(num_chips) + LINK_SLOT_SIZE * j
}

const _: () = assert!(CHIP_USED_WORDS <= CHIP_WORDS && LINK_USED_WORDS <= LINK_WORDS);
const _: () = assert!(C_MEM + 4 * MEM_WORDS == C_TRACES);
const _: () = assert!(CHIPS_OFFSET % 64 == 0 && H_RANKS + 4 <= HEADER_SIZE);
