use ttmesh_chip::compute::reference;
use ttmesh_chip::ops::{self, MatmulConfig, OpOptions};
use ttmesh_chip::{
    ArchSpec, Chip, ChipConfig, CqId, DataType, HostTensor, Layout, MemoryConfig, Tensor,
};

#[test]
fn matmul_round_trip_through_the_queue() {
    let chip = Chip::open(ChipConfig::new(0, ArchSpec::wormhole_b0())).unwrap();
    let (m, k, n) = (64, 96, 32);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
        .collect();
    let b: Vec<f32> = (0..k * n)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0)
        .collect();
    let ha = HostTensor::from_f32(vec![m, k], DataType::Float32, a.clone()).unwrap();
    let hb = HostTensor::from_f32(vec![k, n], DataType::Float32, b.clone()).unwrap();
    let ta = Tensor::from_host(&ha, &chip, Layout::Tile, MemoryConfig::DRAM, CqId(0)).unwrap();
    let tb = Tensor::from_host(&hb, &chip, Layout::Tile, MemoryConfig::L1, CqId(0)).unwrap();
    let tc = ops::matmul(&ta, &tb, &MatmulConfig::default()).unwrap();
    let r = ops::relu(&tc, &OpOptions::default()).unwrap();
    let got = r.to_host(CqId(0)).unwrap();
    let want = reference::matmul(&a, &b, 1, 1, m, k, n).unwrap();
    let want: Vec<f32> = want.iter().map(|x| x.max(0.0)).collect();
    reference::check_close(got.as_f32().unwrap(), &want, 1e-5, 1e-5).unwrap();
    chip.synchronize().unwrap();
}
