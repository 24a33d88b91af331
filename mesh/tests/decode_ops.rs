//! The decode-step mesh ops on every chip of a T3K: replicated inputs give bit-identical
//! results on all 8 chips that equal the f64 references (tolerances as in the chip's
//! decode_ops tests); and a mesh trace with heads sharded over the chips (tensor parallelism),
//! captured once and replayed at many positions, gives each step's reference answer.

use ttmesh::ops::{self, MeshOpOptions};
use ttmesh::*;
use ttmesh_chip::compute::reference::{self, check_close, DecodeDims};
use ttmesh_chip::tensor::HostData;

const CQ0: CqId = CqId(0);

/// Deterministic values in [-1, 1), rounded to `dtype` (what the device holds for f32/bf16).
fn random(shape: &[usize], dtype: DataType, seed: u64) -> HostTensor {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    HostTensor::from_f32(shape.to_vec(), dtype, v).unwrap()
}

fn place(host: &HostTensor, mesh: &MeshDevice, mapper: &dyn MeshMapper) -> MeshTensor {
    let layout = if host.dtype == DataType::UInt32 {
        Layout::RowMajor
    } else {
        Layout::Tile
    };
    MeshTensor::from_host(host, mesh, mapper, layout, MemoryConfig::DRAM, CQ0).unwrap()
}

fn ids_host(v: Vec<u32>) -> HostTensor {
    HostTensor::from_u32(vec![1, 1, 1, v.len()], v).unwrap()
}

fn rope(max_seq: usize, d: usize, dtype: DataType) -> (HostTensor, HostTensor) {
    let (mut c, mut s) = (Vec::new(), Vec::new());
    for p in 0..max_seq {
        for i in 0..d {
            let theta = 10_000f64.powf(-2.0 * (i % (d / 2)) as f64 / d as f64);
            c.push((p as f64 * theta).cos() as f32);
            s.push((p as f64 * theta).sin() as f32);
        }
    }
    let t = |v| HostTensor::from_f32(vec![1, 1, max_seq, d], dtype, v).unwrap();
    (t(c), t(s))
}

fn f32s(h: &HostTensor) -> Vec<f32> {
    h.to_f32_vec()
}

fn u32s(h: &HostTensor) -> Vec<u32> {
    match &h.data {
        HostData::U32(v) => v.clone(),
        HostData::F32(_) => panic!("not UINT32"),
    }
}

/// SmolLM2's attention shapes at batch 32, every input replicated: all 8 chips compute the same
/// bits, and those are the references' answers.
#[test]
fn t3k_replicated_decode_ops_agree_on_every_chip() {
    let mesh = MeshDevice::open(MeshConfig {
        topology: "t3k".into(),
        ..Default::default()
    })
    .unwrap();
    let (users, q_heads, kv_heads, d, max_seq, vocab) = (32, 9, 3, 64, 64, 300);
    let dt = DataType::BFloat16;
    let dims = DecodeDims {
        batch: users,
        q_heads,
        kv_heads,
        max_seq,
        head_dim: d,
    };
    let r = &ReplicateTensorToMesh;
    let table_h = random(&[vocab, 96], dt, 1);
    let q_h = random(&[1, users, q_heads, d], dt, 2);
    let k_h = random(&[users, kv_heads, max_seq, d], dt, 3);
    let v_h = random(&[users, kv_heads, max_seq, d], dt, 4);
    let new_h = random(&[1, users, kv_heads, d], dt, 5);
    let logits_h = random(&[1, 1, users, vocab], dt, 6);
    let (cos_h, sin_h) = rope(max_seq, d, dt);
    let ids: Vec<u32> = (0..users as u32)
        .map(|b| b * 37 % (vocab as u32 + 20))
        .collect();
    let positions: Vec<u32> = (0..users as u32).map(|b| b * 2 % max_seq as u32).collect();
    let (table, q, k, v, new, logits) = (
        place(&table_h, &mesh, r),
        place(&q_h, &mesh, r),
        place(&k_h, &mesh, r),
        place(&v_h, &mesh, r),
        place(&new_h, &mesh, r),
        place(&logits_h, &mesh, r),
    );
    let (cos, sin) = (place(&cos_h, &mesh, r), place(&sin_h, &mesh, r));
    let (ids_t, pos_t) = (
        place(&ids_host(ids.clone()), &mesh, r),
        place(&ids_host(positions.clone()), &mesh, r),
    );
    let o = MeshOpOptions::default();

    let emb = ops::embedding(&ids_t, &table, &o).unwrap();
    let qr = ops::rotary_embedding(&q, &cos, &sin, &pos_t, &o).unwrap();
    ops::update_cache(&k, &new, &pos_t, &o).unwrap();
    let attn = ops::scaled_dot_product_attention_decode(&qr, &k, &v, &pos_t, 0.125, &o).unwrap();
    let next = ops::argmax(&logits, -1, &o).unwrap();

    for (what, t) in [
        ("embedding", &emb),
        ("rotary", &qr),
        ("k cache", &k),
        ("attention", &attn),
        ("argmax", &next),
    ] {
        let shards = t.to_host_shards(CQ0).unwrap();
        assert_eq!(shards.len(), 8);
        for (c, s) in shards.iter().enumerate() {
            assert_eq!(
                s, &shards[0],
                "{what}: chip index {c} differs from chip index 0"
            );
        }
    }
    let one = |t: &MeshTensor| t.to_host_shards(CQ0).unwrap().swap_remove(0);
    assert_eq!(
        f32s(&one(&emb)),
        reference::embedding(&ids, &f32s(&table_h), 96).unwrap()
    );
    let got_qr = f32s(&one(&qr));
    let want_qr = reference::rotary_embedding(
        &f32s(&q_h),
        [users, q_heads, d],
        &f32s(&cos_h),
        &f32s(&sin_h),
        &positions,
    )
    .unwrap();
    // bf16 result: half an ulp plus the f32 arithmetic.
    check_close(&got_qr, &want_qr, 2f64.powi(-8), 1e-6).unwrap();
    let k_want = reference::update_cache(&f32s(&k_h), dims, &f32s(&new_h), &positions).unwrap();
    assert_eq!(f32s(&one(&k)), k_want);
    let a_want =
        reference::sdpa_decode(&got_qr, &k_want, &f32s(&v_h), dims, &positions, 0.125).unwrap();
    check_close(&f32s(&one(&attn)), &a_want, 2f64.powi(-8) + 1e-5, 1e-5).unwrap();
    assert_eq!(
        u32s(&one(&next)),
        reference::argmax_last_dim(&f32s(&logits_h), vocab).unwrap()
    );
    mesh.close().unwrap();
}

/// Tensor-parallel attention on a T3K inside one mesh trace: 16 query heads and 8 KV heads
/// sharded by heads (2 query heads and their KV head per chip), ids and positions replicated.
/// Captured once; before each replay new ids and positions are copied in, and every replay
/// gives that step's reference answer, the KV caches growing step by step.
#[test]
fn t3k_mesh_trace_replays_decode_ops_at_many_positions() {
    let mesh = MeshDevice::open(MeshConfig {
        topology: "t3k".into(),
        trace_region_size: 1 << 20,
        ..Default::default()
    })
    .unwrap();
    let (users, q_heads, kv_heads, d, max_seq, vocab) = (4, 16, 8, 32, 48, 40);
    let dt = DataType::Float32;
    let dims = DecodeDims {
        batch: users,
        q_heads,
        kv_heads,
        max_seq,
        head_dim: d,
    };
    let (r, heads) = (&ReplicateTensorToMesh, &ShardTensorToMesh(2));
    let zeros = HostTensor::zeros(vec![users, kv_heads, max_seq, d], dt);
    let (kc, vc) = (
        place(&zeros, &mesh, &ShardTensorToMesh(1)),
        place(&zeros, &mesh, &ShardTensorToMesh(1)),
    );
    let q_h = random(&[1, users, q_heads, d], dt, 1);
    let (kn_h, vn_h) = (
        random(&[1, users, kv_heads, d], dt, 2),
        random(&[1, users, kv_heads, d], dt, 3),
    );
    let table_h = random(&[vocab, 64], dt, 4);
    let (cos_h, sin_h) = rope(max_seq, d, dt);
    let (q, kn, vn) = (
        place(&q_h, &mesh, heads),
        place(&kn_h, &mesh, heads),
        place(&vn_h, &mesh, heads),
    );
    let (cos, sin, table) = (
        place(&cos_h, &mesh, r),
        place(&sin_h, &mesh, r),
        place(&table_h, &mesh, r),
    );
    let pos = place(&ids_host(vec![0; users]), &mesh, r);
    let ids = place(&ids_host(vec![0; users]), &mesh, r);

    let step = |outs: Option<&[MeshTensor; 3]>| -> [MeshTensor; 3] {
        let o = |i: usize| MeshOpOptions {
            output: outs.map(|t| t[i].clone()),
            ..Default::default()
        };
        let plain = MeshOpOptions::default();
        let e = ops::embedding(&ids, &table, &o(0)).unwrap();
        let qr = ops::rotary_embedding(&q, &cos, &sin, &pos, &o(1)).unwrap();
        ops::update_cache(&kc, &kn, &pos, &plain).unwrap();
        ops::update_cache(&vc, &vn, &pos, &plain).unwrap();
        let a = ops::scaled_dot_product_attention_decode(&qr, &kc, &vc, &pos, 0.17, &o(2)).unwrap();
        [e, qr, a]
    };
    let positions_at = |s: u32| -> Vec<u32> { (0..users as u32).map(|b| s + 5 * b).collect() };
    let ids_at = |s: u32| -> Vec<u32> {
        (0..users as u32)
            .map(|b| (s * 3 + b) % vocab as u32)
            .collect()
    };
    // The compile run is step 0; the first replay redoes it (same rows written again).
    pos.copy_from_host(&ids_host(positions_at(0)), r, CQ0)
        .unwrap();
    let outs = step(None);
    let tid = mesh.begin_trace_capture(CQ0).unwrap();
    step(Some(&outs));
    mesh.end_trace_capture(tid, CQ0).unwrap();

    let (mut kw, mut vw) = (f32s(&zeros), f32s(&zeros));
    let steps = [0u32, 1, 2, 6, 17, 32];
    for &s in &steps {
        let (p, t) = (positions_at(s), ids_at(s));
        pos.copy_from_host(&ids_host(p.clone()), r, CQ0).unwrap();
        ids.copy_from_host(&ids_host(t.clone()), r, CQ0).unwrap();
        mesh.execute_trace(tid, CQ0, true).unwrap();
        kw = reference::update_cache(&kw, dims, &f32s(&kn_h), &p).unwrap();
        vw = reference::update_cache(&vw, dims, &f32s(&vn_h), &p).unwrap();
        let shards = outs[0].to_host_shards(CQ0).unwrap();
        let want_e = reference::embedding(&t, &f32s(&table_h), 64).unwrap();
        for (c, sh) in shards.iter().enumerate() {
            assert_eq!(f32s(sh), want_e, "step {s}: embedding on chip index {c}");
        }
        let qr = f32s(&outs[1].to_host(&ConcatMeshToTensor(2), CQ0).unwrap());
        let want_qr = reference::rotary_embedding(
            &f32s(&q_h),
            [users, q_heads, d],
            &f32s(&cos_h),
            &f32s(&sin_h),
            &p,
        )
        .unwrap();
        check_close(&qr, &want_qr, 0.0, 1e-6).unwrap_or_else(|e| panic!("step {s}: rotary: {e}"));
        assert_eq!(
            f32s(&kc.to_host(&ConcatMeshToTensor(1), CQ0).unwrap()),
            kw,
            "step {s}: k cache"
        );
        let a = f32s(&outs[2].to_host(&ConcatMeshToTensor(2), CQ0).unwrap());
        let want_a = reference::sdpa_decode(&qr, &kw, &vw, dims, &p, 0.17).unwrap();
        check_close(&a, &want_a, 1e-5, 1e-5).unwrap_or_else(|e| panic!("step {s}: attention: {e}"));
    }
    for rep in mesh.reports() {
        assert_eq!(
            rep.trace_replays,
            steps.len() as u64,
            "chip {}: one capture, a replay per step",
            rep.id
        );
    }
    mesh.release_trace(tid).unwrap();
    mesh.close().unwrap();
}
