//! Files that are not a well-formed segment: garbage, truncation, a wrong version, corrupt
//! header fields, bad names, arbitrary bytes. Each is a named error, never a crash.

use super::{cleanup_lock, patched, shm_path, valid_bytes, TestFile};
use crate::layout::*;
use crate::*;

#[test]
fn garbage_file_is_a_specific_error_and_survives_cleanup() {
    let _cleanup = cleanup_lock();
    let f = TestFile::new("garbage", &[b'x'; 300]);
    let e = read_segment(&f.0).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: not a ttmesh monitor segment (magic 0x7878787878787878, expected {:#018x})",
            f.0, MAGIC
        )
    );
    cleanup_stale();
    assert!(std::path::Path::new(&shm_path(&f.0)).exists());
    assert!(list_segments()
        .iter()
        .any(|s| s.name == f.0 && s.size == 300));
}

#[test]
fn truncated_files_are_errors_not_crashes() {
    let bytes = valid_bytes();
    assert_eq!(bytes.len(), 2048);
    for (len, msg) in [
        (64, "truncated (64 of 2048 bytes)"),
        (1500, "truncated (1500 of 2048 bytes)"),
        (2047, "truncated (2047 of 2048 bytes)"),
        (12, "truncated (12 of 128 bytes)"),
        (
            0,
            "not initialised yet (its process is still creating it, or died while creating it)",
        ),
    ] {
        let f = TestFile::new(&format!("trunc{len}"), &bytes[..len]);
        let e = read_segment(&f.0).unwrap_err();
        assert_eq!(e.to_string(), format!("{}: {msg}", f.0));
    }
}

#[test]
fn wrong_version_and_corrupt_headers_are_named() {
    let (f, e) = patched("version", |b| {
        b[8..12].copy_from_slice(&99u32.to_le_bytes())
    });
    assert_eq!(e, format!("{}: layout version 99, this monitor reads version 1; use a ttmesh built from the same release as the watched program", f.0));
    let (f, e) = patched("chips", |b| b[40..44].copy_from_slice(&65u32.to_le_bytes()));
    assert_eq!(
        e,
        format!(
            "{}: corrupt: header claims 65 chips and 3 links; at most 64 and 512",
            f.0
        )
    );
    let (f, e) = patched("counts", |b| b[44..48].copy_from_slice(&4u32.to_le_bytes()));
    assert_eq!(
        e,
        format!(
            "{}: corrupt: 2 chips and 4 links do not add up to 2048 bytes",
            f.0
        )
    );
    let (f, e) = patched("info", |b| b[INFO_OFFSET] = b'!');
    assert!(
        e.starts_with(&format!("{}: corrupt: process info is not valid JSON", f.0)),
        "{e}"
    );
    let (f, e) = patched("longer", |b| b.extend_from_slice(&[0; 64]));
    assert_eq!(
        e,
        format!(
            "{}: corrupt: the file is 2112 bytes but its header says 2048",
            f.0
        )
    );
    let (f, e) = patched("unpublished", |b| b[0..8].fill(0));
    assert!(
        e.starts_with(&format!("{}: not initialised yet", f.0)),
        "{e}"
    );
}

#[test]
fn bad_names_are_rejected() {
    assert!(matches!(
        read_segment("ttmesh-1/../x"),
        Err(MonitorError::BadName { .. })
    ));
    assert!(matches!(
        read_segment(""),
        Err(MonitorError::BadName { .. })
    ));
    let e = read_segment("/ttmesh-no-such-segment").unwrap_err();
    assert_eq!(
        e.to_string(),
        "ttmesh-no-such-segment: vanished (the process exited or removed it)"
    );
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// they happen to be valid, a snapshot.
        #[test]
        fn arbitrary_files_never_crash(bytes in proptest::collection::vec(any::<u8>(), 0..3000),
                                       keep_magic in any::<bool>()) {
            let mut bytes = bytes;
            if keep_magic && bytes.len() >= 8 {
                bytes[..8].copy_from_slice(&MAGIC.to_le_bytes());
            }
            let f = TestFile::new("fuzz", &bytes);
            let _ = read_segment(&f.0);
        }
    }
}
