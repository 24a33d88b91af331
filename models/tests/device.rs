//! The decode loop on the device against the host reference: untraced, and traced (the step
//! captured once and replayed for every later position).

mod common;

use std::sync::Arc;

use ttmesh::{DataType, MeshConfig, MeshDevice};
use ttmesh_models::synthetic::{write_synthetic_llama, SyntheticConfig};
use ttmesh_models::{
    DeviceDecodeConfig, DeviceLlama, GgufTokenizer, GgufWeights, HostReference, LlamaWeights,
    LoadOptions, ModelError,
};

fn n150(trace_region_size: u64) -> MeshDevice {
    MeshDevice::open(MeshConfig {
        topology: "n150".into(),
        trace_region_size,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn synthetic_model_on_n150_untraced_matches_host_reference() {
    let path = common::TempFile::new("device.gguf");
    write_synthetic_llama(&path, &SyntheticConfig::small()).unwrap();
    let weights = Arc::new(LlamaWeights::load(&path, LoadOptions::default()).unwrap());
    let prompt = GgufTokenizer::load(&path)
        .unwrap()
        .encode("Once upon a time")
        .unwrap();
    let mut reference = HostReference::new(Arc::clone(&weights), 1, 64).unwrap();
    let expected = reference.generate(&prompt, 16).unwrap();
    let mesh = n150(0);
    let decode = DeviceDecodeConfig {
        batch: 1,
        max_positions: 64,
        dtype: DataType::Float32,
    };
    let mut model = DeviceLlama::new(&mesh, &weights, decode).unwrap();
    let got = model.generate(&[&prompt], 16, false).unwrap().remove(0);
    assert_eq!(got, expected);
}

/// Placed from the file one block at a time (`GgufWeights`), the model is the same on the
/// device: the host reference's tokens on a T3K (heads padded, weights split), and the same DRAM
/// use as placing from the loaded weights. A file missing a tensor fails at open, before any
/// chip is written.
#[test]
fn synthetic_model_placed_block_by_block_from_the_file_matches_host_reference() {
    let path = common::TempFile::new("device-by-block.gguf");
    write_synthetic_llama(&path, &SyntheticConfig::heads_9_kv_3()).unwrap();
    let weights = Arc::new(LlamaWeights::load(&path, LoadOptions::default()).unwrap());
    let prompt = GgufTokenizer::load(&path)
        .unwrap()
        .encode("Once upon a time")
        .unwrap();
    let expected = HostReference::new(Arc::clone(&weights), 1, 32)
        .unwrap()
        .generate(&prompt, 8)
        .unwrap();
    let decode = DeviceDecodeConfig {
        batch: 1,
        max_positions: 32,
        dtype: DataType::Float32,
    };
    let t3k = || {
        MeshDevice::open(MeshConfig {
            topology: "t3k".into(),
            trace_region_size: 16 << 20,
            ..Default::default()
        })
        .unwrap()
    };
    let (mesh, loaded_mesh) = (t3k(), t3k());
    let by_block = GgufWeights::open(&path).unwrap();
    let mut model = DeviceLlama::new(&mesh, &by_block, decode).unwrap();
    let loaded = DeviceLlama::new(&loaded_mesh, &weights, decode).unwrap();
    assert_eq!(model.dram_bytes_per_chip(), loaded.dram_bytes_per_chip());
    let got = model.generate(&[&prompt], 8, true).unwrap().remove(0);
    assert_eq!(got, expected);

    // An untied output.weight of the wrong shape: refused by name when the file is opened.
    let mut bad = ttmesh_models::synthetic::synthetic_llama(&SyntheticConfig::heads_9_kv_3());
    bad.tensor(ttmesh_models::gguf::WriteTensor {
        name: "output.weight".into(),
        dims: vec![64, 320],
        ty: ttmesh_models::gguf::GgmlType::F32,
        values: vec![0.0; 64 * 320],
    });
    let bad_path = common::TempFile::new("device-by-block-bad.gguf");
    bad.write(&bad_path).unwrap();
    let err = GgufWeights::open(&bad_path)
        .err()
        .expect("a misshapen tensor is refused");
    let text = err.to_string();
    assert!(
        matches!(err, ModelError::BadTensor { .. })
            && text.contains("output.weight")
            && text.contains("[64, 320]"),
        "{text}"
    );
}

/// The decode step captured once and replayed per token gives the host reference's tokens, on
/// one chip and replicated on a T3K, in f32 and bf16 (bf16 against its own untraced run).
#[test]
fn synthetic_model_traced_matches_untraced_and_host_reference() {
    let path = common::TempFile::new("device-traced.gguf");
    write_synthetic_llama(&path, &SyntheticConfig::small()).unwrap();
    let weights = Arc::new(LlamaWeights::load(&path, LoadOptions::default()).unwrap());
    let prompt = GgufTokenizer::load(&path)
        .unwrap()
        .encode("Once upon a time")
        .unwrap();
    let mut reference = HostReference::new(Arc::clone(&weights), 1, 64).unwrap();
    let expected = reference.generate(&prompt, 16).unwrap();
    for topology in ["n150", "t3k"] {
        // BFLOAT8_B: bfp8 weights, bf16 activations (a bfp8 activation could not be split into
        // heads on more than one chip: reshape refuses block floats).
        for dtype in [DataType::Float32, DataType::BFloat16, DataType::BFloat8B] {
            let mesh = MeshDevice::open(MeshConfig {
                topology: topology.into(),
                trace_region_size: 8 << 20,
                ..Default::default()
            })
            .unwrap();
            let decode = DeviceDecodeConfig {
                batch: 1,
                max_positions: 64,
                dtype,
            };
            let mut model = DeviceLlama::new(&mesh, &weights, decode).unwrap();
            let untraced = model.generate(&[&prompt], 16, false).unwrap().remove(0);
            let traced = model.generate(&[&prompt], 16, true).unwrap().remove(0);
            assert_eq!(traced, untraced, "{topology} {dtype:?}: traced vs untraced");
            if dtype == DataType::Float32 {
                assert_eq!(traced, expected, "{topology}: traced vs host reference");
            }
            // One capture served every position: each chip replayed once per step but the first.
            for r in mesh.reports() {
                assert!(
                    r.trace_replays >= 15,
                    "{topology}: chip {} replayed {}",
                    r.id,
                    r.trace_replays
                );
            }
            drop(model);
            mesh.close().unwrap();
        }
    }
}

#[test]
fn smollm2_on_n150_f32_traced_and_untraced_match_host_reference() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let Some(path) = ttmesh_models::real_model_path(&root) else {
        eprintln!(
            "SKIPPED smollm2_on_n150_f32_traced_and_untraced_match_host_reference: no model file"
        );
        return;
    };
    let weights = LlamaWeights::load(&path, LoadOptions::default()).unwrap();
    // The host reference's 32 greedy ids after "Once upon a time" (see real_model.rs).
    let expected = [
        28, 260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228, 28, 351, 25854, 41658, 284,
        14055, 9018, 30, 1249, 347, 260, 929, 3514, 411, 28, 260, 2240, 2585, 288, 5946, 624, 2798,
    ];
    for traced in [false, true] {
        let mesh = n150(64 << 20);
        let decode = DeviceDecodeConfig {
            batch: 1,
            max_positions: 64,
            dtype: DataType::Float32,
        };
        let mut model = DeviceLlama::new(&mesh, &weights, decode).unwrap();
        let started = std::time::Instant::now();
        let got = model
            .generate(&[&[6403, 1980, 253, 655]], 32, traced)
            .unwrap()
            .remove(0);
        println!(
            "device {}: {:?} per step (35 steps)",
            if traced { "traced" } else { "untraced" },
            started.elapsed() / 35
        );
        assert_eq!(got, expected, "traced: {traced}");
        drop(model);
        mesh.close().unwrap();
    }
}

#[test]
fn synthetic_batch_of_32_users_untraced_matches_host_reference() {
    let path = common::TempFile::new("device-b32.gguf");
    write_synthetic_llama(&path, &SyntheticConfig::heads_9_kv_3()).unwrap();
    let weights = Arc::new(LlamaWeights::load(&path, LoadOptions::default()).unwrap());
    let prompts: Vec<Vec<u32>> = (0..32u32)
        .map(|u| (0..1 + u % 5).map(|i| (u * 7 + i * 13) % 300).collect())
        .collect();
    let refs: Vec<&[u32]> = prompts.iter().map(|p| p.as_slice()).collect();
    let mut reference = HostReference::new(Arc::clone(&weights), 32, 32).unwrap();
    let expected = reference.generate_batch(&refs, 8).unwrap();
    let mesh = n150(0);
    let decode = DeviceDecodeConfig {
        batch: 32,
        max_positions: 32,
        dtype: DataType::Float32,
    };
    let mut model = DeviceLlama::new(&mesh, &weights, decode).unwrap();
    assert_eq!(model.generate(&refs, 8, false).unwrap(), expected);
}

/// How many of the 32 reference tokens bf16 and bfloat8_b reproduce (printed; ~35 s, so not in
/// the default suite): `cargo test --release -p ttmesh-models --test device -- --ignored --nocapture`.
#[test]
#[ignore = "prints a measurement; ~35 s"]
fn smollm2_bf16_agreement() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let Some(path) = ttmesh_models::real_model_path(&root) else {
        return;
    };
    let weights = LlamaWeights::load(&path, LoadOptions::default()).unwrap();
    let mut reference = HostReference::new(Arc::new(weights.clone()), 1, 64).unwrap();
    let expected = reference.generate(&[6403, 1980, 253, 655], 32).unwrap();
    for dtype in [DataType::BFloat16, DataType::BFloat8B] {
        let mesh = n150(0);
        let decode = DeviceDecodeConfig {
            batch: 1,
            max_positions: 64,
            dtype,
        };
        let mut model = DeviceLlama::new(&mesh, &weights, decode).unwrap();
        let got = model
            .generate(&[&[6403, 1980, 253, 655]], 32, false)
            .unwrap()
            .remove(0);
        let agree = got.iter().zip(&expected).filter(|(a, b)| a == b).count();
        let prefix = got
            .iter()
            .zip(&expected)
            .take_while(|(a, b)| a == b)
            .count();
        println!("{dtype:?}: {agree}/32 agree, first {prefix} identical: {got:?}");
    }
}
