//! Soak mode: one mesh trace (all_gather, reduce_scatter and all_reduce of one input) replayed
//! without end; every k-th replay gets new inputs and its outputs are checked against the host
//! reference; the process's RSS, thread count and open descriptors are sampled at intervals,
//! and any growth past the first sample after warm-up is a failure.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use ttmesh::ccl::{self, CclArgs};
use ttmesh::{CqId, DataType, HostTensor, Layout, MemoryConfig, MeshMapper, MeshShape, MeshTensor};

use crate::error::{Result, StressError};
use crate::exec::{chain, open_mesh};
use crate::reference;
use crate::spec::TopologyChoice;

/// What the process holds, from /proc/self.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProcessStats {
    pub rss_bytes: u64,
    pub threads: u64,
    pub open_fds: u64,
}

/// This process's RSS, threads and open descriptors (zeros where /proc is missing).
pub fn process_stats() -> ProcessStats {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    ProcessStats {
        rss_bytes: field("VmRSS:") * 1024,
        threads: field("Threads:"),
        open_fds: std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64),
    }
}

#[derive(Clone, Debug)]
pub struct SoakOptions {
    pub topology: TopologyChoice,
    pub duration: Duration,
    pub check_every: u64,
    pub sample_every: Duration,
    pub timeout: Duration,
    pub stop: Arc<AtomicBool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SoakSample {
    pub seconds: f64,
    pub replays: u64,
    pub checks: u64,
    pub stats: ProcessStats,
}

#[derive(Clone, Debug, Serialize)]
pub struct SoakReport {
    pub topology: String,
    pub replays: u64,
    pub checks: u64,
    pub samples: Vec<SoakSample>,
    /// Why the soak failed (a wrong result, an error, growth), or None.
    pub failure: Option<String>,
    pub seconds: f64,
}

/// RSS may move with the allocator's pools; more than this over the baseline is growth.
const RSS_SLACK_BYTES: u64 = 16 << 20;

struct PerChip(Vec<HostTensor>);

impl MeshMapper for PerChip {
    fn map(&self, _host: &HostTensor, _shape: MeshShape) -> ttmesh::Result<Vec<HostTensor>> {
        Ok(self.0.clone())
    }
}

/// Growth of `now` over `base`, described, or None.
fn growth(base: &ProcessStats, now: &ProcessStats) -> Option<String> {
    let mut g = Vec::new();
    if now.threads > base.threads {
        g.push(format!("threads {} -> {}", base.threads, now.threads));
    }
    if now.open_fds > base.open_fds {
        g.push(format!(
            "open descriptors {} -> {}",
            base.open_fds, now.open_fds
        ));
    }
    if now.rss_bytes > base.rss_bytes + RSS_SLACK_BYTES.max(base.rss_bytes / 10) {
        g.push(format!(
            "RSS {} MiB -> {} MiB",
            base.rss_bytes >> 20,
            now.rss_bytes >> 20
        ));
    }
    (!g.is_empty()).then(|| g.join(", "))
}

pub fn run_soak(opts: &SoakOptions, on_sample: &dyn Fn(&SoakSample)) -> Result<SoakReport> {
    let started = Instant::now();
    let mesh = open_mesh(&opts.topology, opts.timeout)?;
    let s = mesh.shape();
    let (axis, n) = opts.topology.axes()[0];
    let lines = reference::lines(s.rows, s.cols, axis);
    let dtype = DataType::BFloat16;
    let shape = vec![1, 1, 64, 32 * n * 2];
    let elems: usize = shape.iter().product();
    let values = |round: u64| -> Vec<Vec<f32>> {
        (0..mesh.num_devices())
            .map(|c| reference::input_values(0x50A4 ^ round, c, elems))
            .collect()
    };
    let hosts = |v: &[Vec<f32>]| -> Vec<HostTensor> {
        v.iter()
            .map(|x| {
                HostTensor::from_f32(shape.clone(), dtype, x.clone()).expect("soak input converts")
            })
            .collect()
    };
    let v0 = values(0);
    let h0 = hosts(&v0);
    let x = MeshTensor::from_host(
        &h0[0],
        &mesh,
        &PerChip(h0.clone()),
        Layout::Tile,
        MemoryConfig::DRAM,
        CqId(0),
    )?;
    let args = CclArgs {
        cluster_axis: axis,
        ..Default::default()
    };
    let block = || -> ttmesh::Result<[MeshTensor; 3]> {
        Ok([
            ccl::all_gather(&x, 3, &args)?,
            ccl::reduce_scatter(&x, 3, &args)?,
            ccl::all_reduce(&x, &args)?,
        ])
    };
    let expect = |v: &[Vec<f32>]| {
        [
            reference::all_gather(v, &shape, 3, &lines),
            reference::reduce_scatter(v, &shape, 3, &lines, dtype),
            reference::all_reduce(v, &lines, dtype),
        ]
    };
    let check = |outs: &[MeshTensor; 3], v: &[Vec<f32>], what: &str| -> Result<()> {
        for (k, (o, want)) in outs.iter().zip(expect(v)).enumerate() {
            let got: Vec<Vec<f32>> = o
                .to_host_shards(CqId(0))?
                .into_iter()
                .map(|h| h.to_f32_vec())
                .collect();
            let wrong = reference::count_wrong(&got, &want, dtype, 1);
            if wrong > 0 {
                return Err(StressError::Soak(format!(
                    "{what}: {wrong} elements of {} differ from the host reference",
                    ["all_gather", "reduce_scatter", "all_reduce"][k]
                )));
            }
        }
        Ok(())
    };
    // Compile untraced and check, then capture the three collectives once.
    let warm = block()?;
    mesh.synchronize_device()?;
    check(&warm, &v0, "the untraced run")?;
    drop(warm);
    let tid = mesh.begin_trace_capture(CqId(0))?;
    let outs = block();
    mesh.end_trace_capture(tid, CqId(0))?;
    let outs = outs?;

    let mut report = SoakReport {
        topology: opts.topology.name(),
        replays: 0,
        checks: 0,
        samples: Vec::new(),
        failure: None,
        seconds: 0.0,
    };
    let mut baseline: Option<ProcessStats> = None;
    let mut next_sample = Instant::now() + opts.sample_every;
    let end = started + opts.duration;
    let result: Result<()> = (|| {
        while Instant::now() < end && !opts.stop.load(Ordering::Relaxed) {
            let checking = (report.replays + 1).is_multiple_of(opts.check_every.max(1));
            if checking {
                let round = report.checks + 1;
                let v = values(round);
                x.copy_from_host(&hosts(&v)[0], &PerChip(hosts(&v)), CqId(0))?;
                mesh.execute_trace(tid, CqId(0), true)?;
                report.replays += 1;
                check(&outs, &v, &format!("replay {}", report.replays))?;
                report.checks += 1;
            } else {
                mesh.execute_trace(tid, CqId(0), false)?;
                report.replays += 1;
            }
            if Instant::now() >= next_sample {
                mesh.synchronize_device()?;
                let sample = SoakSample {
                    seconds: started.elapsed().as_secs_f64(),
                    replays: report.replays,
                    checks: report.checks,
                    stats: process_stats(),
                };
                on_sample(&sample);
                // The first sample is after warm-up (programs compiled, pools grown).
                match &baseline {
                    None => baseline = Some(sample.stats),
                    Some(b) => {
                        if let Some(g) = growth(b, &sample.stats) {
                            report.samples.push(sample);
                            return Err(StressError::Soak(format!("the process grew: {g}")));
                        }
                    }
                }
                report.samples.push(sample);
                next_sample = Instant::now() + opts.sample_every;
            }
        }
        mesh.synchronize_device()?;
        Ok(())
    })();
    if let Err(e) = result {
        report.failure = Some(chain(&e));
    }
    let _ = mesh.release_trace(tid);
    drop(outs);
    let _ = mesh.close();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_a_thread_a_descriptor_or_rss_past_the_slack() {
        let base = ProcessStats {
            rss_bytes: 100 << 20,
            threads: 20,
            open_fds: 6,
        };
        assert_eq!(growth(&base, &base), None);
        let small = ProcessStats {
            rss_bytes: (100 << 20) + (8 << 20),
            ..base
        };
        assert_eq!(growth(&base, &small), None);
        let cases = [
            (
                ProcessStats {
                    threads: 21,
                    ..base
                },
                "threads 20 -> 21",
            ),
            (
                ProcessStats {
                    open_fds: 7,
                    ..base
                },
                "open descriptors 6 -> 7",
            ),
            (
                ProcessStats {
                    rss_bytes: 200 << 20,
                    ..base
                },
                "RSS 100 MiB -> 200 MiB",
            ),
        ];
        for (now, want) in cases {
            assert_eq!(growth(&base, &now).as_deref(), Some(want));
        }
        let me = process_stats();
        assert!(
            me.rss_bytes > 0 && me.threads > 0 && me.open_fds > 0,
            "{me:?}"
        );
    }
}
