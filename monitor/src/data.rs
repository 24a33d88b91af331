//! Plain data that crosses the process boundary (and the JSON output).

use serde::{Deserialize, Serialize};

/// Who publishes: shown in the monitor's heading.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// The reader fills this from the segment header; the publisher ignores what is passed in
    /// and uses the OS pid.
    pub pid: u32,
    /// Program name.
    pub name: String,
    /// Topology name, e.g. "t3k".
    pub topology: String,
    /// (rows, cols).
    pub mesh_shape: (u32, u32),
    /// e.g. "wormhole_b0".
    pub arch: String,
    /// e.g. "FABRIC_1D".
    pub fabric: String,
    /// This process's rank in a mesh split over MPI ranks, 0 when the mesh is wholly here. The
    /// reader fills it from the segment header.
    pub rank: u32,
    /// How many ranks the mesh spans, 1 when it is wholly here. The reader fills it from the
    /// segment header.
    pub ranks: u32,
    /// Names one opening of one mesh, the same on every rank of it: the monitor shows the
    /// segments of a split mesh that share it as one mesh. Opaque; any text.
    pub mesh_id: String,
}

impl ProcessInfo {
    /// Info for this process: its pid and program name (the file name of `argv[0]`).
    pub fn for_current_process(
        topology: &str,
        mesh_shape: (u32, u32),
        arch: &str,
        fabric: &str,
    ) -> ProcessInfo {
        let name = std::env::args_os()
            .next()
            .and_then(|a| {
                std::path::Path::new(&a)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "unknown".to_string());
        ProcessInfo {
            pid: std::process::id(),
            name,
            topology: topology.to_string(),
            mesh_shape,
            arch: arch.to_string(),
            fabric: fabric.to_string(),
            rank: 0,
            ranks: 1,
            mesh_id: String::new(),
        }
    }

    /// This info for `rank` of a mesh split over `ranks` MPI ranks, opened as `mesh_id` on
    /// every rank. Its segment then holds only that rank's chips.
    pub fn for_rank(mut self, rank: u32, ranks: u32, mesh_id: &str) -> ProcessInfo {
        self.rank = rank;
        self.ranks = ranks;
        self.mesh_id = mesh_id.to_string();
        self
    }

    /// True when the mesh is split over several ranks, this segment holding one rank's chips.
    pub fn is_split(&self) -> bool {
        self.ranks > 1
    }
}

/// Which allocator a [`MemoryCounters`] describes (tt-metal's BufferType, minus SYSTEM_MEMORY).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MemoryKind {
    Dram,
    L1,
    L1Small,
    Trace,
}

impl MemoryKind {
    pub const ALL: [MemoryKind; 4] = [
        MemoryKind::Dram,
        MemoryKind::L1,
        MemoryKind::L1Small,
        MemoryKind::Trace,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The name tt-metal uses: DRAM, L1, L1_SMALL, TRACE.
    pub fn label(self) -> &'static str {
        match self {
            MemoryKind::Dram => "DRAM",
            MemoryKind::L1 => "L1",
            MemoryKind::L1Small => "L1_SMALL",
            MemoryKind::Trace => "TRACE",
        }
    }
}

/// One allocator's statistics on one chip (bytes, summed over its banks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryCounters {
    pub allocated: u64,
    pub capacity: u64,
    pub live_buffers: u64,
    pub peak: u64,
    pub largest_free: u64,
}

/// The counters a chip's threads update; [`ChipSnapshot`] adds the chip's identity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChipCounters {
    pub dram: MemoryCounters,
    pub l1: MemoryCounters,
    pub l1_small: MemoryCounters,
    pub trace: MemoryCounters,
    /// Live traces.
    pub traces: u64,
    /// Bytes of live traces' commands (tt-metal's trace_buffers_size).
    pub trace_bytes: u64,
    /// Trace replays since the mesh opened.
    pub replays: u64,
    /// Bytes per chip the program labelled as model weights (`MeshDevice::label_memory`).
    pub weights_bytes: u64,
    /// Bytes per chip the program labelled as KV cache.
    pub kv_cache_bytes: u64,
    /// Host bytes behind the chip's memory: its own chunks plus an equal share of those it
    /// holds with other chips (equal contents are stored once).
    pub host_bytes: u64,
}

impl ChipCounters {
    pub fn memory(&self, kind: MemoryKind) -> &MemoryCounters {
        match kind {
            MemoryKind::Dram => &self.dram,
            MemoryKind::L1 => &self.l1,
            MemoryKind::L1Small => &self.l1_small,
            MemoryKind::Trace => &self.trace,
        }
    }

    pub fn memory_mut(&mut self, kind: MemoryKind) -> &mut MemoryCounters {
        match kind {
            MemoryKind::Dram => &mut self.dram,
            MemoryKind::L1 => &mut self.l1,
            MemoryKind::L1Small => &mut self.l1_small,
            MemoryKind::Trace => &mut self.trace,
        }
    }
}

/// One chip as a reader saw it, consistent within itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChipSnapshot {
    /// The chip's id in the whole mesh (the same on every rank of a split mesh).
    pub id: u32,
    /// The rank holding the chip (0 when the mesh is wholly in one process).
    pub rank: u32,
    /// (row, col) in the mesh.
    pub coord: (u32, u32),
    pub dram: MemoryCounters,
    pub l1: MemoryCounters,
    pub l1_small: MemoryCounters,
    pub trace: MemoryCounters,
    pub traces: u64,
    pub trace_bytes: u64,
    pub replays: u64,
    /// Bytes per chip the program labelled as model weights (`MeshDevice::label_memory`).
    pub weights_bytes: u64,
    /// Bytes per chip the program labelled as KV cache.
    pub kv_cache_bytes: u64,
    /// Host bytes behind the chip's memory: its own chunks plus an equal share of those it
    /// holds with other chips (equal contents are stored once).
    pub host_bytes: u64,
}

impl ChipSnapshot {
    pub fn counters(&self) -> ChipCounters {
        ChipCounters {
            dram: self.dram,
            l1: self.l1,
            l1_small: self.l1_small,
            trace: self.trace,
            traces: self.traces,
            trace_bytes: self.trace_bytes,
            replays: self.replays,
            weights_bytes: self.weights_bytes,
            kv_cache_bytes: self.kv_cache_bytes,
            host_bytes: self.host_bytes,
        }
    }

    pub fn memory(&self, kind: MemoryKind) -> &MemoryCounters {
        match kind {
            MemoryKind::Dram => &self.dram,
            MemoryKind::L1 => &self.l1,
            MemoryKind::L1Small => &self.l1_small,
            MemoryKind::Trace => &self.trace,
        }
    }
}

/// The counters a link's router updates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkCounters {
    pub packets: u64,
    pub bytes: u64,
    pub stalls: u64,
    pub errors: u64,
}

/// One ethernet link (chip a, port a) <-> (chip b, port b) as a reader saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkSnapshot {
    pub a_chip: u32,
    pub a_port: u32,
    pub b_chip: u32,
    pub b_port: u32,
    pub packets: u64,
    pub bytes: u64,
    pub stalls: u64,
    pub errors: u64,
}

/// Why a segment's owner is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Staleness {
    /// No process has the pid (or it is a zombie).
    Exited,
    /// A process has the pid but started at another time: the pid was reused.
    PidReused,
}

impl Staleness {
    /// "process 1234 exited", or "... and its pid was reused".
    pub fn describe(self, pid: u32) -> String {
        match self {
            Staleness::Exited => format!("process {pid} exited"),
            Staleness::PidReused => format!("process {pid} exited and its pid was reused"),
        }
    }
}

/// Everything one segment holds, read at one moment (each chip and link consistent within
/// itself; different slots may be a few nanoseconds apart).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSnapshot {
    /// Segment name without the leading slash, e.g. "ttmesh-1234".
    pub segment: String,
    pub info: ProcessInfo,
    /// Clock ticks since boot at which the owner started.
    pub start_time: u64,
    /// When the segment was created, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// Some when the owner is gone: the numbers are the last it published.
    pub stale: Option<Staleness>,
    pub chips: Vec<ChipSnapshot>,
    pub links: Vec<LinkSnapshot>,
}

/// A candidate segment found in /dev/shm (not yet read or validated).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentInfo {
    /// File name, e.g. "ttmesh-1234" (the shm name is this with a leading slash).
    pub name: String,
    /// The pid in the name, when the name has the form `ttmesh-<pid>[-<n>]`.
    pub pid: Option<u32>,
    /// File size in bytes.
    pub size: u64,
}
