//! CLI pieces: argument parsing, JSON shape, table text, exits.

use std::io::Write;

use clap::Parser;
use serde_json::Value;

use super::{dead_pid, info_for};
use crate::render::human_bytes;
use crate::*;

fn run(args: &MonitorArgs) -> Result<String, MonitorError> {
    let mut out = Vec::new();
    run_monitor(args, &mut out)?;
    Ok(String::from_utf8(out).unwrap())
}

fn sample() -> Publisher {
    let p = Publisher::create(&info_for(2), 2, 2).unwrap();
    let c0 = p.chip(0).unwrap();
    for i in 0..2 {
        p.chip(i).unwrap().set_capacity(MemoryKind::Dram, 12 << 30);
        p.chip(i).unwrap().set_capacity(MemoryKind::Trace, 30 << 20);
    }
    c0.set_memory(
        MemoryKind::Dram,
        &MemoryCounters {
            allocated: 3 << 30,
            capacity: 12 << 30,
            live_buffers: 5,
            peak: 3 << 30,
            largest_free: 9 << 30,
        },
    );
    c0.set_memory(
        MemoryKind::Trace,
        &MemoryCounters {
            allocated: 16 << 20,
            capacity: 30 << 20,
            live_buffers: 1,
            peak: 16 << 20,
            largest_free: 14 << 20,
        },
    );
    c0.set_traces(1, 16_000_000);
    c0.add_replays(1000);
    let l = p.link(1).unwrap();
    l.set_endpoints(0, 8, 1, 9);
    l.add_traffic(10, 43_520);
    p
}

#[test]
fn args_parse_with_defaults_and_ranges() {
    let a = MonitorArgs::try_parse_from(["monitor"]).unwrap();
    assert_eq!(a, MonitorArgs::default());
    let a = MonitorArgs::try_parse_from(["monitor", "--interval", "250", "--json", "--pid", "42"])
        .unwrap();
    assert_eq!(
        (a.interval, a.json, a.once, a.pid),
        (250, true, false, Some(42))
    );
    assert!(MonitorArgs::try_parse_from(["monitor", "--interval", "5"]).is_err());
    assert!(MonitorArgs::try_parse_from(["monitor", "--pid", "x"]).is_err());
    // The bin crate nests it as a subcommand.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }
    #[derive(clap::Subcommand)]
    enum Cmd {
        Monitor(MonitorArgs),
    }
    let Cli {
        cmd: Cmd::Monitor(a),
    } = Cli::try_parse_from(["ttmesh", "monitor", "--once"]).unwrap();
    assert!(a.once);
    let e = run(&MonitorArgs {
        interval: 0,
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "monitor: --interval 0 ms is out of range; use 10 to 3600000 ms"
    );
}

#[test]
fn json_has_the_documented_shape() {
    let p = sample();
    let args = MonitorArgs {
        json: true,
        pid: Some(std::process::id()),
        ..Default::default()
    };
    let v: Value = serde_json::from_str(&run(&args).unwrap()).unwrap();
    let procs = v["processes"].as_array().unwrap();
    let me = procs
        .iter()
        .find(|x| x["segment"] == p.name())
        .expect("our segment listed");
    assert_eq!(me["pid"], std::process::id());
    assert_eq!(me["topology"], "t3k");
    assert_eq!(me["mesh_shape"], serde_json::json!([1, 2]));
    assert!(me["name"].is_string());
    let chips = me["chips"].as_array().unwrap();
    assert_eq!(chips.len(), 2);
    let c0 = &chips[0];
    assert_eq!(c0["id"], 0);
    assert_eq!(c0["coord"], serde_json::json!([0, 0]));
    assert_eq!(c0["dram"]["allocated"], 3u64 << 30);
    assert_eq!(c0["dram"]["capacity"], 12u64 << 30);
    assert_eq!(c0["l1"]["allocated"], 0);
    assert_eq!(c0["l1_small"]["capacity"], 0);
    assert_eq!(c0["trace"]["allocated"], 16u64 << 20);
    assert_eq!(c0["trace"]["capacity"], 30u64 << 20);
    assert_eq!(c0["trace"]["traces"], 1);
    assert_eq!(c0["trace"]["replays"], 1000);
    assert_eq!(chips[1]["coord"], serde_json::json!([0, 1]));
    let links = me["links"].as_array().unwrap();
    assert_eq!(links.len(), 2);
    assert_eq!(
        links[1],
        serde_json::json!({"a_chip": 0, "a_port": 8, "b_chip": 1, "b_port": 9,
                           "packets": 10, "bytes": 43520, "stalls": 0, "errors": 0})
    );
    assert!(v["errors"].is_array());
}

#[test]
fn table_shows_bars_units_traces_and_fabric() {
    let p = sample();
    let args = MonitorArgs {
        once: true,
        pid: Some(std::process::id()),
        ..Default::default()
    };
    let text = run(&args).unwrap();
    let start = text.find(&format!("({})", p.name())).expect(&text);
    let section: String = text[start..].lines().take(6).collect::<Vec<_>>().join("\n");
    assert!(section.contains("DRAM of 12.0 GiB"), "{section}");
    assert!(section.contains("TRACE of 30.0 MiB"), "{section}");
    assert!(section.contains("[##......]  25.0% 3.00 GiB"), "{section}");
    assert!(section.contains("[####....]  53.3% 16.0 MiB"), "{section}");
    assert!(
        section.contains("fabric: 2 links, 1 active, 42.5 KiB moved, 0 stalls, 0 errors"),
        "{section}"
    );
    let chip0 = section
        .lines()
        .find(|l| l.trim_start().starts_with("0  (0,0)"))
        .expect(&section);
    // traces, replays, then the host bytes behind the chip (none written here).
    let tail: Vec<&str> = chip0.split_whitespace().rev().take(4).collect();
    assert_eq!(tail, ["B", "0", "1000", "1"], "{chip0}");
}

#[test]
fn problems_are_one_line_each_and_do_not_stop_the_monitor() {
    let p = sample();
    let pid = std::process::id();
    let name = format!("ttmesh-{pid}-99");
    std::fs::write(super::shm_path(&name), [0xAB; 64]).unwrap();
    let args = MonitorArgs {
        once: true,
        pid: Some(pid),
        ..Default::default()
    };
    let text = run(&args);
    let _ = std::fs::remove_file(super::shm_path(&name));
    let text = text.unwrap();
    assert!(text.contains(&format!("({})", p.name())));
    let line = text.lines().find(|l| l.starts_with(&name)).expect(&text);
    assert_eq!(
        line,
        format!(
            "{name}: not a ttmesh monitor segment (magic 0xabababababababab, expected {:#018x})",
            MAGIC
        )
    );
}

#[test]
fn unknown_pid_names_the_running_ones() {
    let _p = sample();
    let pid = dead_pid();
    let e = run(&MonitorArgs {
        once: true,
        pid: Some(pid),
        ..Default::default()
    })
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "monitor: no ttmesh process with pid {pid}; running ttmesh processes: "
        )),
        "{msg}"
    );
    assert!(msg.contains(&std::process::id().to_string()), "{msg}");
}

struct ClosedPipe;

impl Write for ClosedPipe {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn watch_mode_stops_when_stdout_closes() {
    let _p = sample();
    let args = MonitorArgs {
        interval: 10,
        ..Default::default()
    };
    run_monitor(&args, &mut ClosedPipe).unwrap();
}

#[test]
fn human_units() {
    let cases = [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (1536, "1.50 KiB"),
        (43_520, "42.5 KiB"),
        (1_023_999, "0.98 MiB"),
        (30 << 20, "30.0 MiB"),
        (16_050_000, "15.3 MiB"),
        (12 << 30, "12.0 GiB"),
        (12_872_318_208, "12.0 GiB"),
        (300 << 30, "300 GiB"),
        (u64::MAX, "16777216 TiB"),
    ];
    for (b, s) in cases {
        assert_eq!(human_bytes(b), s, "{b}");
    }
}
