//! ttmesh-settings: every environment variable ttmesh reads, read in one place into one
//! [`Settings`] struct, and the table of them ([`VARIABLES`]) that the README's table is checked
//! against.
//!
//! Owns: the variables' names, defaults, parsing and the warning for a malformed value. Must
//! not touch: anything else. It is the bottom of the house (no ttmesh crate below it), so every
//! crate may read it. The values are process-wide on purpose: the environment is. Per-mesh
//! choices (a mesh's operation timeout, say) live in that mesh's config, whose default comes
//! from here.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// One environment variable: its name, its default as a user would write it, what it does,
/// and who reads it.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    pub name: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
    /// [`RUST`] for the fields of [`Settings`]; otherwise the Python module or script that
    /// reads it (they cannot call into this crate before the extension is loaded).
    pub read_by: &'static str,
}

/// `read_by` of the variables this crate reads.
pub const RUST: &str = "ttmesh (Rust)";

/// Every variable ttmesh reads. The README's table lists exactly these (a test checks both
/// ways), and no other `TTMESH_` name may be read anywhere in the tree.
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: "TTMESH_OPERATION_TIMEOUT_SECONDS",
        default: "60 (`stress`: 5)",
        meaning: "bounds every wait (host waits, kernels' fabric waits, lockstep barriers); seconds, fractions allowed; a mesh's `MeshConfig::operation_timeout` overrides it",
        read_by: RUST,
    },
    Variable {
        name: "TTMESH_MONITOR",
        default: "on",
        meaning: "`0`, `off`, `false` or `no` turns statistics publishing for `ttmesh monitor` off",
        read_by: RUST,
    },
    Variable {
        name: "TTMESH_PIN",
        default: "1",
        meaning: "`0` stops binding dispatcher and router threads to cores (only with the `pin` feature)",
        read_by: RUST,
    },
    Variable {
        name: "TTMESH_SHARE_CHUNKS",
        default: "1",
        meaning: "`0` stops storing chips' equal memory chunks once on the host (every chip keeps its own copy), to measure the host memory it saves; the bits are the same",
        read_by: RUST,
    },
    Variable {
        name: "TTMESH_CCL_RUNNER",
        default: "by size",
        meaning: "`together` or `own` forces how a collective's steps run (one thread for the line, or each chip's own), to compare them; the bits are the same",
        read_by: RUST,
    },
    Variable {
        name: "TTMESH_SEM_SPIN",
        default: "256",
        meaning: "checks a fabric semaphore wait makes before it sleeps (0 to 1000000)",
        read_by: RUST,
    },
    Variable {
        name: "TTMESH_MODEL",
        default: "target/models/SmolLM2-135M-Instruct.Q4_1.gguf",
        meaning: "the GGUF file the real-model tests and `bench decode` use",
        read_by: RUST,
    },
    Variable {
        name: "TTMESH_MPI_RESULTS",
        default: "target/mpi-allreduce.tsv",
        meaning: "where `bench ccl` reads OpenMPI's figures that `scripts/mpi-allreduce.sh` wrote",
        read_by: RUST,
    },
    Variable {
        name: "TTMESH_BENCH_QUICK",
        default: "0",
        meaning: "`1` makes the benchmark tests run their quick form",
        read_by: RUST,
    },
    Variable {
        name: "TTMESH_TEST_DIVERGE_RANK",
        default: "unset",
        meaning: "test only: under `mpirun`, `ttmesh stress` on this rank replays a second, identical trace in place of the one the other ranks replay, so the ranks' next barrier must name the divergence (`.ci/run` checks it)",
        read_by: RUST,
    },
    Variable {
        name: "TTMESH_SYSTEM",
        default: "t3k",
        meaning: "the machine `import ttmesh.ttnn` emulates (`open_device` and `open_mesh_device` open its chips); `ttmesh.set_system` overrides it",
        read_by: "python/ttmesh/ttnn",
    },
    Variable {
        name: "TTMESH_PROFILE",
        default: "unset",
        meaning: "a folder: every device a Python program opens is profiled (modeled device time) and written there when it closes",
        read_by: "python/ttmesh/ttnn",
    },
    Variable {
        name: "TTMESH_PYTHON_TORCH",
        default: "0",
        meaning: "`1` makes `scripts/python-setup.sh` install torch (about 5 GB with its CUDA libraries) into the venv",
        read_by: "scripts/python-setup.sh",
    },
    Variable {
        name: "TTMESH_PYTHON_MPI",
        default: "0",
        meaning: "`1` makes `scripts/python-setup.sh` build the module with MPI (after `scripts/mpi-setup.sh`), so a program under `mpirun` opens one mesh over the ranks",
        read_by: "scripts/python-setup.sh",
    },
    Variable {
        name: "TTMESH_BIN",
        default: "target/release/ttmesh",
        meaning: "the `ttmesh` command the Python tests run beside a program",
        read_by: "python/tests",
    },
    Variable {
        name: "TTMESH_VISUALIZER_CHECK",
        default: "0",
        meaning: "`1` makes the seed tests open their graph report in the real ttnn-visualizer",
        read_by: "python/tests",
    },
];
/// Variables an MPI launcher (`mpirun`, `mpiexec`) sets in each process it starts, which ttmesh
/// reads to know it runs as one rank of a job. They are not the user's to set, so the README
/// describes them in prose rather than in its table of `TTMESH_` variables.
pub const LAUNCHER_VARIABLES: &[Variable] = &[
    Variable {
        name: "OMPI_COMM_WORLD_SIZE",
        default: "unset",
        meaning: "OpenMPI's `mpirun`: how many ranks the job has",
        read_by: RUST,
    },
    Variable {
        name: "OMPI_COMM_WORLD_RANK",
        default: "unset",
        meaning: "OpenMPI's `mpirun`: this process's rank",
        read_by: RUST,
    },
    Variable {
        name: "PMI_SIZE",
        default: "unset",
        meaning: "MPICH's and Slurm's launchers (PMI): how many ranks the job has",
        read_by: RUST,
    },
    Variable {
        name: "PMI_RANK",
        default: "unset",
        meaning: "MPICH's and Slurm's launchers (PMI): this process's rank",
        read_by: RUST,
    },
];

/// This process was started by an MPI launcher as one rank of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpiLaunch {
    /// The variable that said so (`OMPI_COMM_WORLD_SIZE` or `PMI_SIZE`).
    pub detected_by: &'static str,
    pub rank: u32,
    pub size: u32,
}

/// How a collective's steps are run (`TTMESH_CCL_RUNNER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CclRunner {
    /// Chosen per collective by its size and line (the default).
    BySize,
    /// Every chip's steps on one thread for the whole line.
    Together,
    /// Each chip's steps on its own dispatcher thread.
    OwnThreads,
}

/// The environment as ttmesh reads it. Get it with [`settings`].
#[derive(Clone, Debug)]
pub struct Settings {
    /// `TTMESH_OPERATION_TIMEOUT_SECONDS` when set and valid.
    pub operation_timeout_from_env: Option<Duration>,
    /// `TTMESH_MONITOR` is not one of the words that turn it off.
    pub monitor: bool,
    /// `TTMESH_PIN` is not `0`.
    pub pin: bool,
    /// `TTMESH_SHARE_CHUNKS` is not `0`.
    pub share_chunks: bool,
    pub ccl_runner: CclRunner,
    pub sem_spin: u32,
    /// `TTMESH_MODEL`, when set.
    pub model: Option<PathBuf>,
    /// `TTMESH_MPI_RESULTS`, when set.
    pub mpi_results: Option<PathBuf>,
    pub bench_quick: bool,
    /// Set when an MPI launcher started this process (see [`LAUNCHER_VARIABLES`]).
    pub mpi_launch: Option<MpiLaunch>,
    /// `TTMESH_TEST_DIVERGE_RANK`: the rank made to replay another trace, to test the check.
    pub test_diverge_rank: Option<u32>,
    /// One line per malformed variable: its name, its value and what it takes. [`settings`]
    /// prints them once to stderr; the default is used instead.
    pub warnings: Vec<String>,
}

/// The operation timeout when `TTMESH_OPERATION_TIMEOUT_SECONDS` is not set.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(60);

impl Settings {
    /// The operation timeout: the variable's, else [`DEFAULT_OPERATION_TIMEOUT`].
    pub fn operation_timeout(&self) -> Duration {
        self.operation_timeout_from_env
            .unwrap_or(DEFAULT_OPERATION_TIMEOUT)
    }

    /// Reads the settings from `get` (the environment, or a test's map). Malformed values are
    /// reported in `warnings` and replaced by the default, so a typo never stops a program
    /// but is never silent either.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Settings {
        let mut warnings = Vec::new();
        let mut bad = |name: &str, value: &str, takes: &str| {
            warnings.push(format!(
                "ttmesh: {name}={value:?} is not {takes}; using the default ({})",
                VARIABLES
                    .iter()
                    .find(|v| v.name == name)
                    .map_or("", |v| v.default)
            ))
        };
        let operation_timeout_from_env =
            get("TTMESH_OPERATION_TIMEOUT_SECONDS").and_then(|v| match v.trim().parse::<f64>() {
                Ok(s) if s > 0.0 && s <= 1e6 => Some(Duration::from_secs_f64(s)),
                _ => {
                    bad(
                        "TTMESH_OPERATION_TIMEOUT_SECONDS",
                        &v,
                        "a number of seconds above 0",
                    );
                    None
                }
            });
        let monitor = match get("TTMESH_MONITOR") {
            None => true,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "0" | "off" | "false" | "no" => false,
                "" | "1" | "on" | "true" | "yes" => true,
                _ => {
                    bad(
                        "TTMESH_MONITOR",
                        &v,
                        "one of 0, off, false, no, 1, on, true, yes",
                    );
                    true
                }
            },
        };
        let pin = match get("TTMESH_PIN").as_deref().map(str::trim) {
            None | Some("1") | Some("") => true,
            Some("0") => false,
            Some(v) => {
                bad("TTMESH_PIN", v, "0 or 1");
                true
            }
        };
        let share_chunks = match get("TTMESH_SHARE_CHUNKS").as_deref().map(str::trim) {
            None | Some("1") | Some("") => true,
            Some("0") => false,
            Some(v) => {
                bad("TTMESH_SHARE_CHUNKS", v, "0 or 1");
                true
            }
        };
        let ccl_runner = match get("TTMESH_CCL_RUNNER").as_deref().map(str::trim) {
            None | Some("") => CclRunner::BySize,
            Some("together") => CclRunner::Together,
            Some("own") => CclRunner::OwnThreads,
            Some(v) => {
                bad("TTMESH_CCL_RUNNER", v, "`together` or `own`");
                CclRunner::BySize
            }
        };
        let sem_spin = match get("TTMESH_SEM_SPIN") {
            None => 256,
            Some(v) => match v.trim().parse::<u32>() {
                Ok(n) if n <= 1_000_000 => n,
                _ => {
                    bad("TTMESH_SEM_SPIN", &v, "a whole number from 0 to 1000000");
                    256
                }
            },
        };
        // A launcher's size and rank, as whole numbers; OpenMPI's names first (the launcher
        // ttmesh is tested with), then PMI's. Garbage there is the launcher's, not the
        // user's: it counts as not launched.
        let mpi_launch = [
            ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
            ("PMI_SIZE", "PMI_RANK"),
        ]
        .into_iter()
        .find_map(|(size, rank)| {
            let n = |name: &str| get(name).and_then(|v| v.trim().parse::<u32>().ok());
            Some(MpiLaunch {
                detected_by: size,
                size: n(size).filter(|&s| s > 0)?,
                rank: n(rank).unwrap_or(0),
            })
        });
        let test_diverge_rank =
            get("TTMESH_TEST_DIVERGE_RANK").and_then(|v| match v.trim().parse::<u32>() {
                Ok(r) => Some(r),
                Err(_) => {
                    bad("TTMESH_TEST_DIVERGE_RANK", &v, "a rank number");
                    None
                }
            });
        let path = |name: &str| get(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        Settings {
            operation_timeout_from_env,
            monitor,
            pin,
            share_chunks,
            ccl_runner,
            sem_spin,
            model: path("TTMESH_MODEL"),
            mpi_results: path("TTMESH_MPI_RESULTS"),
            bench_quick: get("TTMESH_BENCH_QUICK").is_some_and(|v| v.trim() == "1"),
            mpi_launch,
            test_diverge_rank,
            warnings,
        }
    }
}

/// The process's settings, read from the environment on first use (a malformed variable is
/// reported once on stderr).
pub fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let s = Settings::from_lookup(|name| std::env::var(name).ok());
        for w in &s.warnings {
            eprintln!("{w}");
        }
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Settings {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        let s = from(&[]);
        assert_eq!(s.operation_timeout(), DEFAULT_OPERATION_TIMEOUT);
        assert!(s.monitor && s.pin && !s.bench_quick);
        assert_eq!((s.ccl_runner, s.sem_spin), (CclRunner::BySize, 256));
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn values_are_read() {
        let s = from(&[
            ("TTMESH_OPERATION_TIMEOUT_SECONDS", "0.5"),
            ("TTMESH_MONITOR", "off"),
            ("TTMESH_PIN", "0"),
            ("TTMESH_CCL_RUNNER", "own"),
            ("TTMESH_SEM_SPIN", "10"),
            ("TTMESH_MODEL", "/m.gguf"),
        ]);
        assert_eq!(s.operation_timeout(), Duration::from_millis(500));
        assert!(!s.monitor && !s.pin);
        assert_eq!((s.ccl_runner, s.sem_spin), (CclRunner::OwnThreads, 10));
        assert_eq!(s.model, Some(PathBuf::from("/m.gguf")));
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn a_malformed_value_warns_naming_the_variable_and_keeps_the_default() {
        for (name, value) in [
            ("TTMESH_OPERATION_TIMEOUT_SECONDS", "-3"),
            ("TTMESH_OPERATION_TIMEOUT_SECONDS", "soon"),
            ("TTMESH_MONITOR", "maybe"),
            ("TTMESH_PIN", "2"),
            ("TTMESH_CCL_RUNNER", "fast"),
            ("TTMESH_SEM_SPIN", "-1"),
        ] {
            let s = from(&[(name, value)]);
            assert_eq!(s.warnings.len(), 1, "{name}={value}");
            assert!(s.warnings[0].contains(name) && s.warnings[0].contains(value));
            let d = from(&[]);
            assert_eq!(s.operation_timeout(), d.operation_timeout());
            assert_eq!(
                (s.monitor, s.pin, s.ccl_runner),
                (d.monitor, d.pin, d.ccl_runner)
            );
        }
    }

    #[test]
    fn an_mpi_launch_is_seen_from_either_launcher() {
        assert_eq!(from(&[]).mpi_launch, None);
        let ompi = from(&[("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_RANK", "3")]);
        assert_eq!(
            ompi.mpi_launch,
            Some(MpiLaunch {
                detected_by: "OMPI_COMM_WORLD_SIZE",
                rank: 3,
                size: 4
            })
        );
        let pmi = from(&[("PMI_SIZE", "2"), ("PMI_RANK", "1")]);
        assert_eq!(pmi.mpi_launch.map(|l| (l.rank, l.size)), Some((1, 2)));
        assert_eq!(from(&[("PMI_SIZE", "x")]).mpi_launch, None);
    }

    #[test]
    fn every_variable_is_named_once() {
        let mut names: Vec<_> = VARIABLES
            .iter()
            .chain(LAUNCHER_VARIABLES)
            .map(|v| v.name)
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), VARIABLES.len() + LAUNCHER_VARIABLES.len());
    }
}
