//! 2D routes over a mesh or torus: dimension-ordered, as tt-metal's 2D fabric orders them:
//! first along the source's column (north/south, Y) to the destination's row, then along
//! that row (east/west, X) to the destination. Each leg is the shortest way along its line:
//! on a line toward the destination, on a ring (torus configs) the shorter way round, ties
//! forward.
//!
//! **Header.** tt-metal's 2D header carries a route buffer of one byte per hop naming the
//! direction(s) to leave by. ttmesh keeps its 32-byte header and the 1D route word's 2 bits
//! per hop (01 forward, 10 write, 11 write and forward along the current line) and adds one
//! code: `00` at the chip where the route turns, followed by 2 bits naming the direction on
//! the crossing line (`01` toward its higher positions, `00` toward its lower ones). Under
//! dimension order a route changes direction only there, so this says what the per-hop
//! direction bytes say. A turn costs one code more than its hops: a route holds at most 15
//! hops with a turn (16 without): every pair of a mesh whose rows plus columns are at most
//! 17 (8x9; a Galaxy needs 10 hops at most), of a torus whose half-rows plus half-columns
//! are at most 15 (16x15). Longer routes are refused with `RouteTooLong`.
//! A route with no turn is a 1D route, so line multicasts along a row or column work
//! unchanged.
//!
//! **Deadlock.** On a mesh, channel dependencies go column hop -> column hop (same way) ->
//! row hop -> row hop (same way), and never from a row back to a column: no cycle. On a
//! torus each ring also has a dateline on its wrap hop, as the 1D ring does: packets cross it
//! onto virtual channel 1, never reach it again within one leg, and a turn starts the next leg
//! on virtual channel 0. So VC0 and VC1 of every line are acyclic on their own, and the only
//! dependencies between lines run column -> row. Routers drain every inbound channel
//! independently and local writes never block.

use super::{line, HopStep, LinePlan, Next, Path};
use crate::config::FabricSpec;
use crate::packet::{self, HOP_FORWARD, MAX_HOPS};
use crate::FabricError;

pub(crate) struct MeshRouting {
    /// (row, column) of every chip on the grid.
    coord: Vec<Option<(u32, u32)>>,
    /// The line of every row and every column.
    row_line: Vec<usize>,
    col_line: Vec<usize>,
    rows: u32,
    cols: u32,
    wrap_x: bool,
    wrap_y: bool,
}

/// Reads a 2D hop code: a 1D code, or a turn.
#[inline(always)]
pub(crate) fn step(route: u32) -> Option<HopStep> {
    if route & 0b11 != 0 {
        return line::step(route);
    }
    let dir = (route >> 2) & 0b11;
    let rest = route >> 4;
    if dir > 1 || rest == 0 {
        return None;
    }
    Some(HopStep {
        write: false,
        next: Next::Turn { forward: dir == 1 },
        rest,
    })
}

/// Chips a 2D route writes to.
pub(crate) fn writes_in(mut route: u32) -> u64 {
    let mut n = 0;
    while let Some(s) = step(route) {
        n += s.write as u64;
        if s.next == Next::Stop {
            break;
        }
        route = s.rest;
    }
    n
}

/// The route of `first` hops along one line, a turn onto the crossing line (`forward`), then
/// `second` hops along it; `first` or `second` 0 is a plain 1D route.
pub(crate) fn unicast_route(first: u32, turn_forward: bool, second: u32) -> u32 {
    match (first, second) {
        (0, n) | (n, 0) => packet::unicast_route(n),
        (k, m) => {
            debug_assert!(k + m < MAX_HOPS);
            let mut r = 0;
            for i in 0..k - 1 {
                r |= HOP_FORWARD << (2 * i);
            }
            let turn = 2 * (k - 1);
            r | (turn_forward as u32) << (turn + 2) | packet::unicast_route(m) << (turn + 4)
        }
    }
}

/// Hops and direction from position `a` to `b` on a line of `n` chips.
fn leg(n: u32, a: u32, b: u32, ring: bool) -> (u32, bool) {
    if ring {
        let f = (b + n - a) % n;
        if f <= n - f {
            (f, true)
        } else {
            (n - f, false)
        }
    } else if b >= a {
        (b - a, true)
    } else {
        (a - b, false)
    }
}

impl MeshRouting {
    /// Lines for a checked 2D spec: the spec's axes (used as lines), plus every grid row and
    /// column not among them; rows are rings under a torus on X, columns under one on Y.
    pub fn plan(spec: &FabricSpec) -> (Vec<LinePlan>, MeshRouting) {
        let g = spec
            .grid
            .as_ref()
            .expect("checked by FabricSpec::check_config");
        let (wrap_x, wrap_y) = spec.config.wraps();
        let mut lines: Vec<LinePlan> = spec
            .axes
            .iter()
            .map(|a| LinePlan {
                chips: a.chips.clone(),
                ring: false,
            })
            .collect();
        let mut line_of =
            |chips: Vec<u32>, ring: bool| match lines.iter().position(|l| l.chips == chips) {
                Some(i) => {
                    lines[i].ring = ring;
                    i
                }
                None => {
                    lines.push(LinePlan { chips, ring });
                    lines.len() - 1
                }
            };
        let row_line = (0..g.rows).map(|r| line_of(g.row(r), wrap_x)).collect();
        let col_line = (0..g.cols).map(|c| line_of(g.col(c), wrap_y)).collect();
        let mut coord = vec![None; spec.num_chips as usize];
        for r in 0..g.rows {
            for c in 0..g.cols {
                coord[g.chip(r, c) as usize] = Some((r, c));
            }
        }
        let mesh = MeshRouting {
            coord,
            row_line,
            col_line,
            rows: g.rows,
            cols: g.cols,
            wrap_x,
            wrap_y,
        };
        (lines, mesh)
    }

    /// Column first, then row (see the module docs).
    pub fn path(&self, src: u32, dst: u32) -> Result<Path, FabricError> {
        let at = |c: u32| self.coord.get(c as usize).copied().flatten();
        let (Some((r1, c1)), Some((r2, c2))) = (at(src), at(dst)) else {
            return Err(FabricError::NoRoute { src, dst });
        };
        let (k, fy) = leg(self.rows, r1, r2, self.wrap_y);
        let (m, fx) = leg(self.cols, c1, c2, self.wrap_x);
        let codes = k + m + (k > 0 && m > 0) as u32;
        if codes > MAX_HOPS {
            return Err(FabricError::RouteTooLong {
                src,
                dst,
                hops: k + m,
            });
        }
        let (line, pos, forward) = if k > 0 {
            (self.col_line[c1 as usize], r1 as usize, fy)
        } else {
            (self.row_line[r1 as usize], c1 as usize, fx)
        };
        Ok(Path {
            line,
            forward,
            pos,
            route: unicast_route(k, fx, m),
            dst,
            hops: k + m,
        })
    }

    /// A turn moves from a chip's column onto its row (and, for completeness, back).
    pub fn crossing(&self, chip: u32, line: usize) -> Option<(usize, usize)> {
        let (r, c) = self.coord.get(chip as usize).copied().flatten()?;
        if line == self.col_line[c as usize] {
            Some((self.row_line[r as usize], c as usize))
        } else if line == self.row_line[r as usize] {
            Some((self.col_line[c as usize], r as usize))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_codes_round_trip() {
        // 2 hops down a column, turn backward, 3 hops along the row.
        let r = unicast_route(2, false, 3);
        assert_eq!(r, 0b10_01_01_00_00_01);
        let mut seen = Vec::new();
        let mut route = r;
        while let Some(s) = step(route) {
            seen.push((s.write, s.next));
            if s.next == Next::Stop {
                break;
            }
            route = s.rest;
        }
        use Next::*;
        assert_eq!(
            seen,
            vec![
                (false, Continue),
                (false, Turn { forward: false }),
                (false, Continue),
                (false, Continue),
                (true, Stop)
            ]
        );
        assert_eq!(writes_in(r), 1);
        assert_eq!(unicast_route(0, true, 3), packet::unicast_route(3));
        assert_eq!(unicast_route(3, true, 0), packet::unicast_route(3));
        // A turn with nothing after it, or a direction that is not one, is damage.
        assert_eq!(step(0b01_00), None);
        assert_eq!(step(0b10_10_00), None);
        // The longest route fits: 7 + turn + 8 codes.
        let long = unicast_route(7, true, 8);
        assert_eq!(writes_in(long), 1);
        assert_eq!(long >> 30, 0b10);
    }
}
