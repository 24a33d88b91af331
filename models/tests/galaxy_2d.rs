//! A Galaxy used whole: on a 2D fabric the decode splits every weight over both axes of the
//! 4x8 mesh (32-way, FFN padded with zeros to whole tiles per chip) and reduces along columns
//! then rows. The synthetic models and SmolLM2 (when present) give the host reference's token
//! ids (f32), traced and untraced, as on one chip.

use std::path::PathBuf;
use std::sync::Arc;

use ttmesh::{DataType, FabricConfig, MeshConfig, MeshDevice};
use ttmesh_models::synthetic::{write_synthetic_llama, SyntheticConfig};
use ttmesh_models::{DeviceDecodeConfig, DeviceLlama, HostReference, LlamaWeights, LoadOptions};

fn galaxy_2d(trace_region_size: u64) -> MeshDevice {
    MeshDevice::open(MeshConfig {
        topology: "galaxy".into(),
        fabric_config: FabricConfig::Fabric2D,
        trace_region_size,
        ..Default::default()
    })
    .unwrap()
}

fn f32_decode(max_positions: usize) -> DeviceDecodeConfig {
    DeviceDecodeConfig {
        batch: 1,
        max_positions,
        dtype: DataType::Float32,
    }
}

fn synthetic(name: &str, config: &SyntheticConfig) -> Arc<LlamaWeights> {
    let path: PathBuf = std::env::temp_dir().join(format!(
        "ttmesh-galaxy-2d-{name}-{}.gguf",
        std::process::id()
    ));
    write_synthetic_llama(&path, config).unwrap();
    let weights = LlamaWeights::load(&path, LoadOptions::default()).unwrap();
    let _ = std::fs::remove_file(&path);
    Arc::new(weights)
}

#[test]
fn synthetic_models_on_the_whole_galaxy_match_the_host_reference() {
    const PROMPT: [u32; 5] = [79, 110, 99, 101, 32];
    const NEW: usize = 12;
    let positions = PROMPT.len() + NEW;
    for (name, config) in [
        ("small", SyntheticConfig::small()),
        ("heads9", SyntheticConfig::heads_9_kv_3()),
    ] {
        let weights = synthetic(name, &config);
        let expected = HostReference::new(Arc::clone(&weights), 1, positions)
            .unwrap()
            .generate(&PROMPT, NEW)
            .unwrap();
        let mesh = galaxy_2d(4 << 20);
        let mut model = DeviceLlama::new(&mesh, &weights, f32_decode(positions)).unwrap();
        let p = model.parallel().clone();
        assert_eq!(
            (p.degree, p.cluster_axis, p.replicas, p.both_axes),
            (32, None, 1, true),
            "{name}"
        );
        // Both FFNs (256, 512) are padded to 1024: one tile per chip.
        assert_eq!(p.ffn_size, 1024, "{name}");
        let untraced = model.generate(&[&PROMPT], NEW, false).unwrap();
        assert_eq!(untraced[0], expected, "{name} untraced");
        let traced = model.generate(&[&PROMPT], NEW, true).unwrap();
        assert_eq!(traced[0], expected, "{name} traced");
        for r in mesh.reports() {
            assert_eq!(r.live_traces, 1, "{name}: chip {}", r.id);
        }
        drop(model);
        mesh.close().unwrap();
    }
}

/// SmolLM2 in f32 on all 32 chips: the host reference's 32 greedy ids after "Once upon a time"
/// (the ids of `real_model.rs` and `.ci/run`), traced.
#[test]
fn smollm2_on_the_whole_galaxy_gives_the_host_reference_ids() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let Some(path) = ttmesh_models::real_model_path(&root) else {
        eprintln!("SKIPPED smollm2_on_the_whole_galaxy_gives_the_host_reference_ids: no model file (scripts/fetch-model.sh)");
        return;
    };
    let weights = LlamaWeights::load(&path, LoadOptions::default()).unwrap();
    let expected = [
        28, 260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228, 28, 351, 25854, 41658, 284,
        14055, 9018, 30, 1249, 347, 260, 929, 3514, 411, 28, 260, 2240, 2585, 288, 5946, 624, 2798,
    ];
    let mesh = galaxy_2d(64 << 20);
    let mut model = DeviceLlama::new(&mesh, &weights, f32_decode(40)).unwrap();
    let p = model.parallel();
    assert_eq!((p.degree, p.ffn_size, p.ffn_padding), (32, 2048, 512));
    let got = model
        .generate(&[&[6403, 1980, 253, 655]], 32, true)
        .unwrap()
        .remove(0);
    assert_eq!(got, expected);
    drop(model);
    mesh.close().unwrap();
}
