//! ttmesh-transport-mpi: a big mesh's links between ranks, over MPI.
//!
//! Owns: the MPI world (init, rank, size, finalize), the progress thread that funnels every
//! MPI call, and the far end of a fabric link whose chips sit on different ranks. Must not
//! touch: chips, meshes or collectives; it sees a chip only as the fabric's `ChipMemory`.
//! Without the `mpi` feature it builds no MPI code at all, and says so when asked for a world.

#[cfg(feature = "mpi")]
mod world;

/// True when this build can run over MPI ranks (the `mpi` feature).
pub const BUILT_WITH_MPI: bool = cfg!(feature = "mpi");

#[cfg(feature = "mpi")]
pub use world::World;
