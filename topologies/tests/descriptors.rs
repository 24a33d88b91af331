//! The shipped and generated descriptors: shapes, chip and link counts, ports, queries.

use ttmesh_topologies::{
    builtin_descriptor, known_names, load, parse_str, ArchName, ClusterGraph, Line, TopologyError,
};

fn manhattan(g: &ClusterGraph, a: u32, b: u32) -> usize {
    let (ra, ca) = g.coord_of(a).unwrap();
    let (rb, cb) = g.coord_of(b).unwrap();
    ra.abs_diff(rb) + ca.abs_diff(cb)
}

/// Every mesh-neighbour pair has `per_pair` links, every other pair none.
fn assert_full_mesh(g: &ClusterGraph, per_pair: usize) {
    for a in g.chips() {
        for b in g.chips() {
            let want = if manhattan(g, a.id, b.id) == 1 {
                per_pair
            } else {
                0
            };
            assert_eq!(
                g.link_count(a.id, b.id),
                want,
                "{}: {} - {}",
                g.name(),
                a.id,
                b.id
            );
            assert_eq!(g.ports_between(a.id, b.id).len(), want);
        }
    }
}

/// `line` holds every chip once, consecutive chips are linked, and is_ring is as claimed.
fn assert_valid_order(g: &ClusterGraph, line: &Line) {
    let mut ids = line.chips.clone();
    ids.sort_unstable();
    assert_eq!(ids, (0..g.num_chips() as u32).collect::<Vec<_>>());
    assert!(g.is_linked_path(&line.chips));
    let closes = g.link_count(line.chips[0], *line.chips.last().unwrap()) > 0;
    assert_eq!(line.is_ring, line.len() > 2 && closes);
    assert!(g.is_linked_path(&line.chips));
}

#[test]
fn known_names_are_the_six_builtins() {
    assert_eq!(
        known_names(),
        ["n150", "n300", "t3k", "galaxy", "p150", "p300"]
    );
    for n in known_names() {
        assert!(builtin_descriptor(&n).is_some());
        assert_eq!(load(&n).unwrap().name(), n);
    }
}

#[test]
fn builtin_shapes_and_counts() {
    // name, arch, shape, chips, links, links per neighbour pair
    let table = [
        ("n150", ArchName::WormholeB0, (1, 1), 1, 0, 0),
        ("n300", ArchName::WormholeB0, (1, 2), 2, 2, 2),
        ("t3k", ArchName::WormholeB0, (2, 4), 8, 20, 2),
        ("galaxy", ArchName::WormholeB0, (4, 8), 32, 208, 4),
        ("p150", ArchName::Blackhole, (1, 1), 1, 0, 0),
        ("p300", ArchName::Blackhole, (1, 2), 2, 2, 2),
    ];
    for (name, arch, shape, chips, links, per_pair) in table {
        let g = load(name).unwrap();
        assert_eq!(g.arch(), arch, "{name}");
        assert_eq!(g.mesh_shape(), shape, "{name}");
        assert_eq!(g.num_chips(), chips, "{name}");
        assert_eq!(g.links().len(), links, "{name}");
        assert_full_mesh(&g, per_pair);
    }
}

#[test]
fn t3k_matches_the_mock_cluster_descriptor() {
    let g = load("t3k").unwrap();
    let grid: Vec<Vec<u32>> = (0..2)
        .map(|r| (0..4).map(|c| g.chip_at(r, c).unwrap()).collect())
        .collect();
    assert_eq!(grid, [[4, 0, 2, 6], [5, 1, 3, 7]]);
    // Real (chip, chan) pairs from t3k_cluster_desc.yaml, seen from either end.
    assert_eq!(g.ports_between(0, 2), [(6, 6), (7, 7)]);
    assert_eq!(g.ports_between(0, 4), [(8, 0), (9, 1)]);
    assert_eq!(g.ports_between(4, 0), [(0, 8), (1, 9)]);
    assert_eq!(g.ports_between(0, 1), [(14, 14), (15, 15)]);
    assert_eq!(g.ports_between(3, 7), [(8, 0), (9, 1)]);
    assert_eq!(g.ports_between(0, 7), []);
    assert_eq!(g.neighbours(0), [(1, 2), (2, 2), (4, 2)]);
    assert_eq!(g.neighbours(6), [(2, 2), (7, 2)]);
    assert_eq!(g.neighbours(99), []);
    assert_eq!(g.chips()[4].board.as_deref(), Some("n300"));
}

#[test]
fn t3k_linearize_is_the_perimeter_ring_of_8() {
    let g = load("t3k").unwrap();
    let ring = g.linearize().unwrap();
    assert_eq!(
        ring,
        Line {
            chips: vec![0, 2, 6, 7, 3, 1, 5, 4],
            is_ring: true
        }
    );
    assert_valid_order(&g, &ring);
}

#[test]
fn t3k_hop_distances() {
    let g = load("t3k").unwrap();
    assert_eq!(g.hop_distance(4, 7), Some(4)); // corner (0,0) to corner (1,3)
    assert_eq!(g.hop_distance(5, 6), Some(4)); // corner (1,0) to corner (0,3)
    assert_eq!(g.hop_distance(4, 6), Some(3)); // ends of row 0
    assert_eq!(g.hop_distance(0, 0), Some(0));
    assert_eq!(g.hop_distance(0, 8), None);
    for a in 0..8 {
        for b in 0..8 {
            assert_eq!(g.hop_distance(a, b), Some(manhattan(&g, a, b)));
        }
    }
}

#[test]
fn t3k_rows_columns_and_axes() {
    let g = load("t3k").unwrap();
    assert_eq!(
        g.row(0),
        Line {
            chips: vec![4, 0, 2, 6],
            is_ring: false
        }
    );
    assert_eq!(
        g.row(1),
        Line {
            chips: vec![5, 1, 3, 7],
            is_ring: false
        }
    );
    assert_eq!(
        g.col(2),
        Line {
            chips: vec![2, 3],
            is_ring: false
        }
    );
    assert!(g.row(2).is_empty() && g.col(4).is_empty());
    // cluster_axis 0: chips that differ in row, one line per column.
    let axis0 = g.lines_along_axis(0);
    assert_eq!(axis0.len(), 4);
    assert_eq!(axis0[0].chips, [4, 5]);
    let axis1 = g.lines_along_axis(1);
    assert_eq!(axis1, [g.row(0), g.row(1)]);
    assert!(g.lines_along_axis(2).is_empty());
    assert_eq!(g.chip_at(2, 0), None);
    assert_eq!(g.coord_of(5), Some((1, 0)));
    assert_eq!(g.coord_of(8), None);
}

#[test]
fn galaxy_is_a_4x8_mesh_without_wraparound() {
    let g = load("galaxy").unwrap();
    assert_eq!(g.chip_at(3, 7), Some(31));
    assert_eq!(g.link_count(0, 7), 0);
    assert_eq!(g.link_count(0, 24), 0);
    assert_eq!(g.hop_distance(0, 31), Some(3 + 7));
    // Interior chips use all 16 ports; ports 4..=7 face east, 12..=15 west.
    let used: usize = g.neighbours(9).iter().map(|&(_, n)| n).sum();
    assert_eq!(used, 16);
    assert_eq!(g.ports_between(9, 10), [(4, 12), (5, 13), (6, 14), (7, 15)]);
    assert_eq!(g.ports_between(9, 1), [(0, 8), (1, 9), (2, 10), (3, 11)]);
    let ring = g.linearize().unwrap();
    assert!(ring.is_ring);
    assert_eq!(ring.len(), 32);
    assert_valid_order(&g, &ring);
    assert_eq!(g.row(0).chips, (0..8).collect::<Vec<_>>());
    assert_eq!(g.col(0).chips, [0, 8, 16, 24]);
}

#[test]
fn small_boards() {
    let n150 = load("n150").unwrap();
    assert_eq!(
        n150.linearize(),
        Some(Line {
            chips: vec![0],
            is_ring: false
        })
    );
    assert_eq!(n150.neighbours(0), []);
    let n300 = load("n300").unwrap();
    assert_eq!(n300.ports_between(0, 1), [(8, 0), (9, 1)]);
    assert_eq!(
        n300.linearize(),
        Some(Line {
            chips: vec![0, 1],
            is_ring: false
        })
    );
    let p300 = load("p300").unwrap();
    assert_eq!(p300.arch().as_str(), "blackhole");
    assert_eq!(p300.link_count(1, 0), 2);
    assert_eq!(load("p150").unwrap().arch().num_eth_ports(), 14);
}

#[test]
fn generated_lines_and_rings() {
    for n in [2usize, 3, 8, 64] {
        let line = load(&format!("line-{n}")).unwrap();
        assert_eq!(line.mesh_shape(), (1, n));
        assert_eq!(line.num_chips(), n);
        assert_eq!(line.links().len(), n - 1);
        assert_eq!(line.arch(), ArchName::WormholeB0);
        let order = line.linearize().unwrap();
        assert_eq!(
            order,
            Line {
                chips: (0..n as u32).collect(),
                is_ring: false
            }
        );
        assert_eq!(line.hop_distance(0, n as u32 - 1), Some(n - 1));

        let ring = load(&format!("ring-{n}")).unwrap();
        assert_eq!(ring.links().len(), n);
        assert_eq!(ring.link_count(n as u32 - 1, 0), if n == 2 { 2 } else { 1 });
        assert!(ring.ports_between(n as u32 - 1, 0).contains(&(0, 1)));
        let order = ring.linearize().unwrap();
        assert_eq!(order.chips, (0..n as u32).collect::<Vec<_>>());
        assert_eq!(order.is_ring, n > 2);
        assert_eq!(ring.row(0).is_ring, n > 2);
        assert_eq!(ring.hop_distance(0, n as u32 - 1), Some(1));
    }
}

#[test]
fn generated_meshes_and_tori() {
    let mesh = load("mesh-4x8").unwrap();
    assert_eq!(mesh.mesh_shape(), (4, 8));
    assert_eq!(mesh.num_chips(), 32);
    // 4 rows of 7 links, 8 columns of 3.
    assert_eq!(mesh.links().len(), 4 * 7 + 8 * 3);
    assert_eq!(mesh.link_count(0, 7), 0);
    assert_eq!(mesh.hop_distance(0, 31), Some(3 + 7));
    let torus = load("torus-4x8").unwrap();
    assert_eq!(torus.links().len(), 4 * 8 + 8 * 4);
    assert_eq!(torus.link_count(7, 0), 1);
    assert_eq!(torus.link_count(24, 0), 1);
    assert_eq!(torus.hop_distance(0, 31), Some(1 + 1));
    // A 2-chip dimension has no wrap: its neighbours are joined once already.
    let t = load("torus-2x4").unwrap();
    assert_eq!(t.links().len(), 2 * 4 + 4);
    assert_eq!(t.link_count(0, 4), 1);
    for (name, needle) in [
        ("mesh-1x1", "is not a grid of 2 to 64 chips"),
        ("torus-9x9", "is not a grid of 2 to 64 chips"),
        ("mesh-4by8", "write mesh-RxC, e.g. mesh-4x8"),
    ] {
        let e = load(name).unwrap_err().to_string();
        assert!(e.contains(needle), "{name}: {e}");
    }
}

#[test]
fn generated_names_out_of_range_are_refused() {
    for (name, needle) in [
        ("line-1", "N = 1 is too small"),
        ("ring-1", "N = 1 is too small"),
        ("ring-0", "N = 0 is too small"),
        ("line-65", "N = 65 is too large"),
        ("ring-65", "N = 65 is too large"),
        ("ring-x", "\"x\" is not a chip count"),
        ("line-", "\"\" is not a chip count"),
        ("line-+3", "\"+3\" is not a chip count"),
        ("ring-99999999999999999999999", "is too large"),
    ] {
        let e = load(name).unwrap_err();
        assert!(
            matches!(e, TopologyError::BadGeneratedName { .. }),
            "{name}: {e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(needle) && msg.contains("from 2 to 64"),
            "{name}: {msg}"
        );
    }
}

#[test]
fn unknown_name_lists_the_choices() {
    let e = load("t3000").unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown topology \"t3000\": not a built-in name (n150, n300, t3k, galaxy, p150, p300), \
         not line-N or ring-N with N from 2 to 64, mesh-RxC or torus-RxC with 2 to 64 chips, \
         and no file exists at that path"
    );
    assert_eq!(e.line(), None);
}

#[test]
fn a_path_that_exists_but_is_no_file_says_so() {
    let e = load("/dev/null").unwrap_err();
    assert_eq!(
        e.to_string(),
        "topology path /dev/null exists but is not a cluster descriptor: it is a character \
         device, not a TOML file; name a descriptor file (see topologies/descriptors/) or a \
         built-in name (n150, n300, t3k, galaxy, p150, p300)"
    );
}

#[test]
fn every_descriptor_round_trips_through_to_toml() {
    let names = known_names()
        .into_iter()
        .chain(["line-5", "ring-2", "ring-17"].map(String::from));
    for name in names {
        let g = load(&name).unwrap();
        let back = parse_str(&g.to_toml(), "round-trip.toml").unwrap();
        assert_eq!(back, g, "{name}");
        // Writing is deterministic: a second trip gives the same text.
        assert_eq!(back.to_toml(), g.to_toml());
    }
}

#[test]
fn a_user_file_loads_by_path_and_errors_name_it() {
    let dir = std::env::temp_dir().join(format!("ttmesh-topo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("mine.toml");
    std::fs::write(
        &good,
        load("n300")
            .unwrap()
            .to_toml()
            .replace("\"n300\"", "\"mine\""),
    )
    .unwrap();
    let g = load(good.to_str().unwrap()).unwrap();
    assert_eq!((g.name(), g.num_chips()), ("mine", 2));

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "name = \"bad\"\narch = \"wormhole\"\n").unwrap();
    let e = load(bad.to_str().unwrap()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("{}:2: unknown arch", bad.display())),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn graph_serializes_to_json() {
    let g = load("n300").unwrap();
    let v = serde_json::to_value(&g).unwrap();
    assert_eq!(v["name"], "n300");
    assert_eq!(v["arch"], "wormhole_b0");
    assert_eq!(v["mesh_shape"], serde_json::json!([1, 2]));
    assert_eq!(
        v["chips"][1],
        serde_json::json!({"id": 1, "coord": [0, 1], "board": "n300"})
    );
    assert_eq!(v["links"][0], serde_json::json!({"a": [0, 8], "b": [1, 0]}));
    let line = serde_json::to_value(load("ring-3").unwrap().linearize().unwrap()).unwrap();
    assert_eq!(
        line,
        serde_json::json!({"chips": [0, 1, 2], "is_ring": true})
    );
}

#[test]
fn summary_shows_grid_links_and_order() {
    let s = load("t3k").unwrap().summary();
    assert!(
        s.starts_with("t3k: wormhole_b0, mesh 2x4, 8 chips, 20 ethernet links"),
        "{s}"
    );
    assert!(s.contains("     r0    4    0    2    6\n"), "{s}");
    assert!(s.contains("  chip   4 at (0, 0), board n300\n"), "{s}");
    assert!(
        s.contains("    0 - 4   2 links:  0:8<->4:0 0:9<->4:1\n"),
        "{s}"
    );
    assert!(s.ends_with("linearized (ring): 0 2 6 7 3 1 5 4\n"), "{s}");
    let s = load("n150").unwrap().summary();
    assert!(
        s.contains("links (chip:port <-> chip:port):\n  none\n"),
        "{s}"
    );
}

/// A 1x4 mesh with the given links (port = index of the link, so ports never clash).
fn wired_1x4(pairs: &[(u32, u32)]) -> ClusterGraph {
    let mut s = String::from("name = \"odd\"\narch = \"wormhole_b0\"\nmesh_shape = [1, 4]\n");
    for i in 0..4 {
        s += &format!("[[chips]]\nid = {i}\ncoord = [0, {i}]\n");
    }
    for (k, (a, b)) in pairs.iter().enumerate() {
        s += &format!("[[links]]\na = [{a}, {k}]\nb = [{b}, {k}]\n");
    }
    parse_str(&s, "odd.toml").unwrap()
}

#[test]
fn linearize_searches_when_wiring_is_not_mesh_order() {
    // Cells are 0 1 2 3 but the cables run 0-2-1-3: only the search finds the order.
    let g = wired_1x4(&[(0, 2), (2, 1), (1, 3)]);
    assert_eq!(
        g.linearize(),
        Some(Line {
            chips: vec![0, 2, 1, 3],
            is_ring: false
        })
    );
    // Close it: 3-0 makes a ring, reported from chip 0.
    let g = wired_1x4(&[(0, 2), (2, 1), (1, 3), (3, 0)]);
    assert_eq!(
        g.linearize(),
        Some(Line {
            chips: vec![0, 2, 1, 3],
            is_ring: true
        })
    );
    // Mesh order 0 1 2 3 has linked ends but is not a linked path: neither ring nor usable line.
    assert!(!g.row(0).is_ring);
    assert!(!g.is_linked_path(&g.row(0).chips));
    // A star and a split graph have no order through every chip.
    assert_eq!(wired_1x4(&[(0, 1), (0, 2), (0, 3)]).linearize(), None);
    let split = wired_1x4(&[(0, 1), (2, 3)]);
    assert_eq!(split.linearize(), None);
    assert_eq!(split.hop_distance(0, 3), None);
    assert_eq!(split.hop_distance(3, 2), Some(1));
}
