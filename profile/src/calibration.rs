//! Every constant of the device-time model, named, with its source, and overridable from one
//! TOML file (`key = number` per line; unknown keys and non-positive rates are errors naming
//! the key).
//!
//! Each constant's doc names where its value comes from, one of:
//! - **spec**: a published hardware figure (tt-metal's arch tables and tech reports, as
//!   ttmesh's FACTS file summarises them; the report is named);
//! - **measured**: a Tenstorrent microbenchmark published in tt-metal (the table is named);
//! - **calibrated**: fitted on a named subset of published figures; `ttmesh bench predict`
//!   prints the error on the rest (held out) and docs/prediction.md keeps the table;
//! - **estimate**: no published figure exists; ttmesh's choice. Each says what it touches so
//!   a reader knows how much a prediction leans on it.
//!
//! Reports cited (paths in github.com/tenstorrent/tt-metal):
//! - GEMM: tech_reports/GEMM_FLOPS/GEMM_FLOPS.md (matrix engine per cycle, fidelity phases);
//! - DRAM: tech_reports/Saturating_DRAM_bandwidth/Saturating_DRAM_bandwidth.md (288 GB/s spec;
//!   267 GB/s microbenchmark; 239-260 GB/s reached by Llama3-70B decode matmuls);
//! - CCL: tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md (all_gather,
//!   reduce_scatter, all_reduce time per size on 2, 4 and 8 Wormhole chips, with fitted
//!   startup and per-hop terms);
//! - fabric: tech_reports/TT-Fabric/TT-Fabric-Architecture.md and FACTS (link rate, header,
//!   payload, 711 ns per 1D hop);
//! - host: tt-metal issue 15605 (13-19 us C++ and 36-84 us Python dispatch per op).

use std::path::Path;

use ttmesh_chip::{Arch, ArchSpec, MathFidelity};

use crate::error::{ProfileError, Result};

/// What each constant must be: rates and sizes strictly positive, latencies and counts
/// non-negative, fractions in (0, 1].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Positive,
    NonNegative,
    Fraction,
}

macro_rules! calibration {
    ($( $(#[doc = $doc:literal])* $name:ident : $kind:ident = $wh:expr, $bh:expr; )*) => {
        /// The model's constants for one architecture. See the module doc for the file format.
        #[derive(Clone, Debug, PartialEq)]
        pub struct Calibration {
            $( $(#[doc = $doc])* pub $name: f64, )*
        }

        impl Calibration {
            /// The defaults for `arch` (Wormhole B0 or Blackhole).
            pub fn for_arch(arch: &ArchSpec) -> Calibration {
                let wh = arch.arch == Arch::WormholeB0;
                Calibration { $( $name: if wh { $wh } else { $bh }, )* }
            }

            /// Every key with its kind, in file order.
            fn keys() -> &'static [(&'static str, Kind)] {
                &[ $( (stringify!($name), Kind::$kind), )* ]
            }

            fn slot(&mut self, key: &str) -> Option<&mut f64> {
                match key {
                    $( stringify!($name) => Some(&mut self.$name), )*
                    _ => None,
                }
            }

            /// The constants as a calibration file (every key, with its doc as a comment):
            /// what a run used, and a template to edit.
            pub fn to_toml(&self) -> String {
                let mut s = String::from(
                    "# ttmesh device-time model: the constants this profile used.\n\
                     # Edit and pass back with --calibration FILE.\n",
                );
                $(
                    s.push('\n');
                    for line in [$($doc),*] {
                        s.push_str("#");
                        s.push_str(line);
                        s.push('\n');
                    }
                    s.push_str(&format!("{} = {:?}\n", stringify!($name), self.$name));
                )*
                s
            }
        }
    };
}

calibration! {
    /// Tensix clock in Hz. Source: spec (Wormhole 1 GHz, Blackhole 1.35 GHz: FACTS arch
    /// table; GEMM_FLOPS report).
    clock_hz: Positive = 1.0e9, 1.35e9;
    /// Cycles per 32x32x32 tile matmul on one core at LoFi. Source: spec (the matrix engine
    /// does 8x16 x 16x16 per cycle: 32768 MACs / 2048 = 16 cycles; GEMM_FLOPS report).
    matmul_cycles_lofi: Positive = 16.0, 16.0;
    /// The same at HiFi2: two passes over the mantissa bits. Source: spec (GEMM_FLOPS report).
    matmul_cycles_hifi2: Positive = 32.0, 32.0;
    /// The same at HiFi3: three passes. Source: spec (GEMM_FLOPS report).
    matmul_cycles_hifi3: Positive = 48.0, 48.0;
    /// The same at HiFi4: four passes. Source: spec (GEMM_FLOPS report).
    matmul_cycles_hifi4: Positive = 64.0, 64.0;
    /// Element operations per cycle per core for eltwise and reductions (a 32x32 tile in 32
    /// cycles). Source: estimate (no published per-op SFPU rate; at decode sizes eltwise and
    /// norms are bound by their fixed cost and DRAM, not by this).
    vector_ops_per_cycle_per_core: Positive = 32.0, 32.0;
    /// DRAM bandwidth of the chip in bytes/s. Source: spec (Wormhole 288 GB/s: 6 GDDR6
    /// channels at 12 GT/s, DRAM report's "DRAM spec speed"; Blackhole 512 GB/s: FACTS).
    dram_bytes_per_s: Positive = 288e9, 512e9;
    /// Fraction of the DRAM bandwidth an op reaches. Source: measured (DRAM report: decode
    /// matmuls of Llama3-70B reach 239-260 of 288 GB/s, 0.83-0.90; the midpoint 0.87; the
    /// read microbenchmark reaches 267, 0.93). Blackhole: the same fraction (no published
    /// matmul figure).
    dram_efficiency: Fraction = 0.87, 0.87;
    /// L1 bytes per cycle per core over the NoC (two NoCs of 32 B/cycle). Source: spec (NoC
    /// width, tt-metal NoC docs); how much of it an op uses is an estimate (touches only
    /// ops that declare L1 traffic, all small at decode).
    l1_bytes_per_cycle_per_core: Positive = 64.0, 64.0;
    /// Fixed cost of every kernel (firmware start, kernel setup and teardown): DEVICE FW
    /// DURATION minus DEVICE KERNEL DURATION. Source: estimate (paid once per op: about 600
    /// ops per Llama-3.1-8B token, so 0.4 ms of a 35 ms token).
    kernel_fixed_ns: NonNegative = 600.0, 600.0;
    /// Host to device latency of a command written into the hardware CQ (PCIe write, prefetcher
    /// pickup). Source: estimate (untraced runs only: a traced token never pays it).
    command_latency_ns: NonNegative = 1500.0, 1500.0;
    /// Dispatcher writing one program's launch (binaries, runtime args, CB configs) to the
    /// workers, in bytes/s over the launch's encoded bytes. Source: estimate (with the go
    /// signal, the op-to-op gap of a traced op).
    launch_write_bytes_per_s: Positive = 10e9, 10e9;
    /// Go signal out and completion back, per program. Source: estimate.
    go_signal_ns: NonNegative = 300.0, 300.0;
    /// Fixed cost of an EXEC_BUF: the prefetcher switching to fetch the trace from DRAM.
    /// Source: estimate (once per token).
    exec_buf_fixed_ns: NonNegative = 1000.0, 1000.0;
    /// Prefetcher fetching trace commands from DRAM, bytes/s. Source: estimate.
    exec_buf_fetch_bytes_per_s: Positive = 20e9, 20e9;
    /// Host to device (and back) tensor bytes over PCIe, bytes/s. Source: estimate (Gen4 x16
    /// is 32 GB/s raw, tech_reports/PCIe_bandwidth; not in a traced token's device time).
    pcie_bytes_per_s: Positive = 12e9, 24e9;
    /// Ethernet bytes/s per link per direction. Source: spec (100 Gb/s on Wormhole, 400 on
    /// Blackhole: FACTS; the CCL report's "line rate 12.5 GB/s per link per direction").
    eth_bytes_per_s: Positive = 12.5e9, 50e9;
    /// Usable fraction of the link rate. Source: measured (CCL report: all_gather on a line of
    /// 4 reaches 11.74 of 12.5 GB/s per link, 0.94; FACTS: about 96 %). The CCL report's
    /// peak rates for reduce_scatter and all_reduce lines are lower (11.1, 10.9 GB/s): the
    /// fidelity table shows that miss rather than bending this.
    eth_efficiency: Fraction = 0.94, 0.94;
    /// Latency per hop on the 1D fabric. Source: spec (711 ns on Wormhole, FACTS fabric
    /// section; Blackhole: no published figure, the fabric crate's 500 ns, an estimate).
    hop_latency_ns: NonNegative = 711.0, 500.0;
    /// Fabric packet header bytes. Source: spec (32 B low-latency 1D header, FACTS).
    packet_header_bytes: NonNegative = 32.0, 32.0;
    /// Fabric packet payload bytes. Source: spec (4352 B default, FACTS).
    packet_payload_bytes: Positive = 4352.0, 4352.0;
    /// Semaphore handshake per collective step, on top of the hop's latency. Source:
    /// calibrated on the CCL report's all_gather line fit (1.91 us per extra chip, fitted by
    /// Tenstorrent on 2- and 4-chip lines): 1910 - 711 ns of hop = 1199 ns. Held out: the
    /// all_gather ring and every reduce_scatter and all_reduce row.
    ccl_step_sync_ns: NonNegative = 1199.0, 1199.0;
    /// Fixed cost of a collective (fabric connection setup in the kernel). Source: calibrated
    /// on the same all_gather line fit (4.47 us startup).
    ccl_fixed_ns: NonNegative = 4470.0, 4470.0;
    /// Host time to dispatch one op from tt-metal's C++ API. Source: measured (13-19 us,
    /// tt-metal issue 15605; the midpoint).
    host_op_cpp_ns: NonNegative = 16000.0, 16000.0;
    /// Host time to dispatch one op from TT-NN's Python API. Source: measured (36-84 us,
    /// tt-metal issue 15605; the midpoint).
    host_op_python_ns: NonNegative = 60000.0, 60000.0;
    /// Extra host time per additional chip of a mesh op (one more CQ to write). Source:
    /// estimate (untraced only).
    host_op_extra_chip_ns: NonNegative = 1500.0, 1500.0;
    /// Host time of execute_trace per chip (a few commands). Source: estimate.
    host_execute_trace_ns: NonNegative = 2000.0, 2000.0;
    /// Host time of a tensor write or read call, besides its bytes over PCIe. Source: estimate.
    host_io_fixed_ns: NonNegative = 5000.0, 5000.0;
    /// Per-op device cost a published TT-NN decode pays beyond ttmesh's op set (its extra
    /// data-movement, reshard and typecast ops between the matmuls, and their firmware),
    /// added to `kernel_fixed_ns` in predictions only (`plan decode --predict`, `bench
    /// predict`, a profile's predicted block), never in a profile's own timeline. Source:
    /// calibrated by `ttmesh bench predict` on one row, Llama-3.2-1B on an n150 at batch 1
    /// (87.8 tokens/s/user, models/tt_transformers/PERF.md, bfp4_b MLP and bfp8_b attention
    /// weights as published); every other row is held out. Blackhole: the same (no Blackhole
    /// row in the fit).
    predict_op_extra_ns: NonNegative = 19524.0, 19524.0;
}

impl Calibration {
    /// Ideal cycles of one tile matmul on one core at `fidelity`.
    pub fn matmul_cycles(&self, fidelity: MathFidelity) -> f64 {
        match fidelity {
            MathFidelity::LoFi => self.matmul_cycles_lofi,
            MathFidelity::HiFi2 => self.matmul_cycles_hifi2,
            MathFidelity::HiFi3 => self.matmul_cycles_hifi3,
            MathFidelity::HiFi4 => self.matmul_cycles_hifi4,
        }
    }

    /// The defaults for `arch` with the keys of the TOML text `text` (from `path`) applied.
    pub fn from_toml(arch: &ArchSpec, text: &str, path: &Path) -> Result<Calibration> {
        let table: toml::Table = text
            .parse()
            .map_err(|source| ProfileError::ParseCalibration {
                path: path.to_path_buf(),
                source,
            })?;
        let mut cal = Calibration::for_arch(arch);
        for (key, value) in &table {
            let Some(&(_, kind)) = Self::keys().iter().find(|(k, _)| k == key) else {
                let known: Vec<&str> = Self::keys().iter().map(|(k, _)| *k).collect();
                return Err(ProfileError::UnknownKey {
                    path: path.to_path_buf(),
                    key: key.clone(),
                    known: known.join(", "),
                });
            };
            let bad = |what, hint| ProfileError::BadValue {
                path: path.to_path_buf(),
                key: key.clone(),
                what,
                got: value.to_string(),
                hint,
            };
            let v = match value {
                toml::Value::Float(f) => *f,
                toml::Value::Integer(i) => *i as f64,
                _ => return Err(bad("a number", "write it as key = 12.5e9")),
            };
            let ok = v.is_finite()
                && match kind {
                    Kind::Positive => v > 0.0,
                    Kind::NonNegative => v >= 0.0,
                    Kind::Fraction => v > 0.0 && v <= 1.0,
                };
            if !ok {
                return Err(match kind {
                    Kind::Positive => bad(
                        "a positive number",
                        "rates and sizes cannot be zero or negative",
                    ),
                    Kind::NonNegative => bad(
                        "zero or a positive number",
                        "latencies and fixed costs cannot be negative",
                    ),
                    Kind::Fraction => bad(
                        "a fraction in (0, 1]",
                        "efficiencies are shares of a peak rate",
                    ),
                });
            }
            if let Some(slot) = cal.slot(key) {
                *slot = v;
            }
        }
        Ok(cal)
    }

    /// [`Calibration::from_toml`] on a file.
    pub fn load(arch: &ArchSpec, path: &Path) -> Result<Calibration> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ProfileError::ReadCalibration {
                path: path.to_path_buf(),
                source,
            })?;
        Self::from_toml(arch, &text, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wh() -> ArchSpec {
        ArchSpec::wormhole_b0()
    }

    #[test]
    fn defaults_follow_the_arch_table() {
        let cal = Calibration::for_arch(&wh());
        let arch = wh();
        assert_eq!(cal.clock_hz, arch.clock_hz);
        assert_eq!(cal.dram_bytes_per_s, arch.dram_bandwidth_bytes_per_s);
        assert_eq!(cal.eth_bytes_per_s, arch.eth_bytes_per_s_per_direction);
        for f in [
            MathFidelity::LoFi,
            MathFidelity::HiFi2,
            MathFidelity::HiFi3,
            MathFidelity::HiFi4,
        ] {
            assert_eq!(cal.matmul_cycles(f), f.cycles_per_tile_matmul() as f64);
        }
        let bh = Calibration::for_arch(&ArchSpec::blackhole());
        assert_eq!(bh.clock_hz, ArchSpec::blackhole().clock_hz);
        assert_eq!(bh.eth_bytes_per_s, 50e9);
    }

    #[test]
    fn a_file_overrides_and_round_trips() {
        let p = Path::new("cal.toml");
        let cal = Calibration::from_toml(&wh(), "hop_latency_ns = 874\ndram_efficiency = 0.7\n", p)
            .unwrap();
        assert_eq!(cal.hop_latency_ns, 874.0);
        assert_eq!(cal.dram_efficiency, 0.7);
        let again = Calibration::from_toml(&wh(), &cal.to_toml(), p).unwrap();
        assert_eq!(again, cal);
    }

    #[test]
    fn bad_keys_and_values_name_the_key() {
        let p = Path::new("cal.toml");
        let e = Calibration::from_toml(&wh(), "dram_bandwith = 1e9", p).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("unknown key `dram_bandwith`"), "{msg}");
        assert!(msg.contains("dram_bytes_per_s"), "{msg}");
        for bad in [
            "eth_bytes_per_s = 0",
            "eth_bytes_per_s = -1.0",
            "dram_efficiency = 1.5",
        ] {
            let msg = Calibration::from_toml(&wh(), bad, p)
                .unwrap_err()
                .to_string();
            let key = bad.split(' ').next().unwrap();
            assert!(msg.contains(&format!("`{key}`")), "{msg}");
        }
        let msg = Calibration::from_toml(&wh(), "kernel_fixed_ns = -5", p)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("kernel_fixed_ns") && msg.contains("negative"),
            "{msg}"
        );
        // Zero is a valid latency, not a valid rate.
        assert!(Calibration::from_toml(&wh(), "kernel_fixed_ns = 0", p).is_ok());
        let msg = Calibration::from_toml(&wh(), "clock_hz = \"fast\"", p)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("`clock_hz`") && msg.contains("a number"),
            "{msg}"
        );
    }
}
