//! Each fault kind on a T3K ring and a Galaxy's rows ends as it must, within the timeout: a link
//! down, every packet dropped or corrupted: an error naming the link; a slow link: the right
//! data; a stalled dispatcher: a timeout naming the chip; a fault off the op's path: the right
//! data. And the watchdog: a case past it is a hang naming what still waits, and the next case
//! runs on a fresh mesh.

use std::time::{Duration, Instant};

use ttmesh_stress::{generate, run_cases, Case, FaultPlan, RunOptions, StressSpec, Verdict};
use ttmesh_stress::{FaultKind, OpKind};

const TIMEOUT: Duration = Duration::from_secs(1);

/// A small all_reduce (or send) case of `topology` with `fault`, traced or not.
fn case(topology: &str, op: OpKind, fault: FaultPlan, traced: bool, index: u64) -> Case {
    let spec = StressSpec::parse(topology, op_name(op), "none", "bf16", "64K").unwrap();
    let mut c = generate(&spec, 11, index);
    c.fault = fault;
    c.traced = traced && op != OpKind::Send;
    c
}

fn op_name(op: OpKind) -> &'static str {
    op.name()
}

fn link(kind: FaultKind, param: u64, on_path: bool) -> FaultPlan {
    FaultPlan::Link {
        kind,
        param,
        on_path,
        hop: 1,
        delay_us: 0,
    }
}

fn check(mut cases: Vec<(Case, Verdict, &str)>) {
    // Results come back in index order.
    for (i, c) in cases.iter_mut().enumerate() {
        c.0.index = i as u64;
    }
    let mut iter = cases
        .iter()
        .map(|c| c.0.clone())
        .collect::<Vec<_>>()
        .into_iter();
    let opts = RunOptions::new(TIMEOUT);
    let results = run_cases(&mut iter, &opts, &|_| {});
    assert_eq!(results.len(), cases.len());
    for (r, (c, want, needle)) in results.iter().zip(&cases) {
        assert_eq!(r.verdict, *want, "{c}: {}", r.detail);
        // `a&b`: the detail says both (a link's ends, in either order).
        assert!(
            needle.split('&').all(|n| r.detail.contains(n)),
            "{c}: the error does not say '{needle}': {}",
            r.detail
        );
        // Within the timeout (a stall: past the chip's own finish wait, ~1.25 of it).
        let bound = if matches!(c.fault, FaultPlan::Stall { .. }) {
            3.5
        } else {
            1.5
        };
        assert!(
            r.elapsed_ms < bound * TIMEOUT.as_secs_f64() * 1e3 + 2000.0,
            "{c}: took {} ms",
            r.elapsed_ms
        );
    }
}

fn every_kind(topology: &str) {
    let mut cases = Vec::new();
    for traced in [false, true] {
        for (i, op) in [OpKind::AllReduce, OpKind::AllGather, OpKind::Send]
            .into_iter()
            .enumerate()
        {
            let idx = i as u64 * 10 + traced as u64;
            cases.push((
                case(topology, op, link(FaultKind::Down, 0, true), traced, idx),
                Verdict::ExpectedError,
                "is down",
            ));
            cases.push((
                case(topology, op, link(FaultKind::Drop, 1, true), traced, idx),
                Verdict::ExpectedError,
                "dropped",
            ));
            cases.push((
                case(topology, op, link(FaultKind::Corrupt, 1, true), traced, idx),
                Verdict::ExpectedError,
                "corrupted",
            ));
            cases.push((
                case(topology, op, link(FaultKind::Slow, 100, true), traced, idx),
                Verdict::Passed,
                "",
            ));
        }
        cases.push((
            case(
                topology,
                OpKind::AllReduce,
                FaultPlan::Stall { chip: 3 },
                traced,
                5,
            ),
            Verdict::ExpectedError,
            "timed out",
        ));
    }
    if topology == "galaxy-rows" {
        cases.push((
            case(
                topology,
                OpKind::AllReduce,
                link(FaultKind::Down, 0, false),
                false,
                7,
            ),
            Verdict::Passed,
            "",
        ));
    }
    check(cases);
}

#[test]
fn every_fault_kind_on_a_t3k_ring() {
    let t = Instant::now();
    every_kind("t3k-ring");
    eprintln!("t3k-ring fault kinds: {:?}", t.elapsed());
}

#[test]
fn every_fault_kind_on_galaxy_rows() {
    let t = Instant::now();
    every_kind("galaxy-rows");
    eprintln!("galaxy-rows fault kinds: {:?}", t.elapsed());
}

#[test]
fn every_fault_kind_on_a_2d_galaxy() {
    let t = Instant::now();
    every_kind("galaxy@2d");
    eprintln!("galaxy@2d fault kinds: {:?}", t.elapsed());
}

#[test]
fn every_fault_kind_on_a_torus() {
    let t = Instant::now();
    every_kind("torus-4x4@2d-torus-xy");
    eprintln!("torus-4x4 fault kinds: {:?}", t.elapsed());
}

/// A send case from mesh index `a` to `b` with a link down at hop `hop` of its route.
fn send_down(topology: &str, (a, b): (usize, usize), hop: usize) -> Case {
    let mut c = case(
        topology,
        OpKind::Send,
        link(FaultKind::Down, 0, true),
        false,
        3,
    );
    c.send = Some((a, b));
    if let FaultPlan::Link { hop: h, .. } = &mut c.fault {
        *h = hop;
    }
    c
}

/// The first case of `topology`'s matrix whose collective runs along `axis` alone.
fn along(topology: &str, op: OpKind, axis: usize, fault: FaultPlan) -> Case {
    (0..500)
        .map(|i| case(topology, op, fault.clone(), false, i))
        .find(|c| c.steps.len() == 1 && c.steps[0].axis == Some(axis))
        .unwrap_or_else(|| panic!("no case of {topology} runs along axis {axis} alone"))
}

/// A link down on either dimension of a 2D route ends with the error naming that link: a send
/// from the Galaxy's corner (0, 0) to (3, 7) goes down column 0 (hops 0..3, Y) and then along
/// row 3 (hops 3..10, X); on a 4x4 torus, (0, 0) to (3, 3) takes the wrap link of column 0 and
/// then that of row 3. Collectives along each axis fail naming a link of that axis, and a link
/// down on the other axis is off their path.
#[test]
fn a_link_down_on_each_dimension_of_a_2d_route_names_the_link() {
    let cases = vec![
        (
            send_down("galaxy@2d", (0, 31), 0),
            Verdict::ExpectedError,
            "is down&chip 0 port&chip 8 port",
        ),
        (
            send_down("galaxy@2d", (0, 31), 9),
            Verdict::ExpectedError,
            "is down&chip 30 port&chip 31 port",
        ),
        (
            send_down("torus-4x4@2d-torus-xy", (0, 15), 0),
            Verdict::ExpectedError,
            "is down&chip 0 port&chip 12 port",
        ),
        (
            send_down("torus-4x4@2d-torus-xy", (0, 15), 1),
            Verdict::ExpectedError,
            "is down&chip 12 port&chip 15 port",
        ),
        (
            along(
                "galaxy@2d",
                OpKind::AllReduce,
                0,
                link(FaultKind::Down, 0, true),
            ),
            Verdict::ExpectedError,
            "is down",
        ),
        (
            along(
                "galaxy@2d",
                OpKind::AllGather,
                1,
                link(FaultKind::Down, 0, true),
            ),
            Verdict::ExpectedError,
            "is down",
        ),
        (
            along(
                "galaxy@2d",
                OpKind::AllReduce,
                0,
                link(FaultKind::Down, 0, false),
            ),
            Verdict::Passed,
            "",
        ),
        (
            along(
                "torus-4x4@2d-torus-xy",
                OpKind::ReduceScatter,
                1,
                link(FaultKind::Down, 0, false),
            ),
            Verdict::Passed,
            "",
        ),
    ];
    check(cases);
}

#[test]
fn a_case_past_the_watchdog_is_a_hang_and_the_next_runs_on_a_fresh_mesh() {
    let stalled = case(
        "t3k-line",
        OpKind::AllReduce,
        FaultPlan::Stall { chip: 2 },
        false,
        1,
    );
    let healthy = case("t3k-line", OpKind::AllReduce, FaultPlan::None, false, 2);
    let mut iter = vec![stalled, healthy].into_iter();
    let opts = RunOptions {
        // Shorter than the stall (1.5 timeouts and a second): the watchdog fires first.
        watchdog: Duration::from_millis(300),
        ..RunOptions::new(TIMEOUT)
    };
    let results = run_cases(&mut iter, &opts, &|_| {});
    assert_eq!(results[0].verdict, Verdict::Hang, "{}", results[0].detail);
    assert!(
        results[0].detail.contains("queues not finished") && results[0].detail.contains("CQ 0"),
        "the hang report names no waiting queue: {}",
        results[0].detail
    );
    assert_eq!(results[1].verdict, Verdict::Passed, "{}", results[1].detail);
}
