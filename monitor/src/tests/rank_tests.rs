//! A mesh split over MPI ranks, published without MPI: each rank's segment holds its own chips
//! under their global ids, every slot names its rank, and the monitor shows the ranks of one
//! mesh on this host as one mesh, labelled by rank.

use serde_json::Value;

use super::info;
use crate::*;

/// A Galaxy (4x8, chip id = row * 8 + col) split by rows over 2 ranks: rank `r` holds rows
/// 2r and 2r + 1, chips 16r to 16r + 15.
fn galaxy_rank(rank: u32, mesh_id: &str) -> ProcessInfo {
    let mut i = info();
    i.topology = "galaxy".to_string();
    i.mesh_shape = (4, 8);
    i.for_rank(rank, 2, mesh_id)
}

/// Publishes rank `rank`'s 16 chips as the mesh does: global id and coordinate per slot, and
/// on each chip a DRAM figure naming it (its id in MiB) so a reader can tell chips apart.
/// Rank 0 also sends on one link to rank 1's chip below it (8 -> 16).
fn publish_rank(rank: u32, mesh_id: &str) -> Publisher {
    let p = Publisher::create(&galaxy_rank(rank, mesh_id), 16, 1).unwrap();
    for i in 0..16u32 {
        let id = 16 * rank + i;
        let c = p.chip(i as usize).unwrap();
        c.set_identity(id, (id / 8, id % 8));
        c.set_memory(
            MemoryKind::Dram,
            &MemoryCounters {
                allocated: u64::from(id) << 20,
                capacity: 12 << 30,
                ..Default::default()
            },
        );
    }
    let l = p.link(0).unwrap();
    match rank {
        0 => l.set_endpoints(8, 8, 16, 0),
        _ => l.set_endpoints(16, 0, 8, 8),
    }
    l.add_traffic(2, 2 * 4352);
    p
}

/// Our own segments with this mesh id, as `ttmesh monitor --json --pid <us>` prints them
/// (other tests publish under this pid at the same time).
fn json_of_mesh(mesh_id: &str) -> Vec<Value> {
    let args = MonitorArgs {
        json: true,
        pid: Some(std::process::id()),
        ..Default::default()
    };
    let mut out = Vec::new();
    run_monitor(&args, &mut out).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let mut procs: Vec<Value> = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["mesh_id"] == mesh_id)
        .cloned()
        .collect();
    procs.sort_by_key(|p| p["rank"].as_u64());
    procs
}

#[test]
fn rank_1_of_2_publishes_its_chips_under_their_global_ids() {
    let mesh_id = format!("rank-one-{}", std::process::id());
    let p = publish_rank(1, &mesh_id);
    assert!(
        p.name()
            .starts_with(&format!("ttmesh-{}-r1", std::process::id())),
        "{}",
        p.name()
    );
    let s = read_segment(p.name()).unwrap();
    assert_eq!(
        (s.info.rank, s.info.ranks, s.info.mesh_id.as_str()),
        (1, 2, mesh_id.as_str())
    );
    assert_eq!(s.chips.len(), 16);
    for (i, c) in s.chips.iter().enumerate() {
        let id = 16 + i as u32;
        assert_eq!((c.id, c.rank, c.coord), (id, 1, (id / 8, id % 8)));
        assert_eq!(c.dram.allocated, u64::from(id) << 20);
    }
    // The link it sends on reaches rank 0's chip 8, which this segment does not hold.
    assert_eq!((s.links[0].a_chip, s.links[0].b_chip), (16, 8));

    let procs = json_of_mesh(&mesh_id);
    assert_eq!(procs.len(), 1, "{procs:?}");
    let j = &procs[0];
    assert_eq!(
        (&j["rank"], &j["ranks"]),
        (&Value::from(1), &Value::from(2))
    );
    let chips = j["chips"].as_array().unwrap();
    let labels: Vec<(u64, u64)> = chips
        .iter()
        .map(|c| (c["rank"].as_u64().unwrap(), c["id"].as_u64().unwrap()))
        .collect();
    assert_eq!(labels, (16..32).map(|id| (1, id)).collect::<Vec<_>>());
    assert_eq!(chips[3]["coord"], serde_json::json!([2, 3]));

    let table = render_table(std::slice::from_ref(&s), &[]);
    assert!(
        table.contains("mesh galaxy 4x8 over 2 ranks, 1 on this host"),
        "{table}"
    );
    assert!(
        table.contains(&format!("  rank 1: pid {}, 16 chips", std::process::id())),
        "{table}"
    );
    let header = table.lines().find(|l| l.contains("(r,c)")).unwrap();
    assert!(header.trim_start().starts_with("rank  chip"), "{table}");
    // Every chip row: rank 1, then the chip's global id and coordinate.
    for id in 16..32 {
        let row = format!("1    {id}  ({},{})", id / 8, id % 8);
        assert!(
            table.lines().any(|l| l.trim_start().starts_with(&row)),
            "{row}\n{table}"
        );
    }
}

#[test]
fn the_ranks_of_one_mesh_on_this_host_show_as_one_mesh() {
    let mesh_id = format!("both-{}", std::process::id());
    let (r0, r1) = (publish_rank(0, &mesh_id), publish_rank(1, &mesh_id));
    // Another mesh split the same way, opened separately: a section of its own.
    let other = publish_rank(0, "another opening");
    let snaps: Vec<ProcessSnapshot> = [&r1, &other, &r0]
        .iter()
        .map(|p| read_segment(p.name()).unwrap())
        .collect();
    let table = render_table(&snaps, &[]);
    let sections: Vec<&str> = table.split("\nmesh ").collect();
    assert_eq!(sections.len(), 2, "{table}");
    let ours = sections
        .iter()
        .find(|s| s.contains(&format!("(mesh id {mesh_id})")))
        .unwrap();
    assert!(
        ours.contains("galaxy 4x8 over 2 ranks, 2 on this host"),
        "{ours}"
    );
    let pid = std::process::id();
    let r0_line = format!("  rank 0: pid {pid}, 16 chips  ({})", r0.name());
    let r1_line = format!("  rank 1: pid {pid}, 16 chips  ({})", r1.name());
    assert!(ours.contains(&r0_line) && ours.contains(&r1_line), "{ours}");
    // All 32 chips in mesh order, each with the rank holding it, and one sum over both ranks:
    // 0 + 1 + ... + 31 MiB of DRAM.
    let rows: Vec<(u32, u32)> = ours
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let rank = w.next()?.parse().ok()?;
            let chip = w.next()?.parse().ok()?;
            w.next()?.starts_with('(').then_some((rank, chip))
        })
        .collect();
    let want: Vec<(u32, u32)> = (0..32).map(|id| (id / 16, id)).collect();
    assert_eq!(rows, want, "{ours}");
    let all = ours
        .lines()
        .find(|l| l.trim_start().starts_with("all"))
        .unwrap();
    assert!(all.contains("496 MiB"), "{all}");
    // Both ranks' links, each labelled with the rank that sends on it.
    assert!(ours.contains("fabric: 2 links, 2 active"), "{ours}");
    let link_rows: Vec<Vec<&str>> = ours
        .lines()
        .filter(|l| l.contains("<->"))
        .map(|l| l.split_whitespace().take(5).collect())
        .collect();
    assert_eq!(
        link_rows,
        [
            ["0", "0", "8:8", "<->", "16:0"],
            ["1", "0", "16:0", "<->", "8:8"]
        ],
        "{ours}"
    );

    let procs = json_of_mesh(&mesh_id);
    let ranks: Vec<u64> = procs.iter().map(|p| p["rank"].as_u64().unwrap()).collect();
    assert_eq!(ranks, [0, 1]);
    for p in &procs {
        let r = p["rank"].as_u64().unwrap();
        for (i, c) in p["chips"].as_array().unwrap().iter().enumerate() {
            assert_eq!(
                (c["rank"].as_u64(), c["id"].as_u64()),
                (Some(r), Some(16 * r + i as u64))
            );
        }
    }
}

/// A mesh wholly in one process is rank 0 of 1: its heading and table are as before the
/// split existed, with no rank column; its JSON says rank 0 of 1.
#[test]
fn a_single_process_mesh_is_rank_0_of_1_and_looks_as_before() {
    let p = Publisher::create(&super::info_for(8), 8, 0).unwrap();
    let s = read_segment(p.name()).unwrap();
    assert_eq!((s.info.rank, s.info.ranks), (0, 1));
    assert!(s.chips.iter().all(|c| c.rank == 0));
    // `ttmesh-<pid>` (or `-<n>` for a further mesh in this process): no rank in the name.
    assert_eq!(
        crate::reader::pid_from_name(p.name()),
        Some(std::process::id())
    );
    assert!(!p.name().contains("-r"), "{}", p.name());
    let table = render_table(std::slice::from_ref(&s), &[]);
    assert!(
        table.starts_with(&format!("pid {}  ", std::process::id())),
        "{table}"
    );
    assert!(!table.contains("rank"), "{table}");
    let header = table.lines().nth(1).unwrap();
    assert!(header.trim_start().starts_with("chip  (r,c)"), "{table}");
    let json = render_json(std::slice::from_ref(&s), &[]);
    assert_eq!(
        (
            &json["processes"][0]["rank"],
            &json["processes"][0]["ranks"]
        ),
        (&Value::from(0), &Value::from(1))
    );
    assert_eq!(json["processes"][0]["chips"][7]["rank"], 0);
    assert_eq!(json["processes"][0]["chips"][7]["id"], 7);
}

#[test]
fn a_rank_outside_its_mesh_is_refused_before_publishing() {
    for (rank, ranks) in [(2, 2), (0, 0), (7, 3)] {
        let mut i = galaxy_rank(0, "m");
        (i.rank, i.ranks) = (rank, ranks);
        let e = Publisher::create(&i, 16, 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("monitor: rank {rank} of {ranks} is not a rank of a mesh; a mesh spans at least 1 rank, numbered from 0 (ProcessInfo::for_rank)")
        );
    }
}
