//! A big mesh over MPI ranks: which chips each rank opens (the rank bindings) and whether this
//! process may run as one rank at all.

mod bindings;

pub use bindings::{BindingsError, RankBindings};
use ttmesh_settings::{settings, MpiLaunch};

/// True when this build carries the MPI transport (cargo feature `mpi`).
pub const BUILT_WITH_MPI: bool = cfg!(feature = "mpi");

/// Refuses to go on when an MPI launcher started this process but the build has no MPI: each
/// rank would open the whole mesh by itself. Call before opening any chip.
pub fn check_launch() -> Result<(), String> {
    check_launch_of(settings().mpi_launch.as_ref(), BUILT_WITH_MPI)
}

fn check_launch_of(launch: Option<&MpiLaunch>, built_with_mpi: bool) -> Result<(), String> {
    match launch {
        Some(l) if !built_with_mpi => Err(format!(
            "this ttmesh was built without MPI, but an MPI launcher started it as rank {} of {} \
             ({} is set): every rank would open the whole mesh alone. Build with the feature \
             (`bash scripts/mpi-setup.sh && cargo build --release -p ttmesh-cli --features mpi`) \
             or run it without mpirun",
            l.rank, l.size, l.detected_by
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_without_mpi_is_refused_naming_the_fix() {
        let l = MpiLaunch {
            detected_by: "OMPI_COMM_WORLD_SIZE",
            rank: 1,
            size: 2,
        };
        let e = check_launch_of(Some(&l), false).unwrap_err();
        assert!(
            e.contains("rank 1 of 2") && e.contains("--features mpi"),
            "{e}"
        );
        assert!(check_launch_of(Some(&l), true).is_ok());
        assert!(check_launch_of(None, false).is_ok());
    }
}
