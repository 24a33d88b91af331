//! A mesh over MPI ranks: this rank's part of it (which chips are here), its links to the
//! other ranks (`ttmesh-transport-mpi`), and the host-side exchanges between ranks.

use std::sync::Arc;
use std::time::Duration;

use ttmesh_fabric::{ChipMemory, Fabric, FabricSpec};
use ttmesh_transport_mpi::{transport, MeshLinks, RankLinks, Transport};

use super::RankBindings;
use crate::error::{MeshError, Result};

/// This rank's part of a big mesh.
pub(crate) struct MeshRanks {
    pub bindings: RankBindings,
    transport: &'static Transport,
    remote: Arc<RankLinks>,
    links: MeshLinks,
}

impl MeshRanks {
    /// The ranks of a mesh about to open, or None when this process is not one rank of an MPI
    /// job. Bindings are checked here, before any chip opens.
    pub fn for_open(
        bindings_file: Option<&std::path::Path>,
        cluster: &ttmesh_topologies::ClusterGraph,
    ) -> Result<Option<MeshRanks>> {
        if ttmesh_settings::settings().mpi_launch.is_none() || super::opening_in_this_process() {
            return Ok(None);
        }
        let t = transport().map_err(|e| MeshError::Config(e.to_string()))?;
        let bindings = match bindings_file {
            Some(p) => RankBindings::from_file(p, cluster, t.size()),
            None => RankBindings::split_evenly(cluster, t.size()),
        }
        .map_err(|e| MeshError::Config(e.to_string()))?;
        let owner: Vec<u32> = (0..cluster.num_chips() as u32)
            .map(|c| bindings.owner(c))
            .collect();
        // The receiving side's memories are given at `attach`, once the chips exist.
        let (remote, links) = t.open_mesh(owner, Vec::new());
        Ok(Some(MeshRanks {
            bindings,
            transport: t,
            remote,
            links,
        }))
    }

    pub fn rank(&self) -> u32 {
        self.transport.rank()
    }

    /// How many ranks the mesh spans.
    pub fn size(&self) -> u32 {
        self.transport.size()
    }

    pub fn is_local(&self, chip: u32) -> bool {
        self.bindings.owner(chip) == self.rank()
    }

    /// The fabric, with the chips other ranks hold reached through MPI. `memories` holds
    /// every chip's port; those of chips held elsewhere are replaced.
    pub fn fabric(
        &mut self,
        spec: FabricSpec,
        memories: Vec<Arc<dyn ChipMemory>>,
    ) -> std::result::Result<Fabric, ttmesh_fabric::FabricError> {
        let local: Vec<Option<Arc<dyn ChipMemory>>> = memories
            .iter()
            .enumerate()
            .map(|(c, m)| self.is_local(c as u32).then(|| m.clone()))
            .collect();
        let memories = memories
            .into_iter()
            .enumerate()
            .map(|(c, m)| match self.is_local(c as u32) {
                true => m,
                false => self.remote.memory_of(c as u32),
            })
            .collect();
        self.links = self.transport.reopen_incoming(&self.links, local);
        Fabric::with_remote(spec, memories, self.remote.clone())
    }

    /// Starts delivering what other ranks send into this rank's chips.
    pub fn attach(&self, fabric: &Arc<Fabric>) {
        self.transport.attach_fabric(&self.links, fabric);
    }

    /// Every rank's `data`, by rank; bounded by `timeout`.
    /// Every rank must be making the same call (`what` labels it and is checked).
    pub fn exchange(&self, what: &str, data: Vec<u8>, timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let all = self
            .transport
            .exchange(super::label(what, data), timeout)
            .map_err(|e| MeshError::Config(format!("{what}: {e}")))?;
        super::unlabel(what, self.rank(), all)
            .map_err(|e| MeshError::Config(format!("{what}: {e}")))
    }

    pub fn close(&self) {
        self.transport.detach(&self.links);
    }
}

/// Ends this process's part of the MPI job, if it has one: `Ok` finalises MPI (after every
/// rank got here), an error ends the whole job at once with that error printed first.
pub fn end_of_job(result: &std::result::Result<(), String>) {
    let t = match ttmesh_transport_mpi::started() {
        Some(t) => t,
        // An error before MPI started (an unknown mesh, a bad flag): a rank that just exits
        // non-zero leaves mpirun, told not to end the job when a rank does (so survivors can
        // name a lost one), exiting 0. Start MPI to end the job with the error instead.
        None if result.is_err() && ttmesh_settings::settings().mpi_launch.is_some() => {
            match transport() {
                Ok(t) => t,
                Err(_) => return,
            }
        }
        None => return,
    };
    match result {
        Ok(()) => {
            let timeout = ttmesh_settings::settings().operation_timeout();
            // Every rank reaches the end before any finalises: a rank still delivering into
            // another's chips must find it there.
            if let Err(e) = t.exchange(Vec::new(), timeout) {
                eprintln!("error: at the end of the job: {e}");
                t.abort_job(1);
            }
            if !t.finalize(timeout) {
                eprintln!("error: rank {}: MPI sends did not complete", t.rank());
                t.abort_job(1);
            }
        }
        Err(_) => t.abort_job(1),
    }
}

/// Every rank's `data`, by rank, between every rank of the MPI job (no mesh needed: what a
/// program decides between meshes, such as whether to go on); only ours outside `mpirun`.
/// Labelled `what` and bounded by `timeout` as a mesh's exchanges are.
pub fn exchange_in_job(
    what: &str,
    data: Vec<u8>,
    timeout: Duration,
) -> std::result::Result<Vec<Vec<u8>>, String> {
    if ttmesh_settings::settings().mpi_launch.is_none() {
        return Ok(vec![data]);
    }
    let t = transport().map_err(|e| e.to_string())?;
    let all = t
        .exchange(super::label(what, data), timeout)
        .map_err(|e| format!("{what}: {e}"))?;
    super::unlabel(what, t.rank(), all).map_err(|e| format!("{what}: {e}"))
}
