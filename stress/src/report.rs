//! The report: nccl-tests' columns per case grouped by topology, then the summary with, for
//! every failure, its seed and the one command that reruns it alone; and JUnit XML.

use std::fmt::Write;

use serde::Serialize;

use crate::exec::{CaseResult, Verdict};

/// nccl-tests' bus bandwidth factor for `op` over `n` chips.
fn bus_factor(op: &str, n: usize) -> f64 {
    let n = n.max(1) as f64;
    match op {
        "all_reduce" => 2.0 * (n - 1.0) / n,
        "all_gather" | "reduce_scatter" => (n - 1.0) / n,
        _ => 1.0,
    }
}

fn row(r: &CaseResult) -> String {
    let ran = matches!(r.verdict, Verdict::Passed | Verdict::Wrong) && r.time_us > 0.0;
    let (time, algbw, busbw) = if ran {
        let algbw = r.size as f64 / (r.time_us * 1e3);
        (
            format!("{:.1}", r.time_us),
            format!("{algbw:.3}"),
            format!("{:.3}", algbw * bus_factor(r.op, r.chips)),
        )
    } else if r.time_us > 0.0 {
        (format!("{:.1}", r.time_us), "-".into(), "-".into())
    } else {
        ("-".into(), "-".into(), "-".into())
    };
    let wrong = if ran {
        r.wrong.to_string()
    } else {
        "N/A".into()
    };
    format!(
        "{:>12} {:>12} {:>10} {:>6} {:>10} {:>8} {:>8} {:>7}  {:<14} {}",
        r.size,
        r.count,
        r.dtype,
        if r.op == "reduce_scatter" || r.op == "all_reduce" {
            "sum"
        } else {
            "none"
        },
        time,
        algbw,
        busbw,
        wrong,
        verdict_name(r.verdict),
        r.case
    )
}

pub fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Passed => "ok",
        Verdict::ExpectedError => "expected-error",
        Verdict::Wrong => "WRONG",
        Verdict::Hang => "HANG",
        Verdict::UnexpectedError => "UNEXPECTED",
        Verdict::Skipped => "skipped",
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub cases: usize,
    pub passed: usize,
    pub wrong: usize,
    pub hangs: usize,
    pub expected_errors: usize,
    pub unexpected_errors: usize,
    /// Cases a mesh split over MPI ranks cannot run (their topology does not split).
    pub skipped: usize,
    pub failures: Vec<Failure>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub index: u64,
    pub verdict: Verdict,
    pub case: String,
    pub detail: String,
    pub seed: u64,
    pub command: String,
}

impl Summary {
    pub fn ok(&self) -> bool {
        self.wrong == 0 && self.hangs == 0 && self.unexpected_errors == 0
    }
}

/// Counts `results`; `repro(index)` is the command that reruns one case alone.
pub fn summary(results: &[CaseResult], seed: u64, repro: &dyn Fn(u64) -> String) -> Summary {
    let mut s = Summary {
        cases: results.len(),
        ..Default::default()
    };
    for r in results {
        match r.verdict {
            Verdict::Passed => s.passed += 1,
            Verdict::ExpectedError => s.expected_errors += 1,
            Verdict::Wrong => s.wrong += 1,
            Verdict::Hang => s.hangs += 1,
            Verdict::UnexpectedError => s.unexpected_errors += 1,
            Verdict::Skipped => s.skipped += 1,
        }
        if r.failed() {
            s.failures.push(Failure {
                index: r.index,
                verdict: r.verdict,
                case: r.case.clone(),
                detail: r.detail.clone(),
                seed,
                command: repro(r.index),
            });
        }
    }
    s
}

/// The per-case table grouped by topology (in first-seen order, cases in index order), then
/// the summary.
pub fn render_report(results: &[CaseResult], s: &Summary) -> String {
    let mut out = String::new();
    let mut topologies: Vec<&str> = Vec::new();
    for r in results {
        if !topologies.contains(&r.topology.as_str()) {
            topologies.push(&r.topology);
        }
    }
    for t in topologies {
        let _ = writeln!(out, "# topology {t}");
        let _ = writeln!(
            out,
            "# {:>10} {:>12} {:>10} {:>6} {:>10} {:>8} {:>8} {:>7}  {:<14} case",
            "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "verdict"
        );
        let _ = writeln!(
            out,
            "# {:>10} {:>12} {:>10} {:>6} {:>10} {:>8} {:>8} {:>7}",
            "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", ""
        );
        for r in results.iter().filter(|r| r.topology == t) {
            let _ = writeln!(out, "{}", row(r));
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "# cases {}  passed {}  wrong {}  hangs {}  errors as expected {}  errors not expected {}{}",
        s.cases,
        s.passed,
        s.wrong,
        s.hangs,
        s.expected_errors,
        s.unexpected_errors,
        if s.skipped > 0 {
            format!("  skipped {} (their mesh does not split over the ranks)", s.skipped)
        } else {
            String::new()
        }
    );
    for f in &s.failures {
        let _ = writeln!(
            out,
            "# FAILED {} case {} (seed {}): {}\n#   {}\n#   rerun alone: {}",
            verdict_name(f.verdict),
            f.index,
            f.seed,
            f.case,
            f.detail,
            f.command
        );
    }
    out
}

fn xml_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// JUnit XML: one testsuite per topology, one testcase per case; wrong results and hangs are
/// failures, unexpected errors errors.
pub fn junit_xml(results: &[CaseResult], s: &Summary) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let fails = s.wrong + s.hangs;
    let _ = writeln!(
        out,
        "<testsuites name=\"ttmesh stress\" tests=\"{}\" failures=\"{fails}\" errors=\"{}\" skipped=\"{}\">",
        s.cases, s.unexpected_errors, s.skipped
    );
    let mut topologies: Vec<&str> = Vec::new();
    for r in results {
        if !topologies.contains(&r.topology.as_str()) {
            topologies.push(&r.topology);
        }
    }
    for t in topologies {
        let rs: Vec<&CaseResult> = results.iter().filter(|r| r.topology == t).collect();
        let f = rs
            .iter()
            .filter(|r| matches!(r.verdict, Verdict::Wrong | Verdict::Hang))
            .count();
        let e = rs
            .iter()
            .filter(|r| r.verdict == Verdict::UnexpectedError)
            .count();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{f}\" errors=\"{e}\">",
            xml_escape(t),
            rs.len()
        );
        for r in rs {
            let _ = write!(
                out,
                "    <testcase classname=\"stress.{}\" name=\"{}\" time=\"{:.3}\"",
                xml_escape(t),
                xml_escape(&r.case),
                r.elapsed_ms / 1e3
            );
            let body = match r.verdict {
                Verdict::Wrong | Verdict::Hang => format!(
                    "<failure message=\"{}\">{}</failure>",
                    verdict_name(r.verdict),
                    xml_escape(&r.detail)
                ),
                Verdict::UnexpectedError => format!(
                    "<error message=\"unexpected error\">{}</error>",
                    xml_escape(&r.detail)
                ),
                Verdict::ExpectedError => format!(
                    "<system-out>expected error: {}</system-out>",
                    xml_escape(&r.detail)
                ),
                Verdict::Skipped => format!("<skipped message=\"{}\"/>", xml_escape(&r.detail)),
                Verdict::Passed => String::new(),
            };
            if body.is_empty() {
                out.push_str("/>\n");
            } else {
                let _ = writeln!(out, ">{body}</testcase>");
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::generate;
    use crate::spec::StressSpec;

    #[test]
    fn skipped_cases_are_counted_apart_and_fail_nothing() {
        let spec = StressSpec::parse("n300", "all_reduce", "none", "bf16", "64K").unwrap();
        let case = generate(&spec, 1, 0);
        let results = vec![
            CaseResult::new(&case, Verdict::Passed, String::new()),
            CaseResult::new(
                &case,
                Verdict::Skipped,
                "not run over 2 ranks: 1 row".into(),
            ),
        ];
        let s = summary(&results, 1, &|i| format!("rerun {i}"));
        assert_eq!((s.cases, s.passed, s.skipped), (2, 1, 1));
        assert!(s.ok() && s.failures.is_empty());
        assert!(render_report(&results, &s).contains("skipped 1 (their mesh does not split"));
        let xml = junit_xml(&results, &s);
        assert!(
            xml.contains("skipped=\"1\"")
                && xml.contains("<skipped message=\"not run over 2 ranks"),
            "{xml}"
        );
    }
}
