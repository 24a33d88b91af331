//! A segment is bytes another process wrote: what it holds must not reach the terminal raw,
//! and a pid no process can have is a corrupt segment, not a running process.

use super::{info, patched, TestFile};
use crate::layout::H_PID;
use crate::*;

const ESCAPES: &str = "\x1b[2J\x1b[31m";

fn once(pid: Option<u32>) -> String {
    let mut out = Vec::new();
    let args = MonitorArgs {
        once: true,
        pid,
        ..Default::default()
    };
    run_monitor(&args, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn escape_sequences_in_a_segment_are_printed_escaped() {
    let mut hostile = info();
    hostile.name = format!("evil{ESCAPES}name\u{9b}0m");
    hostile.topology = format!("t3k{ESCAPES}");
    hostile.arch = "wormhole_b0\r\n".to_string();
    hostile.fabric = "\x07FABRIC_1D".to_string();
    let p = Publisher::create(&hostile, 1, 0).unwrap();
    let text = once(Some(std::process::id()));
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "raw control characters reach the terminal: {text:?}"
    );
    let header = text
        .lines()
        .find(|l| l.contains(p.name()))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        header.contains(r"evil\x1b[2J\x1b[31mname\u{9b}0m  t3k\x1b[2J\x1b[31m 2x4  wormhole_b0\x0d\x0a  \x07FABRIC_1D"),
        "{header}"
    );
    // JSON escapes them its own way (\u001b); none is raw either.
    let mut out = Vec::new();
    let args = MonitorArgs {
        json: true,
        pid: Some(std::process::id()),
        ..Default::default()
    };
    run_monitor(&args, &mut out).unwrap();
    let json = String::from_utf8(out).unwrap();
    assert!(!json.contains('\x1b'), "{json}");
    assert!(json.contains(r"evil\u001b[2J"), "{json}");
}

#[test]
fn escape_sequences_in_a_segment_file_name_are_printed_escaped() {
    let f = TestFile::new("esc\x1b[2J", &[0xAB; 64]);
    let text = once(None);
    assert!(!text.contains('\x1b'), "{text:?}");
    assert!(
        text.lines().any(|l| l.starts_with(&format!(
            "ttmesh-test-esc\\x1b[2J-{}: not a ttmesh monitor segment",
            std::process::id()
        ))),
        "{text}"
    );
    drop(f);
}

#[test]
fn escaping_leaves_ordinary_text_alone() {
    assert!(matches!(
        escape_control("t3k ß 2x4"),
        std::borrow::Cow::Borrowed("t3k ß 2x4")
    ));
    assert_eq!(escape_control("a\tb\x7f\u{85}"), r"a\x09b\x7f\u{85}");
}

#[test]
fn a_pid_beyond_i32_is_a_corrupt_segment_not_a_running_process() {
    let _cleanup = super::cleanup_lock();
    let (f, e) = patched("pidmax", |b| {
        b[H_PID..H_PID + 4].copy_from_slice(&u32::MAX.to_le_bytes())
    });
    assert_eq!(
        e,
        format!(
            "{}: corrupt: pid 4294967295 is outside 1..=2147483647; no process can have it",
            f.0
        )
    );
    let text = once(None);
    assert!(
        !text.lines().any(|l| l.starts_with("pid 4294967295")),
        "listed as a process: {text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with(&f.0) && l.contains("corrupt: pid 4294967295")),
        "{text}"
    );
    // Not ours to judge alive or dead: cleanup leaves it alone.
    assert!(!cleanup_stale().contains(&f.0));
    assert!(std::path::Path::new(&super::shm_path(&f.0)).exists());
    // Just above i32::MAX is refused too.
    let (_f, e) = patched("pidi32", |b| {
        b[H_PID..H_PID + 4].copy_from_slice(&(1u32 << 31).to_le_bytes())
    });
    assert!(e.contains("corrupt: pid 2147483648 is outside"), "{e}");
}
