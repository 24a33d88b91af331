//! A Galaxy on a 1D fabric against the same Galaxy on a 2D fabric, side by side in one run:
//! all_reduce of 36 KiB (decode's `[32, 576]` bf16) and 16 MiB per chip along the rows, along
//! the columns and over the whole mesh (1D: one line threaded through all 32 chips; 2D: the
//! columns, then the rows); then decode with the model on rows of 8 (1D, four replicas)
//! against the whole mesh split over both axes (2D): step time, host time per token,
//! collectives and fabric wire bytes per token (measured on the links). Each figure is a
//! median over rounds that alternate the two fabrics, so a busy spell of the shared host
//! falls on both.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use ttmesh::ccl::{self, CclArgs};
use ttmesh::{
    CqId, DataType, FabricConfig, Layout, MemoryConfig, MeshConfig, MeshDevice, MeshTensor,
    ReplicateTensorToMesh,
};
use ttmesh_models::{DeviceDecodeConfig, DeviceLlama};

use crate::ccl::{open, time_collective_along, Iters, Op};
use crate::median;

const FABRICS: [FabricConfig; 2] = [FabricConfig::Fabric1D, FabricConfig::Fabric2D];

/// Runs both parts; a part that fails says so in the report.
pub fn run(quick: bool) -> String {
    let mut s = String::new();
    if let Err(e) = all_reduces(quick, &mut s) {
        let _ = writeln!(s, "all_reduce part failed: {e}");
    }
    if let Err(e) = decode(quick, &mut s) {
        let _ = writeln!(s, "decode part failed: {e}");
    }
    if quick {
        s.push_str(
            "(quick: 1 MiB for 16 MiB, synthetic model, one round; figures are only indicative)\n",
        );
    }
    s
}

/// The lines each all_reduce runs along: (name, cluster_axis).
const ALONG: [(&str, Option<usize>); 3] = [
    ("rows (8 chips)", Some(1)),
    ("columns (4 chips)", Some(0)),
    ("whole mesh (32)", None),
];

fn all_reduces(quick: bool, s: &mut String) -> Result<(), String> {
    // (label, per-chip shape): 36 KiB is decode's [32, 576] bf16, 16 MiB 8192 rows of 1024.
    let sizes: [(&str, [usize; 4]); 2] = if quick {
        [("36 KiB", [1, 1, 32, 576]), ("1 MiB", [1, 1, 512, 1024])]
    } else {
        [("36 KiB", [1, 1, 32, 576]), ("16 MiB", [1, 1, 8192, 1024])]
    };
    let rounds = if quick { 1 } else { 3 };
    let budget = Duration::from_millis(if quick { 40 } else { 400 });
    // times[size][along][fabric]: one figure per round; wire[size][along][fabric]: bytes.
    let mut times = vec![vec![[Vec::new(), Vec::new()]; ALONG.len()]; sizes.len()];
    let mut wire = vec![vec![[0u64; 2]; ALONG.len()]; sizes.len()];
    for round in 0..rounds {
        for (f, &fabric) in FABRICS.iter().enumerate() {
            let mesh = open("galaxy", fabric)?;
            for (i, (_, shape)) in sizes.iter().enumerate() {
                for (j, &(_, axis)) in ALONG.iter().enumerate() {
                    if round == 0 {
                        wire[i][j][f] = wire_bytes_of_one(&mesh, shape, axis)?;
                    }
                    let t = time_collective_along(
                        &mesh,
                        Op::AllReduce,
                        shape,
                        axis,
                        Iters::Within(budget),
                    )?;
                    times[i][j][f].push(t.as_secs_f64() * 1e6);
                }
            }
            mesh.close().map_err(|e| e.to_string())?;
        }
    }
    let _ = writeln!(
        s,
        "all_reduce on a Galaxy (4x8), bf16 in DRAM, per call (median of {rounds} round(s), each a timed loop)"
    );
    let _ = writeln!(
        s,
        "  {:<7} {:<18} {:>14} {:>14} {:>9} {:>15} {:>15}",
        "size", "along", "FABRIC_1D us", "FABRIC_2D us", "2D / 1D", "1D wire MiB", "2D wire MiB"
    );
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    for (i, (label, _)) in sizes.iter().enumerate() {
        for (j, (along, _)) in ALONG.iter().enumerate() {
            let [one, two] = &times[i][j];
            let (one, two) = (median(one.clone()), median(two.clone()));
            let _ = writeln!(
                s,
                "  {label:<7} {along:<18} {one:>14.1} {two:>14.1} {:>8.2}x {:>15.2} {:>15.2}",
                two / one,
                mib(wire[i][j][0]),
                mib(wire[i][j][1])
            );
        }
    }
    s.push_str("  (whole mesh: FABRIC_1D runs one line threaded through all 32 chips; FABRIC_2D the columns, then the rows;\n   wire MiB: bytes one call puts on all links, headers included)\n");
    Ok(())
}

/// Bytes one all_reduce of a `shape` bf16 tensor along `cluster_axis` puts on every link.
fn wire_bytes_of_one(
    mesh: &MeshDevice,
    shape: &[usize],
    cluster_axis: Option<usize>,
) -> Result<u64, String> {
    let e = |e: ttmesh::MeshError| e.to_string();
    let host = ttmesh::models::random_host(shape, DataType::BFloat16, 3, 0.5)
        .map_err(|x| x.to_string())?;
    let x = MeshTensor::from_host(
        &host,
        mesh,
        &ReplicateTensorToMesh,
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )
    .map_err(e)?;
    mesh.finish(CqId(0)).map_err(e)?;
    let before = wire_bytes(mesh);
    let args = CclArgs {
        cluster_axis,
        ..Default::default()
    };
    let y = ccl::all_reduce(&x, &args).map_err(e)?;
    mesh.finish(CqId(0)).map_err(e)?;
    let bytes = wire_bytes(mesh) - before;
    y.deallocate(true).map_err(e)?;
    x.deallocate(true).map_err(e)?;
    Ok(bytes)
}

/// Figures of one decode layout.
#[derive(Default, Clone)]
struct DecodeFigures {
    split: String,
    traced_step_ms: Vec<f64>,
    traced_host_ms: Vec<f64>,
    untraced_step_ms: Vec<f64>,
    untraced_host_ms: Vec<f64>,
    wire_mib_per_token: Vec<f64>,
    collectives: String,
}

fn wire_bytes(mesh: &MeshDevice) -> u64 {
    mesh.fabric()
        .map(|f| f.link_stats().iter().map(|l| l.bytes).sum())
        .unwrap_or(0)
}

fn decode(quick: bool, s: &mut String) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let (weights, name) = crate::decode::bench_model(quick)?;
    let steps = if quick { 5 } else { 9 };
    let rounds = if quick { 1 } else { 2 };
    let batch = 1;
    let mut figures = [DecodeFigures::default(), DecodeFigures::default()];
    for _ in 0..rounds {
        for (f, &fabric) in FABRICS.iter().enumerate() {
            let mesh = MeshDevice::open(MeshConfig {
                topology: "galaxy".into(),
                fabric_config: fabric,
                trace_region_size: 64 << 20,
                ..Default::default()
            })
            .map_err(|x| e(&x))?;
            let decode = DeviceDecodeConfig {
                batch,
                max_positions: 2 * steps + 2,
                dtype: DataType::BFloat16,
            };
            let mut model = DeviceLlama::new(&mesh, &weights, decode).map_err(|x| e(&x))?;
            let fig = &mut figures[f];
            fig.split = model.parallel().describe();
            let (all_reduces, gathers) = model.collectives_per_step();
            fig.collectives = format!("{all_reduces} all_reduce + {gathers} all_gather");
            let mut pos = 0;
            for traced in [false, true] {
                let (mut step, mut host) = (Vec::new(), Vec::new());
                let mut bytes_from = None;
                for k in 0..steps {
                    let t = Instant::now();
                    model
                        .decode_step(&vec![1; batch], &vec![pos; batch], traced)
                        .map_err(|x| e(&x))?;
                    pos += 1;
                    // Each mode's first step compiles (and, traced, captures).
                    if k == 0 {
                        bytes_from = Some(wire_bytes(&mesh));
                        continue;
                    }
                    step.push(t.elapsed().as_secs_f64() * 1e3);
                    host.push(model.last_host_dispatch().as_secs_f64() * 1e3);
                }
                let per_token = (wire_bytes(&mesh) - bytes_from.unwrap_or(0)) as f64
                    / (steps - 1) as f64
                    / (1 << 20) as f64;
                if traced {
                    fig.traced_step_ms.push(median(step));
                    fig.traced_host_ms.push(median(host));
                    fig.wire_mib_per_token.push(per_token);
                } else {
                    fig.untraced_step_ms.push(median(step));
                    fig.untraced_host_ms.push(median(host));
                }
            }
            drop(model);
            mesh.close().map_err(|x| e(&x))?;
        }
    }
    let _ = writeln!(
        s,
        "\ndecode on a Galaxy, {name} bf16, batch {batch} (median of {rounds} round(s) of {} steps per mode)",
        steps - 1
    );
    for (fabric, fig) in FABRICS.iter().zip(&figures) {
        let _ = writeln!(s, "  {fabric}: {}", fig.split);
    }
    let _ = writeln!(
        s,
        "  {:<34} {:>12} {:>12} {:>9}",
        "per token", "rows of 8", "whole 2D", "2D / rows"
    );
    let row = |s: &mut String, what: &str, get: &dyn Fn(&DecodeFigures) -> &Vec<f64>| {
        let (a, b) = (
            median(get(&figures[0]).clone()),
            median(get(&figures[1]).clone()),
        );
        let _ = writeln!(s, "  {what:<34} {a:>12.3} {b:>12.3} {:>8.2}x", b / a);
    };
    row(s, "traced step ms", &|f| &f.traced_step_ms);
    row(s, "traced host time ms", &|f| &f.traced_host_ms);
    row(s, "untraced step ms", &|f| &f.untraced_step_ms);
    row(s, "untraced host time ms", &|f| &f.untraced_host_ms);
    row(s, "fabric wire MiB (traced)", &|f| &f.wire_mib_per_token);
    let _ = writeln!(
        s,
        "  collectives per token: rows of 8 {} (along each row); whole 2D {} (each along columns then rows)",
        figures[0].collectives, figures[1].collectives
    );
    Ok(())
}
