//! The decode-step ops (embedding, rotary_embedding, update_cache,
//! scaled_dot_product_attention_decode, argmax) against the f64 references in
//! `compute::reference`, over random shapes, batches up to 32 and every float dtype; then all of
//! them inside one captured trace replayed at several positions.
//!
//! Tolerances (on top of the rounding of the stored result, see `common::check_stored`):
//! embedding, update_cache and argmax are exact (they move or compare values, no arithmetic);
//! rotary 1e-6 absolute (two f32 products and a sum of values in [-1, 1]); attention 1e-5
//! relative + 1e-5 absolute (f32 dot products over up to 128 values and an f32 softmax).

mod common;

use std::sync::Arc;

use common::{check_stored, chip, read, upload, values};
use proptest::prelude::*;
use ttmesh_chip::compute::reference::{self, DecodeDims};
use ttmesh_chip::ops::{self, OpOptions};
use ttmesh_chip::tensor::HostData;
use ttmesh_chip::{Chip, CqId, DataType, HostTensor, Layout, MemoryConfig, Tensor};

const CQ0: CqId = CqId(0);

fn float_dtype() -> impl Strategy<Value = DataType> {
    prop_oneof![
        Just(DataType::Float32),
        Just(DataType::BFloat16),
        Just(DataType::BFloat8B)
    ]
}

fn upload_u32(chip: &Arc<Chip>, shape: &[usize], v: Vec<u32>) -> Tensor {
    let host = HostTensor::from_u32(shape.to_vec(), v).unwrap();
    Tensor::from_host(&host, chip, Layout::RowMajor, MemoryConfig::DRAM, CQ0).unwrap()
}

fn read_u32(t: &Tensor) -> Vec<u32> {
    match t.to_host(CQ0).unwrap().data {
        HostData::U32(v) => v,
        HostData::F32(_) => panic!("{} is not UINT32", t.name()),
    }
}

fn write_u32(t: &Tensor, v: Vec<u32>) {
    let host = HostTensor::from_u32(t.shape().to_vec(), v).unwrap();
    t.write_from_host(&host, CQ0).unwrap();
}

/// Deterministic u32s below `limit`.
fn ints(seed: u64, n: usize, limit: u32) -> Vec<u32> {
    values(seed, n, 0.0, 1.0)
        .into_iter()
        .map(|x| ((x * limit as f32) as u32).min(limit - 1))
        .collect()
}

/// The host's rotary caches `[max_seq, d]`: cos/sin(p * base^(-2j/d)), j = i mod d/2.
fn rope_caches(max_seq: usize, d: usize, base: f64) -> (Vec<f32>, Vec<f32>) {
    let mut cos = Vec::with_capacity(max_seq * d);
    let mut sin = Vec::with_capacity(max_seq * d);
    for p in 0..max_seq {
        for i in 0..d {
            let theta = base.powf(-2.0 * (i % (d / 2)) as f64 / d as f64);
            cos.push((p as f64 * theta).cos() as f32);
            sin.push((p as f64 * theta).sin() as f32);
        }
    }
    (cos, sin)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(12), ..ProptestConfig::default() })]

    /// Rows of the table, exactly (a row moved keeps its bfloat8_b blocks); ids past the
    /// vocabulary give zero rows.
    #[test]
    fn embedding_matches_reference(vocab in 1usize..100, hidden in 1usize..80, users in 1usize..=32,
                                   dtype in float_dtype(), row_major in any::<bool>(), seed in any::<u64>()) {
        let chip = chip();
        let layout = if row_major && dtype != DataType::BFloat8B { Layout::RowMajor } else { Layout::Tile };
        let (w, wv) = upload(&chip, &[vocab, hidden], dtype, layout, MemoryConfig::DRAM, values(seed, vocab * hidden, -1.0, 1.0));
        // Every fifth id is out of range.
        let ids: Vec<u32> = ints(seed ^ 1, users, vocab as u32).into_iter().enumerate()
            .map(|(i, id)| if i % 5 == 4 { vocab as u32 + i as u32 } else { id }).collect();
        let ids_t = upload_u32(&chip, &[1, 1, 1, users], ids.clone());
        let out = ops::embedding(&ids_t, &w, &OpOptions::default()).unwrap();
        prop_assert_eq!(out.shape(), &[1, 1, users, hidden][..]);
        prop_assert_eq!(out.dtype(), dtype);
        prop_assert_eq!(read(&out), reference::embedding(&ids, &wv, hidden).unwrap());
    }

    #[test]
    fn rotary_embedding_matches_reference(users in 1usize..=32, heads in 1usize..10, half in 1usize..65,
                                          max_seq in 1usize..100, dtype in float_dtype(), seed in any::<u64>()) {
        let chip = chip();
        let d = 2 * half;
        let (x, xv) = upload(&chip, &[1, users, heads, d], dtype, Layout::Tile, MemoryConfig::L1, values(seed, users * heads * d, -1.0, 1.0));
        let (cos, sin) = rope_caches(max_seq, d, 10_000.0);
        let (cos_t, cv) = upload(&chip, &[1, 1, max_seq, d], dtype, Layout::Tile, MemoryConfig::DRAM, cos);
        let (sin_t, sv) = upload(&chip, &[1, 1, max_seq, d], dtype, Layout::Tile, MemoryConfig::DRAM, sin);
        let positions = ints(seed ^ 5, users, max_seq as u32);
        let pos_t = upload_u32(&chip, &[1, 1, 1, users], positions.clone());
        let out = ops::rotary_embedding(&x, &cos_t, &sin_t, &pos_t, &OpOptions::default()).unwrap();
        prop_assert_eq!(out.shape(), x.shape());
        let want = reference::rotary_embedding(&xv, [users, heads, d], &cv, &sv, &positions).unwrap();
        check_stored(&read(&out), &want, &[users * heads, d], dtype, 0.0, 1e-6).map_err(TestCaseError::fail)?;
    }

    /// Only row positions[b] of each head changes; every other value keeps its bits.
    #[test]
    fn update_cache_matches_reference(users in 1usize..=8, heads in 1usize..4, max_seq in 1usize..80, d in 1usize..70,
                                      dtype in float_dtype(), seed in any::<u64>()) {
        let chip = chip();
        let n = users * heads * max_seq * d;
        let (cache, before) = upload(&chip, &[users, heads, max_seq, d], dtype, Layout::Tile, MemoryConfig::DRAM, values(seed, n, -1.0, 1.0));
        let dims = DecodeDims { batch: users, q_heads: heads, kv_heads: heads, max_seq, head_dim: d };
        let mut want = before.clone();
        for step in 0..2u64 {
            let (new, nv) = upload(&chip, &[1, users, heads, d], dtype, Layout::Tile, MemoryConfig::L1, values(seed ^ (7 + step), users * heads * d, -2.0, 2.0));
            let positions = ints(seed ^ (11 + step), users, max_seq as u32);
            let pos_t = upload_u32(&chip, &[1, users], positions.clone());
            ops::update_cache(&cache, &new, &pos_t, &OpOptions::default()).unwrap();
            let next = reference::update_cache(&want, dims, &nv, &positions).unwrap();
            let got = read(&cache);
            let written = |i: usize| {
                let (row, slice) = (i / d % max_seq, i / d / max_seq);
                row == positions[slice / heads] as usize
            };
            for (i, (g, old)) in got.iter().zip(&want).enumerate() {
                if !written(i) {
                    prop_assert_eq!(g.to_bits(), old.to_bits(), "element {} changed", i);
                }
            }
            check_stored(&got, &next, &[n / d, d], dtype, 0.0, 0.0).map_err(TestCaseError::fail)?;
            want = got;
        }
    }

    /// GQA and causality: rows past a user's position hold random values the answer must ignore.
    #[test]
    fn sdpa_decode_matches_reference(users in 1usize..=32, kv_heads in 1usize..4, group in 1usize..4, d in 1usize..70,
                                     max_seq in 1usize..100, dtype in float_dtype(), seed in any::<u64>()) {
        let chip = chip();
        let q_heads = kv_heads * group;
        let dims = DecodeDims { batch: users, q_heads, kv_heads, max_seq, head_dim: d };
        let n = users * kv_heads * max_seq * d;
        let (q, qv) = upload(&chip, &[1, users, q_heads, d], dtype, Layout::Tile, MemoryConfig::L1, values(seed, users * q_heads * d, -1.0, 1.0));
        let (k, kv) = upload(&chip, &[users, kv_heads, max_seq, d], dtype, Layout::Tile, MemoryConfig::DRAM, values(seed ^ 1, n, -1.0, 1.0));
        let (v, vv) = upload(&chip, &[users, kv_heads, max_seq, d], dtype, Layout::Tile, MemoryConfig::DRAM, values(seed ^ 2, n, -1.0, 1.0));
        let positions = ints(seed ^ 3, users, max_seq as u32);
        let pos_t = upload_u32(&chip, &[1, 1, 1, users], positions.clone());
        let scale = 1.0 / (d as f32).sqrt();
        let out = ops::scaled_dot_product_attention_decode(&q, &k, &v, &pos_t, scale, &OpOptions::default()).unwrap();
        prop_assert_eq!(out.shape(), q.shape());
        let want = reference::sdpa_decode(&qv, &kv, &vv, dims, &positions, scale).unwrap();
        check_stored(&read(&out), &want, &[users * q_heads, d], dtype, 1e-5, 1e-5).map_err(TestCaseError::fail)?;
    }

    /// Values on a coarse grid so that ties are common: the lowest index must win.
    #[test]
    fn argmax_matches_reference(rows in 1usize..=32, cols in 1usize..3000, dtype in float_dtype(),
                                row_major in any::<bool>(), seed in any::<u64>()) {
        let chip = chip();
        let layout = if row_major && dtype != DataType::BFloat8B { Layout::RowMajor } else { Layout::Tile };
        let data: Vec<f32> = values(seed, rows * cols, -8.0, 8.0).into_iter().map(|x| x.round()).collect();
        let (x, xv) = upload(&chip, &[1, 1, rows, cols], dtype, layout, MemoryConfig::DRAM, data);
        let out = ops::argmax(&x, -1, &OpOptions::default()).unwrap();
        prop_assert_eq!(out.shape(), &[1, 1, rows][..]);
        prop_assert_eq!(out.dtype(), DataType::UInt32);
        prop_assert_eq!(read_u32(&out), reference::argmax_last_dim(&xv, cols).unwrap());
    }
}

/// SmolLM2-135M's attention shapes at batch 32: 9 query heads over 3 KV heads, head dim 64.
#[test]
fn smollm2_attention_shapes_at_batch_32() {
    let chip = chip();
    let (users, q_heads, kv_heads, d, max_seq) = (32, 9, 3, 64, 96);
    let dt = DataType::BFloat16;
    let (q, qv) = upload(
        &chip,
        &[1, users, q_heads, d],
        dt,
        Layout::Tile,
        MemoryConfig::L1,
        values(1, users * q_heads * d, -1.0, 1.0),
    );
    let (cos, sin) = rope_caches(max_seq, d, 100_000.0);
    let (cos_t, cv) = upload(
        &chip,
        &[1, 1, max_seq, d],
        dt,
        Layout::Tile,
        MemoryConfig::DRAM,
        cos,
    );
    let (sin_t, sv) = upload(
        &chip,
        &[1, 1, max_seq, d],
        dt,
        Layout::Tile,
        MemoryConfig::DRAM,
        sin,
    );
    let n = users * kv_heads * max_seq * d;
    let (k, kv) = upload(
        &chip,
        &[users, kv_heads, max_seq, d],
        dt,
        Layout::Tile,
        MemoryConfig::DRAM,
        values(2, n, -1.0, 1.0),
    );
    let (v, vv) = upload(
        &chip,
        &[users, kv_heads, max_seq, d],
        dt,
        Layout::Tile,
        MemoryConfig::DRAM,
        values(3, n, -1.0, 1.0),
    );
    // Users at every kind of position: 0, the last row, tile edges.
    let positions: Vec<u32> = (0..users as u32)
        .map(|b| [0, 31, 32, 95][b as usize % 4])
        .collect();
    let pos_t = upload_u32(&chip, &[1, 1, 1, users], positions.clone());
    let qr = ops::rotary_embedding(&q, &cos_t, &sin_t, &pos_t, &OpOptions::default()).unwrap();
    let want_qr =
        reference::rotary_embedding(&qv, [users, q_heads, d], &cv, &sv, &positions).unwrap();
    let got_qr = read(&qr);
    check_stored(&got_qr, &want_qr, &[users * q_heads, d], dt, 0.0, 1e-6).unwrap();
    let dims = DecodeDims {
        batch: users,
        q_heads,
        kv_heads,
        max_seq,
        head_dim: d,
    };
    let out =
        ops::scaled_dot_product_attention_decode(&qr, &k, &v, &pos_t, 0.125, &OpOptions::default())
            .unwrap();
    let want = reference::sdpa_decode(&got_qr, &kv, &vv, dims, &positions, 0.125).unwrap();
    check_stored(&read(&out), &want, &[users * q_heads, d], dt, 1e-5, 1e-5).unwrap();
}

/// Every decode op captured once, with fixed outputs, and replayed at several positions with
/// new token ids and positions copied in before each replay: each replay gives the reference's
/// answer for that step (the KV cache growing as the steps go).
#[test]
fn decode_ops_in_one_trace_replayed_at_many_positions() {
    let chip = common::chip_with(|c| c.trace_region_size = 1 << 20);
    let (users, q_heads, kv_heads, d, max_seq, vocab) = (4, 4, 2, 32, 40, 50);
    let dt = DataType::Float32;
    let dims = DecodeDims {
        batch: users,
        q_heads,
        kv_heads,
        max_seq,
        head_dim: d,
    };
    let (table, tv) = upload(
        &chip,
        &[vocab, q_heads * d],
        dt,
        Layout::Tile,
        MemoryConfig::DRAM,
        values(1, vocab * q_heads * d, -1.0, 1.0),
    );
    let (cos, sin) = rope_caches(max_seq, d, 10_000.0);
    let (cos_t, cv) = upload(
        &chip,
        &[1, 1, max_seq, d],
        dt,
        Layout::Tile,
        MemoryConfig::DRAM,
        cos,
    );
    let (sin_t, sv) = upload(
        &chip,
        &[1, 1, max_seq, d],
        dt,
        Layout::Tile,
        MemoryConfig::DRAM,
        sin,
    );
    let cache_shape = [users, kv_heads, max_seq, d];
    let zeros = vec![0.0; users * kv_heads * max_seq * d];
    let (kc, _) = upload(
        &chip,
        &cache_shape,
        dt,
        Layout::Tile,
        MemoryConfig::DRAM,
        zeros.clone(),
    );
    let (vc, _) = upload(
        &chip,
        &cache_shape,
        dt,
        Layout::Tile,
        MemoryConfig::DRAM,
        zeros.clone(),
    );
    let (q, qv) = upload(
        &chip,
        &[1, users, q_heads, d],
        dt,
        Layout::Tile,
        MemoryConfig::L1,
        values(2, users * q_heads * d, -1.0, 1.0),
    );
    let (knew, kn) = upload(
        &chip,
        &[1, users, kv_heads, d],
        dt,
        Layout::Tile,
        MemoryConfig::L1,
        values(3, users * kv_heads * d, -1.0, 1.0),
    );
    let (vnew, vn) = upload(
        &chip,
        &[1, users, kv_heads, d],
        dt,
        Layout::Tile,
        MemoryConfig::L1,
        values(4, users * kv_heads * d, -1.0, 1.0),
    );
    let (logits, lv) = upload(
        &chip,
        &[1, 1, users, vocab],
        dt,
        Layout::Tile,
        MemoryConfig::L1,
        values(5, users * vocab, -1.0, 1.0),
    );
    let ids = upload_u32(&chip, &[1, 1, 1, users], vec![0; users]);
    let pos = upload_u32(&chip, &[1, 1, 1, users], vec![0; users]);

    // Users start at different positions and all advance by one per step.
    let step_positions =
        |step: u32| -> Vec<u32> { (0..users as u32).map(|b| step + 3 * b).collect() };
    let step_ids = |step: u32| -> Vec<u32> {
        (0..users as u32)
            .map(|b| (7 * step + 11 * b) % vocab as u32)
            .collect()
    };

    // Compile run (every program into the cache), at step 0; the replays redo step 0.
    write_u32(&pos, step_positions(0));
    write_u32(&ids, step_ids(0));
    let run = |outs: Option<&[Tensor; 4]>| -> [Tensor; 4] {
        let o = |i: usize| outs.map_or_else(OpOptions::default, |t| OpOptions::into_output(&t[i]));
        let e = ops::embedding(&ids, &table, &o(0)).unwrap();
        let r = ops::rotary_embedding(&q, &cos_t, &sin_t, &pos, &o(1)).unwrap();
        ops::update_cache(&kc, &knew, &pos, &OpOptions::default()).unwrap();
        ops::update_cache(&vc, &vnew, &pos, &OpOptions::default()).unwrap();
        let a = ops::scaled_dot_product_attention_decode(&r, &kc, &vc, &pos, 0.2, &o(2)).unwrap();
        let m = ops::argmax(&logits, -1, &o(3)).unwrap();
        [e, r, a, m]
    };
    let outs = run(None);
    let misses = chip.program_cache().counters().misses;
    let tid = chip.begin_trace_capture(CQ0).unwrap();
    run(Some(&outs));
    chip.end_trace_capture(tid, CQ0).unwrap();
    assert_eq!(
        chip.program_cache().counters().misses,
        misses,
        "capture compiled nothing new"
    );

    let (mut kwant, mut vwant) = (zeros.clone(), zeros);
    let want_argmax = reference::argmax_last_dim(&lv, vocab).unwrap();
    for step in [0u32, 1, 2, 5, 9, 30] {
        let (p, t) = (step_positions(step), step_ids(step));
        write_u32(&pos, p.clone());
        write_u32(&ids, t.clone());
        chip.execute_trace(tid, CQ0, true).unwrap();
        kwant = reference::update_cache(&kwant, dims, &kn, &p).unwrap();
        vwant = reference::update_cache(&vwant, dims, &vn, &p).unwrap();
        assert_eq!(
            read(&outs[0]),
            reference::embedding(&t, &tv, q_heads * d).unwrap(),
            "step {step}: embedding"
        );
        let r = reference::rotary_embedding(&qv, [users, q_heads, d], &cv, &sv, &p).unwrap();
        let got_r = read(&outs[1]);
        check_stored(&got_r, &r, &[users * q_heads, d], dt, 0.0, 1e-6)
            .unwrap_or_else(|e| panic!("step {step}: rotary: {e}"));
        assert_eq!(read(&kc), kwant, "step {step}: k cache");
        let a = reference::sdpa_decode(&got_r, &kwant, &vwant, dims, &p, 0.2).unwrap();
        check_stored(&read(&outs[2]), &a, &[users * q_heads, d], dt, 1e-5, 1e-5)
            .unwrap_or_else(|e| panic!("step {step}: sdpa: {e}"));
        assert_eq!(read_u32(&outs[3]), want_argmax, "step {step}: argmax");
    }
    chip.release_trace(tid).unwrap();
}

fn err(r: ttmesh_chip::Result<impl std::fmt::Debug>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn bad_inputs_are_clear_errors() {
    let chip = chip();
    let f = |shape: &[usize], layout| {
        upload(
            &chip,
            shape,
            DataType::BFloat16,
            layout,
            MemoryConfig::DRAM,
            vec![0.5; shape.iter().product()],
        )
        .0
    };
    let o = OpOptions::default();
    let ids = upload_u32(&chip, &[1, 1, 1, 4], vec![0, 1, 2, 3]);
    let table = f(&[10, 64], Layout::Tile);
    // Float ids.
    let e = err(ops::embedding(&table, &table, &o));
    assert!(e.contains("ids") && e.contains("UINT32"), "{e}");
    // A batched table.
    let e = err(ops::embedding(&ids, &f(&[2, 10, 64], Layout::Tile), &o));
    assert!(e.contains("[vocab, hidden]"), "{e}");

    let x = f(&[1, 4, 3, 64], Layout::Tile);
    let cache = f(&[1, 1, 16, 64], Layout::Tile);
    let e = err(ops::rotary_embedding(
        &f(&[4, 3, 64], Layout::Tile),
        &cache,
        &cache,
        &ids,
        &o,
    ));
    assert!(e.contains("[1, B, heads, head_dim]"), "{e}");
    let e = err(ops::rotary_embedding(
        &f(&[1, 4, 3, 63], Layout::Tile),
        &cache,
        &cache,
        &ids,
        &o,
    ));
    assert!(e.contains("odd"), "{e}");
    let e = err(ops::rotary_embedding(
        &x,
        &f(&[1, 1, 16, 32], Layout::Tile),
        &cache,
        &ids,
        &o,
    ));
    assert!(e.contains("[1, 1, max_seq, 64]"), "{e}");
    let three = upload_u32(&chip, &[3], vec![0; 3]);
    let e = err(ops::rotary_embedding(&x, &cache, &cache, &three, &o));
    assert!(e.contains("holds 3 values but there are 4 users"), "{e}");
    let e = err(ops::rotary_embedding(
        &f(&[1, 4, 3, 64], Layout::RowMajor),
        &cache,
        &cache,
        &ids,
        &o,
    ));
    assert!(e.contains("to_layout"), "{e}");

    let kc = f(&[4, 3, 16, 64], Layout::Tile);
    let e = err(ops::update_cache(
        &kc,
        &f(&[1, 4, 2, 64], Layout::Tile),
        &ids,
        &o,
    ));
    assert!(e.contains("new must be [1, 4, 3, 64]"), "{e}");
    let e = err(ops::update_cache(
        &kc,
        &x,
        &ids,
        &OpOptions::into_output(&kc),
    ));
    assert!(e.contains("in place"), "{e}");
    let q = f(&[1, 4, 4, 64], Layout::Tile);
    let e = err(ops::scaled_dot_product_attention_decode(
        &q, &kc, &kc, &ids, 0.125, &o,
    ));
    assert!(e.contains("multiple of kv_heads"), "{e}");
    let e = err(ops::scaled_dot_product_attention_decode(
        &x,
        &kc,
        &f(&[4, 3, 8, 64], Layout::Tile),
        &ids,
        0.125,
        &o,
    ));
    assert!(e.contains("v_cache"), "{e}");
    let e = err(ops::argmax(&table, 0, &o));
    assert!(e.contains("last dim"), "{e}");
    let e = err(ops::argmax(&ids, -1, &o));
    assert!(e.contains("UINT32"), "{e}");
    chip.finish(CQ0).unwrap();
}

/// A position past the cache cannot be refused on the host (it is read on the device): the
/// kernel fails, and the next finish reports it with the user, the position and the limit.
#[test]
fn position_past_the_cache_is_a_kernel_error() {
    let chip = chip();
    let kc = upload(
        &chip,
        &[2, 1, 16, 32],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::DRAM,
        vec![0.0; 2 * 16 * 32],
    )
    .0;
    let new = upload(
        &chip,
        &[1, 2, 1, 32],
        DataType::BFloat16,
        Layout::Tile,
        MemoryConfig::DRAM,
        vec![1.0; 64],
    )
    .0;
    let pos = upload_u32(&chip, &[1, 1, 1, 2], vec![3, 16]);
    ops::update_cache(&kc, &new, &pos, &OpOptions::default()).unwrap();
    let e = chip.finish(CQ0).unwrap_err().to_string();
    assert!(
        e.contains("user 1's position 16 is beyond the cache's 16 rows"),
        "{e}"
    );
    // The queue goes on: a later op with good positions works.
    write_u32(&pos, vec![3, 15]);
    ops::update_cache(&kc, &new, &pos, &OpOptions::default()).unwrap();
    chip.finish(CQ0).unwrap();
}
