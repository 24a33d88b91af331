//! Routes: how a packet's header names its path, and how a router reads its next hop from it.
//!
//! Two kinds sit side by side behind [`Routing`], chosen once from the config when the fabric
//! opens: [`line`] (the 1D configs: a packet travels one line, one way) and [`mesh2d`] (the 2D
//! configs: dimension-ordered, a column then a row, with datelines on torus wrap links).
//! Neither knows channels, credits, statistics or faults: a router asks [`Routing::step`]
//! what to do with a packet (write here, go on, turn onto the crossing line) and puts it on
//! the hop that names; everything per link stays with the hop.

pub(crate) mod line;
pub(crate) mod mesh2d;

use crate::config::FabricSpec;
use crate::inner::LineRt;
use crate::packet::MAX_HOPS;
use crate::FabricError;

/// Where a packet goes after the chip that reads a route's low bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// The route ends here.
    Stop,
    /// On along the same line, the same way.
    Continue,
    /// Onto the line that crosses this one here, `forward` = toward its higher positions.
    Turn { forward: bool },
}

/// What one chip does with a packet, and the route the next chip will read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HopStep {
    pub write: bool,
    pub next: Next,
    pub rest: u32,
}

/// A route from a chip: the line and direction of its first hop, the chip's position on that
/// line, the route word for the header and the farthest chip it writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Path {
    pub line: usize,
    pub forward: bool,
    pub pos: usize,
    pub route: u32,
    pub dst: u32,
    /// Links crossed to reach `dst`.
    pub hops: u32,
}

/// One line the fabric builds: its chips in order and whether its wrap link is used.
pub(crate) struct LinePlan {
    pub chips: Vec<u32>,
    pub ring: bool,
}

/// The fabric's route kind (see the module docs).
pub(crate) enum Routing {
    Line(line::LineRouting),
    Mesh(Box<mesh2d::MeshRouting>),
}

impl Routing {
    /// The lines to build for `spec` and how packets are routed over them. The 2D configs
    /// need a grid the spec can carry (`FabricSpec::check_config`).
    pub fn plan(spec: &FabricSpec) -> Result<(Vec<LinePlan>, Routing), FabricError> {
        if spec.config.is_2d() {
            spec.check_config()?;
            let (lines, mesh) = mesh2d::MeshRouting::plan(spec);
            Ok((lines, Routing::Mesh(Box::new(mesh))))
        } else {
            Ok(line::LineRouting::plan(spec))
        }
    }

    /// Reads the low bits of `route`; None if they name nothing this routing knows (only a
    /// damaged header).
    #[inline(always)]
    pub fn step(&self, route: u32) -> Option<HopStep> {
        match self {
            Routing::Line(_) => line::step(route),
            Routing::Mesh(_) => mesh2d::step(route),
        }
    }

    /// Chips a route writes to.
    pub fn writes_in(&self, route: u32) -> u64 {
        match self {
            Routing::Line(_) => crate::packet::writes_in(route),
            Routing::Mesh(_) => mesh2d::writes_in(route),
        }
    }

    /// The unicast route from `src` to `dst` (different chips, both on the fabric).
    pub fn path(
        &self,
        lines: &[LineRt],
        chip_lines: &[Vec<(usize, usize)>],
        src: u32,
        dst: u32,
    ) -> Result<Path, FabricError> {
        match self {
            Routing::Line(l) => l.path(lines, chip_lines, src, dst),
            Routing::Mesh(m) => m.path(src, dst),
        }
    }

    /// The line a packet turning at `chip` (arrived along `line`) moves onto, and `chip`'s
    /// position on it.
    pub fn crossing(&self, chip: u32, line: usize) -> Option<(usize, usize)> {
        match self {
            Routing::Line(_) => None,
            Routing::Mesh(m) => m.crossing(chip, line),
        }
    }

    /// Follows `route` from position `pos` on `line` going `forward`: calls `hop(line, from,
    /// forward, to_chip, writes)` for every link it crosses, in order. False if the route
    /// leaves the lines (only a damaged route can).
    pub fn walk(
        &self,
        lines: &[LineRt],
        (mut line, mut pos, mut forward): (usize, usize, bool),
        mut route: u32,
        mut hop: impl FnMut(usize, usize, bool, u32, bool),
    ) -> bool {
        for _ in 0..=MAX_HOPS {
            let l = &lines[line];
            let (Some(next), Some(s)) = (l.step(pos, forward, 1), self.step(route)) else {
                return false;
            };
            let chip = l.chips[next];
            hop(line, pos, forward, chip, s.write);
            pos = next;
            route = s.rest;
            match s.next {
                Next::Stop => return true,
                Next::Continue => {}
                Next::Turn { forward: f } => {
                    let Some((nl, np)) = self.crossing(chip, line) else {
                        return false;
                    };
                    (line, pos, forward) = (nl, np, f);
                }
            }
        }
        false
    }
}
