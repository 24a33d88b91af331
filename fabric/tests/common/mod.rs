//! Test memory: a HashMap of written bytes per chip plus the log of every write in order.
#![allow(dead_code)]

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use ttmesh_fabric::{ChipMemory, Fabric, FabricSpec, MemSpace, NocAddr};

#[derive(Default)]
pub struct LogMemory {
    bytes: Mutex<HashMap<(MemSpace, u32, u64), u8>>,
    pub log: Mutex<Vec<(NocAddr, Vec<u8>)>>,
}

impl LogMemory {
    pub fn read(&self, at: NocAddr, len: usize) -> Vec<u8> {
        let b = self.bytes.lock();
        (0..len as u64)
            .map(|i| *b.get(&(at.space, at.bank, at.addr + i)).unwrap_or(&0))
            .collect()
    }
    pub fn writes(&self) -> Vec<(NocAddr, Vec<u8>)> {
        self.log.lock().clone()
    }
}

impl ChipMemory for LogMemory {
    fn write(&self, dest: NocAddr, data: &[u8]) -> Result<(), ttmesh_fabric::MemoryError> {
        if dest.addr >= 1 << 40 {
            return Err(format!("address {:#x} is past the end of the bank", dest.addr).into());
        }
        let mut b = self.bytes.lock();
        for (i, &v) in data.iter().enumerate() {
            b.insert((dest.space, dest.bank, dest.addr + i as u64), v);
        }
        drop(b);
        self.log.lock().push((dest, data.to_vec()));
        Ok(())
    }

    fn read(&self, src: NocAddr, out: &mut [u8]) -> Result<(), ttmesh_fabric::MemoryError> {
        out.copy_from_slice(&LogMemory::read(self, src, out.len()));
        Ok(())
    }
}

pub fn open(spec: FabricSpec) -> (Fabric, Vec<Arc<LogMemory>>) {
    let mems: Vec<Arc<LogMemory>> = (0..spec.num_chips).map(|_| Arc::default()).collect();
    let dyn_mems = mems
        .iter()
        .map(|m| m.clone() as Arc<dyn ChipMemory>)
        .collect();
    (Fabric::new(spec, dyn_mems).expect("valid spec"), mems)
}

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
