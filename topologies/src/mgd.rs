//! tt-metal's mesh graph descriptor (MGD 2.0, a protobuf textproto) -> checked
//! [`ClusterGraph`].
//!
//! An MGD names no chips or ports: a mesh descriptor gives the device grid (`device_topology`
//! `dims`, with `dim_types` `LINE` or `RING` per dimension), how many ethernet links join each
//! pair of grid neighbours (`channels` `count`) and the hosts it spans (`host_topology`). The
//! graph built here is that grid: chip `r * cols + c` at `(r, c)` (tt-metal's row-major device
//! order), `count` links between grid neighbours, and a wrap link set closing each `RING`
//! dimension. Ports are given per direction: with `count` links per pair, the first direction a
//! chip uses (north, east, south, west, in that order, counting only the directions the grid
//! has) takes ports `0..count`, the next `count..2*count`, and so on.
//!
//! Read: `mesh_descriptors` (name, arch, device_topology, channels, host_topology),
//! `graph_descriptors` (checked, and followed from `top_level_instance` to the one mesh it
//! holds), `top_level_instance`, and `pinnings` (checked, then ignored: they pin logical chips
//! to physical trays, and the emulator has no trays). Refused with the reason: unknown fields
//! (tt-metal tolerates them; a typo here should not silently change the system), more than 2
//! dims, `express_connections` and `switch_descriptors` (not emulated), and a top level that
//! holds more than one mesh (ttmesh opens one mesh).

use std::collections::HashMap;

use crate::graph::{ArchName, Chip, ChipId, ClusterGraph, DimKind, Link};
use crate::textproto::{self, Field, Message, Value};
use crate::{TopologyError, MAX_CHIPS};

mod graph;

use graph::{
    check_pinning, check_ref, meshes_under, read_graph, read_node_ref, GraphDesc, NodeRef,
};

/// File name endings read as a mesh graph descriptor rather than TOML.
pub const MGD_EXTENSIONS: [&str; 4] = ["textproto", "txtpb", "pbtxt", "prototxt"];

/// The top-level fields that mark a text as a mesh graph descriptor.
const TOP_FIELDS: [&str; 5] = [
    "mesh_descriptors",
    "graph_descriptors",
    "top_level_instance",
    "switch_descriptors",
    "pinnings",
];

/// True when `text`'s first field is one of an MGD's top-level fields (a file without a
/// telling extension).
pub(crate) fn looks_like_mgd(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .is_some_and(|l| {
            TOP_FIELDS.iter().any(|f| {
                l.strip_prefix(f)
                    .is_some_and(|rest| rest.trim_start().starts_with(['{', ':', '<']))
            })
        })
}

/// Parses and checks one mesh graph descriptor. `source_name` is what errors print before
/// `:line:`; its file stem names the graph.
pub fn parse_mgd_str(text: &str, source_name: &str) -> Result<ClusterGraph, TopologyError> {
    let root = textproto::parse(text, source_name)?;
    let cx = Cx { source_name };
    cx.known_fields(&root, "the descriptor", &TOP_FIELDS)?;
    if let Some(f) = root.fields.iter().find(|f| f.name == "switch_descriptors") {
        return Err(cx.invalid(
            f.line,
            "switch_descriptors are not emulated (ttmesh opens one mesh, with no switches); \
             remove them and point top_level_instance at a mesh"
                .into(),
        ));
    }
    for p in fields(&root, "pinnings") {
        check_pinning(&cx, p)?;
    }
    let mut meshes: HashMap<String, MeshDesc> = HashMap::new();
    for f in fields(&root, "mesh_descriptors") {
        let m = read_mesh(&cx, f)?;
        if let Some(first) = meshes.get(&m.name) {
            return Err(cx.invalid(
                f.line,
                format!(
                    "mesh descriptor \"{}\" is defined twice (also at line {}); give each its own name",
                    m.name, first.line
                ),
            ));
        }
        meshes.insert(m.name.clone(), m);
    }
    let mut graphs: HashMap<String, GraphDesc> = HashMap::new();
    for f in fields(&root, "graph_descriptors") {
        let g = read_graph(&cx, f)?;
        if let Some(first) = graphs.get(&g.name) {
            return Err(cx.invalid(
                f.line,
                format!(
                    "graph descriptor \"{}\" is defined twice (also at line {}); give each its own name",
                    g.name, first.line
                ),
            ));
        }
        graphs.insert(g.name.clone(), g);
    }
    let top = cx.one(&root, "top_level_instance")?.ok_or_else(|| {
        cx.missing(
            1,
            "top_level_instance",
            "the descriptor",
            "top_level_instance { mesh { mesh_descriptor: \"M0\" mesh_id: 0 } }",
        )
    })?;
    let top_ref = read_node_ref(&cx, top, "top_level_instance")?;
    // Every reference must name a defined descriptor, wherever it sits.
    for g in graphs.values() {
        for r in &g.instances {
            check_ref(&cx, r, &meshes, &graphs)?;
        }
    }
    check_ref(&cx, &top_ref, &meshes, &graphs)?;
    let mut found = Vec::new();
    meshes_under(&top_ref, &graphs, &mut found, 0);
    let mesh = match found.as_slice() {
        [one] => &meshes[one.as_str()],
        _ => {
            return Err(cx.invalid(
                top.line,
                format!(
                    "top_level_instance holds {} mesh instances; ttmesh opens one mesh: point \
                     top_level_instance at one of them, e.g. mesh {{ mesh_descriptor: \"{}\" mesh_id: 0 }}",
                    found.len(),
                    found.first().map_or("M0", String::as_str)
                ),
            ))
        }
    };
    if let NodeRef::Mesh {
        device_id: Some((_, line)),
        ..
    } = &top_ref
    {
        return Err(cx.invalid(
            *line,
            "top_level_instance names one device of the mesh; name the whole mesh (remove device_id)"
                .into(),
        ));
    }
    Ok(build(mesh, graph_name(source_name, &mesh.name)))
}

/// The file stem of the source (`galaxy` for `path/galaxy.textproto`), else the mesh's name.
fn graph_name(source_name: &str, mesh_name: &str) -> String {
    let stem = std::path::Path::new(source_name)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("");
    if stem.trim().is_empty() {
        mesh_name.to_string()
    } else {
        stem.to_string()
    }
}

/// A checked mesh descriptor.
struct MeshDesc {
    name: String,
    line: usize,
    arch: ArchName,
    rows: usize,
    cols: usize,
    kinds: [DimKind; 2],
    channels: usize,
}

/// Errors with the source name, and field access that names what it expected.
struct Cx<'a> {
    source_name: &'a str,
}

impl Cx<'_> {
    fn invalid(&self, line: usize, message: String) -> TopologyError {
        TopologyError::InvalidValue {
            source_name: self.source_name.to_string(),
            line,
            message,
        }
    }

    fn missing(
        &self,
        line: usize,
        field: &'static str,
        context: &str,
        example: &'static str,
    ) -> TopologyError {
        TopologyError::MissingField {
            source_name: self.source_name.to_string(),
            line,
            field,
            context: context.to_string(),
            example,
        }
    }

    /// Refuses a field `msg` does not have, listing those it has.
    fn known_fields(&self, msg: &Message, what: &str, known: &[&str]) -> Result<(), TopologyError> {
        match msg
            .fields
            .iter()
            .find(|f| !known.contains(&f.name.as_str()))
        {
            None => Ok(()),
            Some(f) => Err(TopologyError::UnknownField {
                source_name: self.source_name.to_string(),
                line: f.line,
                field: f.name.clone(),
                message: what.to_string(),
                known: known.join(", "),
            }),
        }
    }

    /// A field that may appear at most once.
    fn one<'m>(&self, msg: &'m Message, name: &str) -> Result<Option<&'m Field>, TopologyError> {
        let mut it = msg.fields.iter().filter(|f| f.name == name);
        let first = it.next();
        if let (Some(a), Some(b)) = (first, it.next()) {
            return Err(self.invalid(
                b.line,
                format!("`{name}` is set twice (also at line {}); keep one", a.line),
            ));
        }
        Ok(first)
    }

    fn message<'m>(&self, f: &'m Field) -> Result<&'m Message, TopologyError> {
        match &f.value {
            Value::Message(m) => Ok(m),
            v => Err(self.invalid(
                f.line,
                format!(
                    "`{}` holds {}; it is a message: write {} {{ ... }}",
                    f.name,
                    v.kind(),
                    f.name
                ),
            )),
        }
    }

    fn string(&self, f: &Field) -> Result<String, TopologyError> {
        match &f.value {
            Value::Str(s) => Ok(s.clone()),
            v => Err(self.invalid(
                f.line,
                format!(
                    "`{}` holds {}; write {}: \"...\" (a quoted string)",
                    f.name,
                    v.kind(),
                    f.name
                ),
            )),
        }
    }

    fn int(&self, f: &Field) -> Result<i64, TopologyError> {
        match &f.value {
            Value::Int(n) => Ok(*n),
            v => Err(self.invalid(
                f.line,
                format!(
                    "`{}` holds {}; write {}: N (a whole number)",
                    f.name,
                    v.kind(),
                    f.name
                ),
            )),
        }
    }

    /// An enum field: its name (or number) must be one of `values` (name, number).
    fn enum_value<T: Copy>(
        &self,
        f: &Field,
        values: &[(&str, i64, T)],
    ) -> Result<T, TopologyError> {
        let hit = match &f.value {
            Value::Ident(s) => values.iter().find(|(n, _, _)| n == s),
            Value::Int(k) => values.iter().find(|(_, v, _)| v == k),
            _ => None,
        };
        hit.map(|(_, _, t)| *t).ok_or_else(|| {
            let shown = match &f.value {
                Value::Ident(s) => s.clone(),
                Value::Int(k) => k.to_string(),
                Value::Str(s) => format!("\"{s}\""),
                Value::Message(_) => "a message".into(),
            };
            let names: Vec<&str> = values.iter().map(|(n, _, _)| *n).collect();
            self.invalid(
                f.line,
                format!(
                    "`{}` holds {shown}; write one of {} (without quotes)",
                    f.name,
                    names.join(", ")
                ),
            )
        })
    }

    /// A string field that must be present and not empty.
    fn required_string(
        &self,
        msg: &Message,
        at: usize,
        name: &'static str,
        context: &str,
        example: &'static str,
    ) -> Result<(String, usize), TopologyError> {
        let f = self
            .one(msg, name)?
            .ok_or_else(|| self.missing(at, name, context, example))?;
        let s = self.string(f)?;
        if s.trim().is_empty() {
            return Err(self.invalid(f.line, format!("`{name}` is empty; write {example}")));
        }
        Ok((s, f.line))
    }
}

fn fields<'m>(msg: &'m Message, name: &'m str) -> impl Iterator<Item = &'m Field> + 'm {
    msg.fields.iter().filter(move |f| f.name == name)
}

const MESH_FIELDS: [&str; 6] = [
    "name",
    "arch",
    "device_topology",
    "channels",
    "host_topology",
    "express_connections",
];

fn read_mesh(cx: &Cx, f: &Field) -> Result<MeshDesc, TopologyError> {
    let m = cx.message(f)?;
    let (name, _) =
        cx.required_string(m, f.line, "name", "this mesh descriptor", "name: \"M0\"")?;
    let what = format!("mesh_descriptors \"{name}\"");
    cx.known_fields(m, &what, &MESH_FIELDS)?;
    if let Some(e) = fields(m, "express_connections").next() {
        return Err(cx.invalid(
            e.line,
            "express_connections are not emulated (the 2D fabric routes over the grid only); remove them".into(),
        ));
    }
    let arch_f = cx
        .one(m, "arch")?
        .ok_or_else(|| cx.missing(f.line, "arch", &what, "arch: WORMHOLE_B0"))?;
    let arch = match &arch_f.value {
        Value::Ident(s) if s == "WORMHOLE_B0" => ArchName::WormholeB0,
        Value::Ident(s) if s == "BLACKHOLE" => ArchName::Blackhole,
        Value::Int(1) => ArchName::WormholeB0,
        Value::Int(2) => ArchName::Blackhole,
        v => {
            return Err(TopologyError::UnknownArch {
                source_name: cx.source_name.to_string(),
                line: arch_f.line,
                arch: match v {
                    Value::Ident(s) | Value::Str(s) => s.clone(),
                    Value::Int(k) => k.to_string(),
                    Value::Message(_) => "a message".into(),
                },
                known: "WORMHOLE_B0, BLACKHOLE (write them without quotes)".into(),
            })
        }
    };

    // device_topology: dims and dim_types.
    let topo_f = cx.one(m, "device_topology")?.ok_or_else(|| {
        cx.missing(
            f.line,
            "device_topology",
            &what,
            "device_topology { dims: [ 8, 4 ] }",
        )
    })?;
    let topo = cx.message(topo_f)?;
    cx.known_fields(
        topo,
        &format!("device_topology of \"{name}\""),
        &["dims", "dim_types", "types"],
    )?;
    let dims = read_dims(
        cx,
        topo,
        topo_f.line,
        "device_topology",
        "device_topology { dims: [ 8, 4 ] }",
    )?;
    let (rows, cols) = match dims.as_slice() {
        [(n, _)] => (1, *n),
        [(r, _), (c, _)] => (*r, *c),
        more => {
            return Err(cx.invalid(
                more[0].1,
                format!(
                    "device_topology has {} dims; ttmesh emulates 1D and 2D meshes: write dims: [ rows, cols ]",
                    more.len()
                ),
            ))
        }
    };
    if rows.saturating_mul(cols) > MAX_CHIPS {
        return Err(cx.invalid(
            dims[0].1,
            format!("device_topology dims [{rows}, {cols}] make {} chips; at most {MAX_CHIPS} are emulated", rows.saturating_mul(cols)),
        ));
    }
    // tt-metal's schema calls the list `dim_types`; older descriptors wrote `types`.
    let kinds_f: Vec<&Field> = topo
        .fields
        .iter()
        .filter(|f| f.name == "dim_types" || f.name == "types")
        .collect();
    if kinds_f.len() > dims.len() {
        return Err(cx.invalid(
            kinds_f[dims.len()].line,
            format!(
                "dim_types has {} entries for {} dims; give one LINE or RING per dim",
                kinds_f.len(),
                dims.len()
            ),
        ));
    }
    let kind_values = [("LINE", 1, DimKind::Line), ("RING", 2, DimKind::Ring)];
    let mut kinds = vec![DimKind::Line; dims.len()];
    for (k, kf) in kinds.iter_mut().zip(&kinds_f) {
        *k = cx.enum_value(kf, &kind_values)?;
    }
    for ((&(len, line), kind), axis) in dims.iter().zip(&kinds).zip(["rows", "cols"]) {
        if *kind == DimKind::Ring && len < 3 {
            let axis = if dims.len() == 1 { "cols" } else { axis };
            return Err(cx.invalid(
                line,
                format!(
                    "dim of {len} ({axis}) is declared RING, but a ring needs 3 or more chips (2 chips are \
                     already joined both ways); write LINE for it"
                ),
            ));
        }
    }
    let kinds = if kinds.len() == 1 {
        [DimKind::Line, kinds[0]]
    } else {
        [kinds[0], kinds[1]]
    };

    // channels: links per neighbour pair.
    let ch_f = cx
        .one(m, "channels")?
        .ok_or_else(|| cx.missing(f.line, "channels", &what, "channels { count: 2 }"))?;
    let channels = read_channels(cx, ch_f, &what)?;
    let directions = usize::from(rows > 1) * 2 + usize::from(cols > 1) * 2;
    let ports = arch.num_eth_ports() as usize;
    if channels * directions > ports {
        return Err(cx.invalid(
            ch_f.line,
            format!(
                "channels count {channels} on a {rows}x{cols} mesh needs {} ethernet ports per chip \
                 ({channels} toward each of {directions} neighbours), but {arch} chips have {ports}: \
                 write count: {} or less",
                channels * directions,
                ports / directions.max(1)
            ),
        ));
    }

    // host_topology: each host holds an equal block of the grid.
    let host_f = cx.one(m, "host_topology")?.ok_or_else(|| {
        cx.missing(
            f.line,
            "host_topology",
            &what,
            "host_topology { dims: [ 1, 1 ] }",
        )
    })?;
    let host = cx.message(host_f)?;
    cx.known_fields(host, &format!("host_topology of \"{name}\""), &["dims"])?;
    let host_dims = read_dims(
        cx,
        host,
        host_f.line,
        "host_topology",
        "host_topology { dims: [ 1, 1 ] }",
    )?;
    let device: Vec<usize> = dims.iter().map(|d| d.0).collect();
    let hosts: Vec<usize> = host_dims.iter().map(|d| d.0).collect();
    if hosts.len() != device.len() || hosts.iter().zip(&device).any(|(h, d)| d % h != 0) {
        return Err(cx.invalid(
            host_dims[0].1,
            format!(
                "host_topology dims {hosts:?} do not split device_topology dims {device:?} into equal \
                 blocks of chips (one per host): give as many entries as device_topology, each \
                 dividing its dim, e.g. dims: {:?}",
                vec![1; device.len()]
            ),
        ));
    }
    Ok(MeshDesc {
        name,
        line: f.line,
        arch,
        rows,
        cols,
        kinds,
        channels,
    })
}

/// `dims` of a topology message: at least one entry, each a whole number >= 1.
fn read_dims(
    cx: &Cx,
    msg: &Message,
    at: usize,
    what: &str,
    example: &'static str,
) -> Result<Vec<(usize, usize)>, TopologyError> {
    let mut dims = Vec::new();
    for d in fields(msg, "dims") {
        let n = cx.int(d)?;
        let n = usize::try_from(n).ok().filter(|n| (1..=MAX_CHIPS).contains(n)).ok_or_else(|| {
            cx.invalid(
                d.line,
                format!("{what} dims holds {n}; each dim must be from 1 to {MAX_CHIPS}: write {example}"),
            )
        })?;
        dims.push((n, d.line));
    }
    if dims.is_empty() {
        return Err(cx.missing(at, "dims", what, example));
    }
    Ok(dims)
}

/// `channels { count: N policy: STRICT|RELAXED }`: N >= 1.
fn read_channels(cx: &Cx, f: &Field, what: &str) -> Result<usize, TopologyError> {
    let ch = cx.message(f)?;
    cx.known_fields(ch, &format!("channels of {what}"), &["count", "policy"])?;
    if let Some(p) = cx.one(ch, "policy")? {
        cx.enum_value(p, &[("STRICT", 1, ()), ("RELAXED", 2, ())])?;
    }
    let count_f = cx
        .one(ch, "count")?
        .ok_or_else(|| cx.missing(f.line, "count", &format!("channels of {what}"), "count: 2"))?;
    let count = cx.int(count_f)?;
    usize::try_from(count)
        .ok()
        .filter(|&c| (1..=64).contains(&c))
        .ok_or_else(|| {
            cx.invalid(
                count_f.line,
                format!(
                    "channels count {count}: each pair of neighbours needs at least one ethernet link; \
                     write count: 1 or more (tt-metal's Wormhole meshes use 2 or 4)"
                ),
            )
        })
}

/// The grid the mesh descriptor describes (see the module docs for ids and ports).
fn build(m: &MeshDesc, name: String) -> ClusterGraph {
    let (rows, cols, count) = (m.rows, m.cols, m.channels);
    let id = |r: usize, c: usize| (r * cols + c) as ChipId;
    let chips: Vec<Chip> = (0..rows)
        .flat_map(|r| (0..cols).map(move |c| (r, c)))
        .map(|(r, c)| Chip {
            id: id(r, c),
            coord: (r, c),
            board: None,
        })
        .collect();
    // Port blocks per direction, only for the directions this grid has.
    let mut block = [None; 4]; // north, east, south, west
    let mut next = 0;
    for (d, used) in [rows > 1, cols > 1, rows > 1, cols > 1]
        .into_iter()
        .enumerate()
    {
        if used {
            block[d] = Some(next);
            next += 1;
        }
    }
    let port = |dir: usize, k: usize| (block[dir].expect("direction in use") * count + k) as u32;
    let (north, east, south, west) = (0, 1, 2, 3);
    let mut links = Vec::new();
    let mut join = |a: ChipId, a_dir: usize, b: ChipId, b_dir: usize| {
        for k in 0..count {
            links.push(Link {
                a: (a, port(a_dir, k)),
                b: (b, port(b_dir, k)),
            });
        }
    };
    for r in 0..rows {
        for c in 0..cols {
            if c + 1 < cols {
                join(id(r, c), east, id(r, c + 1), west);
            }
            if r + 1 < rows {
                join(id(r, c), south, id(r + 1, c), north);
            }
        }
    }
    // RING dims are 3 or more long (checked), so a wrap never doubles a neighbour link.
    if m.kinds[1] == DimKind::Ring {
        for r in 0..rows {
            join(id(r, cols - 1), east, id(r, 0), west);
        }
    }
    if m.kinds[0] == DimKind::Ring {
        for c in 0..cols {
            join(id(rows - 1, c), south, id(0, c), north);
        }
    }
    ClusterGraph::from_checked(name, m.arch, (rows, cols), chips, links).with_dim_kinds(m.kinds)
}
