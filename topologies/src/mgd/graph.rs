//! Graph descriptors in a mesh graph descriptor: their instances, the references between
//! meshes and graphs (checked to exist and to nest without cycles), the meshes a
//! `top_level_instance` reaches, and pinnings; beside the mesh descriptors in `mgd.rs`.

use super::*;

/// A graph descriptor as far as ttmesh needs it: its members.
pub(super) struct GraphDesc {
    pub(super) name: String,
    pub(super) line: usize,
    pub(super) instances: Vec<NodeRef>,
}

pub(super) enum NodeRef {
    Mesh {
        descriptor: String,
        line: usize,
        device_id: Option<(i64, usize)>,
    },
    Graph {
        descriptor: String,
        line: usize,
        sub: Option<Box<NodeRef>>,
    },
}

pub(super) fn read_graph(cx: &Cx, f: &Field) -> Result<GraphDesc, TopologyError> {
    let m = cx.message(f)?;
    let (name, _) =
        cx.required_string(m, f.line, "name", "this graph descriptor", "name: \"G0\"")?;
    let what = format!("graph_descriptors \"{name}\"");
    cx.known_fields(
        m,
        &what,
        &[
            "name",
            "type",
            "instances",
            "channels",
            "graph_topology",
            "connections",
        ],
    )?;
    cx.required_string(m, f.line, "type", &what, "type: \"POD\"")?;
    let mut instances = Vec::new();
    for i in fields(m, "instances") {
        instances.push(read_node_ref(cx, i, "instances")?);
    }
    if instances.is_empty() {
        return Err(cx.missing(
            f.line,
            "instances",
            &what,
            "instances { mesh { mesh_descriptor: \"M0\" mesh_id: 0 } }",
        ));
    }
    let kinds: Vec<bool> = instances
        .iter()
        .map(|r| matches!(r, NodeRef::Mesh { .. }))
        .collect();
    if kinds.iter().any(|&k| k != kinds[0]) {
        return Err(cx.invalid(
            f.line,
            format!("{what} mixes mesh and graph instances; list only meshes or only graphs"),
        ));
    }
    if let Some(c) = cx.one(m, "channels")? {
        read_channels(cx, c, &what)?;
    }
    let layouts = [("ALL_TO_ALL", 1, ()), ("RING", 2, ())];
    if let Some(t) = cx.one(m, "graph_topology")? {
        match &t.value {
            // Newer schema: a message with layout_type and channels.
            Value::Message(tm) => {
                let tw = format!("graph_topology of \"{name}\"");
                cx.known_fields(tm, &tw, &["layout_type", "channels", "assign_z_direction"])?;
                let lt = cx.one(tm, "layout_type")?.ok_or_else(|| {
                    cx.missing(t.line, "layout_type", &tw, "layout_type: ALL_TO_ALL")
                })?;
                cx.enum_value(lt, &layouts)?;
                if let Some(c) = cx.one(tm, "channels")? {
                    read_channels(cx, c, &tw)?;
                }
            }
            _ => cx.enum_value(t, &layouts)?,
        }
    }
    for c in fields(m, "connections") {
        let cm = cx.message(c)?;
        let cw = format!("a connection of \"{name}\"");
        cx.known_fields(
            cm,
            &cw,
            &[
                "nodes",
                "channels",
                "directional",
                "routing_direction",
                "assign_z_direction",
            ],
        )?;
        for n in fields(cm, "nodes") {
            read_node_ref(cx, n, "nodes")?;
        }
        let ch = cx
            .one(cm, "channels")?
            .ok_or_else(|| cx.missing(c.line, "channels", &cw, "channels { count: 2 }"))?;
        read_channels(cx, ch, &cw)?;
    }
    Ok(GraphDesc {
        name,
        line: f.line,
        instances,
    })
}

/// `mesh { mesh_descriptor: "M0" mesh_id: 0 [device_id: 3] }` or
/// `graph { graph_descriptor: "G0" graph_id: 0 [mesh { ... } | graph { ... }] }`.
pub(super) fn read_node_ref(cx: &Cx, f: &Field, what: &str) -> Result<NodeRef, TopologyError> {
    let m = cx.message(f)?;
    cx.known_fields(m, what, &["mesh", "graph", "switch"])?;
    let mut refs = m.fields.iter();
    let (Some(r), None) = (refs.next(), refs.next()) else {
        return Err(cx.invalid(
            f.line,
            format!(
                "`{what}` must hold exactly one of mesh {{ ... }} or graph {{ ... }}; write e.g. \
                 {what} {{ mesh {{ mesh_descriptor: \"M0\" mesh_id: 0 }} }}"
            ),
        ));
    };
    read_ref(cx, r)
}

pub(super) fn read_ref(cx: &Cx, r: &Field) -> Result<NodeRef, TopologyError> {
    let rm = cx.message(r)?;
    match r.name.as_str() {
        "mesh" => {
            cx.known_fields(
                rm,
                "a mesh reference",
                &["mesh_descriptor", "mesh_id", "device_id"],
            )?;
            let (descriptor, _) = cx.required_string(
                rm,
                r.line,
                "mesh_descriptor",
                "this mesh reference",
                "mesh_descriptor: \"M0\"",
            )?;
            id_field(cx, rm, "mesh_id")?;
            let device_id = match cx.one(rm, "device_id")? {
                Some(d) => Some((cx.int(d)?, d.line)),
                None => None,
            };
            Ok(NodeRef::Mesh {
                descriptor,
                line: r.line,
                device_id,
            })
        }
        "graph" => {
            cx.known_fields(
                rm,
                "a graph reference",
                &["graph_descriptor", "graph_id", "mesh", "graph", "sub_ref"],
            )?;
            let (descriptor, _) = cx.required_string(
                rm,
                r.line,
                "graph_descriptor",
                "this graph reference",
                "graph_descriptor: \"G0\"",
            )?;
            id_field(cx, rm, "graph_id")?;
            let subs: Vec<&Field> = rm
                .fields
                .iter()
                .filter(|f| matches!(f.name.as_str(), "mesh" | "graph" | "sub_ref"))
                .collect();
            let sub = match subs.as_slice() {
                [] => None,
                [s] if s.name == "sub_ref" => Some(Box::new(read_node_ref(cx, s, "sub_ref")?)),
                [s] => Some(Box::new(read_ref(cx, s)?)),
                [_, extra, ..] => {
                    return Err(cx.invalid(
                        extra.line,
                        "a graph reference narrows to at most one mesh or graph; keep one".into(),
                    ))
                }
            };
            Ok(NodeRef::Graph {
                descriptor,
                line: r.line,
                sub,
            })
        }
        _ => Err(cx.invalid(
            r.line,
            "switches are not emulated (ttmesh opens one mesh); reference a mesh or a graph".into(),
        )),
    }
}

/// `mesh_id` / `graph_id`: optional (proto3 defaults it to 0), a whole number >= 0.
pub(super) fn id_field(cx: &Cx, m: &Message, name: &str) -> Result<(), TopologyError> {
    if let Some(f) = cx.one(m, name)? {
        if cx.int(f)? < 0 {
            return Err(cx.invalid(
                f.line,
                format!("`{name}` is negative; instance ids are 0 or more"),
            ));
        }
    }
    Ok(())
}

pub(super) fn check_ref(
    cx: &Cx,
    r: &NodeRef,
    meshes: &HashMap<String, MeshDesc>,
    graphs: &HashMap<String, GraphDesc>,
) -> Result<(), TopologyError> {
    let names = |keys: Vec<&String>| {
        let mut v: Vec<String> = keys.into_iter().map(|k| format!("\"{k}\"")).collect();
        v.sort();
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    match r {
        NodeRef::Mesh {
            descriptor,
            line,
            device_id,
        } => {
            let Some(m) = meshes.get(descriptor) else {
                return Err(cx.invalid(
                    *line,
                    format!(
                        "mesh_descriptor \"{descriptor}\" is not defined; the mesh_descriptors are {}",
                        names(meshes.keys().collect())
                    ),
                ));
            };
            if let Some((d, dl)) = device_id {
                let n = m.rows * m.cols;
                if *d < 0 || *d as usize >= n {
                    return Err(cx.invalid(
                        *dl,
                        format!(
                            "device_id {d} is not a chip of \"{descriptor}\" ({}x{}, devices 0..={})",
                            m.rows,
                            m.cols,
                            n - 1
                        ),
                    ));
                }
            }
            Ok(())
        }
        NodeRef::Graph {
            descriptor,
            line,
            sub,
        } => {
            if !graphs.contains_key(descriptor) {
                return Err(cx.invalid(
                    *line,
                    format!(
                        "graph_descriptor \"{descriptor}\" is not defined; the graph_descriptors are {}",
                        names(graphs.keys().collect())
                    ),
                ));
            }
            match sub {
                Some(s) => check_ref(cx, s, meshes, graphs),
                None => Ok(()),
            }
        }
    }
}

/// The mesh descriptors of every mesh instance under `r` (a nested reference narrows to its
/// innermost node). Depth-bounded, so a graph that contains itself ends.
pub(super) fn meshes_under(
    r: &NodeRef,
    graphs: &HashMap<String, GraphDesc>,
    out: &mut Vec<String>,
    depth: usize,
) {
    if depth > 16 {
        return;
    }
    match r {
        NodeRef::Mesh { descriptor, .. } => out.push(descriptor.clone()),
        NodeRef::Graph { sub: Some(s), .. } => meshes_under(s, graphs, out, depth + 1),
        NodeRef::Graph {
            descriptor,
            sub: None,
            ..
        } => {
            if let Some(g) = graphs.get(descriptor) {
                for i in &g.instances {
                    meshes_under(i, graphs, out, depth + 1);
                }
            }
        }
    }
}

/// `pinnings { logical_fabric_node_id { mesh_id chip_id } physical_asic_position { tray_id
/// asic_location } }`: checked for shape only.
pub(super) fn check_pinning(cx: &Cx, f: &Field) -> Result<(), TopologyError> {
    let m = cx.message(f)?;
    cx.known_fields(
        m,
        "pinnings",
        &["logical_fabric_node_id", "physical_asic_position"],
    )?;
    for (field, known) in [
        ("logical_fabric_node_id", ["mesh_id", "chip_id"]),
        ("physical_asic_position", ["tray_id", "asic_location"]),
    ] {
        if let Some(sub) = cx.one(m, field)? {
            let sm = cx.message(sub)?;
            cx.known_fields(sm, field, &known)?;
            for v in &sm.fields {
                if cx.int(v)? < 0 {
                    return Err(
                        cx.invalid(v.line, format!("`{}` is negative; write 0 or more", v.name))
                    );
                }
            }
        }
    }
    Ok(())
}
