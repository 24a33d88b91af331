//! The MPI world of this process.

use mpi::traits::Communicator;

/// This process's place among the ranks.
pub struct World {
    _universe: mpi::environment::Universe,
    pub rank: u32,
    pub size: u32,
}

impl World {
    /// Initialises MPI (once per process).
    pub fn init() -> Option<World> {
        let (universe, _level) = mpi::initialize_with_threading(mpi::Threading::Funneled)?;
        let w = universe.world();
        Some(World {
            rank: w.rank() as u32,
            size: w.size() as u32,
            _universe: universe,
        })
    }
}
