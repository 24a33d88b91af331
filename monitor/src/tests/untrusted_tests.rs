//! A segment is bytes another process wrote: what it holds must not reach the terminal raw,
//! and a pid no process can have is a corrupt segment, not a running process.

use super::{info, info_for, patched, TestFile};
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
    let p = Publisher::create(&hostile, 8, 0).unwrap();
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

/// A split mesh's heading prints what its segments say too (mesh id, names): escaped.
#[test]
fn escape_sequences_in_a_split_mesh_heading_are_printed_escaped() {
    let mut hostile = info().for_rank(1, 2, &format!("mesh{ESCAPES}"));
    hostile.topology = format!("t3k{ESCAPES}");
    let p = Publisher::create(&hostile, 4, 0).unwrap();
    let text = render_table(&[read_segment(p.name()).unwrap()], &[]);
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "raw control characters reach the terminal: {text:?}"
    );
    assert!(
        text.starts_with(r"mesh t3k\x1b[2J\x1b[31m 2x4 over 2 ranks, 1 on this host"),
        "{text}"
    );
    assert!(text.contains(r"(mesh id mesh\x1b[2J\x1b[31m)"), "{text}");
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

/// Numbers no allocator or mesh can have are a corrupt segment, the field named, never data.
#[test]
fn impossible_numbers_are_a_corrupt_segment_naming_the_field() {
    let corrupt_of = |p: &Publisher| -> String {
        let e = read_segment(p.name()).unwrap_err();
        assert!(matches!(e, MonitorError::Corrupt { .. }), "{e}");
        // The monitor's table gives it its one error line, and no chip table.
        let text = once(Some(std::process::id()));
        let line = e.to_string();
        assert!(text.lines().any(|l| l == line), "{text}");
        assert!(!text.contains(&format!("({})", p.name())), "{text}");
        line.split_once(": corrupt: ").unwrap().1.to_string()
    };

    let p = Publisher::create(&info_for(2), 2, 0).unwrap();
    p.chip(0).unwrap().set_memory(
        MemoryKind::Dram,
        &MemoryCounters {
            allocated: 1_000_000_000_000_000,
            capacity: 1,
            ..Default::default()
        },
    );
    assert_eq!(
        corrupt_of(&p),
        "chip 0 DRAM allocated is 1000000000000000 B, more than its capacity of 1 B"
    );
    drop(p);

    let mut nine = info();
    nine.mesh_shape = (9, 9);
    let p = Publisher::create(&nine, 2, 0).unwrap();
    assert_eq!(
        corrupt_of(&p),
        "mesh_shape is 9x9 (81 chips) but the segment has 2 chip slots"
    );
    drop(p);

    let p = Publisher::create(&info_for(2), 2, 1).unwrap();
    p.link(0).unwrap().set_endpoints(0, 1, 5, 0);
    assert_eq!(
        corrupt_of(&p),
        "link 0 end b is chip 5, which is not among the segment's chips"
    );
    drop(p);

    let p = Publisher::create(&info_for(2), 2, 0).unwrap();
    p.chip(1).unwrap().set_identity(1, (3, 0));
    assert_eq!(
        corrupt_of(&p),
        "chip 1 coord is (3, 0), outside its 1x2 mesh"
    );
}
