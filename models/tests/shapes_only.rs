//! A model placed by shape alone (`WeightSource::ShapesOnly`) allocates exactly what the
//! weights placed for real allocate, on one chip and split with padded heads; the sizes
//! computed without a device equal the placed ones; the synthetic config is the one its file
//! reads back.

use ttmesh::{BufferType, DataType, FabricConfig, MeshConfig, MeshDevice};
use ttmesh_models::gguf::GgufFile;
use ttmesh_models::synthetic::{write_synthetic_llama, SyntheticConfig};
use ttmesh_models::{DeviceDecodeConfig, DeviceLlama, LlamaConfig, LlamaWeights, LoadOptions};

fn open((topology, fabric_config): (&str, FabricConfig)) -> MeshDevice {
    MeshDevice::open(MeshConfig {
        topology: topology.into(),
        fabric_config,
        ..Default::default()
    })
    .unwrap()
}

/// Per chip: (DRAM, L1) bytes allocated per bank.
fn usage(mesh: &MeshDevice) -> Vec<(u64, u64)> {
    mesh.chips()
        .iter()
        .map(|c| {
            (
                c.usage().snapshot(BufferType::Dram).allocated_per_bank,
                c.usage().snapshot(BufferType::L1).allocated_per_bank,
            )
        })
        .collect()
}

#[test]
fn shapes_only_allocates_what_the_weights_allocate() {
    for (name, cfg, topology, dtype) in [
        (
            "small",
            SyntheticConfig::small(),
            ("n150", FabricConfig::Fabric1D),
            DataType::Float32,
        ),
        (
            "small",
            SyntheticConfig::small(),
            ("n300", FabricConfig::Fabric1D),
            DataType::BFloat16,
        ),
        (
            "heads9",
            SyntheticConfig::heads_9_kv_3(),
            ("t3k", FabricConfig::Fabric1D),
            DataType::BFloat8B,
        ),
        // The whole Galaxy over both axes: FFN padded, one head per chip.
        (
            "heads9",
            SyntheticConfig::heads_9_kv_3(),
            ("galaxy", FabricConfig::Fabric2D),
            DataType::BFloat16,
        ),
    ] {
        let path = std::env::temp_dir().join(format!(
            "ttmesh-shapes-only-{name}-{}.gguf",
            std::process::id()
        ));
        write_synthetic_llama(&path, &cfg).unwrap();
        let weights = LlamaWeights::load(&path, LoadOptions::default()).unwrap();
        let file_config = LlamaConfig::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(cfg.llama_config(), file_config);
        let decode = DeviceDecodeConfig {
            batch: 2,
            max_positions: 40,
            dtype,
        };

        let mesh = open(topology);
        let real = DeviceLlama::new(&mesh, &weights, decode).unwrap();
        let (real_usage, real_bytes) = (usage(&mesh), real.dram_bytes_per_chip());
        drop(real);
        mesh.close().unwrap();

        let mesh = open(topology);
        let shapes = DeviceLlama::from_shapes(&mesh, &file_config, decode).unwrap();
        assert_eq!(usage(&mesh), real_usage, "{name} on {topology:?}");
        assert_eq!(shapes.dram_bytes_per_chip(), real_bytes);
        assert_eq!(shapes.parallel().describe(), {
            let s = mesh.shape();
            ttmesh_models::TensorParallel::plan_for(
                &file_config,
                s.rows,
                s.cols,
                mesh.fabric_config(),
            )
            .unwrap()
            .describe()
        });
        let s = mesh.shape();
        assert_eq!(
            DeviceLlama::dram_bytes_needed(
                &file_config,
                decode,
                s.rows,
                s.cols,
                mesh.fabric_config()
            )
            .unwrap(),
            real_bytes,
            "{name} on {topology:?}"
        );
        drop(shapes);
        mesh.close().unwrap();
    }
}
