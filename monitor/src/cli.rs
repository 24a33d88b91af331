//! `ttmesh monitor`: the bin crate parses [`MonitorArgs`] and calls [`run_monitor`].

use std::collections::HashMap;
use std::io::{ErrorKind, Write};
use std::time::{Duration, Instant};

use crate::data::ProcessSnapshot;
use crate::error::MonitorError;
use crate::reader::{cleanup_stale, list_segments, pid_from_name, read_segment};
use crate::render::{escape_control, render_json, render_table_with, LinkRates};

const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

/// Watch the memory and fabric statistics of running ttmesh processes.
#[derive(clap::Parser, Debug, Clone, PartialEq, Eq)]
pub struct MonitorArgs {
    /// Refresh period in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub interval: u64,
    /// Print one table and exit.
    #[arg(long)]
    pub once: bool,
    /// Print one snapshot as JSON and exit.
    #[arg(long)]
    pub json: bool,
    /// Show only this process.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Remove segments left behind by processes that have exited, then exit.
    #[arg(long)]
    pub cleanup: bool,
}

impl Default for MonitorArgs {
    fn default() -> Self {
        MonitorArgs {
            interval: 500,
            once: false,
            json: false,
            pid: None,
            cleanup: false,
        }
    }
}

type Problems = Vec<(String, MonitorError)>;

/// Read every segment; problems are kept per segment and never abort the others.
fn collect(pid: Option<u32>) -> (Vec<ProcessSnapshot>, Problems) {
    let mut procs = Vec::new();
    let mut problems = Vec::new();
    for seg in list_segments() {
        match read_segment(&seg.name) {
            Ok(p) => procs.push(p),
            // Removed between listing and reading: its process just exited. Not a problem.
            Err(MonitorError::Vanished { .. }) => {}
            // Another user's process: the monitor lists what it can read, unless asked for it.
            Err(MonitorError::PermissionDenied { .. }) if pid.is_none() => {}
            Err(e) => problems.push((seg.name, e)),
        }
    }
    if let Some(pid) = pid {
        procs.retain(|p| p.info.pid == pid);
        problems.retain(|(name, _)| pid_from_name(name) == Some(pid));
    }
    (procs, problems)
}

fn not_found(pid: u32) -> MonitorError {
    let (all, _) = collect(None);
    let mut pids: Vec<u32> = all
        .iter()
        .filter(|p| p.stale.is_none())
        .map(|p| p.info.pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    let available = if pids.is_empty() {
        "no ttmesh process is publishing statistics right now".to_string()
    } else {
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        format!("running ttmesh processes: {}", list.join(", "))
    };
    MonitorError::ProcessNotFound { pid, available }
}

/// Write and flush; Ok(false) when the reader went away (closed pipe): time to stop quietly.
fn emit(out: &mut dyn Write, text: &str) -> Result<bool, MonitorError> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Bytes per second per link since the previous sample.
fn update_rates(
    procs: &[ProcessSnapshot],
    prev: &mut HashMap<(String, usize), (u64, Instant)>,
) -> LinkRates {
    let now = Instant::now();
    let mut rates = LinkRates::new();
    let mut next = HashMap::new();
    for p in procs {
        for (j, l) in p.links.iter().enumerate() {
            let key = (p.segment.clone(), j);
            if let Some((bytes, t)) = prev.get(&key) {
                let dt = now.duration_since(*t).as_secs_f64();
                if dt > 0.0 {
                    rates.insert(key.clone(), l.bytes.saturating_sub(*bytes) as f64 / dt);
                }
            }
            next.insert(key, (l.bytes, now));
        }
    }
    *prev = next;
    rates
}

/// Run `ttmesh monitor` with output to `out`. `--json` and `--once` print one snapshot;
/// otherwise the screen refreshes every interval until Ctrl-C or until `out` is closed.
pub fn run_monitor(args: &MonitorArgs, out: &mut dyn Write) -> Result<(), MonitorError> {
    if !(10..=3_600_000).contains(&args.interval) {
        return Err(MonitorError::BadInterval { ms: args.interval });
    }
    if args.cleanup {
        let removed = cleanup_stale();
        let text = if removed.is_empty() {
            "no stale ttmesh segments\n".to_string()
        } else {
            format!(
                "removed {} stale segment(s): {}\n",
                removed.len(),
                escape_control(&removed.join(", "))
            )
        };
        emit(out, &text)?;
        return Ok(());
    }
    let (procs, problems) = collect(args.pid);
    if let Some(pid) = args.pid {
        // A stale or unreadable segment of that pid counts as found: it gets its one line.
        if procs.is_empty() && problems.is_empty() {
            return Err(not_found(pid));
        }
    }
    if args.json {
        let mut text = serde_json::to_string_pretty(&render_json(&procs, &problems))?;
        text.push('\n');
        emit(out, &text)?;
        return Ok(());
    }
    if args.once {
        emit(out, &render_table_with(&procs, &problems, None))?;
        return Ok(());
    }
    let period = Duration::from_millis(args.interval);
    let mut prev = HashMap::new();
    let (mut procs, mut problems) = (procs, problems);
    loop {
        let rates = update_rates(&procs, &mut prev);
        let mut frame = format!(
            "{CLEAR_SCREEN}ttmesh monitor: refresh every {} ms, Ctrl-C quits\n\n",
            args.interval
        );
        frame.push_str(&render_table_with(&procs, &problems, Some(&rates)));
        if !emit(out, &frame)? {
            return Ok(());
        }
        std::thread::sleep(period);
        (procs, problems) = collect(args.pid);
        if let Some(pid) = args.pid {
            if !procs.iter().any(|p| p.stale.is_none()) && problems.is_empty() {
                emit(out, &format!("process {pid} has exited\n"))?;
                return Ok(());
            }
        }
    }
}
