//! Files that are not a well-formed segment: garbage, truncation, a wrong version, corrupt
//! header fields, bad names, arbitrary bytes. Each is a named error, never a crash.

use super::{cleanup_lock, info, patched, patched_from, shm_path, valid_bytes, TestFile};
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
    assert_eq!(e, format!("{}: layout version 99, this monitor reads version 2; use a ttmesh built from the same release as the watched program", f.0));
    let (f, e) = patched("chips", |b| {
        b[40..44].copy_from_slice(&129u32.to_le_bytes())
    });
    assert_eq!(
        e,
        format!(
            "{}: corrupt: header claims 129 chips and 3 links; at most 128 and 2048",
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

/// Rank 1 of a Galaxy (4x8) split over 2 ranks: 16 chip slots and 1 link slot.
fn rank_info() -> ProcessInfo {
    let mut i = info();
    i.mesh_shape = (4, 8);
    i.for_rank(1, 2, "m")
}

fn split_bytes() -> Vec<u8> {
    let p = Publisher::create(&rank_info(), 16, 1).unwrap();
    std::fs::read(shm_path(p.name())).unwrap()
}

/// The rank fields of a segment are bounded by each other and by its mesh, each error naming
/// the field; a chip slot's identity words must fit and agree with the header.
#[test]
fn rank_fields_are_bounded_and_named() {
    let u32_le = |v: u32| v.to_le_bytes().to_vec();
    let u64_le = |v: u64| v.to_le_bytes().to_vec();
    let cases = [
        (
            "ranks0",
            H_RANKS,
            u32_le(0),
            "ranks is 0; a mesh spans at least 1 rank",
        ),
        (
            "rank2",
            H_RANK,
            u32_le(2),
            "rank is 2, but the mesh spans 2 ranks (0 to 1)",
        ),
        (
            "ranks64",
            H_RANKS,
            u32_le(64),
            "ranks is 64, more than the 32 chips of its 4x8 mesh",
        ),
        (
            "slotrank",
            chip_offset(3) + 8 * C_RANK,
            u64_le(0),
            "chip slot 3 (chip 3) says rank 0, but the segment is rank 1's",
        ),
        (
            "bigid",
            chip_offset(0) + 8 * C_ID,
            u64_le(1 << 32),
            "chip slot 0 id is 4294967296, beyond 32 bits",
        ),
        (
            "bigrank",
            chip_offset(5) + 8 * C_RANK,
            u64_le(u64::MAX),
            "chip slot 5 rank is 18446744073709551615, beyond 32 bits",
        ),
    ];
    for (tag, at, value, want) in cases {
        let (f, e) = patched_from(split_bytes(), tag, |b| {
            b[at..at + value.len()].copy_from_slice(&value)
        });
        assert_eq!(e, format!("{}: corrupt: {want}", f.0), "{tag}");
    }

    // More chips than the whole mesh has, for one rank of it.
    let mut small = rank_info();
    small.mesh_shape = (2, 4);
    let p = Publisher::create(&small, 16, 0).unwrap();
    assert_eq!(
        read_segment(p.name()).unwrap_err().to_string(),
        format!(
            "{}: corrupt: mesh_shape is 2x4 (8 chips) but the segment has 16 chip slots for rank 1",
            p.name()
        )
    );
    // A rank publishes the links its own chips send on: the far end may be another rank's,
    // the near end may not.
    let p = Publisher::create(&rank_info(), 16, 1).unwrap();
    p.link(0).unwrap().set_endpoints(3, 8, 40, 0);
    assert!(read_segment(p.name()).is_ok());
    p.link(0).unwrap().set_endpoints(40, 0, 3, 8);
    assert_eq!(
        read_segment(p.name()).unwrap_err().to_string(),
        format!(
            "{}: corrupt: link 0 end a is chip 40, which is not among the segment's chips",
            p.name()
        )
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
