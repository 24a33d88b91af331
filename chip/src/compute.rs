//! The math inside one emulated chip's kernels, on plain host slices.
//!
//! Inputs and outputs are f32, logical row-major; accumulation is f32 (as on the chip's FPU/SFPU
//! paths), so results match the f64 [`reference`](mod@reference) only within stated tolerances. Nothing here
//! knows about device memory, tiles or data formats: the chip reads a tensor out of its memory,
//! converts it with [`crate::format`], calls these, and writes the result back.
//!
//! Large inputs run on the shared rayon pool (and matmul on matrixmultiply's own threads), so
//! a dispatcher thread that calls in does not need to split work itself.

mod decode;
mod eltwise;
mod matmul;
pub mod reference;
mod rows;

pub use decode::{argmax_rows, attend, rotate_half};
pub use eltwise::{binary_broadcast, broadcast_shape, unary_inplace, Activation, BinaryOp};
pub use matmul::{bench_matmul, matmul};
pub use rows::{add_bias_rows, rms_norm_last_dim, softmax_last_dim};

/// Slices shorter than this stay on the calling thread; rayon's hand-off costs more.
pub(crate) const PAR_MIN_ELEMS: usize = 1 << 15;

/// Why a compute function refused its input. Every variant names the thing and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComputeError {
    /// A slice does not have the length its dimensions imply.
    #[error("{what}: expected {expected} elements but got {got}; pass a slice of exactly {expected} elements")]
    LengthMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// Batched matmul: B must be one matrix (broadcast) or one per A matrix.
    #[error("matmul: batch_b is {batch_b} but batch_a is {batch_a}; batch_b must be 1 (broadcast B) or equal batch_a")]
    BatchMismatch { batch_a: usize, batch_b: usize },
    /// Two shapes that numpy broadcasting cannot combine.
    #[error("cannot broadcast shapes {a:?} and {b:?}: dimension {dim} from the right is {a_dim} vs {b_dim}; aligned dimensions must be equal or one of them 1")]
    Broadcast {
        a: Vec<usize>,
        b: Vec<usize>,
        dim: usize,
        a_dim: usize,
        b_dim: usize,
    },
    /// A row-wise op got a row width that does not tile the data.
    #[error("{what}: {len} elements do not split into rows of {cols}; pass cols >= 1 that divides the slice length")]
    RowWidth {
        what: &'static str,
        len: usize,
        cols: usize,
    },
    /// An index (a token id, a position, a head count) outside what the data holds.
    #[error("{what}: {index} is out of range (limit {limit}); {fix}")]
    OutOfRange {
        what: &'static str,
        index: usize,
        limit: usize,
        fix: &'static str,
    },
    /// A row width that must be even (rotary embedding rotates pairs (i, i + d/2)).
    #[error("{what}: width {cols} is odd; rotary embedding pairs x[i] with x[i + d/2], so the head dim must be even")]
    OddWidth { what: &'static str, cols: usize },
    /// Shapes a data-movement op cannot combine (permute dims, slice bounds, concat parts).
    #[error("{what}: {detail}")]
    Shapes { what: &'static str, detail: String },
    /// Dimensions whose product overflows usize.
    #[error("{what}: dimensions {dims:?} have too many elements (overflows usize); use smaller dimensions")]
    TooLarge {
        what: &'static str,
        dims: Vec<usize>,
    },
}

pub(crate) fn check_len(
    what: &'static str,
    expected: usize,
    got: usize,
) -> Result<(), ComputeError> {
    if expected == got {
        Ok(())
    } else {
        Err(ComputeError::LengthMismatch {
            what,
            expected,
            got,
        })
    }
}

/// Product of `dims`, or an error naming them when it overflows.
pub(crate) fn checked_product(what: &'static str, dims: &[usize]) -> Result<usize, ComputeError> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| ComputeError::TooLarge {
            what,
            dims: dims.to_vec(),
        })
}

/// Row-wise ops need `cols >= 1` dividing the length (an empty slice is fine with any cols).
pub(crate) fn check_rows(what: &'static str, len: usize, cols: usize) -> Result<(), ComputeError> {
    if len == 0 || len.checked_rem(cols) == Some(0) {
        Ok(())
    } else {
        Err(ComputeError::RowWidth { what, len, cols })
    }
}

/// Validates matmul operands (shared by the kernel and its reference, which differ only in the
/// arithmetic): batch rule and lengths. Returns the output length.
pub(crate) fn check_matmul_operands(
    a: &[f32],
    b: &[f32],
    batch_a: usize,
    batch_b: usize,
    (m, k, n): (usize, usize, usize),
) -> Result<usize, ComputeError> {
    if batch_b != 1 && batch_b != batch_a {
        return Err(ComputeError::BatchMismatch { batch_a, batch_b });
    }
    check_len(
        "matmul a",
        checked_product("matmul a", &[batch_a, m, k])?,
        a.len(),
    )?;
    check_len(
        "matmul b",
        checked_product("matmul b", &[batch_b, k, n])?,
        b.len(),
    )?;
    checked_product("matmul out", &[batch_a, m, n])
}

/// Validates broadcasting operands (shared by the kernel and its reference); returns the
/// output shape.
pub(crate) fn check_broadcast_operands(
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
) -> Result<Vec<usize>, ComputeError> {
    check_len(
        "binary_broadcast a",
        checked_product("binary_broadcast a_shape", a_shape)?,
        a.len(),
    )?;
    check_len(
        "binary_broadcast b",
        checked_product("binary_broadcast b_shape", b_shape)?,
        b.len(),
    )?;
    broadcast_shape(a_shape, b_shape)
}
