//! 1D line routes: tt-metal's low-latency 1D header. The route word holds 2 bits per hop,
//! hop 1 in the low bits (01 forward, 10 write, 11 write and forward; see `packet`), and a
//! packet travels one line one way: on a ring under `FABRIC_1D_RING` the shorter way (ties
//! forward), otherwise toward its destination.
//!
//! Deadlock: on a line, channel dependencies run one way and end at the line's end. On a
//! ring, the wrap hop is a dateline: packets cross it onto virtual channel 1 and never reach
//! it again (at most n-1 hops), so each virtual channel's dependencies are acyclic.

use super::{HopStep, LinePlan, Next, Path, Routing};
use crate::config::{FabricConfig, FabricSpec};
use crate::inner::LineRt;
use crate::packet::{self, HOP_FORWARD, HOP_WRITE, MAX_HOPS};
use crate::FabricError;

pub(crate) struct LineRouting {
    /// Farthest a unicast may go: 1 under `FABRIC_1D_NEIGHBOR_EXCHANGE`.
    reach: u32,
    neighbours_only: bool,
}

/// Reads a 1D hop code.
#[inline(always)]
pub(crate) fn step(route: u32) -> Option<HopStep> {
    let code = route & 0b11;
    if code == 0 {
        return None;
    }
    let next = if code & HOP_FORWARD != 0 {
        Next::Continue
    } else {
        Next::Stop
    };
    Some(HopStep {
        write: code & HOP_WRITE != 0,
        next,
        rest: route >> 2,
    })
}

impl LineRouting {
    /// Every axis of the spec as a line; its wrap link is used only under `FABRIC_1D_RING`.
    pub fn plan(spec: &FabricSpec) -> (Vec<LinePlan>, Routing) {
        let lines = if spec.config == FabricConfig::Disabled {
            Vec::new()
        } else {
            spec.axes
                .iter()
                .map(|a| LinePlan {
                    chips: a.chips.clone(),
                    ring: a.is_ring
                        && a.chips.len() >= 3
                        && spec.config == FabricConfig::Fabric1DRing,
                })
                .collect()
        };
        let neighbours_only = spec.config == FabricConfig::Fabric1DNeighborExchange;
        let routing = LineRouting {
            reach: if neighbours_only { 1 } else { MAX_HOPS },
            neighbours_only,
        };
        (lines, Routing::Line(routing))
    }

    /// Shortest way from `src` to `dst` over a line holding both. Ties go to the lower line
    /// index, then forward.
    pub fn path(
        &self,
        lines: &[LineRt],
        chip_lines: &[Vec<(usize, usize)>],
        src: u32,
        dst: u32,
    ) -> Result<Path, FabricError> {
        let mut best: Option<(u32, usize, bool, usize)> = None;
        for &(li, ps) in &chip_lines[src as usize] {
            for &(lj, pd) in &chip_lines[dst as usize] {
                if li != lj {
                    continue;
                }
                let line = &lines[li];
                let n = line.chips.len();
                let (hops, fwd) = if line.ring {
                    let f = (pd + n - ps) % n;
                    if f <= n - f {
                        (f, true)
                    } else {
                        (n - f, false)
                    }
                } else if pd > ps {
                    (pd - ps, true)
                } else {
                    (ps - pd, false)
                };
                #[allow(clippy::unnecessary_map_or)] // is_none_or needs Rust 1.82
                if best.map_or(true, |b| (hops as u32) < b.0) {
                    best = Some((hops as u32, li, fwd, ps));
                }
            }
        }
        match best {
            None => Err(FabricError::NoRoute { src, dst }),
            Some((hops, ..)) if hops > self.reach && self.neighbours_only => {
                Err(FabricError::NotNeighbours { src, dst, hops })
            }
            Some((hops, ..)) if hops > self.reach => {
                Err(FabricError::RouteTooLong { src, dst, hops })
            }
            Some((hops, line, forward, pos)) => Ok(Path {
                line,
                forward,
                pos,
                route: packet::unicast_route(hops),
                dst,
                hops,
            }),
        }
    }
}
