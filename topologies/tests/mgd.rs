//! tt-metal's mesh graph descriptors (MGD 2.0 textproto): the T3K, Galaxy and n300
//! descriptors (test data written from the published format) load as the grids they describe,
//! and every kind of bad descriptor is refused naming the field, the line and the fix.

use ttmesh_topologies::{load, parse_mgd_str, ArchName, ClusterGraph, DimKind, TopologyError as E};

fn data(name: &str) -> String {
    format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Every grid-neighbour pair (and wrap pair, per `wrap`) has `per_pair` links, no other pair
/// any; every port is used once.
fn assert_grid(g: &ClusterGraph, per_pair: usize, (wrap_rows, wrap_cols): (bool, bool)) {
    let (rows, cols) = g.mesh_shape();
    for a in g.chips() {
        assert_eq!(a.id as usize, a.coord.0 * cols + a.coord.1, "row-major ids");
        for b in g.chips() {
            let (ra, ca) = a.coord;
            let (rb, cb) = b.coord;
            let along_row = ra == rb
                && (ca.abs_diff(cb) == 1
                    || (wrap_cols && ca.abs_diff(cb) == cols - 1 && cols >= 3));
            let along_col = ca == cb
                && (ra.abs_diff(rb) == 1
                    || (wrap_rows && ra.abs_diff(rb) == rows - 1 && rows >= 3));
            let want = if along_row || along_col { per_pair } else { 0 };
            assert_eq!(
                g.link_count(a.id, b.id),
                want,
                "{}: {} - {}",
                g.name(),
                a.id,
                b.id
            );
        }
    }
    let mut ports: Vec<(u32, u32)> = g.links().iter().flat_map(|l| [l.a, l.b]).collect();
    let n = ports.len();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), n, "a port carries two links");
    assert!(ports.iter().all(|&(_, p)| p < g.arch().num_eth_ports()));
}

#[test]
fn t3k_descriptor_is_a_4x2_grid_with_two_links_per_pair() {
    let g = load(&data("t3k.textproto")).unwrap();
    assert_eq!(g.name(), "t3k");
    assert_eq!(g.arch(), ArchName::WormholeB0);
    assert_eq!(g.mesh_shape(), (4, 2));
    assert_eq!(g.num_chips(), 8);
    assert_eq!(g.links().len(), 2 * (4 + 6));
    assert_grid(&g, 2, (false, false));
    assert_eq!(g.dim_kinds(), Some([DimKind::Line, DimKind::Line]));
    // Its rows and columns are lines, and the 8 chips still close into one ring.
    assert!(g.linearize().unwrap().is_ring);
}

#[test]
fn galaxy_descriptor_is_an_8x4_grid_with_four_links_per_pair() {
    let g = load(&data("galaxy.textproto")).unwrap();
    assert_eq!((g.mesh_shape(), g.num_chips()), ((8, 4), 32));
    // Same link count as the built-in 4x8 galaxy: 4 x (8*3 + 7*4).
    assert_eq!(g.links().len(), load("galaxy").unwrap().links().len());
    assert_grid(&g, 4, (false, false));
    assert_eq!(g.dim_kinds(), Some([DimKind::Line, DimKind::Line]));
}

#[test]
fn torus_descriptor_adds_wrap_links_on_its_ring_dims() {
    let g = load(&data("galaxy_torus_xy.textproto")).unwrap();
    assert_grid(&g, 4, (true, true));
    assert_eq!(g.dim_kinds(), Some([DimKind::Ring, DimKind::Ring]));
    assert_eq!(g.links().len(), 4 * 2 * 32);
    // Every port of every chip is used: 4 neighbours x 4 links.
    for c in g.chips() {
        assert_eq!(g.neighbours(c.id).iter().map(|n| n.1).sum::<usize>(), 16);
    }
    assert!(g.row(0).is_ring && g.col(0).is_ring);
}

#[test]
fn n300_descriptor_is_two_chips_with_two_links() {
    let g = load(&data("n300.textproto")).unwrap();
    assert_eq!(g.mesh_shape(), (1, 2));
    assert_grid(&g, 2, (false, false));
}

#[test]
fn top_level_graph_resolves_to_its_one_mesh() {
    let g = load(&data("two_meshes_one_picked.textproto")).unwrap();
    assert_eq!(g.mesh_shape(), (1, 6));
    assert_eq!(g.arch(), ArchName::WormholeB0);
    assert_eq!(g.dim_kinds(), Some([DimKind::Line, DimKind::Ring]));
    assert!(g.row(0).is_ring);
    assert_grid(&g, 1, (false, true));
}

#[test]
fn a_file_with_another_ending_is_recognised_by_its_fields() {
    let dir = std::env::temp_dir().join(format!("ttmesh-mgd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("my_system.desc");
    std::fs::write(
        &path,
        std::fs::read_to_string(data("n300.textproto")).unwrap(),
    )
    .unwrap();
    let g = load(path.to_str().unwrap()).unwrap();
    assert_eq!((g.name(), g.num_chips()), ("my_system", 2));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn one_dim_and_old_types_spelling() {
    let text = r#"
        mesh_descriptors { name: "L" arch: BLACKHOLE
          device_topology { dims: [ 5 ] types: [ RING ] }
          host_topology { dims: [ 1 ] } channels { count: 3 } }
        top_level_instance { mesh { mesh_descriptor: "L" } }"#;
    let g = parse_mgd_str(text, "line.textproto").unwrap();
    assert_eq!(g.mesh_shape(), (1, 5));
    assert_eq!(g.dim_kinds(), Some([DimKind::Line, DimKind::Ring]));
    assert_grid(&g, 3, (false, true));
}

/// A valid 2x2 descriptor, one field per line, for the error tests to edit.
fn base() -> Vec<&'static str> {
    vec![
        "mesh_descriptors {",                                                 // 1
        "  name: \"M0\"",                                                     // 2
        "  arch: WORMHOLE_B0",                                                // 3
        "  device_topology { dims: [ 2, 2 ] }",                               // 4
        "  host_topology { dims: [ 1, 1 ] }",                                 // 5
        "  channels { count: 2 }",                                            // 6
        "}",                                                                  // 7
        "top_level_instance { mesh { mesh_descriptor: \"M0\" mesh_id: 0 } }", // 8
    ]
}

fn refused(lines: &[&str]) -> E {
    parse_mgd_str(&lines.join("\n"), "sys.textproto").expect_err("descriptor should be refused")
}

/// The error is at `line`, starts with `sys.textproto:line:`, and says each of `says`.
fn check(e: &E, line: usize, says: &[&str]) {
    let msg = e.to_string();
    assert_eq!(e.line(), Some(line), "{msg}");
    assert!(msg.starts_with(&format!("sys.textproto:{line}: ")), "{msg}");
    for s in says {
        assert!(msg.contains(s), "{msg}\n  should say: {s}");
    }
}

#[test]
fn the_base_descriptor_is_valid() {
    let g = parse_mgd_str(&base().join("\n"), "sys.textproto").unwrap();
    assert_eq!((g.name(), g.mesh_shape()), ("sys", (2, 2)));
}

#[test]
fn channels_count_zero_is_refused() {
    let mut v = base();
    v[5] = "  channels { count: 0 }";
    let e = refused(&v);
    assert!(matches!(e, E::InvalidValue { .. }), "{e:?}");
    check(&e, 6, &["channels count 0", "write count: 1 or more"]);
}

#[test]
fn channels_more_than_the_chips_have_ports_for() {
    let mut v = base();
    v[5] = "  channels { count: 5 }";
    // 2x2: every chip has 2 neighbours but the grid uses 4 directions, 20 ports > 16.
    check(
        &refused(&v),
        6,
        &[
            "needs 20 ethernet ports",
            "wormhole_b0 chips have 16",
            "count: 4 or less",
        ],
    );
}

#[test]
fn unknown_arch_is_refused() {
    let mut v = base();
    v[2] = "  arch: GRAYSKULL";
    let e = refused(&v);
    assert!(matches!(e, E::UnknownArch { .. }), "{e:?}");
    check(&e, 3, &["GRAYSKULL", "WORMHOLE_B0, BLACKHOLE"]);
    v[2] = "  arch: \"WORMHOLE_B0\"";
    check(&refused(&v), 3, &["without quotes"]);
}

#[test]
fn unknown_field_is_refused_with_the_fields_that_exist() {
    let mut v = base();
    v[5] = "  chanels { count: 2 }";
    let e = refused(&v);
    assert!(matches!(e, E::UnknownField { .. }), "{e:?}");
    check(
        &e,
        6,
        &[
            "unknown field `chanels`",
            "mesh_descriptors \"M0\"",
            "channels",
        ],
    );
    let mut v = base();
    v[3] = "  device_topology { dims: [ 2, 2 ] dimtypes: [ LINE, LINE ] }";
    check(&refused(&v), 4, &["`dimtypes`", "dim_types"]);
    let mut v = base();
    v.push("mesh_descriptor { }"); // line 9: top level
    check(&refused(&v), 9, &["`mesh_descriptor`", "mesh_descriptors"]);
}

#[test]
fn missing_top_level_instance_is_refused() {
    let v = &base()[..7];
    let e = refused(v);
    assert!(
        matches!(
            e,
            E::MissingField {
                field: "top_level_instance",
                ..
            }
        ),
        "{e:?}"
    );
    check(&e, 1, &["top_level_instance { mesh { mesh_descriptor"]);
}

#[test]
fn missing_required_mesh_fields_are_refused() {
    for (idx, field) in [
        (2, "arch"),
        (3, "device_topology"),
        (4, "host_topology"),
        (5, "channels"),
    ] {
        let mut v = base();
        v.remove(idx);
        let e = refused(&v);
        assert!(matches!(e, E::MissingField { .. }), "{field}: {e:?}");
        check(&e, 1, &[&format!("has no `{field}`")]);
    }
}

#[test]
fn dims_that_do_not_fit_are_refused() {
    // Three dims.
    let mut v = base();
    v[3] = "  device_topology { dims: [ 2, 2, 2 ] }";
    check(&refused(&v), 4, &["3 dims", "dims: [ rows, cols ]"]);
    // A zero dim.
    v[3] = "  device_topology { dims: [ 2, 0 ] }";
    check(&refused(&v), 4, &["holds 0", "from 1"]);
    // More dim_types than dims.
    v[3] = "  device_topology { dims: [ 2, 2 ] dim_types: [ LINE, LINE, RING ] }";
    check(&refused(&v), 4, &["3 entries for 2 dims"]);
    // A ring of two chips.
    v[3] = "  device_topology { dims: [ 2, 2 ] dim_types: [ RING, LINE ] }";
    check(&refused(&v), 4, &["RING", "3 or more chips", "write LINE"]);
    // A bad dim type.
    v[3] = "  device_topology { dims: [ 2, 2 ] dim_types: [ LINE, TORUS ] }";
    check(&refused(&v), 4, &["TORUS", "LINE, RING"]);
    // Hosts that do not split the chips.
    let mut v = base();
    v[4] = "  host_topology { dims: [ 1, 3 ] }";
    check(&refused(&v), 5, &["do not split", "[2, 2]", "dims: [1, 1]"]);
    // A device_id beyond the chips.
    let mut v = base();
    v[7] = "top_level_instance { mesh { mesh_descriptor: \"M0\" mesh_id: 0 device_id: 9 } }";
    check(&refused(&v), 8, &["device_id 9", "devices 0..=3"]);
}

#[test]
fn references_to_undefined_descriptors_are_refused() {
    let mut v = base();
    v[7] = "top_level_instance { mesh { mesh_descriptor: \"M1\" mesh_id: 0 } }";
    check(&refused(&v), 8, &["\"M1\" is not defined", "\"M0\""]);
    v[7] = "top_level_instance { graph { graph_descriptor: \"G\" graph_id: 0 } }";
    check(&refused(&v), 8, &["\"G\" is not defined", "none"]);
}

#[test]
fn a_top_level_graph_of_two_meshes_is_refused() {
    let mut v = base();
    v.truncate(7);
    v.extend([
        "graph_descriptors {",                                                  // 8
        "  name: \"G\" type: \"POD\"",                                          // 9
        "  instances { mesh { mesh_descriptor: \"M0\" mesh_id: 0 } }",          // 10
        "  instances { mesh { mesh_descriptor: \"M0\" mesh_id: 1 } }",          // 11
        "  graph_topology: RING channels { count: 1 }",                         // 12
        "}",                                                                    // 13
        "top_level_instance { graph { graph_descriptor: \"G\" graph_id: 0 } }", // 14
    ]);
    check(
        &refused(&v),
        14,
        &["holds 2 mesh instances", "ttmesh opens one mesh"],
    );
    // Narrowed to one mesh of it, it opens.
    v[13] = "top_level_instance { graph { graph_descriptor: \"G\" graph_id: 0 mesh { mesh_descriptor: \"M0\" mesh_id: 1 } } }";
    assert_eq!(parse_mgd_str(&v.join("\n"), "x").unwrap().num_chips(), 4);
}

#[test]
fn not_emulated_parts_are_refused_with_the_reason() {
    let mut v = base();
    v.insert(6, "  express_connections { src: 0 dst: 3 }"); // line 7
    check(&refused(&v), 7, &["express_connections are not emulated"]);
    let mut v = base();
    v.push("switch_descriptors { name: \"S\" }"); // line 9
    check(&refused(&v), 9, &["switch_descriptors are not emulated"]);
}

#[test]
fn syntax_errors_and_duplicates_name_their_line() {
    let mut v = base();
    v[6] = ""; // the mesh is never closed
    let e = refused(&v);
    assert!(matches!(e, E::Syntax { .. }), "{e:?}");
    assert!(e.to_string().contains("opened at line 1"), "{e}");
    let mut v = base();
    v[2] = "  arch: WORMHOLE_B0 arch: BLACKHOLE";
    check(&refused(&v), 3, &["`arch` is set twice", "keep one"]);
    let mut v = base();
    v[3] = "  device_topology { dims: [ \"2\", 2 ] }";
    check(&refused(&v), 4, &["holds a string", "whole number"]);
}

#[test]
fn arbitrary_text_never_panics() {
    let base = base().join("\n");
    // Every prefix of a valid descriptor, and each one with a byte changed.
    for cut in 0..base.len() {
        let _ = parse_mgd_str(&base[..cut], "x");
        let mut bytes = base.as_bytes().to_vec();
        bytes[cut] = b"{}[]:\"#<>,0-"[cut % 12];
        let _ = parse_mgd_str(&String::from_utf8_lossy(&bytes), "x");
    }
}

#[test]
fn an_error_at_the_end_points_at_the_last_line() {
    let e = parse_mgd_str("mesh_descriptors {\n  name: \"M0\"\n", "sys.textproto").unwrap_err();
    check(&e, 2, &["ends inside the message opened at line 1"]);
}
