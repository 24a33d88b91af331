//! The case matrix: case `i` of seed `s` is drawn from its own generator seeded by `(s, i)`, so a
//! case list is the same on every run and any one case can be rerun alone (`--only i`).

use std::fmt;

use ttmesh::DataType;

use crate::spec::{dtype_name, tile_bytes, FaultKind, OpKind, StressSpec, TopologyChoice};

/// splitmix64: small, seedable, and the same on every platform.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

/// One collective along one cluster axis (None: one line through all chips).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub axis: Option<usize>,
    pub chips: usize,
    pub op: OpKind,
    pub dim: usize,
}

/// Which fault a case injects, where and when. Links are named by their place (hop `k` of the
/// op's path, or the `k`-th link off it), resolved against the mesh when the case runs.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultPlan {
    None,
    Link {
        kind: FaultKind,
        /// every_nth for drop and corrupt, the factor for slow.
        param: u64,
        on_path: bool,
        hop: usize,
        /// Injected this long after the op is launched (0: before).
        delay_us: u64,
    },
    /// The dispatcher of the chip at this mesh index is blocked past the operation timeout.
    Stall {
        chip: usize,
    },
}

impl FaultPlan {
    /// The op must fail, naming the faulted link.
    pub fn must_fail(&self) -> bool {
        match self {
            FaultPlan::Link {
                kind,
                param,
                on_path: true,
                delay_us: 0,
                ..
            } => match kind {
                FaultKind::Down => true,
                FaultKind::Drop | FaultKind::Corrupt => *param == 1,
                _ => false,
            },
            _ => false,
        }
    }
    /// The op may fail (naming the link) or give the right result.
    pub fn may_fail(&self) -> bool {
        matches!(
            self,
            FaultPlan::Link {
                kind: FaultKind::Down | FaultKind::Drop | FaultKind::Corrupt,
                on_path: true,
                ..
            }
        )
    }
    pub fn kind(&self) -> FaultKind {
        match self {
            FaultPlan::None => FaultKind::None,
            FaultPlan::Link { kind, .. } => *kind,
            FaultPlan::Stall { .. } => FaultKind::Stall,
        }
    }
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultPlan::None => write!(f, "none"),
            FaultPlan::Link {
                kind,
                param,
                on_path,
                hop,
                delay_us,
            } => {
                write!(f, "{}", kind.name())?;
                match kind {
                    FaultKind::Slow => write!(f, " x{param}")?,
                    FaultKind::Drop | FaultKind::Corrupt => write!(f, " every {param}")?,
                    _ => {}
                }
                let place = if *on_path { "hop" } else { "off-path link" };
                write!(f, " {place} {hop} at +{delay_us}us")
            }
            FaultPlan::Stall { chip } => write!(f, "stall chip index {chip}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub index: u64,
    /// The run's seed; the case's own generator is seeded from it and `index`.
    pub run_seed: u64,
    pub topology: TopologyChoice,
    pub op: OpKind,
    /// Collectives, in order (empty for a send).
    pub steps: Vec<Step>,
    /// Per-chip input shape, TILE layout.
    pub shape: Vec<usize>,
    pub dtype: DataType,
    pub num_links: usize,
    pub l1: bool,
    pub traced: bool,
    /// Mesh indices of a send's source and destination.
    pub send: Option<(usize, usize)>,
    pub fault: FaultPlan,
}

impl Case {
    /// Bytes of one chip's input.
    pub fn input_bytes(&self) -> u64 {
        let tiles: usize = self.shape.iter().product::<usize>() / 1024;
        tiles as u64 * tile_bytes(self.dtype)
    }
    pub fn elements(&self) -> u64 {
        self.shape.iter().product::<usize>() as u64
    }
    /// Seed of the case's input data.
    pub fn data_seed(&self) -> u64 {
        case_seed(self.run_seed, self.index) ^ 0xDA7A
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {} {}",
            self.index,
            self.topology.name(),
            self.op.name()
        )?;
        for s in &self.steps {
            let axis = s.axis.map_or("all".to_string(), |a| a.to_string());
            write!(f, " axis={axis}")?;
            if s.op != OpKind::AllReduce {
                write!(f, ":dim={}", s.dim)?;
            }
        }
        if let Some((a, b)) = self.send {
            write!(f, " {a}->{b}")?;
        }
        write!(
            f,
            " shape={:?} {} links={} {} {} fault={}",
            self.shape,
            dtype_name(self.dtype),
            self.num_links,
            if self.l1 { "L1" } else { "DRAM" },
            if self.traced { "traced" } else { "untraced" },
            self.fault
        )
    }
}

fn case_seed(seed: u64, index: u64) -> u64 {
    let mut r = Rng::new(seed ^ index.wrapping_mul(0xA076_1D64_78BD_642F));
    r.next()
}

/// Tiles the smallest input of `op` on `t` needs (a reduction must split over every line).
pub fn min_tiles(t: &TopologyChoice, op: OpKind) -> u64 {
    match op {
        OpKind::ReduceScatter | OpKind::AllReduce => t
            .axis_choices()
            .iter()
            .map(|axes| axes.iter().map(|&(_, n)| n as u64).product())
            .max()
            .unwrap_or(1),
        _ => 1,
    }
}

/// Case `index` of the matrix of `spec` and `seed`.
pub fn generate(spec: &StressSpec, seed: u64, index: u64) -> Case {
    let mut r = Rng::new(case_seed(seed, index));
    // Pick a (topology, op, dtype) that fits --max-size (the spec checked one exists for every
    // topology and op).
    let topology = r.pick(&spec.topologies).clone();
    let op = *r.pick(&spec.ops);
    let dtypes: Vec<DataType> = spec
        .dtypes
        .iter()
        .copied()
        .filter(|&d| spec.fits(&topology, op, d))
        .collect();
    let dtype = *r.pick(&dtypes);
    // Drawn only where there is a choice, so the other topologies' cases stay as they were.
    let choices = topology.axis_choices();
    let axes = if choices.len() > 1 && op != OpKind::Send {
        r.pick(&choices).clone()
    } else {
        topology.axes()
    };
    let mut max_tiles = (spec.max_size / tile_bytes(dtype)).max(1);
    // A 2D fabric's gather over both axes or the whole mesh leaves every chip with all chips'
    // inputs (32x on a Galaxy): its output is held to 4x --max-size, so one case stays well
    // inside the operation timeout on a loaded 2-core host (a 3.7 MB-per-chip Galaxy gather
    // took 1.5 to 5.6 s there). galaxy-2d keeps drawing the large ones.
    if choices.len() > 1 && op == OpKind::AllGather {
        let ways: u64 = axes.iter().map(|&(_, n)| n as u64).product();
        max_tiles = max_tiles.min((4 * spec.max_size / ways.max(1) / tile_bytes(dtype)).max(1));
    }

    // Units per dim of the [b, c, h, w] input: b and c count rows of tiles' batches, h and w
    // tiles. Each reduction step needs its dim to split over its line.
    let mut steps = Vec::new();
    let mut need = [1u64; 4];
    match op {
        OpKind::Send => {}
        _ => {
            let ar_dim = 3;
            for &(axis, chips) in &axes {
                let dim = if op == OpKind::AllReduce {
                    ar_dim
                } else {
                    r.below(4) as usize
                };
                match op {
                    // Each reduce_scatter divides the dim again; an all_reduce keeps the shape.
                    OpKind::ReduceScatter => need[dim] *= chips as u64,
                    OpKind::AllReduce => need[dim] = lcm(need[dim], chips as u64),
                    _ => {}
                }
                steps.push(Step {
                    axis,
                    chips,
                    op,
                    dim,
                });
            }
        }
    }
    let mut units = need;
    let min: u64 = need.iter().product();
    // Log-uniform total size from the smallest case to --max-size.
    let span = (max_tiles / min).max(1);
    let bits = 64 - span.leading_zeros() as u64;
    let target = (1u64 << r.below(bits)).min(span);
    let mut room = target;
    for _ in 0..16 {
        let d = r.below(4) as usize;
        let f = 2 + r.below(2);
        if room < f || (d < 2 && units[d] * f > 8) {
            continue;
        }
        units[d] *= f;
        room /= f;
    }
    let shape = vec![
        units[0] as usize,
        units[1] as usize,
        32 * units[2] as usize,
        32 * units[3] as usize,
    ];

    let (_, (rows, cols), _) = topology.mesh_key();
    let any_two = topology.axis_choices().len() > 1;
    let send = (op == OpKind::Send).then(|| {
        if any_two {
            // Any two chips of a 2D fabric: most such routes turn from a column into a row.
            let n = (rows * cols) as u64;
            let a = r.below(n);
            return (a as usize, ((a + 1 + r.below(n - 1)) % n) as usize);
        }
        // Both ends on one line of the first axis: a row (or the whole line).
        let (axis, n) = axes[0];
        let a = r.below(n as u64) as usize;
        let b = (a + 1 + r.below(n as u64 - 1) as usize) % n;
        match axis {
            Some(0) => {
                let c = r.below(cols as u64) as usize;
                (a * cols + c, b * cols + c)
            }
            Some(_) => {
                let row = r.below(rows as u64) as usize;
                (row * cols + a, row * cols + b)
            }
            None => (a, b),
        }
    });
    let num_links = 1 + r.below(2) as usize;
    let l1 = r.chance(1, 3);
    let traced = op != OpKind::Send && r.chance(1, 2);

    let faults: Vec<FaultKind> = spec
        .faults
        .iter()
        .copied()
        .filter(|&f| !(f == FaultKind::Stall && op == OpKind::Send))
        .collect();
    // Half the cases run healthy when "none" is allowed.
    let healthy = faults.is_empty() || (faults.contains(&FaultKind::None) && r.chance(1, 2));
    let kind = if healthy {
        FaultKind::None
    } else {
        // A stall costs a whole timeout: drawn half as often as the others.
        let weighted: Vec<FaultKind> = faults
            .iter()
            .flat_map(|&f| {
                let w = match f {
                    FaultKind::None => 0,
                    FaultKind::Stall => 1,
                    _ => 2,
                };
                std::iter::repeat_n(f, w)
            })
            .collect();
        if weighted.is_empty() {
            FaultKind::None
        } else {
            *r.pick(&weighted)
        }
    };
    // One axis of a 2D mesh: the other axis's links are off the op's path; so are the links a
    // 2D fabric's send does not cross.
    let cross_links = (axes.len() == 1 && axes[0].0.is_some()) || (any_two && op == OpKind::Send);
    let fault = match kind {
        FaultKind::None => FaultPlan::None,
        FaultKind::Stall => FaultPlan::Stall {
            chip: r.below((rows * cols) as u64) as usize,
        },
        k => FaultPlan::Link {
            kind: k,
            param: match k {
                FaultKind::Slow => *r.pick(&[2, 4, 100]),
                FaultKind::Drop | FaultKind::Corrupt => *r.pick(&[1, 1, 3, 7]),
                _ => 0,
            },
            // Links off the op's path exist only across the other axis of a 2D mesh.
            on_path: !(cross_links && (op != OpKind::Send || any_two) && r.chance(1, 4)),
            hop: r.below(64) as usize,
            delay_us: *r.pick(&[0, 0, 0, 200, 2000]),
        },
    };
    Case {
        index,
        run_seed: seed,
        topology,
        op,
        steps,
        shape,
        dtype,
        num_links,
        l1,
        traced,
        send,
        fault,
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_fit_and_split() {
        let spec = StressSpec::parse("all", "all", "all", "all", "256K").unwrap();
        for i in 0..2000 {
            let c = generate(&spec, 7, i);
            assert!(c.input_bytes() <= 256 << 10, "{c}");
            for s in &c.steps {
                if s.op != OpKind::AllGather {
                    let units = if s.dim >= 2 {
                        c.shape[s.dim] / 32
                    } else {
                        c.shape[s.dim]
                    };
                    // Reduce-scatters divide the dim one after another.
                    let need: usize = match s.op {
                        OpKind::ReduceScatter => c
                            .steps
                            .iter()
                            .filter(|t| t.dim == s.dim)
                            .map(|t| t.chips)
                            .product(),
                        _ => s.chips,
                    };
                    assert_eq!(units % need, 0, "{c}");
                }
            }
            assert_eq!(generate(&spec, 7, i), c);
        }
    }
}
