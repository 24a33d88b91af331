//! The benchmark's MPI column reads what scripts/mpi-allreduce.sh wrote, and says where its
//! figures come from when the file is missing or malformed.

use ttmesh_benches::ccl::MpiFigures;

#[test]
fn reads_the_script_output_and_falls_back_naming_the_reason() {
    let dir = std::env::temp_dir().join(format!("ttmesh-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.tsv");
    std::fs::write(&good, "8\t36864\t154.7\n32\t36864\t1402.3\n\n").unwrap();
    let f = MpiFigures::from_path(good.to_str().unwrap());
    assert_eq!(f.us(8, 36864), Some(154.7));
    assert_eq!(f.us(32, 36864), Some(1402.3));
    assert_eq!(f.us(8, 4096), None);
    assert!(f.source.contains("OpenMPI on this host"), "{}", f.source);

    let bad = dir.join("bad.tsv");
    std::fs::write(&bad, "8\t36864\t154.7\n8 36864 oops\n").unwrap();
    let f = MpiFigures::from_path(bad.to_str().unwrap());
    assert!(f.source.contains("line 2"), "{}", f.source);
    assert!(
        f.source.contains("scripts/mpi-allreduce.sh"),
        "{}",
        f.source
    );
    assert_eq!(f.us(8, 36864), Some(190.0), "the reference host's figure");

    let f = MpiFigures::from_path(dir.join("missing.tsv").to_str().unwrap());
    assert!(f.source.contains("missing.tsv"), "{}", f.source);
    std::fs::remove_dir_all(&dir).unwrap();
}
