//! The modeled timeline of a real mesh program: untraced it is host-bound (gaps above 6.5 us
//! between ops), replayed from a trace it is not (no gap above 1 us); collectives start
//! together on every chip; the Perfetto JSON holds every op once per chip.

use std::collections::HashMap;

use ttmesh::ccl::{self, CclArgs};
use ttmesh::ops::{self, MeshMatmulConfig};
use ttmesh::*;
use ttmesh_profile::{report, HostModel, Profiler, Timeline};

const ITERS: usize = 3;

/// A small row-parallel matmul + all_reduce + activation block on `topology`, run `ITERS`
/// times untraced, captured, and replayed `ITERS` times, with the profiler attached.
fn profile(topology: &str, host: HostModel) -> (Timeline, usize) {
    let mesh = MeshDevice::open(MeshConfig {
        topology: topology.into(),
        trace_region_size: 1_000_000,
        fabric_config: FabricConfig::Fabric1D,
        ..Default::default()
    })
    .unwrap();
    let n = mesh.num_devices();
    let dir = std::env::temp_dir().join(format!(
        "ttmesh-profile-test-{}-{topology}",
        std::process::id()
    ));
    let profiler = Profiler::start(&dir, None, host, mesh.arch(), mesh.chips()).unwrap();
    let random = |shape: &[usize], seed| {
        ttmesh::models::random_host(shape, DataType::BFloat16, seed, 0.1).unwrap()
    };
    let place = |h: &HostTensor, mapper: &dyn MeshMapper| {
        MeshTensor::from_host(h, &mesh, mapper, Layout::Tile, MemoryConfig::DRAM, CqId(0)).unwrap()
    };
    let w = place(&random(&[64 * n, 64], 1), &ShardTensorToMesh(0));
    let x = place(&random(&[1, 1, 32, 64 * n], 2), &ShardTensorToMesh(3));
    let block = || {
        let partial = ops::matmul(&x, &w, &MeshMatmulConfig::default()).unwrap();
        let reduced = ccl::all_reduce(&partial, &CclArgs::default()).unwrap();
        ops::unary(Activation::Relu, &reduced, &Default::default()).unwrap()
    };
    for _ in 0..ITERS {
        block();
    }
    mesh.synchronize_device().unwrap();
    let tid = mesh.begin_trace_capture(CqId(0)).unwrap();
    let _y = block();
    mesh.end_trace_capture(tid, CqId(0)).unwrap();
    for _ in 0..ITERS {
        mesh.execute_trace(tid, CqId(0), Blocking::No).unwrap();
    }
    mesh.synchronize_device().unwrap();
    let out = profiler.finish(ITERS).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    mesh.close().unwrap();
    (out.timeline, n)
}

#[test]
fn untraced_host_bound_gaps_and_traced_replay_without_them() {
    let (t, n) = profile("n300", HostModel::Cpp);
    let untraced: Vec<_> = t.ops.iter().filter(|o| o.trace_id.is_none()).collect();
    let traced: Vec<_> = t.ops.iter().filter(|o| o.trace_id.is_some()).collect();
    // matmul, reduce_scatter, all_gather, relu per iteration on every chip.
    let per_iter = untraced.len() / (ITERS * n);
    assert!(per_iter >= 3, "{per_iter} ops per iteration");
    assert_eq!(traced.len(), untraced.len());
    // Every untraced op after the first waits for the host: at 16 us of host time per op, more
    // than 6.5 us after an op shorter than 9.5 us (a two-phase all_reduce is longer: the host
    // has caught up by its end, and the next op waits less).
    let span: HashMap<(u32, u64), f64> = untraced
        .iter()
        .map(|o| ((o.chip, o.call_count), o.end_ns - o.start_ns))
        .collect();
    for o in untraced.iter().filter(|o| o.call_count > 1) {
        let before = span[&(o.chip, o.call_count - 1)];
        let floor = if before < 9500.0 { 6500.0 } else { 0.0 };
        assert!(
            o.op_to_op_ns > floor,
            "{} on chip {}: gap {} ns after an op of {before} ns",
            o.program.name,
            o.chip,
            o.op_to_op_ns
        );
    }
    // Inside a replay the ops follow each other: no gap above 1 us (the first op of a
    // replay follows the previous replay's EXEC_BUF and is not counted).
    let mut seen: HashMap<(u32, u64), ()> = HashMap::new();
    for o in &traced {
        let first_of_replay = (o.call_count - 1) % per_iter as u64 == 0;
        if !first_of_replay {
            assert!(
                o.op_to_op_ns < 1000.0,
                "{} on chip {}: gap {} ns",
                o.program.name,
                o.chip,
                o.op_to_op_ns
            );
        }
        seen.insert((o.chip, o.call_count), ());
    }
    // A collective starts at one modeled time on every chip it joins.
    let mut starts: HashMap<u64, Vec<f64>> = HashMap::new();
    for o in t.ops.iter().filter(|o| o.program.cost.collective.is_some()) {
        starts.entry(o.call_count).or_default().push(o.start_ns);
    }
    assert!(!starts.is_empty());
    for (count, s) in starts {
        assert_eq!(s.len(), n, "collective {count}");
        assert!(
            s.iter().all(|&x| (x - s[0]).abs() < 1e-6),
            "collective {count}: {s:?}"
        );
    }
    // The summary's verdicts follow.
    let summary = report::summary::Summary::of(&t, ITERS);
    assert_eq!(
        summary.phases[0].ops_per_iter,
        summary.phases[1].ops_per_iter
    );
    assert_eq!(summary.phases[0].ops_per_iter, per_iter as f64);
    assert!(summary.phases[0].host_bound, "{summary}");
    assert!(!summary.phases[1].host_bound, "{summary}");
}

#[test]
fn every_command_starts_after_its_host_enqueue_plus_latency() {
    // Measured host: the enqueue times are this host's; the device rule is the same.
    let (t, _) = profile("n150", HostModel::Measured);
    assert_eq!(t.host_model, Some(HostModel::Measured));
    let latency =
        ttmesh_profile::Calibration::for_arch(&ArchSpec::wormhole_b0()).command_latency_ns;
    let mut last_end = 0.0;
    let untraced: Vec<_> = t.ops.iter().filter(|o| o.trace_id.is_none()).collect();
    assert!(!untraced.is_empty());
    for o in untraced {
        assert!(o.dispatch_ns + 1e-6 >= o.host_end_ns + latency, "{o:?}");
        assert!(o.dispatch_ns + 1e-6 >= last_end, "{o:?}");
        // It starts at the later of the two, not after.
        assert!(
            (o.dispatch_ns - (o.host_end_ns + latency).max(last_end)).abs() < 1e-6,
            "{o:?}"
        );
        last_end = o.end_ns;
    }
    let host: Vec<f64> = t.host.iter().map(|h| h.start_ns).collect();
    assert!(host.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn perfetto_json_parses_and_holds_every_op_once_per_chip() {
    let (t, n) = profile("t3k", HostModel::Cpp);
    let text = report::chrome::trace(&t).to_string();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let mut per_chip: HashMap<u64, Vec<(String, u64)>> = HashMap::new();
    for e in events.iter().filter(|e| e["cat"] == "op") {
        per_chip
            .entry(e["pid"].as_u64().unwrap())
            .or_default()
            .push((
                e["name"].as_str().unwrap().to_string(),
                e["args"]["global_call_count"].as_u64().unwrap(),
            ));
    }
    assert_eq!(per_chip.len(), n);
    let expected: Vec<(String, u64)> = {
        let mut v: Vec<_> = t
            .ops
            .iter()
            .filter(|o| o.chip == 0)
            .map(|o| (o.program.name.clone(), o.call_count))
            .collect();
        v.sort();
        v
    };
    assert!(!expected.is_empty());
    for (_, mut ops) in per_chip {
        ops.sort();
        assert_eq!(ops, expected, "every op once per chip");
    }
    // Tracks: the host plus one per chip and CQ, named.
    let names = events.iter().filter(|e| e["name"] == "thread_name").count();
    assert_eq!(names, 1 + t.queues.len());
    assert!(events
        .iter()
        .any(|e| e["ph"] == "s" && e["cat"] == "collective"));
}
