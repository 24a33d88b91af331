//! Elementwise kernels: unary activations (the chip's SFPU ops) and binary ops with numpy
//! broadcasting (the FPU's eltwise add/sub/mul).

use super::{checked_product, ComputeError, PAR_MIN_ELEMS};
use rayon::prelude::*;

/// Unary ops the emulated SFPU provides. Formulas are the textbook ones; NaN propagates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    /// `max(x, 0)` (NaN stays NaN).
    Relu,
    /// `x * Phi(x)`; `approximate` uses the tanh form `0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))`
    /// as TT-NN's `fast_and_approximate_mode` does; exact uses erf (approximated to ~3e-7 absolute).
    Gelu {
        approximate: bool,
    },
    /// `x * sigmoid(x)`. Gelu and Silu give -0 at -inf (their limit).
    Silu,
    Exp,
    /// `1 / x` (0 gives inf).
    Reciprocal,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    Tanh,
    /// Negative inputs give NaN.
    Sqrt,
    Neg,
    Identity,
}

/// Applies `op` to every element in place; large slices run in parallel.
pub fn unary_inplace(op: Activation, data: &mut [f32]) {
    // One match outside the loop so each op gets its own tight, vectorisable loop.
    match op {
        Activation::Relu => map(data, |x| if x < 0.0 { 0.0 } else { x }),
        Activation::Gelu { approximate: false } => map(data, gelu_erf),
        Activation::Gelu { approximate: true } => map(data, gelu_tanh),
        Activation::Silu => map(data, |x| at_neg_inf_zero(x, x / (1.0 + (-x).exp()))),
        Activation::Exp => map(data, f32::exp),
        Activation::Reciprocal => map(data, |x| 1.0 / x),
        Activation::Sigmoid => map(data, |x| 1.0 / (1.0 + (-x).exp())),
        Activation::Tanh => map(data, f32::tanh),
        Activation::Sqrt => map(data, f32::sqrt),
        Activation::Neg => map(data, |x| -x),
        Activation::Identity => {}
    }
}

fn map(data: &mut [f32], f: impl Fn(f32) -> f32 + Sync + Send) {
    if data.len() < PAR_MIN_ELEMS {
        data.iter_mut().for_each(|x| *x = f(*x));
    } else {
        data.par_chunks_mut(PAR_MIN_ELEMS / 2)
            .for_each(|c| c.iter_mut().for_each(|x| *x = f(*x)));
    }
}

fn gelu_erf(x: f32) -> f32 {
    at_neg_inf_zero(
        x,
        0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2)),
    )
}

fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2 / pi)
    at_neg_inf_zero(
        x,
        0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh()),
    )
}

/// x * (a gate that tends to 0) is -inf * 0 = NaN at x = -inf; the limit is -0.
#[inline]
fn at_neg_inf_zero(x: f32, y: f32) -> f32 {
    if x == f32::NEG_INFINITY {
        -0.0
    } else {
        y
    }
}

/// erf by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7 in exact arithmetic): std has no erf,
/// and this is accurate well past what f32 kernels on the chip deliver.
fn erf_f32(x: f32) -> f32 {
    let ax = x.abs();
    if ax >= 6.0 {
        // erf is 1 to f32 precision here; also keeps inf out of the polynomial (inf * 0).
        return if x.is_nan() { x } else { 1f32.copysign(x) };
    }
    let t = 1.0 / (1.0 + 0.327_591_1 * ax);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_8 + t * (-1.453_152 + t * 1.061_405_4))));
    (1.0 - poly * (-ax * ax).exp()).copysign(x)
}

/// Elementwise binary ops of the chip's FPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
}

/// The numpy broadcast of two shapes: align on the right; each pair of dims must be equal or
/// one of them 1 (then the other wins, so 1 vs 0 gives 0).
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, ComputeError> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        // i counts from the right; a missing dim is 1.
        let da = if i < a.len() { a[a.len() - 1 - i] } else { 1 };
        let db = if i < b.len() { b[b.len() - 1 - i] } else { 1 };
        out[rank - 1 - i] = match (da, db) {
            _ if da == db => da,
            (1, d) | (d, 1) => d,
            _ => {
                return Err(ComputeError::Broadcast {
                    a: a.to_vec(),
                    b: b.to_vec(),
                    dim: i + 1,
                    a_dim: da,
                    b_dim: db,
                })
            }
        };
    }
    Ok(out)
}

/// `op(a, b)` with numpy broadcasting; returns the result and its shape.
///
/// `a.len()` / `b.len()` must equal the products of their shapes. Fast paths: equal sizes (a
/// plain zip) and one side a row vector broadcast over the other's rows (bias-style); anything
/// else walks rows with per-dim strides (0 on broadcast dims).
pub fn binary_broadcast(
    op: BinaryOp,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
) -> Result<(Vec<f32>, Vec<usize>), ComputeError> {
    let out_shape = super::check_broadcast_operands(a, a_shape, b, b_shape)?;
    let out = match op {
        BinaryOp::Add => broadcast_with(a, a_shape, b, b_shape, &out_shape, |x, y| x + y),
        BinaryOp::Sub => broadcast_with(a, a_shape, b, b_shape, &out_shape, |x, y| x - y),
        BinaryOp::Mul => broadcast_with(a, a_shape, b, b_shape, &out_shape, |x, y| x * y),
    }?;
    Ok((out, out_shape))
}

fn broadcast_with<F>(
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out_shape: &[usize],
    f: F,
) -> Result<Vec<f32>, ComputeError>
where
    F: Fn(f32, f32) -> f32 + Sync + Send + Copy,
{
    let numel = checked_product("binary_broadcast output", out_shape)?;
    let mut out = vec![0f32; numel];
    if numel == 0 {
        return Ok(out);
    }
    // A side with as many elements as the output is not broadcast along any dim, so its
    // linear index equals the output's.
    if a.len() == numel && b.len() == numel {
        for_rows(&mut out, PAR_MIN_ELEMS, |start, o| {
            let (a, b) = (&a[start..start + o.len()], &b[start..start + o.len()]);
            o.iter_mut()
                .zip(a.iter().zip(b))
                .for_each(|(o, (&x, &y))| *o = f(x, y));
        });
        return Ok(out);
    }
    let w = *out_shape.last().unwrap_or(&1);
    let is_row = |s: &[usize], v: &[f32]| v.len() == w && s.last() == Some(&w);
    if a.len() == numel && is_row(b_shape, b) {
        for_rows(&mut out, w, |start, o| {
            let a = &a[start..start + o.len()];
            for (row_o, row_a) in o.chunks_mut(w).zip(a.chunks(w)) {
                row_o
                    .iter_mut()
                    .zip(row_a.iter().zip(b))
                    .for_each(|(o, (&x, &y))| *o = f(x, y));
            }
        });
        return Ok(out);
    }
    if b.len() == numel && is_row(a_shape, a) {
        for_rows(&mut out, w, |start, o| {
            let b = &b[start..start + o.len()];
            for (row_o, row_b) in o.chunks_mut(w).zip(b.chunks(w)) {
                row_o
                    .iter_mut()
                    .zip(a.iter().zip(row_b))
                    .for_each(|(o, (&x, &y))| *o = f(x, y));
            }
        });
        return Ok(out);
    }
    let sa = broadcast_strides(a_shape, out_shape);
    let sb = broadcast_strides(b_shape, out_shape);
    let rank = out_shape.len();
    let (sa_last, sb_last) = (*sa.last().unwrap_or(&0), *sb.last().unwrap_or(&0));
    for_rows(&mut out, w, |start, o| {
        for (r, row) in o.chunks_mut(w).enumerate() {
            // Unravel the row index over the leading dims to find each input's row start.
            let mut idx = start / w + r;
            let (mut oa, mut ob) = (0, 0);
            for d in (0..rank.saturating_sub(1)).rev() {
                let i = idx % out_shape[d];
                idx /= out_shape[d];
                oa += i * sa[d];
                ob += i * sb[d];
            }
            for (j, o) in row.iter_mut().enumerate() {
                *o = f(a[oa + j * sa_last], b[ob + j * sb_last]);
            }
        }
    });
    Ok(out)
}

/// Element strides of an input of `shape` read at output indices (0 on broadcast dims),
/// one per output dim.
fn broadcast_strides(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; out_shape.len()];
    let mut stride = 1;
    for i in 0..shape.len() {
        let d = shape[shape.len() - 1 - i];
        if d != 1 {
            strides[out_shape.len() - 1 - i] = stride;
        }
        stride *= d;
    }
    strides
}

/// Runs `f(start, chunk)` over chunks of `out` that are whole multiples of `unit` elements,
/// in parallel when `out` is large. `start` is the chunk's offset in `out`.
fn for_rows(out: &mut [f32], unit: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    let unit = unit.max(1);
    if out.len() < PAR_MIN_ELEMS {
        f(0, out);
        return;
    }
    let chunk = (PAR_MIN_ELEMS / 2).div_ceil(unit) * unit;
    out.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(i, c)| f(i * chunk, c));
}

#[cfg(test)]
#[path = "eltwise_tests.rs"]
mod tests;
