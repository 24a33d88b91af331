//! A link between two MPI ranks taken down by fault injection ends every rank's wait with an
//! error naming the link: when every rank injects the fault (each fails its own sends), and
//! when only rank 0 does (rank 1 learns it from rank 0's abort, over MPI). And before that,
//! with no fault: every link direction's packets and bytes, read on the rank that holds its
//! receiving chip, are what one process counts for the same all_reduce (with the runner
//! the ranks use).
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

/// The input every run here reduces.
fn input(mesh: &MeshDevice) -> MeshTensor {
    let n = mesh.num_devices();
    let host = random(&[n, 1, 32, 64], DataType::BFloat16, 9);
    MeshTensor::from_host(
        &host,
        mesh,
        &ShardTensorToMesh(0),
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .unwrap()
}

/// One all_reduce on `mesh`, then per link direction (index, a-to-b) its packets and payload
/// bytes, for the directions into chips `counted` says.
fn all_reduce_stats(mesh: &MeshDevice, counted: impl Fn(u32) -> bool) -> Vec<String> {
    let x = input(mesh);
    let y = ccl::all_reduce(&x, &CclArgs::default()).unwrap();
    mesh.finish(CqId(0)).unwrap();
    // Every rank's reports of what it sent are in before any rank reads (they leave before
    // its part of this exchange).
    ttmesh::ranks::exchange_f64(mesh, 0.0, TIMEOUT).unwrap();
    let lines = mesh
        .fabric()
        .unwrap()
        .link_stats()
        .iter()
        .filter(|s| counted(s.to_chip))
        .map(|s| {
            format!(
                "link {} {:?} packets {} payload {}",
                s.link_index, s.direction, s.packets, s.payload_bytes
            )
        })
        .collect();
    drop((x, y));
    lines
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
    let x = input(&mesh);
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
    let mesh = open_split();
    let fabric = mesh.fabric().unwrap().clone();
    for l in all_reduce_stats(&mesh, |chip| !fabric.is_remote(chip)) {
        println!("stats rank {rank} {l}");
    }
    drop(fabric);
    mesh.close().unwrap();
    let lines = [case("every-rank", true), case("rank-0-only", rank == 0)];
    for l in lines {
        println!("{l}");
    }
    ttmesh::ranks::end_of_job(&Ok(()));
}

/// The one-process reference for the statistics, run with the runner the ranks use (a
/// line with chips elsewhere runs on own threads, which sends the ready handshakes as
/// packets; the whole-line runners of one process do not).
#[test]
#[ignore = "started by every_rank_names_a_down_link_between_ranks with TTMESH_CCL_RUNNER=own"]
fn one_process_part() {
    if ttmesh_settings::settings().mpi_launch.is_some() {
        return;
    }
    let mesh = open_split();
    for l in all_reduce_stats(&mesh, |_| true) {
        println!("stats one {l}");
    }
    mesh.close().unwrap();
}

/// Runs this test binary's `part` (under `launcher` if given, with `env`), bounded; its
/// stdout, or a panic with both outputs if it failed.
fn run_part(launcher: &[&str], part: &str, env: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match launcher.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    cmd.args([
        "--exact",
        part,
        "--ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .envs(env.iter().copied())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => panic!(
            "cannot start {launcher:?} ({e}): the mpi feature needs OpenMPI, run \
             scripts/mpi-setup.sh"
        ),
    };
    // Bounded: every case, and the ranks' start and end, well within this. Pipes are read
    // after the exit: the parts print a few lines only.
    let deadline = Instant::now() + TIMEOUT * 4;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{part} did not end within {:?}", TIMEOUT * 4);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{part} failed ({status}):\n{out}\n{err}");
    out
}

/// The `stats` lines of a part's output (after `tag`), sorted.
fn stats_lines(out: &str, tag: &str) -> Vec<String> {
    let mut v: Vec<String> = out
        .lines()
        .filter_map(|l| l.find(tag).map(|at| &l[at..]))
        .filter_map(|l| l.split_once(" link ").map(|(_, s)| format!("link {s}")))
        .collect();
    v.sort();
    v
}

#[test]
fn every_rank_names_a_down_link_between_ranks() {
    if ttmesh_settings::settings().mpi_launch.is_some() {
        return;
    }
    let mpirun = [
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
        "--mca",
        "orte_abort_on_non_zero_status",
        "0",
        "-np",
        "2",
    ];
    let out = run_part(&mpirun, "rank_part", &[]);
    // Each link direction's counts on the rank holding its receiving chip, as one process
    // counts them.
    let one = run_part(&[], "one_process_part", &[("TTMESH_CCL_RUNNER", "own")]);
    let (over_ranks, one) = (
        stats_lines(&out, "stats rank "),
        stats_lines(&one, "stats one "),
    );
    assert!(!one.is_empty(), "no statistics from one process:\n{one:?}");
    assert_eq!(
        over_ranks, one,
        "link statistics over 2 ranks (each direction read where its receiving chip is held) \
         differ from one process's"
    );
    for name in ["every-rank", "rank-0-only"] {
        for rank in 0..2 {
            let head = format!("case {name} rank {rank} ");
            // The harness may print its own words before ours on the line.
            let line = out
                .lines()
                .find_map(|l| l.find(&head).map(|at| &l[at..]))
                .unwrap_or_else(|| panic!("no line from rank {rank} for {name}:\n{out}"));
            assert!(
                line.contains("named=true within=true") && line.contains("is down"),
                "rank {rank}, {name}: the error must name the down link, before the \
                 timeout:\n{line}"
            );
        }
    }
}
