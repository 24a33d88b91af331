//! Tensor-parallel decode across meshes: the same model, prompt and dtype give the same token
//! ids on one chip, two, a T3K (line and ring fabric) and a Galaxy, traced and untraced, equal
//! to the host reference's (f32); padded heads change nothing; one capture serves every
//! position; shapes that cannot split are refused with what would work.

use std::path::PathBuf;
use std::sync::Arc;

use ttmesh::{DataType, FabricConfig, MeshConfig, MeshDevice};
use ttmesh_models::synthetic::{write_synthetic_llama, SyntheticConfig};
use ttmesh_models::{
    DeviceDecodeConfig, DeviceLlama, HostReference, LlamaWeights, LmHead, LoadOptions, ModelError,
};

/// A synthetic llama written as GGUF and loaded back.
fn synthetic(name: &str, config: &SyntheticConfig) -> Arc<LlamaWeights> {
    let path: PathBuf = std::env::temp_dir().join(format!(
        "ttmesh-parallel-{name}-{}.gguf",
        std::process::id()
    ));
    write_synthetic_llama(&path, config).unwrap();
    let weights = LlamaWeights::load(&path, LoadOptions::default()).unwrap();
    let _ = std::fs::remove_file(&path);
    Arc::new(weights)
}

fn open(topology: &str, fabric_config: FabricConfig) -> MeshDevice {
    MeshDevice::open(MeshConfig {
        topology: topology.into(),
        trace_region_size: 4 << 20,
        fabric_config,
        ..Default::default()
    })
    .unwrap()
}

fn f32_decode(positions: usize) -> DeviceDecodeConfig {
    DeviceDecodeConfig {
        batch: 1,
        max_positions: positions,
        dtype: DataType::Float32,
    }
}

const PROMPT: [u32; 5] = [79, 110, 99, 101, 32];
const NEW_TOKENS: usize = 16;

#[test]
fn synthetic_model_gives_the_same_ids_on_every_mesh_traced_and_untraced() {
    let weights = synthetic("small", &SyntheticConfig::small());
    let positions = PROMPT.len() + NEW_TOKENS;
    let expected = HostReference::new(Arc::clone(&weights), 1, positions)
        .unwrap()
        .generate(&PROMPT, NEW_TOKENS)
        .unwrap();
    for (topology, fabric, degree) in [
        ("n150", FabricConfig::Fabric1D, 1),
        ("n300", FabricConfig::Fabric1D, 2),
        ("t3k", FabricConfig::Fabric1D, 8),
        ("t3k", FabricConfig::Fabric1DRing, 8),
        ("galaxy", FabricConfig::Fabric1D, 8),
    ] {
        let mesh = open(topology, fabric);
        let mut model = DeviceLlama::new(&mesh, &weights, f32_decode(positions)).unwrap();
        assert_eq!(model.parallel().degree, degree, "{topology}");
        let untraced = model.generate(&[&PROMPT], NEW_TOKENS, false).unwrap();
        assert_eq!(untraced[0], expected, "{topology} {fabric:?} untraced");
        let traced = model.generate(&[&PROMPT], NEW_TOKENS, true).unwrap();
        assert_eq!(traced[0], expected, "{topology} {fabric:?} traced");
        // Captured once, replayed at every position: one live trace per chip, one replay per
        // traced step, the same on every chip (lockstep).
        let steps = (positions - 1) as u64;
        for r in mesh.reports() {
            assert_eq!(r.live_traces, 1, "{topology}: chip {}", r.id);
            assert_eq!(r.trace_replays, steps, "{topology}: chip {}", r.id);
        }
        drop(model);
        mesh.close().unwrap();
    }
}

/// bf16 collectives sum in a fixed order: two runs give the same ids, traced or not.
#[test]
fn bf16_tensor_parallel_decode_is_repeatable() {
    let weights = synthetic("bf16", &SyntheticConfig::small());
    let positions = PROMPT.len() + NEW_TOKENS;
    let decode = DeviceDecodeConfig {
        dtype: DataType::BFloat16,
        ..f32_decode(positions)
    };
    let mut runs = Vec::new();
    for traced in [false, true, true] {
        let mesh = open("t3k", FabricConfig::Fabric1DRing);
        let mut model = DeviceLlama::new(&mesh, &weights, decode).unwrap();
        runs.push(model.generate(&[&PROMPT], NEW_TOKENS, traced).unwrap());
        drop(model);
        mesh.close().unwrap();
    }
    assert_eq!(runs[0], runs[1]);
    assert_eq!(runs[1], runs[2]);
}

/// SmolLM2's head shape (9 query heads over 3 KV heads) padded to 16 over 8 chips, with its
/// vocabulary-sharded LM head, equals the same model on one chip and the host reference.
#[test]
fn nine_heads_over_three_kv_heads_on_8_chips_equal_one_chip() {
    let weights = synthetic("9-3", &SyntheticConfig::heads_9_kv_3());
    let positions = PROMPT.len() + 8;
    let expected = HostReference::new(Arc::clone(&weights), 1, positions)
        .unwrap()
        .generate(&PROMPT, 8)
        .unwrap();
    let mut got = Vec::new();
    for topology in ["n150", "t3k", "n300"] {
        let mesh = open(topology, FabricConfig::Fabric1D);
        let mut model = DeviceLlama::new(&mesh, &weights, f32_decode(positions)).unwrap();
        if topology == "t3k" {
            let p = model.parallel();
            assert_eq!((p.local_heads(), p.local_kv_heads()), (2, 1));
            assert_eq!(p.heads.padded_head_count(), 16);
        }
        got.push(model.generate(&[&PROMPT], 8, true).unwrap().remove(0));
        drop(model);
        mesh.close().unwrap();
    }
    for (topology, ids) in ["n150", "t3k", "n300"].iter().zip(&got) {
        assert_eq!(ids, &expected, "{topology}");
    }
}

/// A vocabulary that splits into whole tiles is sharded (and all-gathered); one that does
/// not is replicated. Both decode the reference's ids (checked above for the small model,
/// whose 320-token vocabulary is replicated on 8 chips and sharded on 2).
#[test]
fn lm_head_placement_follows_the_vocabulary() {
    let weights = synthetic("vocab", &SyntheticConfig::small());
    for (topology, placement) in [("n300", LmHead::Sharded), ("t3k", LmHead::Replicated)] {
        let mesh = open(topology, FabricConfig::Fabric1D);
        let model = DeviceLlama::new(&mesh, &weights, f32_decode(8)).unwrap();
        assert_eq!(model.parallel().lm_head, placement, "{topology}");
        drop(model);
        mesh.close().unwrap();
    }
}

#[test]
fn an_ffn_that_does_not_split_over_the_mesh_is_refused_with_what_works() {
    // FFN 96 = 3 tiles: splits over 1 or 3 chips, not 2.
    let weights = synthetic(
        "ffn96",
        &SyntheticConfig {
            ffn_size: 96,
            ..SyntheticConfig::small()
        },
    );
    let mesh = open("n300", FabricConfig::Fabric1D);
    let err = match DeviceLlama::new(&mesh, &weights, f32_decode(8)) {
        Ok(_) => panic!("an FFN of 3 tiles was split over 2 chips"),
        Err(e) => e,
    };
    assert!(matches!(err, ModelError::CannotSplit { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("FFN of 96"), "{msg}");
    assert!(msg.contains("a line of 1, 3 chips"), "{msg}");
    mesh.close().unwrap();
}

/// A trace region too small for the decode step: tt-metal's message, with the size that fits.
#[test]
fn a_trace_region_too_small_names_the_size_that_fits() {
    let weights = synthetic("small-region", &SyntheticConfig::small());
    let mesh = MeshDevice::open(MeshConfig {
        topology: "n300".into(),
        trace_region_size: 4096,
        ..Default::default()
    })
    .unwrap();
    let mut model = DeviceLlama::new(&mesh, &weights, f32_decode(8)).unwrap();
    let err = model.decode_step(&[1], &[0], true).unwrap_err().to_string();
    assert!(
        err.contains("Open the device with trace_region_size of at least"),
        "{err}"
    );
    // The mesh stays usable: the same step untraced still runs.
    model.decode_step(&[1], &[0], false).unwrap();
    drop(model);
    mesh.close().unwrap();
}

/// A model that does not fit in DRAM (here: a trace region that leaves 400 kB of the n150's
/// 12 GiB): the allocator's out-of-memory message, naming the tensor, and the ways out.
#[test]
fn a_model_that_does_not_fit_in_dram_names_the_tensor() {
    let weights = synthetic("oom", &SyntheticConfig::small());
    let mesh = MeshDevice::open(MeshConfig {
        topology: "n150".into(),
        trace_region_size: 1_072_693_184 * 12 - 400_000,
        ..Default::default()
    })
    .unwrap();
    let err = match DeviceLlama::new(&mesh, &weights, f32_decode(8)) {
        Ok(_) => panic!("the model fit in 400 kB of DRAM"),
        Err(e) => e,
    };
    assert!(matches!(err, ModelError::DoesNotFit { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("Out of Memory: Not enough space to allocate"),
        "{msg}"
    );
    assert!(
        msg.starts_with("blk.") || msg.starts_with("token_embd"),
        "{msg}"
    );
    assert!(msg.contains("split the model over more chips"), "{msg}");
    mesh.close().unwrap();
}
