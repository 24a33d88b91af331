//! `ttmesh stress`: the topology stress matrix (and `--soak`), its progress bar, report and
//! exit code. The engine is the `ttmesh-stress` crate.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use ttmesh_stress::{
    generate, junit_xml, render_report, run_cases, summary, CaseResult, RunOptions, StressSpec,
};

#[derive(clap::Args, Debug, Clone)]
pub struct StressArgs {
    /// Comma list of n300, t3k-line, t3k-ring, galaxy-rows, galaxy-cols, galaxy-2d, line-N,
    /// ring-N, mesh-RxC (FABRIC_2D), torus-RxC (its torus), topology TOML files, mesh graph
    /// descriptors (.textproto, the fabric their dim types imply), any of them as NAME@FABRIC
    /// (e.g. galaxy@2d, torus-4x4@2d-torus-x); or all.
    #[arg(long, default_value = "all")]
    pub topology: String,
    /// Comma list of all_gather, reduce_scatter, all_reduce, send; or all.
    #[arg(long, default_value = "all")]
    pub ops: String,
    /// Comma list of none, down, slow, drop, corrupt, stall; or all.
    #[arg(long, default_value = "all")]
    pub faults: String,
    /// Comma list of bf16, f32, bfloat8_b; or all.
    #[arg(long, default_value = "all")]
    pub dtypes: String,
    /// Largest input per chip (bytes; K, M suffixes); the smallest case is one tile.
    #[arg(long, default_value = "256K")]
    pub max_size: String,
    /// Seed of the case matrix: the same seed gives the same cases.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Number of cases (default 100 unless --duration is given).
    #[arg(long)]
    pub cases: Option<u64>,
    /// Run cases until this much time has passed (e.g. 90s, 10m, 1h).
    #[arg(long)]
    pub duration: Option<String>,
    /// Run only case INDEX of the matrix (what a failure's rerun command uses).
    #[arg(long, value_name = "INDEX")]
    pub only: Option<u64>,
    /// Print the case list and exit.
    #[arg(long)]
    pub list: bool,
    /// Cases run at once, each on its own mesh.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Operation timeout of every mesh, seconds (default TTMESH_OPERATION_TIMEOUT_SECONDS, else 5).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Also write a JUnit XML report to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<String>,
    /// Soak: replay one mesh trace without end (with --duration), watching RSS, threads, fds.
    #[arg(long)]
    pub soak: bool,
    /// Soak: check results every K replays.
    #[arg(long, default_value_t = 50)]
    pub check_every: u64,
}

/// "90", "90s", "10m", "1h", "1.5h": a positive duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('s') => (&t[..t.len() - 1], 1.0),
        Some('m') => (&t[..t.len() - 1], 60.0),
        Some('h') => (&t[..t.len() - 1], 3600.0),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("--duration {s}: give a number with s, m or h (e.g. 90s, 10m, 1h)"))?;
    let secs = v * mult;
    if !(secs.is_finite() && secs > 0.0 && secs <= 30.0 * 86400.0) {
        return Err(format!(
            "--duration {s}: give a positive duration up to 30 days (e.g. 2m); 0 would run nothing"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn timeout_of(args: &StressArgs) -> Result<Duration, String> {
    let secs = match args.timeout {
        Some(t) => t,
        // A stress case is small: without the variable it gets 5 s, not the library's 60.
        None => ttmesh_settings::settings()
            .operation_timeout_from_env
            .map_or(5.0, |d| d.as_secs_f64()),
    };
    if !(secs.is_finite() && secs > 0.0 && secs <= 3600.0) {
        return Err(format!("--timeout {secs}: give seconds between 0 and 3600"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The command that reruns case `index` alone, with the flags that shaped the matrix.
fn repro(args: &StressArgs, index: u64) -> String {
    let mut c = match ttmesh::ranks::launched() {
        Some((_, ranks)) => format!("mpirun -np {ranks} ttmesh stress"),
        None => "ttmesh stress".to_string(),
    };
    c += &format!(" --seed {} --only {index}", args.seed);
    for (flag, v, default) in [
        ("--topology", &args.topology, "all"),
        ("--ops", &args.ops, "all"),
        ("--faults", &args.faults, "all"),
        ("--dtypes", &args.dtypes, "all"),
        ("--max-size", &args.max_size, "256K"),
    ] {
        if v != default {
            c += &format!(" {flag} {v}");
        }
    }
    if let Some(t) = args.timeout {
        c += &format!(" --timeout {t}");
    }
    c
}

pub fn run(args: &StressArgs) -> Result<(), String> {
    let spec = StressSpec::parse(
        &args.topology,
        &args.ops,
        &args.faults,
        &args.dtypes,
        &args.max_size,
    )
    .map_err(|e| e.to_string())?;
    let duration = args.duration.as_deref().map(parse_duration).transpose()?;
    let timeout = timeout_of(args)?;
    if args.jobs == 0 || args.jobs > 64 {
        return Err(format!("--jobs {}: use 1 to 64", args.jobs));
    }
    if args.cases == Some(0) {
        return Err("--cases 0: give at least 1 case (or --duration)".into());
    }
    // Under mpirun every rank runs the same cases on its part of each mesh; rank 0 reports.
    let launched = ttmesh::ranks::launched();
    if let Some((_, ranks)) = launched {
        if args.jobs > 1 {
            return Err(format!(
                "--jobs {}: under mpirun ({ranks} ranks) cases run one at a time, so every rank \
                 opens its meshes in the same order; drop --jobs",
                args.jobs
            ));
        }
        if args.soak {
            return Err(format!(
                "--soak under mpirun ({ranks} ranks): the soak watches one process; run it \
                 without mpirun"
            ));
        }
    }
    let speaks = launched.is_none_or(|(rank, _)| rank == 0);
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        // A second Ctrl-C ends the process at once.
        let _ = ctrlc::set_handler(move || {
            if stop.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
            eprintln!(
                "\nttmesh stress: stopping after the cases running now (Ctrl-C again to quit)"
            );
        });
    }
    if args.soak {
        return crate::soak::run(args, duration, timeout, stop);
    }
    let total = match (args.only, args.cases, duration) {
        (Some(_), _, _) => Some(1),
        (None, Some(n), _) => Some(n),
        (None, None, Some(_)) => None,
        (None, None, None) => Some(100),
    };
    let seed = args.seed;
    let first = args.only.unwrap_or(0);
    let indices = first..total.map_or(u64::MAX, |n| first + n);
    if args.list {
        if !speaks {
            return Ok(());
        }
        for i in indices.take(total.unwrap_or(100) as usize) {
            println!("{}", generate(&spec, seed, i));
        }
        return Ok(());
    }
    let mut cases = indices.map(|i| generate(&spec, seed, i));
    let opts = RunOptions {
        jobs: args.jobs,
        deadline: duration.map(|d| Instant::now() + d),
        stop,
        ..RunOptions::new(timeout)
    };
    let bar = if args.json || !speaks {
        ProgressBar::hidden()
    } else {
        match total {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::new_spinner(),
        }
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {pos}{len_part} cases  {msg}")
            .map(|s| {
                s.with_key(
                    "len_part",
                    |st: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        if let Some(l) = st.len() {
                            let _ = write!(w, "/{l}");
                        }
                    },
                )
            })
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let failures = AtomicU64::new(0);
    let started = Instant::now();
    let on_done = |r: &CaseResult| {
        if r.failed() && speaks {
            failures.fetch_add(1, Ordering::Relaxed);
            bar.println(format!(
                "FAILED case {}: {} ({})",
                r.index, r.case, r.detail
            ));
        }
        bar.inc(1);
        let rate = bar.position() as f64 / started.elapsed().as_secs_f64().max(1e-3) * 60.0;
        bar.set_message(format!(
            "{} failures  {rate:.0} cases/min",
            failures.load(Ordering::Relaxed)
        ));
    };
    let results = run_cases(&mut cases, &opts, &on_done);
    bar.finish_and_clear();
    if let Some(e) = opts.fatal.lock().take() {
        return Err(format!(
            "stress over MPI ranks stopped after {} cases: {e}",
            results.len()
        ));
    }
    let elapsed = started.elapsed();
    let s = summary(&results, seed, &|i| repro(args, i));
    if speaks {
        report(args, &results, &s, elapsed, &opts)?;
    }
    if let Some((rank, _)) = launched {
        // A rank that fails ends the whole job: every rank waits until rank 0's report is
        // out. The verdicts were agreed by every rank, so every rank exits alike.
        use std::io::Write;
        let _ = std::io::stdout().flush();
        ttmesh::ranks::exchange_in_job("stress: the report is out", Vec::new(), opts.watchdog)?;
        if !speaks && !s.ok() {
            return Err(format!("rank {rank}: stress failed (rank 0 reports it)"));
        }
    }
    if s.ok() {
        Ok(())
    } else {
        Err(format!(
            "stress: {} wrong, {} hangs, {} unexpected errors in {} cases (seed {seed})",
            s.wrong, s.hangs, s.unexpected_errors, s.cases
        ))
    }
}

/// Rank 0's (or the only process's) report: JUnit if asked, then JSON or the tables.
fn report(
    args: &StressArgs,
    results: &[CaseResult],
    s: &ttmesh_stress::Summary,
    elapsed: Duration,
    opts: &RunOptions,
) -> Result<(), String> {
    let seed = args.seed;
    let per_minute = results.len() as f64 / elapsed.as_secs_f64().max(1e-3) * 60.0;
    if let Some(path) = &args.junit {
        std::fs::write(path, junit_xml(results, s))
            .map_err(|e| format!("--junit {path}: cannot write it: {e}"))?;
    }
    if args.json {
        let v = serde_json::json!({
            "seed": seed,
            "results": results,
            "summary": s,
            "elapsed_s": elapsed.as_secs_f64(),
            "cases_per_minute": per_minute,
            "interrupted": opts.stop.load(Ordering::Relaxed),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", render_report(results, s));
        println!(
            "# seed {seed}: {} cases in {:.1} s ({per_minute:.0} cases/min){}",
            results.len(),
            elapsed.as_secs_f64(),
            if opts.stop.load(Ordering::Relaxed) {
                ", interrupted"
            } else {
                ""
            }
        );
    }
    Ok(())
}
