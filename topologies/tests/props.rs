//! Properties: generated lines and rings, random meshes, and no panics on arbitrary text.

use proptest::prelude::*;
use ttmesh_topologies::{load, parse_str, ClusterGraph};

/// A full rows x cols grid, 1 link per neighbour pair (ports 0..3 by direction), with chip ids
/// assigned by the permutation `perm` (row-major cell -> id).
fn grid_toml(rows: usize, cols: usize, perm: &[u32]) -> String {
    let mut s = format!("name = \"grid\"\narch = \"blackhole\"\nmesh_shape = [{rows}, {cols}]\n");
    let id = |r: usize, c: usize| perm[r * cols + c];
    for r in 0..rows {
        for c in 0..cols {
            s += &format!("[[chips]]\nid = {}\ncoord = [{r}, {c}]\n", id(r, c));
        }
    }
    for r in 0..rows {
        for c in 0..cols {
            if c + 1 < cols {
                s += &format!(
                    "[[links]]\na = [{}, 1]\nb = [{}, 3]\n",
                    id(r, c),
                    id(r, c + 1)
                );
            }
            if r + 1 < rows {
                s += &format!(
                    "[[links]]\na = [{}, 2]\nb = [{}, 0]\n",
                    id(r, c),
                    id(r + 1, c)
                );
            }
        }
    }
    s
}

fn permutation(n: usize) -> impl Strategy<Value = Vec<u32>> {
    Just((0..n as u32).collect::<Vec<_>>()).prop_shuffle()
}

proptest! {
    #[test]
    fn generated_line_and_ring_distances(n in 2usize..=64, i in 0usize..64, j in 0usize..64) {
        let (i, j) = (i % n, j % n);
        let line = load(&format!("line-{n}")).unwrap();
        prop_assert_eq!(line.links().len(), n - 1);
        prop_assert_eq!(line.hop_distance(i as u32, j as u32), Some(i.abs_diff(j)));
        let ring = load(&format!("ring-{n}")).unwrap();
        prop_assert_eq!(ring.links().len(), n);
        let d = i.abs_diff(j);
        prop_assert_eq!(ring.hop_distance(i as u32, j as u32), Some(d.min(n - d)));
        for k in 0..n as u32 {
            let want = if n == 2 { vec![(1 - k, 2)] } else {
                let mut v = vec![(k + 1) % n as u32, (k + n as u32 - 1) % n as u32];
                v.sort_unstable();
                v.into_iter().map(|c| (c, 1)).collect()
            };
            prop_assert_eq!(ring.neighbours(k), want);
        }
    }

    #[test]
    fn random_grids_have_manhattan_hops_and_a_valid_order(
        (rows, cols, perm) in (1usize..=6, 1usize..=6)
            .prop_flat_map(|(r, c)| (Just(r), Just(c), permutation(r * c)))
    ) {
        let g: ClusterGraph = parse_str(&grid_toml(rows, cols, &perm), "grid.toml").unwrap();
        prop_assert_eq!(g.links().len(), rows * (cols - 1) + cols * (rows - 1));
        for a in g.chips() {
            for b in g.chips() {
                let (ra, ca) = a.coord;
                let (rb, cb) = b.coord;
                prop_assert_eq!(g.hop_distance(a.id, b.id), Some(ra.abs_diff(rb) + ca.abs_diff(cb)));
            }
        }
        let order = g.linearize().unwrap();
        let mut seen = order.chips.clone();
        seen.sort_unstable();
        prop_assert_eq!(seen, (0..(rows * cols) as u32).collect::<Vec<_>>());
        prop_assert!(g.is_linked_path(&order.chips));
        // A grid has a Hamiltonian cycle iff both sides are >= 2 and the cell count is even.
        prop_assert_eq!(order.is_ring, rows >= 2 && cols >= 2 && (rows * cols) % 2 == 0);
        if order.is_ring {
            prop_assert_eq!(order.chips[0], 0);
        }
        prop_assert_eq!(parse_str(&g.to_toml(), "rt").unwrap(), g);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = parse_str(&text, "fuzz.toml");
        let _ = ttmesh_topologies::parse_mgd_str(&text, "fuzz.textproto");
    }

    /// Text made of textproto's own tokens: a graph or an error at a line inside the text.
    #[test]
    fn textproto_token_soup_errors_point_inside_the_text(
        tokens in prop::collection::vec(prop::sample::select(vec![
            "mesh_descriptors", "top_level_instance", "device_topology", "dims", "channels",
            "count", "name", "arch", "WORMHOLE_B0", "{", "}", ":", "[", "]", ",", "\"M0\"",
            "4", "-1", "\n", "# c\n", "<", ">", "'", "mesh", "mesh_descriptor",
        ]), 0..80)
    ) {
        let text = tokens.join(" ");
        let lines = text.lines().count().max(1);
        if let Err(e) = ttmesh_topologies::parse_mgd_str(&text, "soup.textproto") {
            let line = e.line().unwrap();
            prop_assert!((1..=lines).contains(&line), "{} (text has {} lines)", e, lines);
        }
    }

    /// Replacing any one number of the T3K file with another gives a graph or an error whose
    /// line lies inside the file; never a panic.
    #[test]
    fn mutated_t3k_errors_point_inside_the_file(pick in 0usize..1000, value in -3i64..40) {
        let text = ttmesh_topologies::builtin_descriptor("t3k").unwrap();
        let spans: Vec<(usize, usize)> = {
            let b = text.as_bytes();
            let mut v = Vec::new();
            let mut i = 0;
            while i < b.len() {
                if b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
                    let s = i;
                    while i < b.len() && b[i].is_ascii_digit() { i += 1; }
                    // Only numbers in values, not in comments.
                    let line_start = text[..s].rfind('\n').map_or(0, |p| p + 1);
                    if !text[line_start..s].contains('#') { v.push((s, i)); }
                } else { i += 1; }
            }
            v
        };
        let (s, e) = spans[pick % spans.len()];
        let mutated = format!("{}{}{}", &text[..s], value, &text[e..]);
        let lines = mutated.lines().count();
        match parse_str(&mutated, "t3k.toml") {
            Ok(g) => prop_assert_eq!(g.num_chips(), 8),
            Err(err) => {
                let line = err.line().unwrap();
                prop_assert!((1..=lines).contains(&line), "{} (file has {} lines)", err, lines);
                let prefix = format!("t3k.toml:{}: ", line);
                prop_assert!(err.to_string().starts_with(&prefix));
            }
        }
    }
}
