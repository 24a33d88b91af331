//! ttmesh-fabric: the ethernet fabric that moves bytes between emulated chips the way
//! tt-metal's fabric (EDM routers) does, 1D (lines and rings) and 2D (mesh and torus), with
//! link statistics, fault injection and modeled link time.
//!
//! Owns: routers, channels, packets, `FabricConfig`, per-chip semaphore tables, link stats
//! and faults. Must not touch: chips, topologies or meshes. Of ttmesh it depends only on the
//! address vocabulary it shares with the chip (`ttmesh-noc`: `MemSpace`, `NocAddr`); the mesh
//! crate hands it a `FabricSpec` (links and axis lines) and one `Arc<dyn ChipMemory>` per
//! chip, the one seam through which it reaches a chip's memory (its contract: `memory.rs`),
//! and kernels use `FabricSender`s.
//!
//! # Design
//!
//! **Lines and routes.** An axis line is an ordered chain of linked chips (a mesh row or
//! column, or one line through all chips). A packet from `s` to `d` travels along a line that
//! holds both, forward or backward; on a ring under `Fabric1DRing` the shorter way (ties go
//! forward; under `Fabric1D` a ring is used as a line). With no common line the send fails
//! naming both chips. Between neighbours joined by several links, a packet that asked for
//! link `k` uses `k % links` at every hop. Under `FABRIC_1D_NEIGHBOR_EXCHANGE` a packet goes
//! one hop only.
//!
//! **2D routes** (`FABRIC_2D`, `FABRIC_2D_TORUS_X/Y/XY`; see `route/mesh2d.rs`). The spec's
//! [`MeshGrid`] gives rows and columns; every row and column is a line as above (a ring
//! under a torus on its axis). A packet goes along its source's column to the destination's
//! row, turns, and goes along that row (tt-metal's order: north/south, then east/west). The
//! route sits in the header as the 1D route does, plus a turn code; a router asks the
//! route which hop comes next (on along its line, or the crossing line's), so channels,
//! credits, statistics and faults are the same per-link machinery in 1D and 2D. The 1D and
//! 2D route code sit side by side in `route/line.rs` and `route/mesh2d.rs`. A config the
//! topology cannot carry is refused (`FabricSpec::check_config`), naming the configs that
//! fit.
//!
//! **Channels, slots, credits.** Every hop (a neighbour pair, one direction, one line) has one
//! channel per parallel link and virtual channel. A channel is a ring of `channel_slots`
//! equal slots, each holding one packet (32-byte header + up to `max_payload_bytes`).
//! A free slot is a credit: a producer reserves credits (one CAS for a batch), fills the
//! slots and publishes them; the consumer frees slots in order and returns their credits
//! every half channel. A producer that finds no credit counts a credit stall and waits (bounded by
//! the operation timeout). Slot buffers are allocated once. A router forwards a packet by
//! swapping buffers between its inbound and outbound slot, so intermediate hops copy nothing.
//! A message of more than one packet lends its payload to the first hop instead of copying
//! it into the slots: the send returns once the first router has taken every packet, and on
//! timeout or shutdown it voids, under the slot lock, any packet not yet taken, so no slot
//! outlives the caller's buffer. A one-packet message is copied and the send returns at
//! once, unless it goes one hop to a router that is free with nothing queued before it: the
//! sender's own pass then delivers it at once, so it is lent too (a neighbour write of a
//! small collective's step, copied once instead of twice). The receiving router writes lent
//! packets of one message that land back to back with one `ChipMemory::write` (always before
//! their credits return), so a large neighbour write is copied once, in chunks of a few
//! packets.
//!
//! **Direct delivery.** A message that goes one hop over a link with no fault, fits the
//! channel (at most `channel_slots` packets) and finds the receiving router idle with
//! nothing queued is delivered on the sender's thread: the sender takes that router's token
//! and does what its pass would do (one `ChipMemory::write`, then the increment), with no
//! slot, credit or header. An empty channel would have taken the message without a credit
//! stall, so the link counts the same packets and bytes; nothing of this sender is queued
//! before it, so order holds; a write the chip rejects is replayed packet by packet, so its
//! losses are recorded exactly as the router records them. Faulted links always take the
//! packet path. This is a small collective's every step: per step the slots, credits and
//! router pass had cost about as much as the data's copy. A message longer than a channel
//! (`FabricSender::direct_message_bytes`) always travels as packets, so callers that stage
//! or compute what they send a part at a time send parts no longer than that.
//!
//! **Computed payloads.** `write_with_and_inc` sends bytes that a function computes where
//! they land, as the receiving core would write them at the end of a hop (a reduction's
//! last add, or a partial sum on its way). Delivered directly, the function fills the
//! destination's memory under its bank lock, where it may read the rest of that bank
//! through the lock it holds (`HeldMemory`: the owner's input beside the output of a
//! reduction's last add) and only *try* to read other chip memory
//! (`Fabric::try_read_local_with`), filling a buffer instead, with nothing locked, when a
//! lock it needs is busy (`ChipMemory::write_trying`: no thread waits for a lock while
//! holding one); on every other path it fills a staging buffer first and the message travels
//! as packets, so statistics, order, faults and write errors are exactly those of
//! `write_and_inc` with the same bytes (`tests/computed.rs` compares the two on each path).
//! `copy_and_inc` sends bytes of the sending chip's own memory (a gather passing on its
//! output). Delivered directly, they go from memory to memory in one pass when the
//! destination's memory can reach the source chip's (`ChipMemory::copy_from`, naming the
//! source by chip id: the destination's bank locked per chunk, the source's read lock only
//! tried, so two chips copying to each other never wait on each other), else through a
//! buffer; on every other path they are read into a staging buffer and travel as packets,
//! as above.
//!
//! **Threads.** One router thread per chip, line and direction that has an inbound hop. It
//! drains all inbound channels of that hop (links x VCs) and, per the route's 2 bits for this
//! hop, writes locally (`ChipMemory::write`, semaphore increment), forwards, or both. It
//! never blocks on one channel: a packet waiting for an outbound credit stays at its
//! channel's head while the router serves the others. An idle router spins ~64 times, yields
//! ~16 times, then parks; producers unpark it only if it announced that it sleeps, so a busy
//! channel costs no wake per packet. A router's passes run under a token, so they may run on
//! another thread: a sender waiting for a credit first spins briefly, then runs a pass of the
//! router it waits on if that router is not running, and then of each router down the line
//! that this pass forwarded to or is blocked on. A helper publishes its forwards without a
//! wake and drives the next router itself; a router it cannot run is woken instead. It never
//! runs routers of its own chip (a kernel may hold its chip's memory while it sends). Every
//! send publishes quietly and then drives the routers down its path itself (a router whose
//! pass runs elsewhere is woken instead): on the 2-core host, moving every slot between cores
//! cost more than the parallelism gained, and a small collective's steps were chains of router
//! wake-ups. So `ChipMemory::write` may be called on any sending thread.
//!
//! `Fabric::read_local` reads a chip's own memory (`ChipMemory::read`, no link crossed) for a
//! thread that runs that chip's part of an algorithm while the chip's kernel waits (the
//! collectives' line runner).
//!
//! `wait_semaphore` checks the table a few hundred times (yielding every 16th check) before it
//! sleeps on the condvar: the increment usually comes from a peer on the other core within
//! microseconds. `TTMESH_SEM_SPIN` sets the count (0: sleep at once).
//!
//! **Deadlock avoidance.** Lines: channel dependencies run one way along the line and end at
//! the line's end, so there is no cycle. Rings: two virtual channels per link and a dateline
//! on the wrap-around hop (last chip to first going forward, first to last going backward).
//! Packets start on VC0 and move to VC1 when they cross the dateline; a packet travels at
//! most n-1 hops, so it never crosses it twice. VC0 then never uses the dateline hop and VC1
//! never reaches it again, so each VC's dependency chain is acyclic; routers drain both
//! independently, and local writes never block. Full-load ring tests exercise this. 2D:
//! dimension order (column, then row) means dependencies run column -> row and never back,
//! so a mesh has no cycle; on a torus each ring keeps its dateline and a turn starts the row
//! on VC0 (`tests/mesh2d.rs` runs all-to-all through 2-slot channels on both). Chip
//! memory: a delivery holds the destination's bank lock, and whatever it reads meanwhile
//! (the source of a copied payload, the operands of a computed one) it only *tries*, falling
//! back to a buffer filled with nothing held (`ChipMemory::copy_from`, `write_trying`). No
//! thread waits for a memory lock while holding one, so deliveries crossing each other's
//! chips cannot deadlock.
//!
//! **Packets.** See [`packet`]: 32-byte header with the 1D low-latency route (2 bits per
//! hop: forward, write, write-and-forward; up to 16 hops; 2D adds a turn code), source,
//! address, length,
//! sequence number, semaphore argument and checksum. Send types: unicast write, inline write,
//! atomic increment, fused write + increment, line multicast (`start..start+range` hops).
//! Messages larger than the payload size are split; a message's increment rides on its last
//! packet, so it lands after the data. Order is kept per (sender, destination, link index).
//!
//! **Semaphores.** The fabric holds one table of `u32 -> u64` semaphores per chip.
//! `wait_semaphore` consumes what it waited for, so a trace replayed many times can reuse
//! the same semaphore.
//!
//! **Faults** ([`Fault`], per link, both directions). `Down`: nothing crosses; sends whose
//! path uses the link fail at once with `link ... is down: packet from chip s to chip d not
//! delivered`, and packets already in flight that reach it are lost. `Drop { every_nth }`:
//! every n-th crossing is lost (the emulated link knows and reports it, like a sequence gap
//! would). `Corrupt { every_nth }`: every n-th crossing has a byte flipped; the receiving
//! router's checksum catches it and discards the packet. (The checksum is a link-level check,
//! like Ethernet's: sealed by the sending end and verified by the receiving end of every
//! link on which a Corrupt fault is or was set. Injected faults are the only thing that
//! damages packets here; on other links both steps would just re-read every payload.) Every
//! loss is counted on the link,
//! reported to the sending handle (its next `flush` fails naming the link) and recorded for
//! each chip the packet was meant for: a `wait_semaphore` whose increment was lost fails at
//! once, and any timed-out wait lists the losses (`semaphore 7 on chip 3 waited for 4, saw 2
//! after 5s; link chip 2 port 8 <-> chip 6 port 0 dropped 2 packets`). `Slow { factor }`
//! multiplies modeled time. Nothing waits without a timeout and `shutdown` always completes.
//!
//! **Abort and recover.** A user of the fabric (the collectives) that fails calls
//! [`Fabric::abort`] with the cause: from then on every `wait_semaphore` and send fails at
//! once with [`FabricError::Aborted`] naming it, so a failure on one chip ends the others'
//! waits now. [`Fabric::recover`], called when no kernel runs, waits until every channel is
//! empty, zeroes all semaphores, forgets losses and lifts the abort: a defined state again.
//!
//! **Modeled time.** Each packet adds `(32 + payload) / (bandwidth * efficiency)` (times the
//! slow factor) plus one hop latency to the busy time of every link direction it crosses
//! (`LinkStats::busy_ns`); [`LinkParams::transfer_ns`] models a whole transfer.

mod channel;
mod config;
mod error;
mod fabric;
mod inner;
mod memory;
pub mod packet;
mod payload;
mod remote;
pub(crate) mod route;
mod router;
mod sender;
pub mod testing;

pub use config::{
    AxisLine, Dir, EthLink, FabricConfig, FabricSpec, Fault, LineDir, LinkDirection, LinkParams,
    LinkStats, MeshGrid, RouteInfo,
};
pub use error::{FabricError, MemoryError};
pub use fabric::Fabric;
pub use memory::{ChipMemory, ComputedFill, HeldMemory};
pub use remote::RemoteChips;
pub use sender::FabricSender;
/// Addresses on a chip: the vocabulary the fabric shares with the chip (`ttmesh-noc`).
pub use ttmesh_noc::{MemSpace, NocAddr};
