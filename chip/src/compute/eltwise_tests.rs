//! Tests of the elementwise kernels against `reference` (kept apart to keep eltwise.rs short).

use super::*;
use crate::compute::reference::{self, check_close};
use proptest::prelude::*;

const ALL_OPS: [Activation; 11] = [
    Activation::Relu,
    Activation::Gelu { approximate: false },
    Activation::Gelu { approximate: true },
    Activation::Silu,
    Activation::Exp,
    Activation::Reciprocal,
    Activation::Sigmoid,
    Activation::Tanh,
    Activation::Sqrt,
    Activation::Neg,
    Activation::Identity,
];

/// f32 tolerance per op against the f64 reference: transcendental ops are within a few ulps;
/// exact gelu carries the erf approximation (~3e-7 absolute, times |x|/2).
fn tolerance(op: Activation) -> (f64, f64) {
    match op {
        Activation::Gelu { approximate: false } => (1e-5, 2e-6),
        _ => (1e-5, 1e-6),
    }
}

#[test]
fn known_values() {
    let mut x = [-2.0f32, -0.0, 0.5, 4.0, f32::NAN];
    unary_inplace(Activation::Relu, &mut x);
    assert_eq!(&x[..4], &[0.0, -0.0, 0.5, 4.0]);
    assert!(x[4].is_nan());
    let mut x = [1.0f32, -1.0, 0.0];
    unary_inplace(Activation::Gelu { approximate: false }, &mut x);
    // gelu(1) = 0.8413447460685429, gelu(-1) = -0.15865525393145707
    assert!((x[0] - 0.841_344_7).abs() < 1e-6 && (x[1] + 0.158_655_25).abs() < 1e-6);
    assert_eq!(x[2], 0.0);
    let mut x = [0.0f32, 4.0, -1.0];
    unary_inplace(Activation::Sqrt, &mut x);
    assert_eq!(&x[..2], &[0.0, 2.0]);
    assert!(x[2].is_nan());
    let mut x = [0.0f32, f32::INFINITY, f32::NEG_INFINITY];
    unary_inplace(Activation::Gelu { approximate: false }, &mut x);
    assert_eq!(x, [0.0, f32::INFINITY, -0.0]);
    let mut x = [0.0f32, 2.0];
    unary_inplace(Activation::Reciprocal, &mut x);
    assert_eq!(x, [f32::INFINITY, 0.5]);
}

#[test]
fn every_op_matches_reference_on_a_large_slice() {
    // Long enough for the parallel path; covers [-12, 12) densely.
    let x: Vec<f32> = (0..200_000)
        .map(|i| (i as f32 - 100_000.0) * 1.2e-4)
        .collect();
    for op in ALL_OPS {
        let mut got = x.clone();
        unary_inplace(op, &mut got);
        let want = reference::unary(op, &x);
        let (rtol, atol) = tolerance(op);
        if let Err(e) = check_close(&got, &want, rtol, atol) {
            panic!("{op:?}: {e}");
        }
    }
}

proptest! {
    #[test]
    fn unary_matches_reference(op_i in 0usize..ALL_OPS.len(), xs in prop::collection::vec(-30f32..30.0, 0..300)) {
        let op = ALL_OPS[op_i];
        let mut got = xs.clone();
        unary_inplace(op, &mut got);
        let (rtol, atol) = tolerance(op);
        // Scale the absolute tolerance with |x| for gelu's erf term.
        let want = reference::unary(op, &xs);
        for i in 0..xs.len() {
            let scale = 1.0 + xs[i].abs() as f64;
            if let Err(e) = check_close(&got[i..=i], &want[i..=i], rtol, atol * scale) {
                prop_assert!(false, "{:?}({}): {}", op, xs[i], e);
            }
        }
    }
}

#[test]
fn broadcast_shapes() {
    assert_eq!(broadcast_shape(&[2, 3], &[3]).unwrap(), vec![2, 3]);
    assert_eq!(broadcast_shape(&[4, 1, 3], &[2, 1]).unwrap(), vec![4, 2, 3]);
    assert_eq!(broadcast_shape(&[], &[5]).unwrap(), vec![5]);
    assert_eq!(broadcast_shape(&[1, 0], &[3, 1]).unwrap(), vec![3, 0]);
    let err = broadcast_shape(&[2, 3], &[4]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot broadcast shapes [2, 3] and [4]: dimension 1 from the right is 3 vs 4; \
         aligned dimensions must be equal or one of them 1"
    );
    let err = broadcast_shape(&[5, 2, 3], &[4, 1, 3]).unwrap_err();
    assert!(matches!(
        err,
        ComputeError::Broadcast {
            dim: 3,
            a_dim: 5,
            b_dim: 4,
            ..
        }
    ));
}

#[test]
fn binary_known_cases() {
    let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    let (out, shape) =
        binary_broadcast(BinaryOp::Sub, &a, &[2, 3], &[1.0, 1.0, 2.0], &[3]).unwrap();
    assert_eq!(
        (out, shape),
        (vec![0.0, 1.0, 1.0, 3.0, 4.0, 4.0], vec![2, 3])
    );
    // Row vector on the left: order of operands matters for Sub.
    let (out, _) = binary_broadcast(BinaryOp::Sub, &[1.0, 1.0, 2.0], &[1, 3], &a, &[2, 3]).unwrap();
    assert_eq!(out, vec![0.0, -1.0, -1.0, -3.0, -4.0, -4.0]);
    // Column times row: an outer product through the general path.
    let (out, shape) = binary_broadcast(
        BinaryOp::Mul,
        &[1.0, 2.0],
        &[2, 1],
        &[3.0, 4.0, 5.0],
        &[1, 3],
    )
    .unwrap();
    assert_eq!(
        (out, shape),
        (vec![3.0, 4.0, 5.0, 6.0, 8.0, 10.0], vec![2, 3])
    );
    // Scalars.
    let (out, shape) = binary_broadcast(BinaryOp::Add, &[2.0], &[], &[3.0], &[]).unwrap();
    assert_eq!((out, shape), (vec![5.0], vec![]));
    let (out, shape) = binary_broadcast(BinaryOp::Add, &[], &[0, 3], &[1.0], &[1]).unwrap();
    assert_eq!((out, shape), (vec![], vec![0, 3]));
}

#[test]
fn binary_errors_name_the_shapes() {
    let err = binary_broadcast(BinaryOp::Add, &[0.0; 6], &[2, 3], &[0.0; 2], &[2]).unwrap_err();
    assert!(err
        .to_string()
        .starts_with("cannot broadcast shapes [2, 3] and [2]"));
    let err = binary_broadcast(BinaryOp::Add, &[0.0; 5], &[2, 3], &[0.0; 3], &[3]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "binary_broadcast a: expected 6 elements but got 5; pass a slice of exactly 6 elements"
    );
    assert!(matches!(
        binary_broadcast(BinaryOp::Add, &[], &[usize::MAX, 3], &[], &[0]),
        Err(ComputeError::TooLarge { .. })
    ));
}

#[test]
fn large_broadcasts_use_parallel_paths_correctly() {
    let a: Vec<f32> = (0..3 * 200 * 170).map(|i| i as f32 * 0.5).collect();
    let row: Vec<f32> = (0..170).map(|i| i as f32).collect();
    let col: Vec<f32> = (0..200).map(|i| -(i as f32)).collect();
    for (b, b_shape) in [
        (&row, vec![170]),
        (&col, vec![200, 1]),
        (&a, vec![3, 200, 170]),
    ] {
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul] {
            let got = binary_broadcast(op, &a, &[3, 200, 170], b, &b_shape).unwrap();
            let want = reference::binary_broadcast(op, &a, &[3, 200, 170], b, &b_shape).unwrap();
            assert_eq!(got.1, want.1);
            check_close(&got.0, &want.0, 1e-6, 0.0).unwrap();
            // Swapped operands exercise the row-on-the-left path.
            let got = binary_broadcast(op, b, &b_shape, &a, &[3, 200, 170]).unwrap();
            let want = reference::binary_broadcast(op, b, &b_shape, &a, &[3, 200, 170]).unwrap();
            check_close(&got.0, &want.0, 1e-6, 0.0).unwrap();
        }
    }
}

/// Two shapes that broadcast: start from one output shape, then replace some dims with 1 and
/// drop some leading dims independently for each side.
fn compatible_shapes() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    prop::collection::vec(1usize..5, 0..=4).prop_flat_map(|out| {
        let r = out.len();
        (
            Just(out),
            prop::collection::vec(any::<bool>(), r),
            prop::collection::vec(any::<bool>(), r),
            0..=r,
            0..=r,
        )
            .prop_map(|(out, ones_a, ones_b, drop_a, drop_b)| {
                let pick = |ones: &[bool], drop: usize| -> Vec<usize> {
                    out.iter()
                        .zip(ones)
                        .skip(drop)
                        .map(|(&d, &one)| if one { 1 } else { d })
                        .collect()
                };
                (pick(&ones_a, drop_a), pick(&ones_b, drop_b))
            })
    })
}

proptest! {
    #[test]
    fn binary_matches_reference((a_shape, b_shape) in compatible_shapes(), op_i in 0usize..3) {
        let op = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul][op_i];
        let a: Vec<f32> = (0..a_shape.iter().product::<usize>()).map(|i| i as f32 * 0.25 - 3.0).collect();
        let b: Vec<f32> = (0..b_shape.iter().product::<usize>()).map(|i| 7.0 - i as f32 * 0.5).collect();
        let got = binary_broadcast(op, &a, &a_shape, &b, &b_shape).unwrap();
        let want = reference::binary_broadcast(op, &a, &a_shape, &b, &b_shape).unwrap();
        prop_assert_eq!(&got.1, &want.1);
        // Inputs are multiples of 1/4 with few bits: every op is exact in f32.
        prop_assert_eq!(&got.0, &want.0);
    }

    #[test]
    fn incompatible_shapes_are_errors(d in 2usize..6, e in 2usize..6, lead in 1usize..4) {
        prop_assume!(d != e);
        let a = vec![0f32; lead * d];
        let b = vec![0f32; e];
        let err = binary_broadcast(BinaryOp::Add, &a, &[lead, d], &b, &[e]).unwrap_err();
        let expected = format!("cannot broadcast shapes [{}, {}] and [{}]", lead, d, e);
        prop_assert!(err.to_string().starts_with(&expected), "{}", err);
    }
}
