//! Inputs to the fabric: config names, link parameters, the cluster's links and axis lines.
//! The memory it writes is `memory.rs`'s `ChipMemory`.

use crate::FabricError;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Which fabric the mesh opens with: tt-metal's `FabricConfig`, with its values. Keyed on
/// names (`from_name`); the values are only for reports that print tt-metal's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FabricConfig {
    #[default]
    Disabled,
    /// 1D lines on which a packet goes one hop only (to a neighbour).
    Fabric1DNeighborExchange,
    Fabric1D,
    Fabric1DRing,
    /// 2D mesh: dimension-ordered routes over rows and columns, no wrap-around.
    Fabric2D,
    /// 2D with every row closed into a ring (X: along a row, `cluster_axis` 1).
    Fabric2DTorusX,
    /// 2D with every column closed into a ring (Y: along a column, `cluster_axis` 0).
    Fabric2DTorusY,
    Fabric2DTorusXY,
}

impl FabricConfig {
    /// Every config, in tt-metal's order (its values 0..=7).
    pub const ALL: [FabricConfig; 8] = [
        Self::Disabled,
        Self::Fabric1DNeighborExchange,
        Self::Fabric1D,
        Self::Fabric1DRing,
        Self::Fabric2D,
        Self::Fabric2DTorusX,
        Self::Fabric2DTorusY,
        Self::Fabric2DTorusXY,
    ];

    /// Accepts tt-metal's names (`FABRIC_2D_TORUS_X`, optionally `FabricConfig.`-prefixed)
    /// and ttmesh's short names (`disabled`, `1d`, `1d-ring`, `1d-neighbor-exchange`, `2d`,
    /// `2d-torus-x`, `2d-torus-y`, `2d-torus-xy`), case-insensitively, `_` or `-` alike.
    pub fn from_name(name: &str) -> Result<Self, FabricError> {
        let n = name.trim().to_ascii_lowercase().replace('_', "-");
        let n = n.strip_prefix("ttnn.").unwrap_or(&n);
        let n = n.strip_prefix("fabricconfig.").unwrap_or(n);
        let n = n.strip_prefix("fabric-").unwrap_or(n);
        match n {
            "disabled" | "none" | "off" => Ok(Self::Disabled),
            "1d-neighbor-exchange" | "1d-neighbour-exchange" | "neighbor-exchange" => {
                Ok(Self::Fabric1DNeighborExchange)
            }
            "1d" | "fabric1d" => Ok(Self::Fabric1D),
            "1d-ring" | "fabric1dring" => Ok(Self::Fabric1DRing),
            "2d" | "fabric2d" => Ok(Self::Fabric2D),
            "2d-torus-x" => Ok(Self::Fabric2DTorusX),
            "2d-torus-y" => Ok(Self::Fabric2DTorusY),
            "2d-torus-xy" => Ok(Self::Fabric2DTorusXY),
            _ => Err(FabricError::UnknownConfig {
                name: name.to_string(),
            }),
        }
    }

    /// tt-metal's spelling, for messages and reports.
    pub fn tt_metal_name(self) -> &'static str {
        match self {
            Self::Disabled => "DISABLED",
            Self::Fabric1DNeighborExchange => "FABRIC_1D_NEIGHBOR_EXCHANGE",
            Self::Fabric1D => "FABRIC_1D",
            Self::Fabric1DRing => "FABRIC_1D_RING",
            Self::Fabric2D => "FABRIC_2D",
            Self::Fabric2DTorusX => "FABRIC_2D_TORUS_X",
            Self::Fabric2DTorusY => "FABRIC_2D_TORUS_Y",
            Self::Fabric2DTorusXY => "FABRIC_2D_TORUS_XY",
        }
    }

    /// ttmesh's short name (what `--fabric` shows).
    pub fn short_name(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Fabric1DNeighborExchange => "1d-neighbor-exchange",
            Self::Fabric1D => "1d",
            Self::Fabric1DRing => "1d-ring",
            Self::Fabric2D => "2d",
            Self::Fabric2DTorusX => "2d-torus-x",
            Self::Fabric2DTorusY => "2d-torus-y",
            Self::Fabric2DTorusXY => "2d-torus-xy",
        }
    }

    /// tt-metal's numeric value of the config.
    pub fn value(self) -> u32 {
        Self::ALL.iter().position(|&c| c == self).unwrap_or(0) as u32
    }

    /// True for the 2D configs (mesh and torus).
    pub fn is_2d(self) -> bool {
        matches!(
            self,
            Self::Fabric2D | Self::Fabric2DTorusX | Self::Fabric2DTorusY | Self::Fabric2DTorusXY
        )
    }

    /// Whether rows (X) and columns (Y) close into rings under this config.
    pub fn wraps(self) -> (bool, bool) {
        match self {
            Self::Fabric2DTorusX => (true, false),
            Self::Fabric2DTorusY => (false, true),
            Self::Fabric2DTorusXY => (true, true),
            _ => (false, false),
        }
    }
}

impl FromStr for FabricConfig {
    type Err = FabricError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_name(s)
    }
}

impl fmt::Display for FabricConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tt_metal_name())
    }
}

/// One ethernet link direction's model. Time per packet is
/// `(header + payload) / (bandwidth * efficiency) + hop_latency`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkParams {
    pub bandwidth_bytes_per_s: f64,
    pub efficiency: f64,
    pub hop_latency_ns: f64,
    pub header_bytes: usize,
    pub default_payload_bytes: usize,
    pub max_payload_bytes: usize,
}

impl LinkParams {
    /// Wormhole: 100 Gb/s per port per direction, ~96 % usable, 711 ns per 1D hop,
    /// 4352 B default and 7616 B max payload.
    pub fn wormhole() -> Self {
        Self {
            bandwidth_bytes_per_s: 12.5e9,
            efficiency: 0.96,
            hop_latency_ns: 711.0,
            header_bytes: crate::packet::HEADER_BYTES,
            default_payload_bytes: 4352,
            max_payload_bytes: 7616,
        }
    }

    /// Wormhole under a 2D fabric: 874 ns per hop (tt-metal's figure for its 2D routers,
    /// against 711 in 1D), the rest as [`LinkParams::wormhole`].
    pub fn wormhole_2d() -> Self {
        Self {
            hop_latency_ns: 874.0,
            ..Self::wormhole()
        }
    }

    /// Blackhole: ~400 Gb/s (50 GB/s) per port per direction. ttmesh's choices, not measured:
    /// 500 ns per hop (faster SerDes, same router design) and the Wormhole packet sizes,
    /// since tt-metal sizes fabric channel buffers the same way on both.
    pub fn blackhole() -> Self {
        Self {
            bandwidth_bytes_per_s: 50e9,
            hop_latency_ns: 500.0,
            ..Self::wormhole()
        }
    }

    /// Modeled picoseconds to serialize one packet (header + `payload`) onto a link.
    pub fn serial_ps(&self, payload: usize) -> f64 {
        let wire = (self.header_bytes + payload) as f64;
        wire / (self.bandwidth_bytes_per_s * self.efficiency) * 1e12
    }

    /// Modeled picoseconds one packet of `payload` bytes occupies one link direction.
    pub fn packet_ps(&self, payload: usize, slow_factor: f64) -> u64 {
        (self.serial_ps(payload) * slow_factor + self.hop_latency_ns * 1e3 + 0.5) as u64
    }

    /// Modeled busy time of a link direction that carried `packets` packets with
    /// `payload_bytes` in all, plus `slow_extra_ps` added by slowdowns.
    pub fn busy_ns(&self, packets: u64, payload_bytes: u64, slow_extra_ps: u64) -> u64 {
        let wire = (payload_bytes + packets * self.header_bytes as u64) as f64;
        let serial_ps = wire / (self.bandwidth_bytes_per_s * self.efficiency) * 1e12;
        let ps = serial_ps + packets as f64 * self.hop_latency_ns * 1e3 + slow_extra_ps as f64;
        (ps / 1000.0).round() as u64
    }

    /// Modeled nanoseconds to move `bytes` over `hops` links in packets of `payload` bytes:
    /// the packets stream back to back, the first pays the latency of every hop.
    pub fn transfer_ns(&self, bytes: usize, hops: u32, payload: usize) -> f64 {
        let payload = payload.max(1);
        let packets = bytes.div_ceil(payload).max(1);
        let wire = (bytes + packets * self.header_bytes) as f64;
        wire / (self.bandwidth_bytes_per_s * self.efficiency) * 1e9
            + self.hop_latency_ns * hops as f64
    }
}

/// One ethernet link between two chips: `(chip, port)` at each end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthLink {
    pub a: (u32, u32),
    pub b: (u32, u32),
}

impl EthLink {
    pub fn new(a: (u32, u32), b: (u32, u32)) -> Self {
        Self { a, b }
    }
    pub fn joins(&self, x: u32, y: u32) -> bool {
        (self.a.0 == x && self.b.0 == y) || (self.a.0 == y && self.b.0 == x)
    }
}

impl fmt::Display for EthLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "chip {} port {} <-> chip {} port {}",
            self.a.0, self.a.1, self.b.0, self.b.1
        )
    }
}

/// An ordered chain of chips in which neighbours are linked: a mesh row or column, or one
/// line through all chips. `is_ring`: the last chip is also linked to the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AxisLine {
    pub chips: Vec<u32>,
    pub is_ring: bool,
}

/// The chips of a 2D mesh, row-major: `chips[r * cols + c]` sits at row `r`, column `c`.
/// The 2D fabric routes over it (see `route::mesh2d`). X runs along a row (east/west,
/// `cluster_axis` 1), Y along a column (north/south, `cluster_axis` 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshGrid {
    pub rows: u32,
    pub cols: u32,
    pub chips: Vec<u32>,
}

impl MeshGrid {
    pub fn new(rows: u32, cols: u32, chips: Vec<u32>) -> Self {
        Self { rows, cols, chips }
    }

    /// Chips `0..rows*cols` in row-major order.
    pub fn numbered(rows: u32, cols: u32) -> Self {
        Self::new(rows, cols, (0..rows * cols).collect())
    }

    pub fn chip(&self, row: u32, col: u32) -> u32 {
        self.chips[(row * self.cols + col) as usize]
    }

    pub fn row(&self, r: u32) -> Vec<u32> {
        (0..self.cols).map(|c| self.chip(r, c)).collect()
    }

    pub fn col(&self, c: u32) -> Vec<u32> {
        (0..self.rows).map(|r| self.chip(r, c)).collect()
    }

    /// (row, column) of `chip`, if it is on the grid.
    pub fn coord(&self, chip: u32) -> Option<(u32, u32)> {
        let i = self.chips.iter().position(|&c| c == chip)? as u32;
        Some((i / self.cols, i % self.cols))
    }
}

/// Everything the fabric needs to know about a cluster.
#[derive(Debug, Clone)]
pub struct FabricSpec {
    pub num_chips: u32,
    pub links: Vec<EthLink>,
    pub axes: Vec<AxisLine>,
    /// The 2D mesh the 2D configs route over (rows and columns of linked chips); None for a
    /// cluster that is only lines.
    pub grid: Option<MeshGrid>,
    pub params: LinkParams,
    pub config: FabricConfig,
    /// Slots per channel, one packet per slot (EDM's buffer count).
    pub channel_slots: usize,
    /// Slots per channel from a chip held here into one another process holds (a big mesh
    /// over MPI ranks).
    /// Their credits return only once that process confirms taking the packets, a round
    /// trip between processes of tens of microseconds where the ethernet's is about one, so
    /// the channel holds that much more to keep the link as busy.
    pub remote_channel_slots: usize,
    /// Every wait (free slot, flush, semaphore default) ends after this.
    pub timeout: Duration,
}

impl FabricSpec {
    pub const DEFAULT_SLOTS: usize = 8;
    pub const DEFAULT_REMOTE_SLOTS: usize = 64;
    /// How long a send, flush or semaphore wait may take unless the spec says otherwise: the
    /// chips' default operation timeout. The fabric reads no environment; the mesh sets
    /// `timeout` to its chips' operation timeout (`TTMESH_OPERATION_TIMEOUT_SECONDS`).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

    /// A spec with default slots and [`FabricSpec::DEFAULT_TIMEOUT`].
    pub fn new(
        num_chips: u32,
        links: Vec<EthLink>,
        axes: Vec<AxisLine>,
        params: LinkParams,
        config: FabricConfig,
    ) -> Self {
        Self {
            num_chips,
            links,
            axes,
            grid: None,
            params,
            config,
            channel_slots: Self::DEFAULT_SLOTS,
            remote_channel_slots: Self::DEFAULT_REMOTE_SLOTS,
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// The same spec over a 2D grid (what the 2D configs route over).
    pub fn with_grid(mut self, grid: MeshGrid) -> Self {
        self.grid = Some(grid);
        self
    }

    /// A `rows` x `cols` grid of chips `0..rows*cols` (row-major), `links_per_pair` links
    /// between grid neighbours, rows closed into rings by wrap links if `wrap_x` (and
    /// columns if `wrap_y`, each only when 3 or more long); axes: every row, then every
    /// column. Handy for tests and benchmarks.
    pub fn mesh(
        rows: u32,
        cols: u32,
        links_per_pair: u32,
        (wrap_x, wrap_y): (bool, bool),
        config: FabricConfig,
    ) -> Self {
        let grid = MeshGrid::numbered(rows, cols);
        let n = rows * cols;
        let mut next_port = vec![0u32; n as usize];
        let mut links = Vec::new();
        let mut join = |x: u32, y: u32| {
            for _ in 0..links_per_pair {
                let (pa, pb) = (next_port[x as usize], next_port[y as usize]);
                next_port[x as usize] += 1;
                next_port[y as usize] += 1;
                links.push(EthLink::new((x, pa), (y, pb)));
            }
        };
        let mut axes = Vec::new();
        let lines = (0..rows)
            .map(|r| (grid.row(r), wrap_x))
            .chain((0..cols).map(|c| (grid.col(c), wrap_y)));
        for (chips, wrap) in lines {
            let ring = wrap && chips.len() >= 3;
            for w in chips.windows(2) {
                join(w[0], w[1]);
            }
            if ring {
                join(chips[chips.len() - 1], chips[0]);
            }
            if chips.len() > 1 {
                axes.push(AxisLine {
                    chips,
                    is_ring: ring,
                });
            }
        }
        Self::new(n, links, axes, LinkParams::wormhole(), config).with_grid(grid)
    }

    /// Refuses a config this topology cannot carry, naming why and the configs that would
    /// work. `Fabric::new` refuses the 2D configs this way; the mesh checks every config
    /// (the fabric alone runs a ring config on a line as a line).
    pub fn check_config(&self) -> Result<(), FabricError> {
        match self.unfit(self.config) {
            None => Ok(()),
            Some(reason) => {
                let fits: Vec<&str> = self
                    .configs_carried()
                    .into_iter()
                    .map(|c| c.tt_metal_name())
                    .collect();
                Err(FabricError::ConfigNotCarried {
                    config: self.config.tt_metal_name().to_string(),
                    reason,
                    fits: fits.join(", "),
                })
            }
        }
    }

    /// Every config this topology can carry, in tt-metal's order.
    pub fn configs_carried(&self) -> Vec<FabricConfig> {
        FabricConfig::ALL
            .into_iter()
            .filter(|&c| self.unfit(c).is_none())
            .collect()
    }

    fn linked(&self, x: u32, y: u32) -> bool {
        self.links.iter().any(|l| l.joins(x, y))
    }

    /// Why `config` cannot run here, if it cannot.
    fn unfit(&self, config: FabricConfig) -> Option<String> {
        use FabricConfig::*;
        match config {
            Disabled | Fabric1DNeighborExchange | Fabric1D => None,
            Fabric1DRing => {
                let ring = self.axes.iter().any(|a| {
                    a.is_ring
                        && a.chips.len() >= 3
                        && self.linked(a.chips[0], a.chips[a.chips.len() - 1])
                });
                (!ring).then(|| {
                    "no line of this topology closes into a ring (a ring needs 3 or more chips \
                     and a link from the last back to the first)"
                        .to_string()
                })
            }
            Fabric2D | Fabric2DTorusX | Fabric2DTorusY | Fabric2DTorusXY => {
                let Some(g) = &self.grid else {
                    return Some(
                        "it is a line, not a 2D mesh (the spec has no grid of rows and columns)"
                            .into(),
                    );
                };
                if g.rows < 2 || g.cols < 2 {
                    return Some(format!(
                        "the mesh is {}x{}: 2D routing needs at least 2 rows and 2 columns",
                        g.rows, g.cols
                    ));
                }
                if g.chips.len() != (g.rows * g.cols) as usize {
                    return Some(format!(
                        "the grid lists {} chips for {}x{}",
                        g.chips.len(),
                        g.rows,
                        g.cols
                    ));
                }
                let lines = (0..g.rows)
                    .map(|r| ("row", r, g.row(r)))
                    .chain((0..g.cols).map(|c| ("column", c, g.col(c))));
                for (what, i, chips) in lines {
                    for w in chips.windows(2) {
                        if !self.linked(w[0], w[1]) {
                            return Some(format!(
                                "chips {} and {} are neighbours in {what} {i} but no ethernet \
                                 link joins them",
                                w[0], w[1]
                            ));
                        }
                    }
                }
                let (wx, wy) = config.wraps();
                let wrap = |what: &str, axis: &str, i: u32, chips: Vec<u32>| {
                    let (first, last) = (chips[0], chips[chips.len() - 1]);
                    if chips.len() < 3 {
                        Some(format!(
                            "{what} {i} has {} chips: a {axis} wrap needs 3 or more",
                            chips.len()
                        ))
                    } else if !self.linked(first, last) {
                        Some(format!(
                            "{what} {i} has no wrap link from chip {last} back to chip {first} \
                             (a torus on {axis} needs one on every {what})"
                        ))
                    } else {
                        None
                    }
                };
                let xs = (0..g.rows)
                    .filter(|_| wx)
                    .map(|r| wrap("row", "X", r, g.row(r)));
                let ys = (0..g.cols)
                    .filter(|_| wy)
                    .map(|c| wrap("column", "Y", c, g.col(c)));
                xs.chain(ys).flatten().next()
            }
        }
    }

    /// A line (or ring) of `n` chips `0..n`, `links_per_pair` links per neighbour pair, ports
    /// numbered per chip from 0. Handy for tests and benchmarks.
    pub fn line(n: u32, links_per_pair: u32, ring: bool, config: FabricConfig) -> Self {
        let mut next_port = vec![0u32; n as usize];
        let mut links = Vec::new();
        let pairs = if ring && n >= 3 {
            n
        } else {
            n.saturating_sub(1)
        };
        for i in 0..pairs {
            let (x, y) = (i, (i + 1) % n);
            for _ in 0..links_per_pair {
                let pa = next_port[x as usize];
                let pb = next_port[y as usize];
                next_port[x as usize] += 1;
                next_port[y as usize] += 1;
                links.push(EthLink::new((x, pa), (y, pb)));
            }
        }
        let axes = vec![AxisLine {
            chips: (0..n).collect(),
            is_ring: ring,
        }];
        Self::new(n, links, axes, LinkParams::wormhole(), config)
    }
}

/// Direction along an axis line: Forward = increasing index in `AxisLine::chips`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    Forward,
    Backward,
}

/// One axis line (index into `FabricSpec::axes`) and a direction along it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LineDir {
    pub axis: usize,
    pub dir: Dir,
}

/// The path the fabric uses between two chips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteInfo {
    pub line: LineDir,
    pub hops: u32,
}

/// A fault injected on one ethernet link (both directions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Nothing crosses; senders get `LinkDown`.
    Down,
    /// Modeled time per packet is multiplied by `factor` (>= 1).
    Slow { factor: f64 },
    /// Every n-th packet crossing the link is lost.
    Drop { every_nth: u64 },
    /// Every n-th packet crossing the link has one payload byte flipped.
    Corrupt { every_nth: u64 },
}

/// Which way a packet crossed an `EthLink`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkDirection {
    AToB,
    BToA,
}

/// Counters of one link direction; read while traffic runs.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkStats {
    pub link_index: usize,
    pub link: EthLink,
    pub direction: LinkDirection,
    pub from_chip: u32,
    pub to_chip: u32,
    /// Packets that crossed (dropped ones excluded).
    pub packets: u64,
    /// Wire bytes that crossed: header plus payload.
    pub bytes: u64,
    /// Payload bytes that crossed.
    pub payload_bytes: u64,
    /// Times a sender or router found no free slot on this link.
    pub credit_stalls: u64,
    pub dropped: u64,
    pub corrupted: u64,
    /// Modeled device time the link direction was busy.
    pub busy_ns: u64,
    pub fault: Option<Fault>,
}
