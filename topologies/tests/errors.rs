//! Each kind of malformed descriptor gives its own error variant, pointing at the right line.
//! Descriptors are written as arrays of lines, so line k is element k-1.

use ttmesh_topologies::{parse_str, TopologyError as E};

fn parse(lines: &[&str]) -> E {
    parse_str(&lines.join("\n"), "t3k-custom.toml").expect_err("descriptor should be refused")
}

/// A valid 1x2 Wormhole descriptor, 12 lines, for tests to append to or edit.
fn two_chips() -> Vec<&'static str> {
    vec![
        "name = \"two\"",         // 1
        "arch = \"wormhole_b0\"", // 2
        "mesh_shape = [1, 2]",    // 3
        "",                       // 4
        "[[chips]]",              // 5
        "id = 0",                 // 6
        "coord = [0, 0]",         // 7
        "",                       // 8
        "[[chips]]",              // 9
        "id = 1",                 // 10
        "coord = [0, 1]",         // 11
        "",                       // 12
    ]
}

fn with_links(links: &[&'static str]) -> Vec<&'static str> {
    let mut v = two_chips();
    v.extend_from_slice(links);
    v
}

/// `links = [...]` as an inline array must come before the first `[[chips]]` header (after it,
/// it would be a key of that chip): here it starts at line 4.
fn with_inline_links(links: &[&'static str]) -> Vec<&'static str> {
    let mut v = two_chips();
    for (i, l) in links.iter().enumerate() {
        v.insert(3 + i, l);
    }
    v
}

#[test]
fn a_top_level_key_after_a_table_gets_a_hint() {
    let e = parse(&with_links(&["links = [{ a = [0, 1], b = [1, 1] }]"]));
    assert!(matches!(e, E::Syntax { line: 13, .. }), "{e:?}");
    assert!(e.to_string().contains("belong to that table"), "{e}");
}

#[test]
fn the_base_descriptor_is_valid() {
    let g = parse_str(
        &with_links(&["[[links]]", "a = [0, 3]", "b = [1, 3]"]).join("\n"),
        "x",
    )
    .unwrap();
    assert_eq!(g.link_count(0, 1), 1);
}

#[test]
fn toml_syntax_error() {
    let mut v = two_chips();
    v[6] = "coord = = [0, 0]"; // line 7
    let e = parse(&v);
    assert!(matches!(e, E::Syntax { .. }), "{e:?}");
    assert!(e.to_string().starts_with("t3k-custom.toml:7: "), "{e}");
}

#[test]
fn wrong_type_and_unknown_key_are_syntax_errors_at_their_line() {
    let mut v = two_chips();
    v[9] = "id = \"one\""; // line 10
    let e = parse(&v);
    assert!(matches!(e, E::Syntax { line: 10, .. }), "{e:?}");
    assert!(e.to_string().contains("expected i64"), "{e}");

    let mut v = two_chips();
    v[2] = "mesh-shape = [1, 2]"; // line 3: a typo, not silently ignored
    let e = parse(&v);
    assert!(matches!(e, E::Syntax { line: 3, .. }), "{e:?}");
    assert!(e.to_string().contains("unknown field `mesh-shape`"), "{e}");
}

#[test]
fn unknown_arch_lists_the_known_ones() {
    let mut v = two_chips();
    v[1] = "arch = \"grayskull\"";
    let e = parse(&v);
    assert!(matches!(e, E::UnknownArch { line: 2, .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "t3k-custom.toml:2: unknown arch \"grayskull\"; known archs: wormhole_b0, blackhole"
    );
}

#[test]
fn link_to_unknown_chip() {
    let e = parse(&with_links(&["[[links]]", "a = [0, 3]", "b = [9, 3]"]));
    assert!(
        matches!(
            e,
            E::UnknownChip {
                line: 15,
                chip: 9,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("link names chip 9, which is not in [[chips]]"),
        "{e}"
    );
}

#[test]
fn port_used_twice_names_both_lines() {
    let e = parse(&with_links(&[
        "[[links]]",  // 13
        "a = [0, 3]", // 14
        "b = [1, 3]", // 15
        "",           // 16
        "[[links]]",  // 17
        "a = [1, 4]", // 18
        "b = [0, 3]", // 19
    ]));
    assert!(
        matches!(
            e,
            E::PortReused {
                line: 19,
                chip: 0,
                port: 3,
                first_line: 14,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "t3k-custom.toml:19: port 3 of chip 0 is used by two links (also at line 14); \
         each (chip, port) may carry one link"
    );
}

#[test]
fn port_beyond_the_arch() {
    let e = parse(&with_links(&["[[links]]", "a = [0, 15]", "b = [1, 16]"]));
    assert!(
        matches!(
            e,
            E::PortOutOfRange {
                line: 15,
                port: 16,
                num_ports: 16,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "t3k-custom.toml:15: port 16 of chip 1 does not exist; wormhole_b0 chips have 16 ethernet ports (0..=15)"
    );
    // Blackhole has 14 ports: 13 is fine, 14 is not.
    let mut v = with_links(&["[[links]]", "a = [0, 13]", "b = [1, 14]"]);
    v[1] = "arch = \"blackhole\"";
    let e = parse(&v);
    assert!(
        matches!(
            e,
            E::PortOutOfRange {
                line: 15,
                port: 14,
                num_ports: 14,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn one_sided_links() {
    let e = parse(&with_links(&["[[links]]", "a = [1, 2]", "b = [1, 3]"]));
    assert!(matches!(e, E::OneSidedLink { line: 15, .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("link joins chip 1 to itself (ports 2 and 3)"),
        "{e}"
    );

    let e = parse(&with_links(&["", "[[links]]", "a = [0, 2]"]));
    assert!(matches!(e, E::OneSidedLink { line: 14, .. }), "{e:?}");
    assert!(e.to_string().contains("link has no `b` end"), "{e}");

    let e = parse(&with_links(&["[[links]]", "b = [0, 2]"]));
    assert!(matches!(e, E::OneSidedLink { line: 13, .. }), "{e:?}");
    assert!(e.to_string().contains("link has no `a` end"), "{e}");

    // Inline form: the line of the inline table.
    let e = parse(&with_inline_links(&[
        "links = [",
        "  { a = [0, 1], b = [1, 1] },",
        "  {},",
        "]",
    ]));
    assert!(matches!(e, E::OneSidedLink { line: 6, .. }), "{e:?}");
    assert!(e.to_string().contains("neither end"), "{e}");
}

#[test]
fn coordinate_outside_the_mesh() {
    let mut v = two_chips();
    v[10] = "coord = [1, 0]";
    let e = parse(&v);
    assert!(
        matches!(
            e,
            E::CoordOutOfMesh {
                line: 11,
                chip: 1,
                row: 1,
                col: 0,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "t3k-custom.toml:11: chip 1 has coord [1, 0], outside mesh_shape [1, 2] (rows 0..=0, cols 0..=1)"
    );
}

#[test]
fn duplicated_coordinate() {
    let mut v = two_chips();
    v[10] = "coord = [0, 0]";
    let e = parse(&v);
    assert!(
        matches!(
            e,
            E::DuplicateCoord {
                line: 11,
                chip: 1,
                other: 0,
                first_line: 7,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn mesh_not_filled_points_at_mesh_shape() {
    let mut v = two_chips();
    v[2] = "mesh_shape = [2, 2]";
    let e = parse(&v);
    assert!(
        matches!(
            e,
            E::MeshNotFilled {
                line: 3,
                num_chips: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "t3k-custom.toml:3: mesh_shape [2, 2] has 4 cells and the chips fill 2 of them \
         (no chip at [1, 0], [1, 1]); every cell needs exactly one chip"
    );
}

#[test]
fn duplicate_chip_id() {
    let mut v = two_chips();
    v[9] = "id = 0";
    let e = parse(&v);
    assert!(
        matches!(
            e,
            E::DuplicateChipId {
                line: 10,
                id: 0,
                first_line: 6,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn chip_ids_must_be_0_to_n_minus_1() {
    let mut v = two_chips();
    v[9] = "id = 5";
    let e = parse(&v);
    assert!(
        matches!(
            e,
            E::ChipIdOutOfRange {
                line: 10,
                id: 5,
                num_chips: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e
        .to_string()
        .ends_with("chip id 5 is out of range; a mesh of 2 chips numbers them 0..=1"));
}

#[test]
fn missing_required_fields() {
    let mut v = two_chips();
    v.remove(1); // no arch
    let e = parse(&v);
    assert!(
        matches!(
            e,
            E::MissingField {
                line: 1,
                field: "arch",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "t3k-custom.toml:1: the descriptor has no `arch`; add `arch = \"wormhole_b0\"`"
    );

    let mut v = two_chips();
    v[10] = "board = \"n300\""; // chip 1 has no coord: reported at its [[chips]] header
    let e = parse(&v);
    assert!(
        matches!(
            e,
            E::MissingField {
                line: 9,
                field: "coord",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("chip 1 has no `coord`"), "{e}");

    let mut v = two_chips();
    v[5] = ""; // chip without id
    let e = parse(&v);
    assert!(
        matches!(
            e,
            E::MissingField {
                line: 5,
                field: "id",
                ..
            }
        ),
        "{e:?}"
    );

    let e = parse(&two_chips()[..4]);
    assert!(
        matches!(
            e,
            E::MissingField {
                line: 1,
                field: "chips",
                ..
            }
        ),
        "{e:?}"
    );
    let e = parse(&two_chips()[1..]);
    assert!(matches!(e, E::MissingField { field: "name", .. }), "{e:?}");
}

#[test]
fn unusable_values() {
    let cases: [(usize, &str, usize, &str); 6] = [
        (
            2,
            "mesh_shape = [0, 2]",
            3,
            "mesh_shape holds 0; rows must be from 1 to 4096",
        ),
        (
            2,
            "mesh_shape = [5000, 5000]",
            3,
            "rows * cols at most 4096",
        ),
        (
            2,
            "mesh_shape = [1, 2, 3]",
            3,
            "mesh_shape has 3 numbers; write mesh_shape = [rows, cols]",
        ),
        (
            6,
            "coord = [0]",
            7,
            "coord has 1 numbers; write coord = [row, col]",
        ),
        (9, "id = -1", 10, "chip id -1 is not a non-negative integer"),
        (0, "name = \"  \"", 1, "name is empty"),
    ];
    for (idx, text, line, needle) in cases {
        let mut v = two_chips();
        v[idx] = text;
        let e = parse(&v);
        assert!(matches!(e, E::InvalidValue { .. }), "{text}: {e:?}");
        assert_eq!(e.line(), Some(line), "{text}: {e}");
        assert!(e.to_string().contains(needle), "{text}: {e}");
    }
    // A negative port is reported at the number itself, inside an inline array over lines.
    let e = parse(&with_inline_links(&[
        "links = [",
        "  { a = [0, 1],",
        "    b = [1, -2] },",
        "]",
    ]));
    assert!(matches!(e, E::InvalidValue { line: 6, .. }), "{e:?}");
    assert!(e.to_string().contains("b holds -2"), "{e}");
}

#[test]
fn errors_on_inline_tables_point_at_their_own_line() {
    let v = [
        "name = \"inline\"",
        "arch = \"wormhole_b0\"",
        "mesh_shape = [1, 2]",
        "chips = [",
        "  { id = 0, coord = [0, 0] },",
        "  { id = 1, coord = [0, 1] },",
        "]",
        "links = [",
        "  { a = [0, 1], b = [1, 1] },",
        "  { a = [0, 2], b = [1, 2] },",
        "  { a = [0, 1], b = [1, 3] },", // line 11: port 1 of chip 0 again
        "]",
    ];
    let e = parse(&v);
    assert!(
        matches!(
            e,
            E::PortReused {
                line: 11,
                first_line: 9,
                ..
            }
        ),
        "{e:?}"
    );
}

/// Messages name the key and the range a descriptor may really use.
#[test]
fn messages_name_the_key_and_the_accepted_range() {
    let mut v = two_chips();
    v[9] = "id = 4294967296";
    let e = parse(&v);
    assert!(matches!(e, E::InvalidValue { line: 10, .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "t3k-custom.toml:10: chip id 4294967296 is out of range; a mesh of 2 chips numbers them 0..=1: write id = N with N in that range"
    );
    v[9] = "id = -1";
    assert!(parse(&v).to_string().contains(
        "chip id -1 is not a non-negative integer; a mesh of 2 chips numbers them 0..=1"
    ));

    let mut v = two_chips();
    v.insert(6, "id = 1"); // a second `id` in the first chip, line 7
    let e = parse(&v);
    assert!(matches!(e, E::Syntax { line: 7, .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("t3k-custom.toml:7: duplicate key `id`: it is already set in this table"),
        "{e}"
    );
    let mut v = two_chips();
    v.insert(1, "name = \"again\"");
    assert!(parse(&v).to_string().contains("duplicate key `name`"));

    // Neither u32's range nor a range that includes the 0 refused next.
    for (text, needle) in [
        (
            "mesh_shape = [-2, 4]",
            "mesh_shape holds -2; rows must be from 1 to 4096",
        ),
        (
            "mesh_shape = [1, 0]",
            "mesh_shape holds 0; cols must be from 1 to 4096",
        ),
    ] {
        let mut v = two_chips();
        v[2] = text;
        let msg = parse(&v).to_string();
        assert!(msg.contains(needle), "{text}: {msg}");
        assert!(!msg.contains("4294967295"), "{msg}");
    }
    let mut v = two_chips();
    v[6] = "coord = [0, -1]";
    assert!(parse(&v)
        .to_string()
        .contains("coord holds -1; col must be from 0 to 1: write coord = [row, col]"));
    let e = parse(&with_links(&["[[links]]", "a = [0, -3]", "b = [1, 0]"]));
    assert!(
        e.to_string()
            .contains("a holds -3; port must be from 0 to 15: write a = [chip, port]"),
        "{e}"
    );
}

#[test]
fn a_folder_is_named_as_a_folder() {
    let dir = std::env::temp_dir();
    let e = ttmesh_topologies::load(dir.to_str().unwrap()).unwrap_err();
    assert!(matches!(e, E::IsAFolder { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "topology path {} is a folder, not a descriptor file; name a .toml file in it (see topologies/descriptors/) or a built-in name (n150, n300, t3k, galaxy, p150, p300)",
            dir.display()
        )
    );
}
