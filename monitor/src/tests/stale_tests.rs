//! Segments whose owner is gone (exited, pid reused, died while creating it): detected,
//! named, cleaned, and their names reused.

use super::{cleanup_lock, dead_pid, info_for, shm_path, TestFile};
use crate::*;

#[test]
fn stale_segment_is_detected_and_cleaned() {
    let _cleanup = cleanup_lock();
    let pid = dead_pid();
    let base = format!("ttmesh-{pid}");
    let p = Publisher::create_as(&info_for(2), 2, 1, pid, 12345, Some(&base)).unwrap();
    let name = p.name().to_string();
    let s = read_segment(&name).unwrap();
    assert_eq!(s.info.pid, pid);
    assert_eq!(s.start_time, 12345);
    assert_eq!(s.stale, Some(Staleness::Exited));

    // Our own pid with another start time: the pid was reused.
    let me = std::process::id();
    let reused =
        Publisher::create_as(&info_for(1), 1, 0, me, 1, Some(&format!("ttmesh-{me}-r"))).unwrap();
    assert_eq!(
        read_segment(reused.name()).unwrap().stale,
        Some(Staleness::PidReused)
    );
    // A live one of ours is left alone.
    let live = Publisher::create(&info_for(1), 1, 0).unwrap();

    let removed = cleanup_stale();
    assert!(removed.contains(&name), "{removed:?}");
    assert!(removed.contains(&reused.name().to_string()), "{removed:?}");
    assert!(!removed.contains(&live.name().to_string()));
    assert!(!std::path::Path::new(&shm_path(&name)).exists());
    assert!(read_segment(live.name()).is_ok());
}

#[test]
fn segment_whose_owner_died_before_publishing_is_stale_and_cleaned() {
    let _cleanup = cleanup_lock();
    // A creator killed between shm_open and storing the magic leaves an empty file (before
    // ftruncate) or a zeroed one (after): only the pid in the name says whose it was.
    let pid = dead_pid();
    let empty = TestFile::named(&format!("ttmesh-{pid}"), &[]);
    let zeroed = TestFile::named(&format!("ttmesh-{pid}-1"), &[0; 2048]);
    for f in [&empty, &zeroed] {
        assert_eq!(
            read_segment(&f.0).unwrap_err().to_string(),
            format!("{}: stale (process {pid} exited, before it finished creating the segment); `ttmesh monitor --cleanup` removes it", f.0)
        );
    }
    // Named after this (live) process and written just now: still being created.
    let me = std::process::id();
    let creating = TestFile::named(&format!("ttmesh-{me}-77"), &[0; 2048]);
    assert!(
        matches!(
            read_segment(&creating.0),
            Err(MonitorError::NotInitialised { .. })
        ),
        "{:?}",
        read_segment(&creating.0)
    );
    // Named after this process but last written an hour before it started: the leftover of
    // an earlier process that had our pid.
    let leftover = TestFile::named(&format!("ttmesh-{me}-78"), &[]);
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(shm_path(&leftover.0))
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    assert_eq!(
        read_segment(&leftover.0).unwrap_err().to_string(),
        format!("{}: stale (process {me} exited and its pid was reused, before it finished creating the segment); `ttmesh monitor --cleanup` removes it", leftover.0)
    );

    let removed = cleanup_stale();
    for gone in [&empty, &zeroed, &leftover] {
        assert!(removed.contains(&gone.0), "{removed:?}");
        assert!(!std::path::Path::new(&shm_path(&gone.0)).exists());
    }
    assert!(std::path::Path::new(&shm_path(&creating.0)).exists());
}

#[test]
fn stale_name_is_reused_by_a_new_publisher() {
    let _cleanup = cleanup_lock();
    // A segment left under a name this process wants (pid reuse after a crash) is replaced.
    let me = std::process::id();
    let base = format!("ttmesh-{me}-s");
    let old = Publisher::create_as(&info_for(1), 1, 0, me, 7, Some(&base)).unwrap();
    std::mem::forget(old); // simulate a crash: no unlink
    let new = Publisher::create_as(
        &info_for(1),
        1,
        0,
        me,
        crate::shm::own_start_time(),
        Some(&base),
    )
    .unwrap();
    assert_eq!(new.name(), base);
    assert_eq!(read_segment(&base).unwrap().stale, None);

    // So is one whose creator died before writing its header.
    let pid = dead_pid();
    let unfinished = format!("ttmesh-{pid}");
    std::fs::write(shm_path(&unfinished), []).unwrap();
    let new = Publisher::create_as(&info_for(1), 1, 0, pid, 1, Some(&unfinished)).unwrap();
    assert_eq!(new.name(), unfinished);
    assert_eq!(read_segment(&unfinished).unwrap().info.pid, pid);
}

mod props {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn pid_names_parse(pid in 1u32.., rank in proptest::option::of(0u32..1000),
                           n in proptest::option::of(1u32..100)) {
            let mut name = format!("ttmesh-{pid}");
            if let Some(r) = rank {
                name.push_str(&format!("-r{r}"));
            }
            if let Some(n) = n {
                name.push_str(&format!("-{n}"));
            }
            prop_assert_eq!(crate::reader::pid_from_name(&name), Some(pid));
            for other in [
                format!("ttmesh-x{pid}"),
                format!("ttmesh-{pid}-r"),
                format!("ttmesh-{pid}-rx"),
                format!("{name}-7-8"),
                format!("ttmesh-{pid}-1-r1"),
            ] {
                prop_assert_eq!(crate::reader::pid_from_name(&other), None, "{}", other);
            }
        }
    }
}
