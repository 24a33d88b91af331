//! The names a stress run is given (topologies, ops, faults, dtypes, sizes), parsed and checked
//! before anything opens: an unknown name or a size that cannot split is refused naming the
//! value and the choices.

use ttmesh::{DataType, FabricConfig};

use crate::error::{bad, Result, StressError};

/// A mesh and the axes its collectives run on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TopologyChoice {
    N300,
    /// A T3K as 1x8 (the line through its 8 chips), Fabric1D: Linear collectives.
    T3kLine,
    /// A T3K as 1x8 with Fabric1DRing: Ring collectives.
    T3kRing,
    /// A Galaxy (4x8): collectives along every row (4 lines of 8).
    GalaxyRows,
    /// A Galaxy: along every column (8 lines of 4).
    GalaxyCols,
    /// A Galaxy: columns, then rows (a 2D collective over all 32 chips).
    Galaxy2d,
    Line(usize),
    Ring(usize),
    /// A cluster descriptor file with its shape: one axis if it is a line, both if 2D.
    File {
        path: String,
        rows: usize,
        cols: usize,
    },
    /// A topology opened with a fabric config of its own: `NAME@FABRIC` (e.g. `galaxy@2d`,
    /// `torus-4x4@2d-torus-x`), `mesh-RxC` (FABRIC_2D), `torus-RxC` (the torus its wrap links
    /// close), or a mesh graph descriptor (the config its dim types imply). On a 2D mesh each
    /// case draws its collectives along axis 0, axis 1, both, or the whole mesh, and a send
    /// between any two chips (a 2D route when they differ in row and column).
    Fabric {
        topology: String,
        rows: usize,
        cols: usize,
        config: FabricConfig,
    },
}

/// The names `--topology all` runs.
pub const DEFAULT_TOPOLOGIES: &str = "n300,t3k-line,t3k-ring,galaxy-rows,galaxy-cols,galaxy-2d,\
     line-4,ring-6,galaxy@2d,mesh-2x4,torus-4x4,torus-3x4@2d-torus-x,torus-4x3@2d-torus-y";
const TOPOLOGY_CHOICES: &str = "n300, t3k-line, t3k-ring, galaxy-rows, galaxy-cols, galaxy-2d, \
     line-N, ring-N (N = 2..64), mesh-RxC, torus-RxC, a topology TOML file or mesh graph \
     descriptor, any of those as NAME@FABRIC (e.g. galaxy@2d, torus-4x4@2d-torus-x), or all";

impl TopologyChoice {
    pub fn parse(s: &str) -> Result<TopologyChoice> {
        let unknown = || StressError::UnknownName {
            what: "topology",
            value: s.to_string(),
            choices: TOPOLOGY_CHOICES.into(),
        };
        let sized = |rest: &str, ring: bool| -> Result<TopologyChoice> {
            let n: usize = rest.parse().map_err(|_| unknown())?;
            let min = if ring { 3 } else { 2 };
            if !(min..=64).contains(&n) {
                return Err(bad(
                    "--topology",
                    s,
                    format!(
                        "a {} has {min} to 64 chips",
                        if ring { "ring" } else { "line" }
                    ),
                ));
            }
            Ok(if ring {
                TopologyChoice::Ring(n)
            } else {
                TopologyChoice::Line(n)
            })
        };
        Ok(match s {
            "n300" => TopologyChoice::N300,
            "t3k-line" => TopologyChoice::T3kLine,
            "t3k-ring" => TopologyChoice::T3kRing,
            "galaxy-rows" => TopologyChoice::GalaxyRows,
            "galaxy-cols" => TopologyChoice::GalaxyCols,
            "galaxy-2d" => TopologyChoice::Galaxy2d,
            _ if s.contains('@') => {
                let (topology, fabric) = s.rsplit_once('@').expect("has an @");
                let config = FabricConfig::from_name(fabric)
                    .map_err(|e| bad("--topology", s, format!("after @: {e}")))?;
                with_fabric(s, topology, Some(config))?
            }
            _ if s.starts_with("line-") => sized(&s[5..], false)?,
            _ if s.starts_with("ring-") => sized(&s[5..], true)?,
            _ if s.starts_with("mesh-") || s.starts_with("torus-") => with_fabric(s, s, None)?,
            _ if std::path::Path::new(s).is_file()
                && ttmesh_topologies::load(s)?.dim_kinds().is_some() =>
            {
                with_fabric(s, s, None)?
            }
            _ if s.ends_with(".toml") || std::path::Path::new(s).is_file() => {
                let g = ttmesh_topologies::load(s)?;
                let (rows, cols) = g.mesh_shape();
                if g.num_chips() < 2 {
                    return Err(bad(
                        "--topology",
                        s,
                        "the cluster has one chip: collectives need 2 or more",
                    ));
                }
                TopologyChoice::File {
                    path: s.to_string(),
                    rows,
                    cols,
                }
            }
            _ => return Err(unknown()),
        })
    }

    pub fn name(&self) -> String {
        match self {
            TopologyChoice::N300 => "n300".into(),
            TopologyChoice::T3kLine => "t3k-line".into(),
            TopologyChoice::T3kRing => "t3k-ring".into(),
            TopologyChoice::GalaxyRows => "galaxy-rows".into(),
            TopologyChoice::GalaxyCols => "galaxy-cols".into(),
            TopologyChoice::Galaxy2d => "galaxy-2d".into(),
            TopologyChoice::Line(n) => format!("line-{n}"),
            TopologyChoice::Ring(n) => format!("ring-{n}"),
            TopologyChoice::File { path, .. } => path.clone(),
            TopologyChoice::Fabric {
                topology, config, ..
            } => format!("{topology}@{}", config.short_name()),
        }
    }

    /// What the mesh is opened with: topology name, mesh shape, fabric config.
    pub fn mesh_key(&self) -> (String, (usize, usize), FabricConfig) {
        use FabricConfig::{Fabric1D, Fabric1DRing};
        match self {
            TopologyChoice::N300 => ("n300".into(), (1, 2), Fabric1D),
            TopologyChoice::T3kLine => ("t3k".into(), (1, 8), Fabric1D),
            TopologyChoice::T3kRing => ("t3k".into(), (1, 8), Fabric1DRing),
            TopologyChoice::GalaxyRows | TopologyChoice::GalaxyCols | TopologyChoice::Galaxy2d => {
                ("galaxy".into(), (4, 8), Fabric1DRing)
            }
            TopologyChoice::Line(n) => (format!("line-{n}"), (1, *n), Fabric1D),
            // Two chips make no ring (the mesh refuses a ring fabric there), and a file may
            // have none: both run under FABRIC_1D.
            TopologyChoice::Ring(n) => (
                format!("ring-{n}"),
                (1, *n),
                if *n > 2 { Fabric1DRing } else { Fabric1D },
            ),
            TopologyChoice::File { path, rows, cols } => (path.clone(), (*rows, *cols), Fabric1D),
            TopologyChoice::Fabric {
                topology,
                rows,
                cols,
                config,
            } => (topology.clone(), (*rows, *cols), *config),
        }
    }

    /// Whether the mesh opens in the cluster's own shape (a file, a `NAME@FABRIC`) rather
    /// than a shape of its own (a T3K as 1x8).
    pub fn own_shape(&self) -> bool {
        matches!(
            self,
            TopologyChoice::File { .. } | TopologyChoice::Fabric { .. }
        )
    }

    /// The cluster axes a collective runs on, in order, with the chips per line of each.
    pub fn axes(&self) -> Vec<(Option<usize>, usize)> {
        let (_, (rows, cols), _) = self.mesh_key();
        match self {
            TopologyChoice::GalaxyRows => vec![(Some(1), cols)],
            TopologyChoice::GalaxyCols => vec![(Some(0), rows)],
            TopologyChoice::Galaxy2d => vec![(Some(0), rows), (Some(1), cols)],
            TopologyChoice::File { .. } | TopologyChoice::Fabric { .. } if rows > 1 && cols > 1 => {
                vec![(Some(0), rows), (Some(1), cols)]
            }
            _ => vec![(None, rows * cols)],
        }
    }

    /// The axis sets a case may draw from: one set, [`TopologyChoice::axes`], except on a 2D
    /// mesh opened with a fabric of its own, where a case runs along axis 0, axis 1, both, or
    /// over the whole mesh (`cluster_axis` None).
    pub fn axis_choices(&self) -> Vec<Vec<(Option<usize>, usize)>> {
        let (_, (rows, cols), _) = self.mesh_key();
        match self {
            TopologyChoice::Fabric { .. } if rows > 1 && cols > 1 => vec![
                vec![(Some(0), rows)],
                vec![(Some(1), cols)],
                vec![(Some(0), rows), (Some(1), cols)],
                vec![(None, rows * cols)],
            ],
            _ => vec![self.axes()],
        }
    }
}

/// A `Fabric` choice for `name` (as given, for messages): `topology` opened with `config`,
/// or with what it implies (a mesh graph descriptor's dim types, `torus-RxC`'s wrap links,
/// else FABRIC_2D on a grid and FABRIC_1D on a line). Refuses a config the topology cannot
/// carry, saying what would.
fn with_fabric(name: &str, topology: &str, config: Option<FabricConfig>) -> Result<TopologyChoice> {
    use FabricConfig::*;
    let g = ttmesh_topologies::load(topology)?;
    let (rows, cols) = g.mesh_shape();
    if g.num_chips() < 2 {
        return Err(bad(
            "--topology",
            name,
            "the cluster has one chip: collectives need 2 or more",
        ));
    }
    let rows_ring = (0..rows).all(|r| g.row(r).is_ring);
    let cols_ring = (0..cols).all(|c| g.col(c).is_ring);
    let grid = rows > 1 && cols > 1;
    let config = match config {
        Some(c) => c,
        None => match ttmesh::implied_fabric_config(&g) {
            Some(c) => c,
            None if grid => match (rows_ring, cols_ring) {
                (true, true) => Fabric2DTorusXY,
                (true, false) => Fabric2DTorusX,
                (false, true) => Fabric2DTorusY,
                (false, false) => Fabric2D,
            },
            None => Fabric1D,
        },
    };
    let (wrap_x, wrap_y) = config.wraps();
    let unfit = if config == Disabled {
        Some("collectives need a fabric")
    } else if config.is_2d() && !grid {
        Some("2D fabrics need 2 or more rows and columns")
    } else if wrap_x && !rows_ring {
        Some("a torus along X needs every row closed by a wrap link (3 or more chips)")
    } else if wrap_y && !cols_ring {
        Some("a torus along Y needs every column closed by a wrap link (3 or more chips)")
    } else {
        None
    };
    if let Some(why) = unfit {
        return Err(bad(
            "--topology",
            name,
            format!(
                "{why}; {topology} is {rows}x{cols}: use 2d on mesh-RxC or galaxy, a torus \
                 config on torus-RxC, or a 1d config on a line"
            ),
        ));
    }
    Ok(TopologyChoice::Fabric {
        topology: topology.to_string(),
        rows,
        cols,
        config,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    AllGather,
    ReduceScatter,
    AllReduce,
    /// A point-to-point fabric write from one chip to another, closed by a semaphore increment.
    Send,
}

const OP_CHOICES: &str = "all_gather, reduce_scatter, all_reduce, send, or all";

impl OpKind {
    pub const ALL: [OpKind; 4] = [
        OpKind::AllGather,
        OpKind::ReduceScatter,
        OpKind::AllReduce,
        OpKind::Send,
    ];
    pub fn name(self) -> &'static str {
        match self {
            OpKind::AllGather => "all_gather",
            OpKind::ReduceScatter => "reduce_scatter",
            OpKind::AllReduce => "all_reduce",
            OpKind::Send => "send",
        }
    }
    /// nccl-tests' redop column.
    pub fn redop(self) -> &'static str {
        match self {
            OpKind::ReduceScatter | OpKind::AllReduce => "sum",
            _ => "none",
        }
    }
    pub fn parse(s: &str) -> Result<OpKind> {
        OpKind::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| StressError::UnknownName {
                what: "op",
                value: s.into(),
                choices: OP_CHOICES.into(),
            })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    None,
    Down,
    Slow,
    Drop,
    Corrupt,
    Stall,
}

const FAULT_CHOICES: &str = "none, down, slow, drop, corrupt, stall, or all";

impl FaultKind {
    pub const ALL: [FaultKind; 6] = [
        FaultKind::None,
        FaultKind::Down,
        FaultKind::Slow,
        FaultKind::Drop,
        FaultKind::Corrupt,
        FaultKind::Stall,
    ];
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::None => "none",
            FaultKind::Down => "down",
            FaultKind::Slow => "slow",
            FaultKind::Drop => "drop",
            FaultKind::Corrupt => "corrupt",
            FaultKind::Stall => "stall",
        }
    }
    pub fn parse(s: &str) -> Result<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| StressError::UnknownName {
                what: "fault",
                value: s.into(),
                choices: FAULT_CHOICES.into(),
            })
    }
}

const DTYPE_CHOICES: &str = "bf16, f32, bfloat8_b, or all";

pub fn dtype_name(d: DataType) -> &'static str {
    match d {
        DataType::BFloat16 => "bf16",
        DataType::Float32 => "f32",
        DataType::BFloat8B => "bfloat8_b",
        DataType::BFloat4B => "bfloat4_b",
        DataType::UInt32 => "uint32",
    }
}

pub fn parse_dtype(s: &str) -> Result<DataType> {
    match s {
        "bf16" | "bfloat16" => Ok(DataType::BFloat16),
        "f32" | "float32" => Ok(DataType::Float32),
        "bfloat8_b" | "bfp8_b" => Ok(DataType::BFloat8B),
        _ => Err(StressError::UnknownName {
            what: "dtype",
            value: s.into(),
            choices: DTYPE_CHOICES.into(),
        }),
    }
}

/// Bytes of one 32x32 tile of `d` on the device.
pub fn tile_bytes(d: DataType) -> u64 {
    d.tile_bytes()
}

/// "4096", "256K", "1M", "2MiB", "1G": bytes.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(bad(
                "--max-size",
                s,
                "give bytes, optionally with K, M or G (e.g. 4096, 256K, 1M)",
            ))
        }
    };
    let n: u64 = num
        .parse()
        .map_err(|_| bad("--max-size", s, "give a whole number of bytes, e.g. 256K"))?;
    n.checked_mul(mult)
        .filter(|b| *b > 0)
        .ok_or_else(|| bad("--max-size", s, "give a positive size below 16 EiB"))
}

/// Largest per-chip input `--max-size` may ask for: every chip holds its share in host memory.
pub const MAX_SIZE_LIMIT: u64 = 64 << 20;

/// A checked stress matrix: what the generator draws from.
#[derive(Clone, Debug)]
pub struct StressSpec {
    pub topologies: Vec<TopologyChoice>,
    pub ops: Vec<OpKind>,
    pub faults: Vec<FaultKind>,
    pub dtypes: Vec<DataType>,
    /// Largest per-chip input, bytes.
    pub max_size: u64,
}

fn list(s: &str, all: &str) -> Vec<String> {
    let s = if s.trim() == "all" { all } else { s };
    s.split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
}

impl StressSpec {
    /// Parses comma lists ("all" for every choice) and checks that every topology and op
    /// requested fits `max_size`.
    pub fn parse(
        topologies: &str,
        ops: &str,
        faults: &str,
        dtypes: &str,
        max_size: &str,
    ) -> Result<StressSpec> {
        let topologies = list(topologies, DEFAULT_TOPOLOGIES)
            .iter()
            .map(|t| TopologyChoice::parse(t))
            .collect::<Result<Vec<_>>>()?;
        let ops = list(ops, "all_gather,reduce_scatter,all_reduce,send")
            .iter()
            .map(|o| OpKind::parse(o))
            .collect::<Result<Vec<_>>>()?;
        let faults = list(faults, "none,down,slow,drop,corrupt,stall")
            .iter()
            .map(|f| FaultKind::parse(f))
            .collect::<Result<Vec<_>>>()?;
        let dtypes = list(dtypes, "bf16,f32,bfloat8_b")
            .iter()
            .map(|d| parse_dtype(d))
            .collect::<Result<Vec<_>>>()?;
        for (what, empty) in [
            ("--topology", topologies.is_empty()),
            ("--ops", ops.is_empty()),
            ("--faults", faults.is_empty()),
            ("--dtypes", dtypes.is_empty()),
        ] {
            if empty {
                return Err(bad(what, "''", "name at least one choice, or all"));
            }
        }
        let max_size = parse_size(max_size)?;
        if max_size > MAX_SIZE_LIMIT {
            return Err(bad(
                "--max-size",
                max_size,
                format!("at most {MAX_SIZE_LIMIT} bytes (64 MiB) per chip: every chip's data lives in host memory"),
            ));
        }
        let spec = StressSpec {
            topologies,
            ops,
            faults,
            dtypes,
            max_size,
        };
        for t in &spec.topologies {
            for &op in &spec.ops {
                if !spec.dtypes.iter().any(|&d| spec.fits(t, op, d)) {
                    let d = spec.dtypes[0];
                    let need = crate::cases::min_tiles(t, op) * tile_bytes(d);
                    return Err(bad(
                        "--max-size",
                        max_size,
                        format!(
                            "{} on {} cannot split over its chips in so few bytes: it needs at least {need} bytes per chip ({} tiles of {})",
                            op.name(),
                            t.name(),
                            need / tile_bytes(d),
                            dtype_name(d)
                        ),
                    ));
                }
            }
        }
        Ok(spec)
    }

    /// Whether the smallest case of `op` on `t` in `d` fits `max_size`.
    pub fn fits(&self, t: &TopologyChoice, op: OpKind, d: DataType) -> bool {
        crate::cases::min_tiles(t, op) * tile_bytes(d) <= self.max_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> (String, (usize, usize), FabricConfig) {
        TopologyChoice::parse(s).unwrap().mesh_key()
    }

    #[test]
    fn fabric_choices_open_with_their_config() {
        use FabricConfig::*;
        assert_eq!(key("galaxy@2d"), ("galaxy".into(), (4, 8), Fabric2D));
        assert_eq!(key("mesh-2x4"), ("mesh-2x4".into(), (2, 4), Fabric2D));
        assert_eq!(
            key("torus-4x4"),
            ("torus-4x4".into(), (4, 4), Fabric2DTorusXY)
        );
        assert_eq!(key("torus-2x4").2, Fabric2DTorusX);
        assert_eq!(
            key("torus-4x4@FABRIC_2D_TORUS_Y"),
            ("torus-4x4".into(), (4, 4), Fabric2DTorusY)
        );
        let mgd = format!(
            "{}/../topologies/tests/data/galaxy_torus_xy.textproto",
            env!("CARGO_MANIFEST_DIR")
        );
        assert_eq!(key(&mgd), (mgd.clone(), (8, 4), Fabric2DTorusXY));
        // The name reparses to the same choice (a failure's rerun command uses it).
        for s in ["galaxy@2d", "torus-4x4", mgd.as_str()] {
            let t = TopologyChoice::parse(s).unwrap();
            assert_eq!(TopologyChoice::parse(&t.name()).unwrap(), t);
            assert_eq!(t.axis_choices().len(), 4);
        }
    }

    #[test]
    fn configs_a_topology_cannot_carry_are_refused() {
        for (s, says) in [
            ("galaxy@2d-torus-x", "every row closed"),
            ("n300@2d", "2 or more rows and columns"),
            ("galaxy@disabled", "need a fabric"),
            ("galaxy@3d", "after @"),
        ] {
            let e = TopologyChoice::parse(s).unwrap_err().to_string();
            assert!(e.contains(says), "{s}: {e}");
        }
    }
}
