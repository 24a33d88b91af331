//! An SVG picture of the timeline: the host and the first chips, untraced above traced, both
//! at one scale, so the gaps trace removes are visible at a glance.

use std::fmt::Write as _;

use crate::timeline::{OpSpan, Timeline};

const WIDTH: f64 = 1200.0;
const LABEL: f64 = 110.0;
const ROW: f64 = 22.0;
const CHIPS_SHOWN: usize = 4;
/// Ops of the first chip shown per panel (the last ones of the phase).
const OPS_SHOWN: usize = 16;

const PALETTE: &[&str] = &[
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
];

fn color(name: &str) -> &'static str {
    let h = name
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    PALETTE[h as usize % PALETTE.len()]
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The time window of a phase: its last ops on the first chip.
fn window(ops: &[&OpSpan]) -> Option<(f64, f64)> {
    let first_chip = ops.iter().map(|o| (o.chip, o.cq)).min()?;
    let mine: Vec<&&OpSpan> = ops
        .iter()
        .filter(|o| (o.chip, o.cq) == first_chip)
        .collect();
    let shown = &mine[mine.len().saturating_sub(OPS_SHOWN)..];
    let start = shown.iter().map(|o| o.dispatch_ns).fold(f64::MAX, f64::min);
    let end = shown.iter().map(|o| o.end_ns).fold(0.0, f64::max);
    Some((start, end))
}

/// The picture as SVG text.
pub fn picture(t: &Timeline) -> String {
    let mut chips: Vec<u32> = t.queues.iter().map(|q| q.0).collect();
    chips.dedup();
    chips.truncate(CHIPS_SHOWN);
    let phases: Vec<(&str, Vec<&OpSpan>)> = [
        (
            "untraced",
            t.ops.iter().filter(|o| o.trace_id.is_none()).collect(),
        ),
        (
            "traced (replay)",
            t.ops.iter().filter(|o| o.trace_id.is_some()).collect(),
        ),
    ]
    .into_iter()
    .filter(|(_, ops): &(&str, Vec<&OpSpan>)| !ops.is_empty())
    .collect();
    let windows: Vec<(f64, f64)> = phases.iter().filter_map(|(_, o)| window(o)).collect();
    let longest = windows.iter().map(|w| w.1 - w.0).fold(1.0, f64::max);
    let scale = (WIDTH - LABEL - 10.0) / longest;
    let panel_h = ROW * (chips.len() as f64 + 1.0) + 40.0;
    let height = panel_h * phases.len() as f64 + 30.0 + ROW;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<text x="4" y="16" font-size="13">ttmesh modeled timeline, host {} (same scale: {:.1} us across)</text>"#,
        escape(&t.host_model.map_or(String::new(), |m| m.to_string())),
        (WIDTH - LABEL - 10.0) / scale / 1000.0
    );
    for (i, ((name, ops), (w0, w1))) in phases.iter().zip(&windows).enumerate() {
        let top = 30.0 + panel_h * i as f64;
        let _ = writeln!(
            s,
            r#"<text x="4" y="{}" font-weight="bold">{}</text>"#,
            top + 12.0,
            name
        );
        let x = |ns: f64| LABEL + (ns - w0) * scale;
        let visible = |a: f64, b: f64| b >= *w0 && a <= *w1;
        let row_y = |r: usize| top + 20.0 + ROW * r as f64;
        let _ = writeln!(s, r#"<text x="4" y="{}">host</text>"#, row_y(0) + 14.0);
        for h in t.host.iter().filter(|h| visible(h.start_ns, h.end_ns)) {
            let (a, b) = (x(h.start_ns.max(*w0)), x(h.end_ns.min(*w1)));
            let fill = if h.name.starts_with("wait") {
                "#dddddd"
            } else {
                "#9c755f"
            };
            let _ = writeln!(
                s,
                r#"<rect x="{a:.1}" y="{:.1}" width="{:.1}" height="{}" fill="{fill}" stroke="white" stroke-width="0.5"><title>{}</title></rect>"#,
                row_y(0) + 2.0,
                (b - a).max(0.5),
                ROW - 4.0,
                escape(&h.name)
            );
        }
        for (r, chip) in chips.iter().enumerate() {
            let y = row_y(r + 1);
            let _ = writeln!(s, r#"<text x="4" y="{}">chip {chip}</text>"#, y + 14.0);
            for o in ops
                .iter()
                .filter(|o| o.chip == *chip && visible(o.start_ns, o.end_ns))
            {
                let (a, b) = (x(o.start_ns.max(*w0)), x(o.end_ns.min(*w1)));
                let _ = writeln!(
                    s,
                    r#"<rect x="{a:.1}" y="{:.1}" width="{:.1}" height="{}" fill="{}"><title>{} {:.2} us</title></rect>"#,
                    y + 2.0,
                    (b - a).max(0.5),
                    ROW - 4.0,
                    color(&o.program.name),
                    escape(&o.program.name),
                    (o.end_ns - o.start_ns) / 1000.0
                );
            }
        }
    }
    // Legend: each op name in its colour, host dispatch and host waiting.
    let mut names: Vec<&str> = t.ops.iter().map(|o| o.program.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let y = height - ROW + 4.0;
    let mut x = 4.0;
    let entries = names
        .iter()
        .map(|n| (*n, color(n)))
        .chain([("host dispatch", "#9c755f"), ("host waits", "#dddddd")]);
    for (name, fill) in entries {
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{y:.1}" width="10" height="10" fill="{fill}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            x + 13.0,
            y + 9.0,
            escape(name)
        );
        x += 20.0 + 6.5 * name.len() as f64;
    }
    s.push_str("</svg>\n");
    s
}
