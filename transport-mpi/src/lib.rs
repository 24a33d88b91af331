//! ttmesh-transport-mpi: a big mesh's links between ranks, over MPI.
//!
//! Owns: the MPI world (started once per process, on its progress thread, which makes every
//! MPI call: see `progress.rs` for why), the far end of fabric deliveries into chips other
//! ranks hold (`links.rs`: the fabric's `RemoteChips` and those chips' `ChipMemory`), the
//! messages' bytes (`wire.rs`), and host-side exchanges between ranks. Must not touch: chips,
//! meshes or collectives; it sees a chip only as the fabric's `ChipMemory`. Without the `mpi`
//! feature it builds only the message format, and no MPI at all.

pub mod wire;

#[cfg(feature = "mpi")]
mod links;
#[cfg(feature = "mpi")]
mod outbox;
#[cfg(feature = "mpi")]
mod progress;
#[cfg(feature = "mpi")]
mod transport;

#[cfg(feature = "mpi")]
pub use links::RankLinks;
#[cfg(feature = "mpi")]
pub use transport::{started, transport, MeshLinks, Transport};

/// True when this build can run over MPI ranks (the `mpi` feature).
pub const BUILT_WITH_MPI: bool = cfg!(feature = "mpi");

/// MPI could not do what was asked; the message names the rank and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);
