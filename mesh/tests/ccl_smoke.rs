use ttmesh::ccl::{self, CclArgs};
use ttmesh::*;

fn host(shape: Vec<usize>, seed: u32) -> HostTensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| {
            (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 16) % 64) as f32 / 16.0
                - 2.0
        })
        .collect();
    HostTensor::from_f32(shape, DataType::Float32, v).unwrap()
}

fn open(topo: &str, fabric: FabricConfig) -> MeshDevice {
    MeshDevice::open(MeshConfig {
        topology: topo.into(),
        fabric_config: fabric,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn all_gather_and_all_reduce_on_t3k() {
    for fabric in [FabricConfig::Fabric1D, FabricConfig::Fabric1DRing] {
        let mesh = open("t3k", fabric);
        let full = host(vec![1, 1, 32, 256], 7);
        let t = MeshTensor::from_host(
            &full,
            &mesh,
            &ShardTensorToMesh(3),
            Layout::Tile,
            MemoryConfig::DRAM,
            CqId(0),
        )
        .unwrap();
        let g = ccl::all_gather(&t, 3, &CclArgs::default()).unwrap();
        // Every chip holds the whole tensor: blocks in mesh order, whatever path the line
        // takes (on a 2x4 T3K it is the perimeter ring).
        let lines = mesh.ccl_lines(None).unwrap();
        let order = &lines[0].1;
        let shards = t.to_host_shards(CqId(0)).unwrap();
        let expected = full.as_f32().unwrap().to_vec();
        for h in g.to_host_shards(CqId(0)).unwrap() {
            assert_eq!(h.as_f32().unwrap(), expected.as_slice());
        }
        let r = ccl::all_reduce(&t, &CclArgs::default()).unwrap();
        let mut sum = vec![0f32; shards[0].volume()];
        for &i in order {
            for (s, x) in sum.iter_mut().zip(shards[i].as_f32().unwrap()) {
                *s += x;
            }
        }
        for h in r.to_host_shards(CqId(0)).unwrap() {
            for (a, b) in h.as_f32().unwrap().iter().zip(&sum) {
                assert!((a - b).abs() < 1e-4, "{a} vs {b}");
            }
        }
        mesh.close().unwrap();
    }
}
