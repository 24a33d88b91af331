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
pub const GENERATED_FAMILIES: &str = "line-N or ring-N with N from 2 to 64";

/// `None` when `name` is not of the form `line-...` / `ring-...`; otherwise the graph, or the
/// reason N is bad.
pub(crate) fn try_generate(name: &str) -> Option<Result<ClusterGraph, TopologyError>> {
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
