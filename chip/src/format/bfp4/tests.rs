//! bfloat4_b against an independent f64 statement of its rule, and its byte layout.
use super::*;
use proptest::prelude::*;

/// Independent f64 statement of the rule: scale from the largest binary exponent in the
/// block (2 fraction bits below it), round half to even, clamp to 7 steps.
fn naive_quantize_block(block: &[f32]) -> Vec<f32> {
    let e_max = block
        .iter()
        .filter(|x| **x != 0.0)
        .map(|x| (x.abs() as f64).log2().floor() as i32)
        .max()
        .map(|e| e.max(-127));
    let Some(e_max) = e_max else {
        return block.to_vec();
    };
    let step = 2f64.powi(e_max - 2);
    block
        .iter()
        .map(|&x| {
            let m = (x.abs() as f64 / step).round_ties_even().min(7.0);
            let v = (m * step) as f32;
            if x.is_sign_negative() {
                -v
            } else {
                v
            }
        })
        .collect()
}

fn round_trip(tile: &[f32]) -> Vec<f32> {
    let mut t = tile.to_vec();
    quantize_bfp4(&mut t).unwrap();
    t
}

#[test]
fn known_bytes() {
    let mut tile = vec![0f32; TILE_ELEMS];
    tile[0] = 1.0; // block 0: E = 127, m = 4
    tile[1] = -0.5; // m = 2, sign set
    tile[2] = 1.125; // halfway between m = 4 and 5: ties to even -> 4
    tile[3] = 1.375; // halfway between 5 and 6 -> 6
    tile[4] = 0.1; // below half a step (0.125): zero
    tile[5] = 1.99; // rounds to 8, saturates to 7
    tile[16] = 3.0; // block 1: E = 128, m = 6
    let mut b = vec![0u8; BFP4_TILE_BYTES];
    pack_bfp4_tile(&tile, &mut b).unwrap();
    assert_eq!(&b[..3], &[127, 128, 0]);
    // Codes 4, 0b1010; 4, 6; 0, 7: first of each pair in the low nibble.
    assert_eq!(&b[64..67], &[0xA4, 0x64, 0x70]);
    assert_eq!(b[64 + 8], 6);
    let mut back = vec![0f32; TILE_ELEMS];
    unpack_bfp4_tile(&b, &mut back).unwrap();
    assert_eq!(&back[..6], &[1.0, -0.5, 1.0, 1.5, 0.0, 1.75]);
    assert_eq!(back[16], 3.0);
}

#[test]
fn non_finite_values_survive_and_flush_their_block() {
    let mut tile = vec![1.5f32; TILE_ELEMS];
    tile[0] = f32::INFINITY;
    tile[1] = f32::NEG_INFINITY;
    tile[2] = f32::NAN;
    tile[3] = -7.0;
    let q = round_trip(&tile);
    assert_eq!(q[0], f32::INFINITY);
    assert_eq!(q[1], f32::NEG_INFINITY);
    assert!(q[2].is_nan());
    assert_eq!(q[3].to_bits(), (-0.0f32).to_bits());
    assert_eq!(q[16], 1.5);
}

#[test]
fn lengths_are_checked() {
    let mut out = vec![0u8; BFP4_TILE_BYTES];
    assert!(pack_bfp4_tile(&[0.0; 1000], &mut out).is_err());
    assert!(unpack_bfp4_tile(&out[..575], &mut [0.0; 1024]).is_err());
    assert!(quantize_bfp4(&mut [0.0; 1500]).is_err());
    let mut two = vec![0.75f32; 2 * TILE_ELEMS];
    let mut bytes = vec![0u8; 2 * BFP4_TILE_BYTES];
    pack_bfp4_tiles(&two, &mut bytes).unwrap();
    assert!(unpack_bfp4_tiles(&bytes[1..], &mut two).is_err());
    unpack_bfp4_tiles(&bytes, &mut two).unwrap();
    assert!(two.iter().all(|&x| x == 0.75));
}

/// Values spread over a few binades, random signs, some zeros.
fn tiles() -> impl Strategy<Value = Vec<f32>> {
    (
        -140i32..127,
        prop::collection::vec((any::<u32>(), 0u32..8, any::<bool>()), TILE_ELEMS),
    )
        .prop_map(|(base, parts)| {
            parts
                .into_iter()
                .map(|(frac, drop, neg)| {
                    if drop == 7 {
                        return 0.0;
                    }
                    let v = (1.0 + (frac >> 9) as f64 / 8388608.0)
                        * 2f64.powi((base - drop as i32).max(-149));
                    if neg {
                        -(v as f32)
                    } else {
                        v as f32
                    }
                })
                .collect()
        })
}

proptest! {
    #[test]
    fn matches_naive_rule_and_error_bound(tile in tiles()) {
        let q = round_trip(&tile);
        for (b, (xs, qs)) in tile.chunks(16).zip(q.chunks(16)).enumerate() {
            let want = naive_quantize_block(xs);
            for i in 0..16 {
                prop_assert_eq!(qs[i].to_bits(), want[i].to_bits(),
                    "block {} value {} ({})", b, i, xs[i]);
            }
            let max = xs.iter().fold(0f32, |m, x| m.max(x.abs())) as f64;
            let bound = if max >= f32::MIN_POSITIVE as f64 { max / 8.0 } else { 2f64.powi(-129) };
            for (x, y) in xs.iter().zip(qs) {
                prop_assert!((*x as f64 - *y as f64).abs() <= bound, "{} -> {}", x, y);
            }
        }
    }

    #[test]
    fn any_bytes_decode_to_their_codes(bytes in prop::collection::vec(any::<u8>(), BFP4_TILE_BYTES)) {
        let mut out = vec![0f32; TILE_ELEMS];
        unpack_bfp4_tile(&bytes, &mut out).unwrap();
        for (j, &e) in bytes[..64].iter().enumerate().filter(|&(_, &e)| e != 255) {
            for i in 0..16 {
                let byte = bytes[64 + 8 * j + i / 2];
                let code = if i % 2 == 0 { byte & 0xF } else { byte >> 4 };
                let want = f64::from(code & 7) * 2f64.powi(i32::from(e) - 129);
                prop_assert_eq!(out[16 * j + i].abs() as f64, want);
            }
        }
        // Decoding is a pure function of the bytes: repacking the result is stable.
        prop_assert_eq!(round_trip(&out).iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            out.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    }
}
