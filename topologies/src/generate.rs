//! The generated families `line-N` and `ring-N` (N in 2..=64): Wormhole B0 chips 0..N-1 in a
//! 1xN mesh, chip i at (0, i), ONE link per neighbour pair (the single link TT-NN CCLs use by
//! default; write a descriptor for more). Port 0 of chip i faces chip i+1, port 1 faces chip
//! i-1. `ring-N` adds the closing link from port 0 of chip N-1 to port 1 of chip 0, so ring-2
//! has two links between its chips and is not a ring in the [`crate::Line`] sense.
//!
//! The descriptor text is generated and then parsed, so generated graphs pass the same checks
//! as files.

use std::fmt::Write as _;

use crate::{parse_str, ClusterGraph, TopologyError};

/// Smallest and largest N of `line-N` / `ring-N`.
pub const MIN_GENERATED: usize = 2;
pub const MAX_GENERATED: usize = 64;

/// What `known_names` leaves out, for messages and `--help` text.
pub const GENERATED_FAMILIES: &str =
    "line-N or ring-N with N from 2 to 64, mesh-RxC or torus-RxC with 2 to 64 chips";

/// `None` when `name` is not of the form `line-...` / `ring-...`; otherwise the graph, or the
/// reason N is bad.
pub(crate) fn try_generate(name: &str) -> Option<Result<ClusterGraph, TopologyError>> {
    if let Some(g) = try_generate_grid(name) {
        return Some(g);
    }
    let (is_ring, digits) = if let Some(d) = name.strip_prefix("line-") {
        (false, d)
    } else if let Some(d) = name.strip_prefix("ring-") {
        (true, d)
    } else {
        return None;
    };
    let family = if is_ring { "ring" } else { "line" };
    let bad = |problem: String| {
        Some(Err(TopologyError::BadGeneratedName {
            name: name.to_string(),
            problem,
        }))
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return bad(format!(
            "\"{digits}\" is not a chip count; write {family}-N with N from {MIN_GENERATED} to {MAX_GENERATED}, e.g. {family}-8"
        ));
    }
    let n = match digits.parse::<usize>() {
        Ok(n) if (MIN_GENERATED..=MAX_GENERATED).contains(&n) => n,
        Ok(n) if n < MIN_GENERATED => {
            return bad(format!(
                "N = {n} is too small; {family}-N takes N from {MIN_GENERATED} to {MAX_GENERATED} (for one chip use n150)"
            ))
        }
        _ => {
            return bad(format!(
                "N = {digits} is too large; {family}-N takes N from {MIN_GENERATED} to {MAX_GENERATED} (for more chips write a descriptor file)"
            ))
        }
    };
    Some(parse_str(&generated_toml(name, n, is_ring), name))
}

fn generated_toml(name: &str, n: usize, is_ring: bool) -> String {
    let mut s = format!("name = \"{name}\"\narch = \"wormhole_b0\"\nmesh_shape = [1, {n}]\n");
    for i in 0..n {
        let _ = write!(s, "\n[[chips]]\nid = {i}\ncoord = [0, {i}]\n");
    }
    let closing = if is_ring { Some((n - 1, 0)) } else { None };
    for (i, j) in (0..n - 1).map(|i| (i, i + 1)).chain(closing) {
        let _ = write!(s, "\n[[links]]\na = [{i}, 0]\nb = [{j}, 1]\n");
    }
    s
}

/// `mesh-RxC` and `torus-RxC`: Wormhole B0 chips in an R x C mesh, chip `r * C + c` at
/// (r, c), one link per neighbour pair, ports numbered per chip in link order. `torus-RxC`
/// adds a wrap link closing every row of 3 or more chips and every column of 3 or more
/// (what the 2D fabric's torus configs need). `None` when `name` is not of that form.
fn try_generate_grid(name: &str) -> Option<Result<ClusterGraph, TopologyError>> {
    let (torus, dims) = if let Some(d) = name.strip_prefix("mesh-") {
        (false, d)
    } else if let Some(d) = name.strip_prefix("torus-") {
        (true, d)
    } else {
        return None;
    };
    let family = if torus { "torus" } else { "mesh" };
    let parsed = dims
        .split_once('x')
        .and_then(|(r, c)| Some((r.parse::<usize>().ok()?, c.parse::<usize>().ok()?)));
    let (rows, cols) = match parsed {
        Some((r, c)) if r >= 1 && c >= 1 && (MIN_GENERATED..=MAX_GENERATED).contains(&(r * c)) => {
            (r, c)
        }
        _ => {
            return Some(Err(TopologyError::BadGeneratedName {
                name: name.to_string(),
                problem: format!(
                    "\"{dims}\" is not a grid of {MIN_GENERATED} to {MAX_GENERATED} chips; write \
                     {family}-RxC, e.g. {family}-4x8"
                ),
            }))
        }
    };
    let mut s =
        format!("name = \"{name}\"\narch = \"wormhole_b0\"\nmesh_shape = [{rows}, {cols}]\n");
    for r in 0..rows {
        for c in 0..cols {
            let _ = write!(
                s,
                "\n[[chips]]\nid = {}\ncoord = [{r}, {c}]\n",
                r * cols + c
            );
        }
    }
    let id = |r: usize, c: usize| r * cols + c;
    let mut pairs = Vec::new();
    for r in 0..rows {
        for c in 0..cols {
            if c + 1 < cols {
                pairs.push((id(r, c), id(r, c + 1)));
            }
            if r + 1 < rows {
                pairs.push((id(r, c), id(r + 1, c)));
            }
        }
    }
    if torus {
        pairs.extend(
            (0..rows)
                .filter(|_| cols >= 3)
                .map(|r| (id(r, cols - 1), id(r, 0))),
        );
        pairs.extend(
            (0..cols)
                .filter(|_| rows >= 3)
                .map(|c| (id(rows - 1, c), id(0, c))),
        );
    }
    let mut next_port = vec![0usize; rows * cols];
    for (a, b) in pairs {
        let (pa, pb) = (next_port[a], next_port[b]);
        next_port[a] += 1;
        next_port[b] += 1;
        let _ = write!(s, "\n[[links]]\na = [{a}, {pa}]\nb = [{b}, {pb}]\n");
    }
    Some(parse_str(&s, name))
}
