//! `ttmesh stress --soak`: one mesh trace replayed until --duration, results checked every
//! --check-every replays, RSS / threads / descriptors printed at intervals; growth fails.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use ttmesh_stress::{run_soak, SoakOptions, SoakSample, TopologyChoice};

use crate::stress::StressArgs;

pub fn run(
    args: &StressArgs,
    duration: Option<Duration>,
    timeout: Duration,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    let topology = match args.topology.as_str() {
        "all" => TopologyChoice::T3kRing,
        t if t.contains(',') => {
            return Err(format!(
                "--soak --topology {t}: a soak replays one mesh; name one topology"
            ))
        }
        t => TopologyChoice::parse(t).map_err(|e| e.to_string())?,
    };
    if args.check_every == 0 {
        return Err("--check-every 0: check at least every 1000000 replays, e.g. 50".into());
    }
    let duration = duration.unwrap_or(Duration::from_secs(60));
    let opts = SoakOptions {
        topology,
        duration,
        check_every: args.check_every,
        // About 20 samples a run, at most one a minute apart and at least a second.
        sample_every: (duration / 20).clamp(Duration::from_secs(1), Duration::from_secs(60)),
        timeout,
        stop,
    };
    let json = args.json;
    let print = |s: &SoakSample| {
        if !json {
            println!(
                "# soak {:>8.1} s  {:>9} replays  {:>6} checks  RSS {:>6} MiB  threads {:>4}  fds {:>4}",
                s.seconds,
                s.replays,
                s.checks,
                s.stats.rss_bytes >> 20,
                s.stats.threads,
                s.stats.open_fds
            );
        }
    };
    let report = run_soak(&opts, &print).map_err(|e| e.to_string())?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "# soak on {}: {} replays ({:.0}/s), {} checked, in {:.1} s: {}",
            report.topology,
            report.replays,
            report.replays as f64 / report.seconds.max(1e-3),
            report.checks,
            report.seconds,
            report
                .failure
                .as_deref()
                .unwrap_or("no wrong result, no growth")
        );
    }
    match report.failure {
        None => Ok(()),
        Some(f) => Err(format!("soak failed: {f}")),
    }
}
