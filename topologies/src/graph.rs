//! The checked cluster graph and its queries. Pure data: no threads, no I/O.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// A chip's id. In a checked graph the ids are exactly `0..num_chips`, so an id is also an index
/// and a device id.
pub type ChipId = u32;

/// The chip architectures ttmesh emulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ArchName {
    #[serde(rename = "wormhole_b0")]
    WormholeB0,
    #[serde(rename = "blackhole")]
    Blackhole,
}

impl ArchName {
    /// The spellings accepted in a descriptor's `arch` field.
    pub const ALL_NAMES: [&'static str; 2] = ["wormhole_b0", "blackhole"];

    /// The descriptor spelling: `"wormhole_b0"` or `"blackhole"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ArchName::WormholeB0 => "wormhole_b0",
            ArchName::Blackhole => "blackhole",
        }
    }

    /// Parses the descriptor spelling (exact, lower case).
    pub fn from_name(s: &str) -> Option<ArchName> {
        match s {
            "wormhole_b0" => Some(ArchName::WormholeB0),
            "blackhole" => Some(ArchName::Blackhole),
            _ => None,
        }
    }

    /// Ethernet ports per chip: valid ports are `0..num_eth_ports()`.
    pub fn num_eth_ports(self) -> u32 {
        match self {
            ArchName::WormholeB0 => 16,
            ArchName::Blackhole => 14,
        }
    }
}

impl std::fmt::Display for ArchName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a mesh graph descriptor declares one dimension of the device grid: `LINE` (no wrap
/// link) or `RING` (its last chip links back to its first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum DimKind {
    #[serde(rename = "LINE")]
    Line,
    #[serde(rename = "RING")]
    Ring,
}

impl DimKind {
    /// The descriptor spelling, `LINE` or `RING`.
    pub fn as_str(self) -> &'static str {
        match self {
            DimKind::Line => "LINE",
            DimKind::Ring => "RING",
        }
    }
}

/// One chip: its id, its mesh coordinate `(row, col)` and an optional board label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chip {
    pub id: ChipId,
    pub coord: (usize, usize),
    pub board: Option<String>,
}

/// One ethernet link: `(chip, port)` at each end. Links are undirected; `a`/`b` keep file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Link {
    pub a: (ChipId, u32),
    pub b: (ChipId, u32),
}

/// An ordered run of chips, e.g. a mesh row. `is_ring` is true when there are more than two
/// chips (with two, "ring" and "line" are the same pair), each consecutive pair is linked and
/// the last chip links back to the first. A row of a hand-wired descriptor need not be linked
/// at all: check [`ClusterGraph::is_linked_path`] before running a line algorithm on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    pub chips: Vec<ChipId>,
    pub is_ring: bool,
}

impl Line {
    pub fn len(&self) -> usize {
        self.chips.len()
    }
    pub fn is_empty(&self) -> bool {
        self.chips.is_empty()
    }
}

/// A checked cluster: every chip in one mesh cell, ids `0..N`, links between known chips on
/// distinct, existing ports. Build one with [`crate::load`] or [`crate::parse_str`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterGraph {
    name: String,
    arch: ArchName,
    mesh_shape: (usize, usize),
    /// Sorted by id, so `chips[id].id == id`.
    chips: Vec<Chip>,
    links: Vec<Link>,
    /// `[rows, cols]` kinds as a mesh graph descriptor declared them; None for a TOML
    /// descriptor, which lists its links instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    dim_kinds: Option<[DimKind; 2]>,
    /// Row-major: `grid[r * cols + c]` is the chip at `(r, c)`.
    #[serde(skip)]
    grid: Vec<ChipId>,
    /// Per chip: neighbour -> (own port, neighbour's port) for each link, ports sorted.
    #[serde(skip)]
    adj: Vec<BTreeMap<ChipId, Vec<(u32, u32)>>>,
}

impl ClusterGraph {
    /// Builds the indexes. The caller (the parser) has checked every invariant.
    pub(crate) fn from_checked(
        name: String,
        arch: ArchName,
        mesh_shape: (usize, usize),
        mut chips: Vec<Chip>,
        links: Vec<Link>,
    ) -> ClusterGraph {
        chips.sort_by_key(|c| c.id);
        let (_, cols) = mesh_shape;
        let mut grid = vec![0; chips.len()];
        for c in &chips {
            grid[c.coord.0 * cols + c.coord.1] = c.id;
        }
        let mut adj = vec![BTreeMap::new(); chips.len()];
        for l in &links {
            let ((ca, pa), (cb, pb)) = (l.a, l.b);
            adj[ca as usize]
                .entry(cb)
                .or_insert_with(Vec::new)
                .push((pa, pb));
            adj[cb as usize]
                .entry(ca)
                .or_insert_with(Vec::new)
                .push((pb, pa));
        }
        for m in &mut adj {
            for ports in m.values_mut() {
                ports.sort_unstable();
            }
        }
        ClusterGraph {
            name,
            arch,
            mesh_shape,
            chips,
            links,
            dim_kinds: None,
            grid,
            adj,
        }
    }

    /// The same graph, recording the dimension kinds its mesh graph descriptor declared.
    pub(crate) fn with_dim_kinds(mut self, kinds: [DimKind; 2]) -> ClusterGraph {
        self.dim_kinds = Some(kinds);
        self
    }

    /// `[rows, cols]`: whether each dimension was declared `LINE` or `RING` by the mesh graph
    /// descriptor this graph was read from; None for a TOML descriptor or a generated name.
    /// The mesh turns this into the fabric config the descriptor implies.
    pub fn dim_kinds(&self) -> Option<[DimKind; 2]> {
        self.dim_kinds
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn arch(&self) -> ArchName {
        self.arch
    }
    /// `(rows, cols)`.
    pub fn mesh_shape(&self) -> (usize, usize) {
        self.mesh_shape
    }
    pub fn num_chips(&self) -> usize {
        self.chips.len()
    }
    /// All chips, sorted by id.
    pub fn chips(&self) -> &[Chip] {
        &self.chips
    }
    /// All links, in descriptor order.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The chip at mesh coordinate `(r, c)`, or `None` outside the mesh.
    pub fn chip_at(&self, r: usize, c: usize) -> Option<ChipId> {
        let (rows, cols) = self.mesh_shape;
        (r < rows && c < cols).then(|| self.grid[r * cols + c])
    }

    /// `(row, col)` of a chip, or `None` for an unknown id.
    pub fn coord_of(&self, chip: ChipId) -> Option<(usize, usize)> {
        self.chips.get(chip as usize).map(|c| c.coord)
    }

    /// Directly linked chips with the number of links to each, sorted by id. Empty for an
    /// unknown id.
    pub fn neighbours(&self, chip: ChipId) -> Vec<(ChipId, usize)> {
        self.adj
            .get(chip as usize)
            .map(|m| m.iter().map(|(&n, p)| (n, p.len())).collect())
            .unwrap_or_default()
    }

    /// Number of links joining `a` and `b` (0 if none or either id is unknown).
    pub fn link_count(&self, a: ChipId, b: ChipId) -> usize {
        self.adj
            .get(a as usize)
            .and_then(|m| m.get(&b))
            .map_or(0, Vec::len)
    }

    /// The `(port on a, port on b)` pairs of the links joining `a` and `b`, sorted.
    pub fn ports_between(&self, a: ChipId, b: ChipId) -> Vec<(u32, u32)> {
        self.adj
            .get(a as usize)
            .and_then(|m| m.get(&b))
            .cloned()
            .unwrap_or_default()
    }

    /// Fewest links to cross from `a` to `b` (breadth-first search). `Some(0)` when `a == b`;
    /// `None` when either id is unknown or `b` cannot be reached.
    pub fn hop_distance(&self, a: ChipId, b: ChipId) -> Option<usize> {
        let n = self.chips.len();
        if a as usize >= n || b as usize >= n {
            return None;
        }
        let mut dist = vec![usize::MAX; n];
        dist[a as usize] = 0;
        let mut queue = VecDeque::from([a]);
        while let Some(u) = queue.pop_front() {
            if u == b {
                return Some(dist[u as usize]);
            }
            for &v in self.adj[u as usize].keys() {
                if dist[v as usize] == usize::MAX {
                    dist[v as usize] = dist[u as usize] + 1;
                    queue.push_back(v);
                }
            }
        }
        None
    }

    /// Mesh row `r`, left to right. Empty `Line` when `r` is outside the mesh.
    pub fn row(&self, r: usize) -> Line {
        let (rows, cols) = self.mesh_shape;
        if r >= rows {
            return self.make_line(Vec::new());
        }
        self.make_line(self.grid[r * cols..(r + 1) * cols].to_vec())
    }

    /// Mesh column `c`, top to bottom. Empty `Line` when `c` is outside the mesh.
    pub fn col(&self, c: usize) -> Line {
        let (rows, cols) = self.mesh_shape;
        if c >= cols {
            return self.make_line(Vec::new());
        }
        self.make_line((0..rows).map(|r| self.grid[r * cols + c]).collect())
    }

    /// The lines a CCL with TT-NN's `cluster_axis = axis` runs along: axis 0 gives the columns
    /// (chips that differ in row, one line per column), axis 1 gives the rows (one line per
    /// row). Empty for any other axis.
    pub fn lines_along_axis(&self, axis: usize) -> Vec<Line> {
        let (rows, cols) = self.mesh_shape;
        match axis {
            0 => (0..cols).map(|c| self.col(c)).collect(),
            1 => (0..rows).map(|r| self.row(r)).collect(),
            _ => Vec::new(),
        }
    }

    /// True if every consecutive pair of `chips` is linked.
    pub fn is_linked_path(&self, chips: &[ChipId]) -> bool {
        chips.windows(2).all(|w| self.link_count(w[0], w[1]) > 0)
    }

    /// Every chip once, each consecutive pair linked; a ring (rotated to start at chip 0) when
    /// the wiring allows one. A 2x4 T3K gives its 8-chip perimeter ring, an even-sided mesh a
    /// ring that snakes through it, an odd x odd mesh a row snake, `line-N` the line. `None` if
    /// no such order exists or none is found within a bounded search (irregular wiring).
    pub fn linearize(&self) -> Option<Line> {
        let (rows, cols) = self.mesh_shape;
        let mut candidates: Vec<Vec<(usize, usize)>> = Vec::new();
        if rows >= 2 && cols >= 2 {
            if rows % 2 == 0 {
                candidates.push(grid_cycle(rows, cols));
            } else if cols % 2 == 0 {
                candidates.push(
                    grid_cycle(cols, rows)
                        .into_iter()
                        .map(|(a, b)| (b, a))
                        .collect(),
                );
            }
        }
        candidates.push(snake(rows, cols));
        candidates.push(snake(cols, rows).into_iter().map(|(a, b)| (b, a)).collect());

        let mut best: Option<Line> = None;
        for cand in candidates {
            let chips: Vec<ChipId> = cand.iter().map(|&(r, c)| self.grid[r * cols + c]).collect();
            if !self.is_linked_path(&chips) {
                continue;
            }
            let line = self.make_line(chips);
            if line.is_ring {
                return Some(self.rotate_to_zero(line));
            }
            best.get_or_insert(line);
        }
        best.or_else(|| self.search_path().map(|l| self.rotate_to_zero(l)))
    }

    fn make_line(&self, chips: Vec<ChipId>) -> Line {
        let is_ring = chips.len() > 2
            && self.link_count(chips[0], chips[chips.len() - 1]) > 0
            && self.is_linked_path(&chips);
        Line { chips, is_ring }
    }

    fn rotate_to_zero(&self, mut line: Line) -> Line {
        if line.is_ring {
            if let Some(p) = line.chips.iter().position(|&c| c == 0) {
                line.chips.rotate_left(p);
            }
        }
        line
    }

    /// Depth-first search for a Hamiltonian path, for wiring the mesh patterns miss. The step
    /// budget keeps a hostile descriptor from making this exponential.
    fn search_path(&self) -> Option<Line> {
        const BUDGET: usize = 200_000;
        let n = self.chips.len();
        let mut steps = 0usize;
        let mut found: Option<Vec<ChipId>> = None;
        for start in 0..n as ChipId {
            let mut path = vec![start];
            let mut seen = vec![false; n];
            seen[start as usize] = true;
            // Stack of (chip, neighbour iterator index).
            let mut stack: Vec<usize> = vec![0];
            while let Some(top) = stack.last_mut() {
                steps += 1;
                if steps > BUDGET {
                    return found.map(|c| self.make_line(c));
                }
                if path.len() == n {
                    let line = self.make_line(path.clone());
                    if line.is_ring {
                        return Some(line);
                    }
                    found.get_or_insert(path.clone());
                }
                let u = *path
                    .last()
                    .expect("path is never empty while the stack is not");
                let next = self.adj[u as usize]
                    .keys()
                    .skip(*top)
                    .position(|&v| !seen[v as usize])
                    .map(|off| *top + off);
                match next {
                    Some(i) => {
                        *top = i + 1;
                        let v = *self.adj[u as usize].keys().nth(i).expect("index from keys");
                        seen[v as usize] = true;
                        path.push(v);
                        stack.push(0);
                    }
                    None => {
                        stack.pop();
                        if let Some(v) = path.pop() {
                            seen[v as usize] = false;
                        }
                    }
                }
            }
        }
        found.map(|c| self.make_line(c))
    }
}

/// A Hamiltonian cycle of a `rows x cols` grid with `rows` even and both sides >= 2: along row
/// 0, snake back and forth through columns 1.. of the other rows, return up column 0.
fn grid_cycle(rows: usize, cols: usize) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = (0..cols).map(|c| (0, c)).collect();
    for r in 1..rows {
        if r % 2 == 1 {
            out.extend((1..cols).rev().map(|c| (r, c)));
        } else {
            out.extend((1..cols).map(|c| (r, c)));
        }
    }
    out.extend((1..rows).rev().map(|r| (r, 0)));
    out
}

/// Boustrophedon order over rows: row 0 left to right, row 1 right to left, ...
fn snake(rows: usize, cols: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        if r % 2 == 0 {
            out.extend((0..cols).map(|c| (r, c)));
        } else {
            out.extend((0..cols).rev().map(|c| (r, c)));
        }
    }
    out
}
