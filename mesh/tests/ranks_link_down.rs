//! A link between two MPI ranks taken down by fault injection ends every rank's wait with an
//! error naming the link: when every rank injects the fault (each fails its own sends), and
//! when only rank 0 does (rank 1 learns it from rank 0's abort, over MPI).
//!
//! The test runs itself under `mpirun -np 2` (OpenMPI from scripts/mpi-setup.sh, which the
//! `mpi` feature needs anyway); each rank runs `rank_part` and prints what it saw, and the
//! test checks both ranks' lines: `cargo test --release -p ttmesh --features mpi --test
//! ranks_link_down`.
#![cfg(feature = "mpi")]

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::*;
use ttmesh_fabric::Fault;

/// A wait that outlives this failed the test (the error should end waits at once).
const TIMEOUT: Duration = Duration::from_secs(20);

/// A T3K split by rows over the 2 ranks: the whole-mesh line crosses between them.
fn open_split() -> MeshDevice {
    open_with(MeshConfig {
        topology: "t3k".into(),
        fabric_config: FabricConfig::Fabric1D,
        operation_timeout: Some(TIMEOUT),
        ..Default::default()
    })
}

/// One case on this rank: `inject` says whether this rank takes the links down. Returns the
/// line this rank prints.
fn case(name: &str, inject: bool) -> String {
    let mesh = open_split();
    let rank = mesh.rank().unwrap_or(0);
    let fabric = mesh.fabric().unwrap().clone();
    let links = &fabric.spec().links;
    let crossing: Vec<usize> = (0..links.len())
        .filter(|&i| fabric.is_remote(links[i].a.0) != fabric.is_remote(links[i].b.0))
        .collect();
    assert!(
        !crossing.is_empty(),
        "t3k over 2 ranks has links between them"
    );
    if inject {
        for &i in &crossing {
            fabric.inject(i, Fault::Down).unwrap();
        }
    }
    let n = mesh.num_devices();
    let host = random(&[n, 1, 32, 64], DataType::BFloat16, 9);
    let x = MeshTensor::from_host(
        &host,
        &mesh,
        &ShardTensorToMesh(0),
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .unwrap();
    let started = Instant::now();
    let res = ccl::all_reduce(&x, &CclArgs::default()).and_then(|y| {
        mesh.finish(CqId(0))?;
        Ok(y)
    });
    let took = started.elapsed();
    let err = match res {
        Ok(_) => panic!("rank {rank}, {name}: all_reduce across a down link succeeded"),
        Err(e) => format!("{e}"),
    };
    let named = crossing
        .iter()
        .any(|&i| err.contains(&links[i].to_string()));
    let line = format!(
        "case {name} rank {rank} named={named} within={} error: {err}",
        took < TIMEOUT
    );
    drop(x);
    let _ = mesh.close();
    line
}

/// Each rank's part (run by mpirun; does nothing outside it).
#[test]
#[ignore = "runs under mpirun, started by every_rank_names_a_down_link_between_ranks"]
fn rank_part() {
    if ttmesh_settings::settings().mpi_launch.is_none() {
        return;
    }
    let rank = ttmesh_settings::settings()
        .mpi_launch
        .as_ref()
        .unwrap()
        .rank;
    let lines = [case("every-rank", true), case("rank-0-only", rank == 0)];
    for l in lines {
        println!("{l}");
    }
    ttmesh::ranks::end_of_job(&Ok(()));
}

#[test]
fn every_rank_names_a_down_link_between_ranks() {
    if ttmesh_settings::settings().mpi_launch.is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let spawned = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["--mca", "orte_abort_on_non_zero_status", "0", "-np", "2"])
        .arg(&exe)
        .args(["--exact", "rank_part", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => panic!(
            "cannot start mpirun ({e}): the mpi feature needs OpenMPI, run scripts/mpi-setup.sh"
        ),
    };
    // Bounded: both cases, and the ranks' start and end, well within this.
    let deadline = Instant::now() + TIMEOUT * 4;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mpirun -np 2 did not end within {:?}", TIMEOUT * 4);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "mpirun failed ({status}):\n{out}\n{err}");
    for name in ["every-rank", "rank-0-only"] {
        for rank in 0..2 {
            let head = format!("case {name} rank {rank} ");
            // The harness may print its own words before ours on the line.
            let line = out
                .lines()
                .find_map(|l| l.find(&head).map(|at| &l[at..]))
                .unwrap_or_else(|| panic!("no line from rank {rank} for {name}:\n{out}\n{err}"));
            assert!(
                line.contains("named=true within=true") && line.contains("is down"),
                "rank {rank}, {name}: the error must name the down link, before the \
                 timeout:\n{line}"
            );
        }
    }
}
