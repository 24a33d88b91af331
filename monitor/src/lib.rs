//! ttmesh-monitor: the shared-memory protocol through which a running ttmesh process publishes
//! per-chip memory and per-link fabric statistics, and the reader and renderer behind
//! `ttmesh monitor`, which runs in another process.
//!
//! This crate owns the segment layout, the [`Publisher`] (called by the mesh crate), the reader
//! ([`list_segments`], [`read_segment`], [`cleanup_stale`]) and the CLI pieces ([`MonitorArgs`],
//! [`run_monitor`]). It depends on no other ttmesh crate and never decides what the numbers
//! mean: the mesh crate feeds it allocator statistics; the reader never writes to a segment.
//!
//! # Segment layout, version 2
//!
//! One POSIX shared-memory object per mesh, named `/ttmesh-<pid>` (`/ttmesh-<pid>-<n>` for a
//! further mesh in the same process), mode 0600, visible on Linux as `/dev/shm/ttmesh-<pid>`.
//! A mesh split over MPI ranks has one segment per rank, holding only that rank's chips, named
//! `/ttmesh-<pid>-r<rank>` (`-r<rank>-<n>`); the monitor shows the segments of one split mesh
//! on a host (same mesh id, shape and rank count) as one mesh, each chip labelled with its rank
//! and its id in the whole mesh.
//! All integers are little-endian (native on every host ttmesh runs on), 8-byte aligned.
//!
//! Header (128 bytes). Offsets 0..40 stay the same in every future version, so any reader can
//! name the version and tell whether the owner is still alive:
//!
//! | offset | type | field |
//! |---|---|---|
//! | 0 | u64 | magic `b"TTMESHMN"`; stored last (release) once the segment is complete |
//! | 8 | u32 | layout version (2) |
//! | 12 | u32 | header size (128) |
//! | 16 | u64 | total size of the segment in bytes |
//! | 24 | u32 | pid of the publishing process |
//! | 28 | u32 | flags (0) |
//! | 32 | u64 | process start time, clock ticks since boot (`/proc/<pid>/stat` field 22), so a reused pid is recognised |
//! | 40 | u32 | number of chip slots (at most [`MAX_CHIPS`]) |
//! | 44 | u32 | number of link slots (at most [`MAX_LINKS`]) |
//! | 48 | u32 | chip slot size (256) |
//! | 52 | u32 | link slot size (128) |
//! | 56 | u32 | process-info offset (128) |
//! | 60 | u32 | process-info length in bytes (at most 1024) |
//! | 64 | u32 | chips offset (1152) |
//! | 68 | u32 | links offset (1152 + 256 * chips) |
//! | 72 | u64 | creation time, milliseconds since the Unix epoch |
//! | 80 | u32 | rank of the publishing process in its mesh (0 when the mesh is wholly in it) |
//! | 84 | u32 | ranks the mesh spans (1 when wholly in one process; at most its chips) |
//! | 88..128 | | reserved, zero |
//!
//! Process info at 128: [`ProcessInfo`] as JSON (1024 bytes reserved), written once before the
//! magic; its `mesh_id` is the same on every rank of one opening of a split mesh.
//!
//! Chip slot `i` at `1152 + 256 * i`, 32 u64 words: `[0]` sequence, `[1]` chip id, `[2]` row,
//! `[3]` column, then for DRAM, L1, L1_SMALL, TRACE in that order five words each (allocated,
//! capacity, live buffers, peak, largest free block) at `[4..24]`, `[24]` live traces,
//! `[25]` trace bytes, `[26]` replays, `[27]` bytes the program labelled as model weights,
//! `[28]` bytes it labelled as KV cache, `[29]` host bytes behind the chip's memory (its share
//! of chunks stored once for several chips), `[30]` the rank holding the chip (the header's
//! rank), `[31]` reserved. The id is the chip's id in the whole mesh and the coordinate its
//! place in the whole mesh, so a rank's segment reads as that part of a single process's.
//!
//! Link slot `j` at `links offset + 128 * j`, 16 u64 words: `[0]` sequence, `[1]` chip a,
//! `[2]` port a, `[3]` chip b, `[4]` port b, `[5]` packets, `[6]` bytes, `[7]` stalls,
//! `[8]` errors, `[9..16]` reserved.
//!
//! Every slot is a sequence lock: a writer makes the sequence odd, stores the counters, then
//! makes it even again (release). A reader copies the slot and retries while the sequence was
//! odd or changed, for at most 250 ms, then reports the slot as too busy (or stuck); it holds
//! nothing a writer could wait on. Slots are cache-line multiples so chips never share a line.
//! Writers of one chip slot come in two kinds (never both on one chip):
//! [`ChipPublisher`] (shared by any threads: one compare-and-swap per update, ~10 ns) and
//! [`ChipWriter`] (the chip's only writer, `&mut self`: plain stores, ~2.5 ns), which
//! [`ChipWriter::into_serial`] turns into a [`SerialChipWriter`] (`&self`, Sync) for writers
//! already serialised by a lock of their own, such as the mesh's allocator listeners.
//!
//! Reading never disturbs the watched process: the segment is mapped read-only, its size is
//! taken from fstat before mapping and nothing beyond it is read (a truncated file is an error,
//! never SIGBUS), and every field is validated before use. A stale segment (owner's pid gone,
//! a zombie, or reused: start time differs) is reported and removable with [`cleanup_stale`].
//! So is a segment whose owner died before writing its header (size 0 or magic 0): it names
//! its owner only by the pid in its name, reused when that process started after the file
//! was last written.
//! Publishing is off when `TTMESH_MONITOR=0` ([`Publisher::create_from_env`]).

mod cli;
mod data;
mod error;
mod handles;
mod layout;
mod publisher;
mod reader;
mod render;
mod seqlock;
mod shm;

#[cfg(test)]
mod tests;

pub use cli::{run_monitor, MonitorArgs};
pub use data::{
    ChipCounters, ChipSnapshot, LinkCounters, LinkSnapshot, MemoryCounters, MemoryKind,
    ProcessInfo, ProcessSnapshot, SegmentInfo, Staleness,
};
pub use error::MonitorError;
pub use handles::{ChipPublisher, ChipWriter, LinkPublisher, SerialChipWriter};
pub use layout::{LAYOUT_VERSION, MAGIC, MAX_CHIPS, MAX_LINKS};
pub use publisher::Publisher;
pub use reader::{cleanup_stale, list_segments, read_segment};
pub use render::{escape_control, render_json, render_table};
