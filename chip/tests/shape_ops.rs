//! The data-movement ops (reshape, slice, concat, transpose, permute) against the host
//! references in `compute::reference`, over random shapes, TILE and ROW_MAJOR, BFLOAT16 and
//! FLOAT32 (and UINT32): all exact, they move values and compute nothing. Then the decode
//! step's head split and merge, a captured trace replayed on new data, and the errors.

mod common;

use std::sync::Arc;

use common::{chip, read, upload, values};
use proptest::prelude::*;
use ttmesh_chip::compute::reference;
use ttmesh_chip::ops::{self, OpOptions};
use ttmesh_chip::tensor::HostData;
use ttmesh_chip::{Chip, CqId, DataType, HostTensor, Layout, MemoryConfig, Tensor};

const CQ0: CqId = CqId(0);

fn dtype() -> impl Strategy<Value = DataType> {
    prop_oneof![Just(DataType::Float32), Just(DataType::BFloat16)]
}

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![Just(Layout::Tile), Just(Layout::RowMajor)]
}

/// Rank 1 to 4: the last two dims 1..max (crossing tile edges), leading dims 1..4 (a permute
/// may move them last, where TILE pads each to 32).
fn shape(max: usize) -> impl Strategy<Value = Vec<usize>> {
    (
        prop::collection::vec(1usize..4, 0..=2),
        prop::collection::vec(1usize..max, 1..=2),
    )
        .prop_map(|(mut lead, last)| {
            lead.extend(last);
            lead
        })
}

fn input(
    chip: &Arc<Chip>,
    shape: &[usize],
    dtype: DataType,
    layout: Layout,
    seed: u64,
) -> (Tensor, Vec<f32>) {
    let n = shape.iter().product();
    upload(
        chip,
        shape,
        dtype,
        layout,
        MemoryConfig::DRAM,
        values(seed, n, -4.0, 4.0),
    )
}

/// Splits `volume` into up to four factors (a new shape of the same volume), picked by `picks`.
fn factor(volume: usize, picks: &[usize]) -> Vec<usize> {
    let mut rest = volume;
    let mut out = Vec::new();
    for &p in picks {
        let divisors: Vec<usize> = (1..=rest).filter(|d| rest.is_multiple_of(*d)).collect();
        let d = divisors[p % divisors.len()];
        out.push(d);
        rest /= d;
    }
    out.push(rest);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(24), ..ProptestConfig::default() })]

    /// Same values in the same logical order, whatever the padding of old and new last dims.
    /// (Small volumes: trailing dims of 1 make TILE tensors 1024 times their volume.)
    #[test]
    fn reshape_keeps_logical_order(shape in shape(20), picks in prop::collection::vec(0usize..100, 0..3),
                                   dtype in dtype(), layout in layout(), seed in any::<u64>()) {
        let chip = chip();
        let (x, xv) = input(&chip, &shape, dtype, layout, seed);
        let new_shape = factor(xv.len(), &picks);
        // DRAM: trailing dims of 1 pad each value to a whole tile.
        let opts = OpOptions { memory_config: Some(MemoryConfig::DRAM), ..Default::default() };
        let out = ops::reshape(&x, &new_shape, &opts).unwrap();
        prop_assert_eq!(out.shape(), &new_shape[..]);
        prop_assert_eq!((out.dtype(), out.spec().layout), (dtype, layout));
        prop_assert_eq!(read(&out), xv);
    }

    #[test]
    fn slice_matches_reference(shape in shape(50), cuts in prop::collection::vec((any::<u16>(), any::<u16>()), 4),
                               dtype in dtype(), layout in layout(), seed in any::<u64>()) {
        let chip = chip();
        let (x, xv) = input(&chip, &shape, dtype, layout, seed);
        let (mut begins, mut ends) = (vec![], vec![]);
        for (k, &n) in shape.iter().enumerate() {
            let (a, b) = (cuts[k].0 as usize % (n + 1), cuts[k].1 as usize % (n + 1));
            // Empty ranges are legal for the reference; keep the device's at least one wide.
            let (a, b) = if a == b { (a.min(n - 1), a.min(n - 1) + 1) } else { (a.min(b), a.max(b)) };
            begins.push(a);
            ends.push(b);
        }
        let out = ops::slice(&x, &begins, &ends, &OpOptions::default()).unwrap();
        let want_shape: Vec<usize> = begins.iter().zip(&ends).map(|(a, b)| b - a).collect();
        prop_assert_eq!(out.shape(), &want_shape[..]);
        prop_assert_eq!(read(&out), reference::slice(&xv, &shape, &begins, &ends).unwrap());
    }

    #[test]
    fn concat_matches_reference(shape in shape(40), dim in 0usize..4, sizes in prop::collection::vec(1usize..40, 1..4),
                                dtype in dtype(), layout in layout(), seed in any::<u64>()) {
        let chip = chip();
        let dim = dim % shape.len();
        let mut parts = vec![];
        for (i, &size) in sizes.iter().enumerate() {
            let mut s = shape.clone();
            s[dim] = size;
            let (t, v) = input(&chip, &s, dtype, layout, seed.wrapping_add(i as u64));
            parts.push((t, v, s));
        }
        let tensors: Vec<&Tensor> = parts.iter().map(|p| &p.0).collect();
        // Negative dims count from the end.
        let neg = dim as i64 - shape.len() as i64;
        let out = ops::concat(&tensors, if seed % 3 == 0 { neg } else { dim as i64 }, &OpOptions::default()).unwrap();
        let refs: Vec<(&[f32], &[usize])> = parts.iter().map(|p| (&p.1[..], &p.2[..])).collect();
        let mut want_shape = shape.clone();
        want_shape[dim] = sizes.iter().sum();
        prop_assert_eq!(out.shape(), &want_shape[..]);
        prop_assert_eq!(read(&out), reference::concat(&refs, dim).unwrap());
    }

    #[test]
    fn permute_matches_reference(shape in shape(40), order in Just((0..4).collect::<Vec<usize>>()).prop_shuffle(),
                                 dtype in dtype(), layout in layout(), seed in any::<u64>()) {
        let chip = chip();
        let (x, xv) = input(&chip, &shape, dtype, layout, seed);
        let dims: Vec<usize> = order.into_iter().filter(|&d| d < shape.len()).collect();
        let as_i64: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let out = ops::permute(&x, &as_i64, &OpOptions::default()).unwrap();
        let want_shape: Vec<usize> = dims.iter().map(|&d| shape[d]).collect();
        prop_assert_eq!(out.shape(), &want_shape[..]);
        prop_assert_eq!(read(&out), reference::permute(&xv, &shape, &dims).unwrap());
    }

    #[test]
    fn transpose_matches_reference(shape in shape(70), d0 in 0usize..4, d1 in 0usize..4,
                                   dtype in dtype(), layout in layout(), seed in any::<u64>()) {
        let chip = chip();
        let (x, xv) = input(&chip, &shape, dtype, layout, seed);
        let (d0, d1) = (d0 % shape.len(), d1 % shape.len());
        let out = ops::transpose(&x, d0 as i64, d1 as i64 - shape.len() as i64, &OpOptions::default()).unwrap();
        let mut dims: Vec<usize> = (0..shape.len()).collect();
        dims.swap(d0, d1);
        prop_assert_eq!(read(&out), reference::permute(&xv, &shape, &dims).unwrap());
    }
}

/// The decode step's moves: a fused QKV projection `[1, 1, B, (n + 2k) d]` split along the last
/// dim, heads split to `[1, B, n, d]`, then merged back; at B = 1 (rows padded to 32) and 32.
#[test]
fn decode_head_split_and_merge() {
    let chip = chip();
    for (b, n, k, d) in [(1, 4, 2, 64), (32, 2, 1, 64), (3, 5, 1, 48)] {
        for dt in [DataType::BFloat16, DataType::Float32] {
            let w = (n + 2 * k) * d;
            let (qkv, v) = upload(
                &chip,
                &[1, 1, b, w],
                dt,
                Layout::Tile,
                MemoryConfig::L1,
                values(7 + b as u64, b * w, -4.0, 4.0),
            );
            let q = ops::slice(
                &qkv,
                &[0, 0, 0, 0],
                &[1, 1, b, n * d],
                &OpOptions::default(),
            )
            .unwrap();
            let kk = ops::slice(
                &qkv,
                &[0, 0, 0, n * d],
                &[1, 1, b, (n + k) * d],
                &OpOptions::default(),
            )
            .unwrap();
            let heads = ops::reshape(&q, &[1, b, n, d], &OpOptions::default()).unwrap();
            let kheads = ops::reshape(&kk, &[1, b, k, d], &OpOptions::default()).unwrap();
            // Row-major over [1, B, n, d]: user u's head h is columns h*d..(h+1)*d of row u.
            let got = read(&heads);
            for u in 0..b {
                for h in 0..n {
                    let at = (u * n + h) * d;
                    assert_eq!(
                        got[at..at + d],
                        v[u * w + h * d..][..d],
                        "B={b} {dt}: user {u} head {h}"
                    );
                }
            }
            let got_k = read(&kheads);
            for u in 0..b {
                assert_eq!(got_k[u * k * d..][..k * d], v[u * w + n * d..][..k * d]);
            }
            let merged = ops::reshape(&heads, &[1, 1, b, n * d], &OpOptions::default()).unwrap();
            assert_eq!(read(&merged), read(&q), "B={b} {dt}: merge undoes split");
            // [1, B, n, d] -> [1, n, B, d] and back.
            let by_head = ops::permute(&heads, &[0, 2, 1, 3], &OpOptions::default()).unwrap();
            assert_eq!(by_head.shape(), &[1, n, b, d]);
            let back = ops::transpose(&by_head, 1, 2, &OpOptions::default()).unwrap();
            assert_eq!(read(&back), got);
            let joined = ops::concat(&[&q, &kk], -1, &OpOptions::default()).unwrap();
            assert_eq!(
                read(&joined),
                reference::slice(&v, &[1, 1, b, w], &[0, 0, 0, 0], &[1, 1, b, (n + k) * d])
                    .unwrap()
            );
        }
    }
}

fn read_u32(t: &Tensor) -> Vec<u32> {
    match t.to_host(CQ0).unwrap().data {
        HostData::U32(v) => v,
        HostData::F32(_) => panic!("{} is not UINT32", t.name()),
    }
}

#[test]
fn uint32_moves_exactly() {
    let chip = chip();
    let v: Vec<u32> = (0..2 * 3 * 5).map(|i| 4_000_000_000 - 7 * i).collect();
    let host = HostTensor::from_u32(vec![2, 3, 5], v.clone()).unwrap();
    let x = Tensor::from_host(&host, &chip, Layout::RowMajor, MemoryConfig::DRAM, CQ0).unwrap();
    let p = ops::permute(&x, &[2, 0, 1], &OpOptions::default()).unwrap();
    assert_eq!(
        read_u32(&p),
        reference::permute(&v, &[2, 3, 5], &[2, 0, 1]).unwrap()
    );
    let s = ops::slice(&x, &[1, 0, 2], &[2, 3, 4], &OpOptions::default()).unwrap();
    assert_eq!(
        read_u32(&s),
        reference::slice(&v, &[2, 3, 5], &[1, 0, 2], &[2, 3, 4]).unwrap()
    );
    let r = ops::reshape(&x, &[30], &OpOptions::default()).unwrap();
    assert_eq!(read_u32(&r), v);
}

/// Two slices of one input to the same output shape are different programs (the offset is in
/// the program's key), and repeating one hits the cache.
#[test]
fn the_move_is_part_of_the_program_key() {
    let chip = chip();
    let (x, xv) = input(&chip, &[1, 1, 4, 96], DataType::Float32, Layout::Tile, 3);
    let lo = ops::slice(&x, &[0, 0, 0, 0], &[1, 1, 4, 32], &OpOptions::default()).unwrap();
    let hi = ops::slice(&x, &[0, 0, 0, 64], &[1, 1, 4, 96], &OpOptions::default()).unwrap();
    assert_ne!(read(&lo), read(&hi));
    let misses = chip.program_cache().counters().misses;
    ops::slice(
        &x,
        &[0, 0, 0, 64],
        &[1, 1, 4, 96],
        &OpOptions::into_output(&lo),
    )
    .unwrap();
    assert_eq!(chip.program_cache().counters().misses, misses);
    assert_eq!(
        read(&lo),
        reference::slice(&xv, &[1, 1, 4, 96], &[0, 0, 0, 64], &[1, 1, 4, 96]).unwrap()
    );
}

/// A QKV split, head split, permute and concat captured once into fixed outputs, replayed
/// twice on new data written into the same input buffer.
#[test]
fn moves_replay_in_a_trace_on_new_data() {
    let chip = common::chip_with(|c| c.trace_region_size = 1 << 20);
    let (b, n, d) = (1, 4, 32);
    let shape = [1, 1, b, 2 * n * d];
    let dt = DataType::BFloat16;
    let (x, _) = input(&chip, &shape, dt, Layout::Tile, 1);
    let run = |outs: Option<&[Tensor; 4]>| -> [Tensor; 4] {
        let o = |i: usize| outs.map_or_else(OpOptions::default, |t| OpOptions::into_output(&t[i]));
        let q = ops::slice(&x, &[0, 0, 0, 0], &[1, 1, b, n * d], &o(0)).unwrap();
        let heads = ops::reshape(&q, &[1, b, n, d], &o(1)).unwrap();
        let by_head = ops::permute(&heads, &[0, 2, 1, 3], &o(2)).unwrap();
        let joined = ops::concat(&[&q, &x], 3, &o(3)).unwrap();
        [q, heads, by_head, joined]
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
    for step in 0..2u64 {
        let fresh = values(100 + step, shape.iter().product(), -8.0, 8.0);
        let host = HostTensor::from_f32(shape.to_vec(), dt, fresh).unwrap();
        x.write_from_host(&host, CQ0).unwrap();
        let xv = read(&x);
        chip.execute_trace(tid, CQ0, true).unwrap();
        let q = reference::slice(&xv, &shape, &[0, 0, 0, 0], &[1, 1, b, n * d]).unwrap();
        assert_eq!(read(&outs[0]), q, "step {step}: slice");
        assert_eq!(read(&outs[1]), q, "step {step}: reshape");
        assert_eq!(
            read(&outs[2]),
            reference::permute(&q, &[1, b, n, d], &[0, 2, 1, 3]).unwrap(),
            "step {step}: permute"
        );
        let want = reference::concat(&[(&q, &[1, 1, b, n * d]), (&xv, &shape)], 3).unwrap();
        assert_eq!(read(&outs[3]), want, "step {step}: concat");
    }
    chip.release_trace(tid).unwrap();
}

fn err(r: ttmesh_chip::Result<Tensor>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn bad_shapes_are_clear_errors() {
    let chip = chip();
    let (x, _) = input(&chip, &[1, 1, 2, 64], DataType::Float32, Layout::Tile, 5);
    let o = OpOptions::default();
    let e = err(ops::reshape(&x, &[1, 2, 3, 32], &o));
    assert!(
        e.contains("[1, 1, 2, 64]") && e.contains("[1, 2, 3, 32]") && e.contains("128"),
        "{e}"
    );
    let e = err(ops::slice(&x, &[0, 0, 0, 0], &[1, 1, 2, 65], &o));
    assert!(
        e.contains("[1, 1, 2, 65]") && e.contains("[1, 1, 2, 64]"),
        "{e}"
    );
    let e = err(ops::slice(&x, &[0, 0], &[1, 1], &o));
    assert!(e.contains("one begin and one end per dim"), "{e}");
    let (y, _) = input(&chip, &[1, 2, 2, 64], DataType::Float32, Layout::Tile, 6);
    let e = err(ops::concat(&[&x, &y], 3, &o));
    assert!(
        e.contains("[1, 2, 2, 64]") && e.contains("outside dim 3"),
        "{e}"
    );
    assert!(err(ops::concat(&[], 0, &o)).contains("no tensors"));
    let e = err(ops::concat(&[&x], 4, &o));
    assert!(
        e.contains("dim 4 is out of range") && e.contains("-4..4"),
        "{e}"
    );
    let (z, _) = input(&chip, &[1, 1, 2, 64], DataType::BFloat16, Layout::Tile, 7);
    assert!(err(ops::concat(&[&x, &z], 3, &o)).contains("one dtype and layout"));
    let e = err(ops::permute(&x, &[0, 1, 1, 3], &o));
    assert!(
        e.contains("[0, 1, 1, 3]") && e.contains("not a permutation"),
        "{e}"
    );
    assert!(err(ops::permute(&x, &[0, 1, 2], &o)).contains("not a permutation"));
    assert!(err(ops::transpose(&x, 0, -5, &o)).contains("dim -5 is out of range"));
    let (bfp8, _) = input(&chip, &[1, 1, 32, 32], DataType::BFloat8B, Layout::Tile, 8);
    assert!(err(ops::reshape(&bfp8, &[1, 32, 1, 32], &o)).contains("typecast to BFLOAT16"));
    let cast = OpOptions {
        dtype: Some(DataType::BFloat16),
        ..Default::default()
    };
    assert!(err(ops::reshape(&x, &[2, 64], &cast)).contains("typecast before or after"));
    // A given output of the wrong shape names both specs.
    let e = err(ops::reshape(&x, &[2, 64], &OpOptions::into_output(&x)));
    assert!(e.contains("[2, 64]") && e.contains("[1, 1, 2, 64]"), "{e}");
}
