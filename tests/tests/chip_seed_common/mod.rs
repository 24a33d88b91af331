//! What the chip seed tests share: the model the seed documents call `run_model`, its f64
//! reference, the memory configs, new inputs per iteration, and timing jitter.
//!
//! The model is what makes the seed's L1-input trick work: a large intermediate, a small
//! output, and the model frees its own input (as TT-NN models do). Its sizes per L1 bank
//! (FLOAT32): input 8 KiB (height-sharded over 2 cores), intermediate 16 KiB, output 4 KiB.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use ttmesh_chip::compute::{reference, Activation};
use ttmesh_chip::ops::{self, MatmulConfig, OpOptions};
use ttmesh_chip::tensor::{CoreRange, ShardSpec, TensorMemoryLayout};
use ttmesh_chip::{
    ArchSpec, BufferType, Chip, ChipConfig, CqId, DataType, HostTensor, Layout, MemoryConfig,
    Tensor, TensorSpec,
};

pub const SHAPE: [usize; 2] = [64, 64];
pub const HIDDEN: usize = 4096;

pub fn open(trace_region_size: u64, num_command_queues: u8) -> Arc<Chip> {
    let mut cfg = ChipConfig::new(0, ArchSpec::wormhole_b0());
    cfg.trace_region_size = trace_region_size;
    cfg.num_command_queues = num_command_queues;
    Chip::open(cfg).unwrap()
}

fn sharded(layout: TensorMemoryLayout, bt: BufferType, shard: [usize; 2]) -> MemoryConfig {
    MemoryConfig::sharded(layout, bt, ShardSpec::new(CoreRange::grid(2, 1), shard))
}

/// The persistent input in DRAM, height-sharded over 2 banks.
pub fn sharded_dram() -> MemoryConfig {
    sharded(
        TensorMemoryLayout::HeightSharded,
        BufferType::Dram,
        [32, 64],
    )
}

/// The model's input in L1, height-sharded over 2 cores.
pub fn sharded_l1() -> MemoryConfig {
    sharded(TensorMemoryLayout::HeightSharded, BufferType::L1, [32, 64])
}

/// The persistent output in DRAM, width-sharded over 2 banks.
pub fn output_sharded_dram() -> MemoryConfig {
    sharded(TensorMemoryLayout::WidthSharded, BufferType::Dram, [64, 32])
}

pub fn input_spec(mc: MemoryConfig) -> TensorSpec {
    TensorSpec::new(SHAPE.to_vec(), DataType::Float32, Layout::Tile, mc)
}

/// Deterministic values in [-scale, scale).
pub fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Input of iteration `i`: different every iteration, so a stale read shows.
pub fn host_input(i: u64) -> HostTensor {
    HostTensor::from_f32(
        SHAPE.to_vec(),
        DataType::Float32,
        values(1000 + i, 64 * 64, 1.0),
    )
    .unwrap()
}

/// `relu(x @ w1) @ w2`, weights in DRAM.
pub struct Model {
    w1: Tensor,
    w2: Tensor,
    w1v: Vec<f32>,
    w2v: Vec<f32>,
}

impl Model {
    pub fn new(chip: &Arc<Chip>) -> Model {
        let w1v = values(1, 64 * HIDDEN, 1.0);
        let w2v = values(2, HIDDEN * 64, 1.0 / 64.0);
        let up = |shape: [usize; 2], v: &[f32]| {
            let h = HostTensor::from_f32(shape.to_vec(), DataType::Float32, v.to_vec()).unwrap();
            Tensor::from_host(&h, chip, Layout::Tile, MemoryConfig::DRAM, CqId(0)).unwrap()
        };
        let (w1, w2) = (up([64, HIDDEN], &w1v), up([HIDDEN, 64], &w2v));
        chip.finish(CqId(0)).unwrap();
        Model { w1, w2, w1v, w2v }
    }

    /// The seed's `run_model(input_l1)` on `cq`: frees its input once consumed.
    pub fn run(&self, x: &Tensor, cq: CqId) -> Tensor {
        let l1 = OpOptions {
            cq,
            memory_config: Some(MemoryConfig::L1),
            ..Default::default()
        };
        let cfg = MatmulConfig {
            activation: Some(Activation::Relu),
            options: l1.clone(),
            ..Default::default()
        };
        let h = ops::matmul(x, &self.w1, &cfg).unwrap();
        x.deallocate(true).unwrap();
        let cfg = MatmulConfig {
            options: l1,
            ..Default::default()
        };
        ops::matmul(&h, &self.w2, &cfg).unwrap()
    }

    pub fn reference(&self, x: &HostTensor) -> Vec<f32> {
        let h = reference::matmul(x.as_f32().unwrap(), &self.w1v, 1, 1, 64, 64, HIDDEN).unwrap();
        let h = reference::unary(Activation::Relu, &h);
        reference::matmul(&h, &self.w2v, 1, 1, 64, HIDDEN, 64).unwrap()
    }

    /// Checks the output of iteration `i` (f32 sums of up to 4,096 products, |out| ~ 1).
    pub fn check(&self, i: u64, got: &HostTensor) {
        let want = self.reference(&host_input(i));
        if let Err(e) = reference::check_close(&got.to_f32_vec(), &want, 1e-4, 1e-4) {
            panic!("iteration {i}: {e}");
        }
    }
}

/// Random delays: on the host between calls, and on the device (a host callback that sleeps
/// in a queue), so every interleaving the events allow gets a chance to happen.
pub struct Jitter(u64);

impl Jitter {
    pub fn new(seed: u64) -> Jitter {
        Jitter(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Sleeps the host 0-300 us half of the time.
    pub fn host(&mut self) {
        let r = self.next();
        if r.is_multiple_of(2) {
            std::thread::sleep(Duration::from_micros(r % 300));
        }
    }
    /// Stalls `cq` on the device 0-500 us a third of the time.
    pub fn device(&mut self, chip: &Chip, cq: CqId) {
        self.device_up_to(chip, cq, 500);
    }
    /// Stalls `cq` on the device 0-`max_us` us a third of the time.
    pub fn device_up_to(&mut self, chip: &Chip, cq: CqId, max_us: u64) {
        let r = self.next();
        if r.is_multiple_of(3) {
            let us = r % max_us;
            chip.enqueue_host_callback(cq, move || {
                std::thread::sleep(Duration::from_micros(us));
                Ok(())
            })
            .unwrap();
        }
    }
}
