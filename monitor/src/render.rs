//! Text table and JSON for `ttmesh monitor`. Pure functions of snapshots: no I/O here.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::data::{
    ChipSnapshot, LinkSnapshot, MemoryCounters, MemoryKind, ProcessSnapshot, Staleness,
};
use crate::error::MonitorError;
use crate::shm::now_unix_ms;

const BAR_WIDTH: usize = 8;

/// Link throughput in bytes per second, keyed by (segment, link index); the watch loop
/// computes it from two samples.
pub(crate) type LinkRates = HashMap<(String, usize), f64>;

/// `1536` -> "1.50 KiB"; three significant digits, binary units.
pub(crate) fn human_bytes(b: u64) -> String {
    if b < 1024 {
        return format!("{b} B");
    }
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while (v >= 999.5 || unit == 0) && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let text = if v < 9.995 {
        format!("{v:.2}")
    } else if v < 99.95 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    };
    format!("{text} {}", UNITS[unit])
}

/// A string from a segment (or a file name in /dev/shm) made safe to print on a terminal: every
/// control character, escape sequences included, is shown as `\x1b` / `\u{9b}` instead of
/// being sent raw. Another process wrote those bytes; they must not drive our terminal.
pub fn escape_control(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if c.is_control() && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn bar(used: u64, capacity: u64) -> String {
    let frac = (used as f64 / capacity as f64).clamp(0.0, 1.0);
    let mut filled = (frac * BAR_WIDTH as f64).round() as usize;
    if used > 0 && filled == 0 {
        filled = 1; // something is allocated: never draw an empty bar
    }
    format!("[{}{}]", "#".repeat(filled), ".".repeat(BAR_WIDTH - filled))
}

fn percent(used: u64, capacity: u64) -> f64 {
    used as f64 * 100.0 / capacity as f64
}

fn uptime(created_ms: u64) -> String {
    let s = now_unix_ms().saturating_sub(created_ms) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// One memory cell: bar, percentage, used (and capacity when chips differ).
fn memory_cell(m: &MemoryCounters, show_capacity: bool) -> String {
    if m.capacity == 0 {
        return if m.allocated == 0 {
            "-".to_string()
        } else {
            format!("{} (no capacity published)", human_bytes(m.allocated))
        };
    }
    let mut s = format!(
        "{} {:5.1}% {}",
        bar(m.allocated, m.capacity),
        percent(m.allocated, m.capacity),
        human_bytes(m.allocated)
    );
    if show_capacity {
        s.push_str(&format!(" / {}", human_bytes(m.capacity)));
    }
    s
}

/// Left-aligned columns except those marked numeric (right-aligned), two spaces apart.
fn columns(rows: &[Vec<String>], numeric: &[bool], indent: &str) -> String {
    let ncols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..ncols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = indent.to_string();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c].saturating_sub(cell.chars().count());
            if numeric.get(c).copied().unwrap_or(false) {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                if c + 1 < row.len() {
                    line.push_str(&" ".repeat(pad));
                }
            }
            if c + 1 < row.len() {
                line.push_str("  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn stale_line(p: &ProcessSnapshot, why: Staleness) -> String {
    format!(
        "{}: stale ({}); `ttmesh monitor --cleanup` removes it",
        escape_control(&p.segment),
        why.describe(p.info.pid)
    )
}

/// One row per chip, then their sum. `with_rank` adds the rank holding each chip (a mesh split
/// over ranks); the chip column is always the chip's id in the whole mesh.
fn chip_table(chips: &[ChipSnapshot], with_rank: bool) -> String {
    let mut header = vec!["chip".to_string(), "(r,c)".to_string()];
    let mut uniform = Vec::new();
    for kind in MemoryKind::ALL {
        let cap = chips.first().map_or(0, |c| c.memory(kind).capacity);
        let same = chips.iter().all(|c| c.memory(kind).capacity == cap);
        uniform.push(same);
        header.push(if same && cap > 0 {
            format!("{} of {}", kind.label(), human_bytes(cap))
        } else {
            kind.label().to_string()
        });
    }
    header.push("traces".to_string());
    header.push("replays".to_string());
    // Beside the devices' figures, the host memory behind them (equal chunks stored once).
    header.push("host".to_string());
    // What the program says its memory holds, shown only when it labelled something.
    let labelled = chips
        .iter()
        .any(|c| c.weights_bytes > 0 || c.kv_cache_bytes > 0);
    if labelled {
        header.push("weights".to_string());
        header.push("KV cache".to_string());
    }
    let mut rows = vec![header];
    for c in chips {
        let mut row = vec![c.id.to_string(), format!("({},{})", c.coord.0, c.coord.1)];
        for (k, kind) in MemoryKind::ALL.iter().enumerate() {
            row.push(memory_cell(c.memory(*kind), !uniform[k]));
        }
        row.push(c.traces.to_string());
        row.push(c.replays.to_string());
        row.push(human_bytes(c.host_bytes));
        if labelled {
            row.push(human_bytes(c.weights_bytes));
            row.push(human_bytes(c.kv_cache_bytes));
        }
        rows.push(row);
    }
    if chips.len() > 1 {
        let mut row = vec!["all".to_string(), String::new()];
        for kind in MemoryKind::ALL {
            let sum = chips.iter().fold(MemoryCounters::default(), |mut acc, c| {
                acc.allocated = acc.allocated.saturating_add(c.memory(kind).allocated);
                acc.capacity = acc.capacity.saturating_add(c.memory(kind).capacity);
                acc
            });
            row.push(memory_cell(&sum, !uniform[kind.index()]));
        }
        row.push(chips.iter().map(|c| c.traces).sum::<u64>().to_string());
        row.push(chips.iter().map(|c| c.replays).sum::<u64>().to_string());
        row.push(human_bytes(
            chips
                .iter()
                .map(|c| c.host_bytes)
                .fold(0, u64::saturating_add),
        ));
        if labelled {
            let sum =
                |f: fn(&ChipSnapshot) -> u64| chips.iter().map(f).fold(0u64, u64::saturating_add);
            row.push(human_bytes(sum(|c| c.weights_bytes)));
            row.push(human_bytes(sum(|c| c.kv_cache_bytes)));
        }
        rows.push(row);
    }
    let mut numeric = vec![true, false, false, false, false, false, true, true, true];
    if labelled {
        numeric.extend([true, true]);
    }
    if with_rank {
        let ranks = std::iter::once("rank".to_string())
            .chain(chips.iter().map(|c| c.rank.to_string()))
            .chain(std::iter::repeat(String::new()));
        for (row, rank) in rows.iter_mut().zip(ranks) {
            row.insert(0, rank);
        }
        numeric.insert(0, true);
    }
    columns(&rows, &numeric, "  ")
}

/// The links of one mesh's segments (one, or one per rank of a split mesh: then each link
/// is labelled with the rank that sends on it, and its index in that rank's segment).
fn fabric_section(segments: &[&ProcessSnapshot], rates: Option<&LinkRates>) -> String {
    let links: Vec<(&ProcessSnapshot, usize, &LinkSnapshot)> = segments
        .iter()
        .flat_map(|p| p.links.iter().enumerate().map(move |(j, l)| (*p, j, l)))
        .collect();
    if links.is_empty() {
        return "  fabric: no links published\n".to_string();
    }
    let active: Vec<_> = links
        .iter()
        .filter(|(_, _, l)| l.packets > 0 || l.stalls > 0 || l.errors > 0)
        .collect();
    let stalls: u64 = links.iter().map(|(_, _, l)| l.stalls).sum();
    let errors: u64 = links.iter().map(|(_, _, l)| l.errors).sum();
    let bytes: u64 = links.iter().map(|(_, _, l)| l.bytes).sum();
    let mut out = format!(
        "  fabric: {} links, {} active, {} moved, {stalls} stalls, {errors} errors\n",
        links.len(),
        active.len(),
        human_bytes(bytes)
    );
    if active.is_empty() {
        return out;
    }
    let with_rank = segments.iter().any(|p| p.info.is_split());
    let mut header: Vec<String> = ["link", "chip:port", "", "chip:port", "packets", "bytes"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if rates.is_some() {
        header.push("rate".to_string());
    }
    header.push("stalls".to_string());
    header.push("errors".to_string());
    let mut rows = vec![header];
    for &&(p, j, l) in &active {
        let mut row = vec![
            j.to_string(),
            format!("{}:{}", l.a_chip, l.a_port),
            "<->".to_string(),
            format!("{}:{}", l.b_chip, l.b_port),
            l.packets.to_string(),
            human_bytes(l.bytes),
        ];
        if let Some(rates) = rates {
            row.push(match rates.get(&(p.segment.clone(), j)) {
                Some(r) => format!("{}/s", human_bytes(*r as u64)),
                None => "-".to_string(),
            });
        }
        row.push(l.stalls.to_string());
        row.push(l.errors.to_string());
        if with_rank {
            row.insert(0, p.info.rank.to_string());
        }
        rows.push(row);
    }
    if with_rank {
        rows[0].insert(0, "rank".to_string());
    }
    let mut numeric = vec![true, true, false, false, true, true];
    if rates.is_some() {
        numeric.push(true);
    }
    numeric.extend([true, true]);
    if with_rank {
        numeric.insert(0, true);
    }
    out.push_str(&columns(&rows, &numeric, "    "));
    out
}

/// Live segments in display order, those of one split mesh together: a mesh wholly in one
/// process is one group of one; the ranks of a split mesh on this host (same mesh id, shape
/// and rank count) are one group, by rank.
fn group_by_mesh<'a>(live: &[&'a ProcessSnapshot]) -> Vec<Vec<&'a ProcessSnapshot>> {
    let mut groups: Vec<Vec<&ProcessSnapshot>> = Vec::new();
    for &p in live {
        let same_mesh = |q: &ProcessSnapshot| {
            p.info.is_split()
                && (
                    &q.info.mesh_id,
                    &q.info.topology,
                    q.info.mesh_shape,
                    q.info.ranks,
                ) == (
                    &p.info.mesh_id,
                    &p.info.topology,
                    p.info.mesh_shape,
                    p.info.ranks,
                )
        };
        match groups.iter_mut().find(|g| same_mesh(g[0])) {
            Some(g) => g.push(p),
            None => groups.push(vec![p]),
        }
    }
    for g in &mut groups {
        g.sort_by_key(|p| p.info.rank);
    }
    groups
}

/// The heading of one process's mesh (`pid ...`), or of a split mesh's ranks on this host
/// (`mesh ... over N ranks`, then a line per rank).
fn heading(group: &[&ProcessSnapshot]) -> String {
    let p = group[0];
    let i = &p.info;
    if !i.is_split() {
        return format!(
            "pid {}  {}  {} {}x{}  {}  {}  up {}  ({})\n",
            i.pid,
            escape_control(&i.name),
            escape_control(&i.topology),
            i.mesh_shape.0,
            i.mesh_shape.1,
            escape_control(&i.arch),
            escape_control(&i.fabric),
            uptime(p.created_unix_ms),
            escape_control(&p.segment)
        );
    }
    let mut out = format!(
        "mesh {} {}x{} over {} ranks, {} on this host  {}  {}  {}  up {}  (mesh id {})\n",
        escape_control(&i.topology),
        i.mesh_shape.0,
        i.mesh_shape.1,
        i.ranks,
        group.len(),
        escape_control(&i.name),
        escape_control(&i.arch),
        escape_control(&i.fabric),
        uptime(group.iter().map(|p| p.created_unix_ms).min().unwrap_or(0)),
        escape_control(&i.mesh_id)
    );
    for q in group {
        out.push_str(&format!(
            "  rank {}: pid {}, {} chips  ({})\n",
            q.info.rank,
            q.info.pid,
            q.chips.len(),
            escape_control(&q.segment)
        ));
    }
    out
}

/// The table `ttmesh monitor` prints: one section per live process, then one line per
/// segment that is stale or could not be read.
pub fn render_table(processes: &[ProcessSnapshot], problems: &[(String, MonitorError)]) -> String {
    render_table_with(processes, problems, None)
}

pub(crate) fn render_table_with(
    processes: &[ProcessSnapshot],
    problems: &[(String, MonitorError)],
    rates: Option<&LinkRates>,
) -> String {
    let mut out = String::new();
    let mut notes: Vec<String> = Vec::new();
    let mut live = Vec::new();
    for p in processes {
        match p.stale {
            Some(why) => notes.push(stale_line(p, why)),
            None => live.push(p),
        }
    }
    for group in group_by_mesh(&live) {
        out.push_str(&heading(&group));
        let mut chips: Vec<ChipSnapshot> =
            group.iter().flat_map(|p| p.chips.iter().copied()).collect();
        if group.len() > 1 {
            // In mesh order, as one process holding them all would list them.
            chips.sort_by_key(|c| (c.coord, c.id));
        }
        out.push_str(&chip_table(&chips, group[0].info.is_split()));
        out.push_str(&fabric_section(&group, rates));
        out.push('\n');
    }
    if live.is_empty() {
        out.push_str("no running ttmesh process publishes statistics (publishing is on unless TTMESH_MONITOR=0)\n");
    }
    notes.extend(problems.iter().map(|(_, e)| e.to_string()));
    for n in notes {
        // Error texts quote segment names and what a segment holds.
        out.push_str(&escape_control(&n));
        out.push('\n');
    }
    out
}

fn memory_json(m: &MemoryCounters) -> Value {
    json!({
        "allocated": m.allocated,
        "capacity": m.capacity,
        "live_buffers": m.live_buffers,
        "peak": m.peak,
        "largest_free": m.largest_free,
    })
}

/// One snapshot as JSON: `{"processes": [...], "errors": [{"segment", "error"}]}`; stale
/// segments appear under "errors", not "processes".
pub fn render_json(processes: &[ProcessSnapshot], problems: &[(String, MonitorError)]) -> Value {
    let mut errors: Vec<Value> = Vec::new();
    let mut procs: Vec<Value> = Vec::new();
    for p in processes {
        if let Some(why) = p.stale {
            errors.push(json!({"segment": p.segment, "error": stale_line(p, why)}));
            continue;
        }
        let chips: Vec<Value> = p
            .chips
            .iter()
            .map(|c| {
                let mut trace = memory_json(&c.trace);
                trace["traces"] = json!(c.traces);
                trace["trace_bytes"] = json!(c.trace_bytes);
                trace["replays"] = json!(c.replays);
                json!({
                    "id": c.id,
                    "rank": c.rank,
                    "coord": [c.coord.0, c.coord.1],
                    "dram": memory_json(&c.dram),
                    "l1": memory_json(&c.l1),
                    "l1_small": memory_json(&c.l1_small),
                    "trace": trace,
                    "weights_bytes": c.weights_bytes,
                    "kv_cache_bytes": c.kv_cache_bytes,
                    "host_bytes": c.host_bytes,
                })
            })
            .collect();
        let i = &p.info;
        procs.push(json!({
            "pid": i.pid,
            "name": i.name,
            "topology": i.topology,
            "mesh_shape": [i.mesh_shape.0, i.mesh_shape.1],
            "arch": i.arch,
            "fabric": i.fabric,
            "rank": i.rank,
            "ranks": i.ranks,
            "mesh_id": i.mesh_id,
            "segment": p.segment,
            "chips": chips,
            "links": serde_json::to_value(&p.links).unwrap_or(Value::Null),
        }));
    }
    errors.extend(
        problems
            .iter()
            .map(|(seg, e)| json!({"segment": seg, "error": e.to_string()})),
    );
    json!({"processes": procs, "errors": errors})
}
