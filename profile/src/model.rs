//! The device-time model: what one kernel, one transfer and one dispatch would take on the
//! hardware, from a [`Calibration`]. Pure arithmetic: no clocks, no chips.

use ttmesh_chip::program::KernelCost;
use ttmesh_chip::MathFidelity;

use crate::calibration::Calibration;

/// Modeled duration of one kernel, as tt-metal's profiler splits it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelTime {
    /// From the first core starting the kernel to the last one finishing it.
    pub kernel_ns: f64,
    /// The kernel plus firmware start and teardown.
    pub fw_ns: f64,
}

/// The calibrated model.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceModel {
    pub cal: Calibration,
}

impl DeviceModel {
    pub fn new(cal: Calibration) -> DeviceModel {
        DeviceModel { cal }
    }

    /// `tiles` tile matmuls at `fidelity` spread over `cores` cores.
    pub fn matmul_ns(&self, tiles: f64, fidelity: MathFidelity, cores: u32) -> f64 {
        let cycles = tiles * self.cal.matmul_cycles(fidelity) / cores.max(1) as f64;
        cycles / self.cal.clock_hz * 1e9
    }

    /// `ops` element operations on the vector engines of `cores` cores.
    pub fn vector_ns(&self, ops: f64, cores: u32) -> f64 {
        let per_s =
            self.cal.vector_ops_per_cycle_per_core * cores.max(1) as f64 * self.cal.clock_hz;
        ops / per_s * 1e9
    }

    /// `bytes` to or from DRAM at the reachable share of its bandwidth.
    pub fn dram_ns(&self, bytes: f64) -> f64 {
        bytes / (self.cal.dram_bytes_per_s * self.cal.dram_efficiency) * 1e9
    }

    /// `bytes` to or from L1 by `cores` cores over the NoC.
    pub fn l1_ns(&self, bytes: f64, cores: u32) -> f64 {
        let per_s = self.cal.l1_bytes_per_cycle_per_core * cores.max(1) as f64 * self.cal.clock_hz;
        bytes / per_s * 1e9
    }

    /// Wire bytes of `bytes` of payload cut into fabric packets (each with its header).
    pub fn wire_bytes(&self, bytes: f64) -> f64 {
        let packets = (bytes / self.cal.packet_payload_bytes).ceil().max(1.0);
        bytes + packets * self.cal.packet_header_bytes
    }

    /// `bytes` streamed over `hops` ethernet hops spread over `links` parallel links: packets
    /// go back to back at the usable link rate, the first pays every hop's latency.
    pub fn transfer_ns(&self, bytes: f64, hops: u32, links: u32) -> f64 {
        let rate = self.cal.eth_bytes_per_s * self.cal.eth_efficiency * links.max(1) as f64;
        self.wire_bytes(bytes) / rate * 1e9 + hops as f64 * self.cal.hop_latency_ns
    }

    /// One kernel's modeled time on `cores` cores (the cores its launch declares).
    pub fn kernel_time(&self, cost: &KernelCost, cores: u32) -> KernelTime {
        let memory = self.dram_ns(cost.dram_bytes) + self.l1_ns(cost.l1_bytes, cores);
        let kernel_ns = match &cost.collective {
            Some(c) => {
                // The busiest link direction streams its bytes; every step also pays a hop
                // and a semaphore handshake, every phase a start-up; DRAM reads and writes
                // overlap the link.
                let link = self.transfer_ns(cost.fabric_bytes, 0, c.links)
                    + c.steps as f64 * (self.cal.hop_latency_ns + self.cal.ccl_step_sync_ns)
                    + c.phases.max(1) as f64 * self.cal.ccl_fixed_ns;
                link.max(memory)
            }
            None => {
                let matmul_flops = cost.matmul_tiles * 2.0 * 32f64.powi(3);
                let compute = self
                    .matmul_ns(cost.matmul_tiles, cost.math_fidelity, cores)
                    .max(self.vector_ns((cost.flops - matmul_flops).max(0.0), cores));
                compute.max(memory)
            }
        };
        KernelTime {
            kernel_ns,
            fw_ns: kernel_ns + self.cal.kernel_fixed_ns,
        }
    }

    /// Device-side dispatch of one program before its kernel starts: the dispatcher writes
    /// the launch (`launch_bytes` of encoded commands) to the workers and sends the go signal.
    /// From a trace, the launch is first fetched from DRAM.
    pub fn launch_dispatch_ns(&self, launch_bytes: f64, from_trace: bool) -> f64 {
        let fetch = if from_trace {
            launch_bytes / self.cal.exec_buf_fetch_bytes_per_s * 1e9
        } else {
            0.0
        };
        fetch + launch_bytes / self.cal.launch_write_bytes_per_s * 1e9 + self.cal.go_signal_ns
    }

    /// Device-side start of a trace replay (EXEC_BUF), before its first command.
    pub fn exec_buf_ns(&self) -> f64 {
        self.cal.exec_buf_fixed_ns
    }

    /// A tensor write or read of `bytes` over PCIe, on the device's side.
    pub fn pcie_ns(&self, bytes: f64) -> f64 {
        bytes / self.cal.pcie_bytes_per_s * 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttmesh_chip::program::CollectiveCost;
    use ttmesh_chip::ArchSpec;

    fn wh() -> DeviceModel {
        DeviceModel::new(Calibration::for_arch(&ArchSpec::wormhole_b0()))
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-6 * b.abs().max(1.0), "{a} != {b}");
    }

    #[test]
    fn matmul_tiles_times_fidelity_over_cores() {
        let m = wh();
        // [32 x 512] x [512 x 256]: 1 x 16 x 8 = 128 tile matmuls; 8 output tiles, 8 cores.
        // HiFi4: 128 * 64 / 8 = 1024 cycles = 1024 ns at 1 GHz; LoFi a quarter of that.
        close(m.matmul_ns(128.0, MathFidelity::HiFi4, 8), 1024.0);
        close(m.matmul_ns(128.0, MathFidelity::LoFi, 8), 256.0);
        close(m.matmul_ns(128.0, MathFidelity::HiFi2, 64), 64.0);
        // A compute-bound kernel: 4096 tiles at HiFi2 on 64 cores = 2048 ns, while its
        // 100 KB of DRAM traffic take 100e3 / (288e9 * 0.87) = 399.1 ns.
        let cost = KernelCost {
            flops: 4096.0 * 65536.0,
            dram_bytes: 100e3,
            matmul_tiles: 4096.0,
            math_fidelity: MathFidelity::HiFi2,
            ..Default::default()
        };
        let t = m.kernel_time(&cost, 64);
        close(t.kernel_ns, 2048.0);
        close(t.fw_ns, 2048.0 + 600.0);
        // The same work memory-bound: 10 MB of DRAM traffic = 39,910.6 ns.
        let t = m.kernel_time(
            &KernelCost {
                dram_bytes: 10e6,
                ..cost
            },
            64,
        );
        close(t.kernel_ns, 10e6 / (288e9 * 0.87) * 1e9);
    }

    #[test]
    fn one_mib_over_one_and_seven_hops() {
        let m = wh();
        // 1 MiB in 4352-byte packets: 241 packets, 241 * 32 header bytes.
        // 1,056,288 wire bytes at 12.5e9 * 0.94 = 11.75e9 B/s = 89,896.85 ns, + 711 ns per hop.
        close(m.wire_bytes(1048576.0), 1_056_288.0);
        let stream = 1_056_288.0 / 11.75e9 * 1e9;
        close(m.transfer_ns(1048576.0, 1, 1), stream + 711.0);
        close(m.transfer_ns(1048576.0, 7, 1), stream + 7.0 * 711.0);
        // Two links halve the streaming time, not the latency.
        close(m.transfer_ns(1048576.0, 1, 2), stream / 2.0 + 711.0);
    }

    #[test]
    fn all_gather_on_eight_chips() {
        let m = wh();
        // 8 chips each holding 64 KiB of bf16: the output is 512 KiB; the busiest link
        // direction carries 7 of the 8 shards = 458,752 B = 106 packets (3,392 header bytes):
        // 462,144 / 11.75e9 = 39,331.4 ns; 7 steps of 711 + 1199 ns = 13,370 ns; + 4470 ns
        // fixed.
        let cost = KernelCost {
            fabric_bytes: 458_752.0,
            dram_bytes: (65536 + 524288) as f64,
            collective: Some(CollectiveCost {
                participants: 0xff,
                chips: 8,
                steps: 7,
                links: 1,
                phases: 1,
            }),
            ..Default::default()
        };
        let t = m.kernel_time(&cost, 2);
        close(t.kernel_ns, 462_144.0 / 11.75e9 * 1e9 + 13_370.0 + 4_470.0);
    }

    #[test]
    fn dispatch_costs() {
        let m = wh();
        // 2 KB of launch records at 10 GB/s + 300 ns go signal; from a trace, + 2 KB at 20 GB/s.
        close(m.launch_dispatch_ns(2000.0, false), 200.0 + 300.0);
        close(m.launch_dispatch_ns(2000.0, true), 100.0 + 200.0 + 300.0);
        close(m.exec_buf_ns(), 1000.0);
        close(m.pcie_ns(12e3), 1000.0);
    }
}
