//! `--svg`: the call graph as one SVG file. Each operation the user called is a box, top to
//! bottom in call order, with its duration and the device operations it ran in smaller boxes
//! to its right; an arrow joins an operation to each later one that reads a tensor it wrote.
//! Operations that failed are drawn in red with the error's first line.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::model::ReportModel;

const ROW: usize = 56;
const TOP: usize = 40;
const OP_X: usize = 160;
const OP_W: usize = 300;
const DEV_W: usize = 190;

fn escape(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '&' => "&amp;".to_string(),
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '"' => "&quot;".to_string(),
            c if c.is_control() => " ".to_string(),
            c => c.to_string(),
        })
        .collect()
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn duration(ns: Option<u64>) -> String {
    match ns {
        None => "no end".to_string(),
        Some(ns) if ns >= 1_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        Some(ns) => format!("{:.1} us", ns as f64 / 1e3),
    }
}

/// The SVG document.
pub fn call_graph_svg(model: &ReportModel, title: &str) -> String {
    let ops = &model.operations;
    let widest = ops
        .iter()
        .map(|o| o.device_operations.len())
        .max()
        .unwrap_or(0);
    let width = OP_X + OP_W + 40 + widest.min(6) * (DEV_W + 10) + 20;
    let height = TOP + ops.len().max(1) * ROW + 20;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="22" font-size="14" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let y_of = |index: usize| TOP + index * ROW;
    // Which operation wrote each tensor last, for the data-flow arrows.
    let mut writer: HashMap<u64, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let y = y_of(i);
        for t in &op.inputs {
            if let Some(&from) = writer.get(t) {
                let (y0, y1) = (y_of(from) + 20, y + 20);
                let bend = OP_X - 20 - (i - from).min(6) * 18;
                let _ = writeln!(
                    s,
                    r##"<path d="M{OP_X},{y0} C{bend},{y0} {bend},{y1} {OP_X},{y1}" fill="none" stroke="#555" marker-end="url(#arrow)"><title>tensor {t}</title></path>"##
                );
            }
        }
        let (fill, stroke) = if op.error.is_some() {
            ("#fde2e2", "#c0392b")
        } else {
            ("#e8f0fe", "#3367d6")
        };
        let _ = writeln!(
            s,
            r#"<rect x="{OP_X}" y="{y}" width="{OP_W}" height="40" rx="5" fill="{fill}" stroke="{stroke}"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="{}">{} #{}</text>"#,
            y + 24,
            duration(op.duration_ns),
            op.id
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" font-weight="bold">{}</text>"#,
            OP_X + 8,
            y + 17,
            escape(&short(&op.name, 38))
        );
        let detail = match &op.error {
            Some(e) => short(e.message.lines().next().unwrap_or(""), 40),
            None => format!("in {:?} out {:?}", op.inputs, op.outputs),
        };
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" fill="#444">{}</text>"##,
            OP_X + 8,
            y + 33,
            escape(&short(&detail, 40))
        );
        for (k, (_, name)) in op.device_operations.iter().take(6).enumerate() {
            let x = OP_X + OP_W + 40 + k * (DEV_W + 10);
            let _ = writeln!(
                s,
                r##"<rect x="{x}" y="{}" width="{DEV_W}" height="28" rx="4" fill="#f1f8e9" stroke="#689f38"/><text x="{}" y="{}">{}</text>"##,
                y + 6,
                x + 6,
                y + 24,
                escape(&short(name, 25))
            );
        }
        if op.device_operations.len() > 6 {
            let x = OP_X + OP_W + 40 + 6 * (DEV_W + 10);
            let _ = writeln!(
                s,
                r#"<text x="{x}" y="{}">+{}</text>"#,
                y + 24,
                op.device_operations.len() - 6
            );
        }
        if !op.device_operations.is_empty() {
            let _ = writeln!(
                s,
                r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#689f38"/>"##,
                OP_X + OP_W,
                y + 20,
                OP_X + OP_W + 40,
                y + 20
            );
        }
        for t in &op.outputs {
            writer.insert(*t, i);
        }
    }
    s.push_str("</svg>\n");
    s
}
