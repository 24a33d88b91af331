//! `cluster_descriptor.yaml` in the layout tt-metal's cluster descriptors use (arch per chip,
//! chip coordinates `[x, y, rack, shelf]`, ethernet connections as chip/channel pairs, MMIO
//! chips, board type), made from the report's cluster_descriptor. The structure is fixed and
//! small, so it is written directly rather than through a YAML library.

use std::fmt::Write as _;

use serde_json::Value;

/// The YAML text, or None when the report carries no cluster (a graph captured without a mesh).
pub fn cluster_descriptor_yaml(cluster: &Value) -> Option<String> {
    let chips = cluster.get("chips")?.as_array()?;
    let arch = cluster
        .get("arch")
        .and_then(Value::as_str)
        .unwrap_or("wormhole_b0");
    let name = cluster.get("name").and_then(Value::as_str).unwrap_or("");
    let field = |c: &Value, k: &str| c.get(k).and_then(Value::as_u64).unwrap_or(0);
    let mut ids: Vec<(u64, u64, u64)> = chips
        .iter()
        .map(|c| (field(c, "chip"), field(c, "col"), field(c, "row")))
        .collect();
    ids.sort_unstable();
    let mut y = String::new();
    y.push_str("arch:\n");
    for (id, ..) in &ids {
        let _ = writeln!(y, "  {id}: {arch}");
    }
    y.push_str("chips:\n");
    for (id, x, row) in &ids {
        let _ = writeln!(y, "  {id}:\n    - {x}\n    - {row}\n    - 0\n    - 0");
    }
    y.push_str("chip_unique_ids:\n");
    for (id, ..) in &ids {
        let _ = writeln!(y, "  {id}: {}", 1000 + id);
    }
    y.push_str("ethernet_connections:\n");
    let links = cluster
        .get("ethernet_connections")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for l in &links {
        let end = |i: usize, j: usize| l.get(i).and_then(|e| e.get(j)).and_then(Value::as_u64);
        if let (Some(a), Some(pa), Some(b), Some(pb)) = (end(0, 0), end(0, 1), end(1, 0), end(1, 1))
        {
            let _ = writeln!(
                y,
                "  -\n    - chip: {a}\n      chan: {pa}\n    - chip: {b}\n      chan: {pb}"
            );
        }
    }
    if links.is_empty() {
        y.push_str("  []\n");
    }
    y.push_str("ethernet_connections_to_remote_devices:\n  []\n");
    // The emulator reaches every chip from the host directly.
    y.push_str("chips_with_mmio:\n");
    for (i, (id, ..)) in ids.iter().enumerate() {
        let _ = writeln!(y, "  - {id}: {i}");
    }
    let board = match name {
        "n150" | "p150" | "p300" => name,
        "galaxy" => "ubb",
        _ if arch == "blackhole" => "p150",
        _ => "n300",
    };
    y.push_str("chip_to_boardtype:\n");
    for (id, ..) in &ids {
        let _ = writeln!(y, "  {id}: {board}");
    }
    Some(y)
}
