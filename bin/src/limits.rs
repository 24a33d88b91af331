//! Range checks for `ttmesh run`'s numbers, made before anything is allocated: a value that
//! does not make sense, or a block that cannot fit the host or the chips, is refused with the
//! flag, its limit and why (never a panic, an abort or a failed host allocation).

use crate::run::RunArgs;

/// A clap value parser for a flag that takes a whole number: `-5` or `many` is a bad value of
/// that flag, said with what it takes (`takes`, e.g. "a whole number of iterations, 1 to
/// 1000000"), not an unknown argument. Ranges are checked after parsing, with the flag's own
/// message; the flag needs `allow_negative_numbers` so clap hands `-5` to this parser.
pub fn whole<T: std::str::FromStr>(
    takes: &'static str,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let why = if s.trim_start().starts_with('-') {
            "negative"
        } else {
            "not a whole number"
        };
        s.parse().map_err(|_| format!("{why}; it takes {takes}"))
    }
}

/// Longest `--hold`: a day keeps `ttmesh monitor` busy long enough.
pub const MAX_HOLD_SECONDS: f64 = 86_400.0;
/// Most iterations: their host times are kept to report a median.
pub const MAX_ITERS: usize = 1_000_000;

/// Checks that need no mesh: counts, durations.
pub fn check_flags(args: &RunArgs) -> Result<(), String> {
    if args.tokens == 0 {
        return Err(
            "--tokens 0: the block needs at least 1 token (a row of the activation); use --tokens 32 for one tile of rows".into(),
        );
    }
    if args.iters == 0 || args.iters > MAX_ITERS {
        return Err(format!(
            "--iters {}: use 1 to {MAX_ITERS} iterations (each one's host time is kept for the median)",
            args.iters
        ));
    }
    if !(args.hold.is_finite() && (0.0..=MAX_HOLD_SECONDS).contains(&args.hold)) {
        return Err(format!(
            "--hold {}: give a number of seconds from 0 to {MAX_HOLD_SECONDS} (a day) to keep the mesh open",
            args.hold
        ));
    }
    if args.hidden == 0 || !args.hidden.is_multiple_of(32) {
        return Err(format!(
            "--hidden {}: must be a positive multiple of 32 (the tile width)",
            args.hidden
        ));
    }
    Ok(())
}

/// What the block needs, in bytes (estimates on the high side), as linear functions of each
/// size: host memory for the weights, their shards and the host reference; DRAM per chip for
/// the weight shards, activations, collective scratch and the trace region.
struct Need {
    chips: f64,
    trace_region: f64,
}

impl Need {
    fn host(&self, t: f64, h: f64, f: f64) -> f64 {
        24.0 * h * f + 16.0 * t * f + 64.0 * t * h
    }
    fn device(&self, t: f64, h: f64, f: f64) -> f64 {
        let tp = (t / 32.0).ceil() * 32.0;
        4.0 * h * f / self.chips + 4.0 * tp * f / self.chips + 16.0 * tp * h + self.trace_region
    }
}

fn gb(bytes: f64) -> String {
    if bytes < 1e15 {
        format!("{:.1} GB", bytes / 1e9)
    } else {
        format!("{bytes:.1e} B")
    }
}

/// Bytes of host memory the OS reports as available (Linux), if it says.
fn host_available() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0)
}

/// Checks the sizes against the mesh: `--ffn` must split over the chips, and the block must
/// fit each chip's DRAM (`dram_per_chip` allocatable bytes) and the host's free memory.
pub fn check_fits(args: &RunArgs, chips: usize, dram_per_chip: u64) -> Result<(), String> {
    let (t, h, f) = (args.tokens, args.hidden, args.ffn);
    let step = 32 * chips;
    if f == 0 || !f.is_multiple_of(step) {
        return Err(format!(
            "--ffn {f}: must split into slices of a multiple of 32 over {chips} chips: a positive multiple of {step}"
        ));
    }
    let need = Need {
        chips: chips as f64,
        trace_region: if args.no_trace {
            0.0
        } else {
            args.trace_region_size as f64
        },
    };
    let (tf, hf, ff) = (t as f64, h as f64, f as f64);
    let host_cap = host_available().unwrap_or(f64::INFINITY);
    let dev_cap = dram_per_chip as f64;
    let (host, dev) = (need.host(tf, hf, ff), need.device(tf, hf, ff));
    if host <= host_cap && dev <= dev_cap {
        return Ok(());
    }
    // The largest value of each flag that fits with the other two as given (both needs grow
    // linearly in each size), rounded down to the flag's multiple.
    // Slopes over a long step, so the token count's padding to 32 rows does not skew them.
    const STEP: f64 = 1e6;
    let most = |eval: &dyn Fn(f64) -> (f64, f64), multiple: f64| -> f64 {
        let (h0, d0) = eval(0.0);
        let (h1, d1) = eval(STEP);
        let by_host = (host_cap - h0) * STEP / (h1 - h0).max(f64::MIN_POSITIVE);
        let by_dev = (dev_cap - d0) * STEP / (d1 - d0).max(f64::MIN_POSITIVE);
        ((by_host.min(by_dev) / multiple).floor() * multiple).max(0.0)
    };
    let flags = [
        (
            "--tokens",
            t,
            tf,
            most(&|x| (need.host(x, hf, ff), need.device(x, hf, ff)), 1.0),
        ),
        (
            "--hidden",
            h,
            hf,
            most(&|x| (need.host(tf, x, ff), need.device(tf, x, ff)), 32.0),
        ),
        (
            "--ffn",
            f,
            ff,
            most(
                &|x| (need.host(tf, hf, x), need.device(tf, hf, x)),
                step as f64,
            ),
        ),
    ];
    // Blame the flag furthest above what fits.
    let (flag, value, _, limit) = flags
        .iter()
        .copied()
        .max_by(|a, b| (a.2 / a.3.max(1.0)).total_cmp(&(b.2 / b.3.max(1.0))))
        .expect("three flags");
    let fits = if limit >= 1.0 {
        format!("at most {flag} {limit} fits with the other sizes as given")
    } else {
        format!("no {flag} fits with the other sizes as given; lower them")
    };
    let host_text = if host_cap.is_finite() {
        format!("{} of host memory ({} available)", gb(host), gb(host_cap))
    } else {
        format!("{} of host memory", gb(host))
    };
    Err(format!(
        "{flag} {value} is too large (--tokens {t} --hidden {h} --ffn {f} on {chips} chips): the block needs about {} of DRAM per chip (a chip has {}) and {host_text}; {fits}, or use a mesh with more chips",
        gb(dev),
        gb(dev_cap),
    ))
}
