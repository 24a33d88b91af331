//! The fidelity table's anchors stay put: the fit reproduces its calibration row and the
//! shipped constant is the fitted one; a held-out row and a calibration CCL row stay within
//! their published figures' margins; the table prints every published row.

use ttmesh::ArchSpec;
use ttmesh_benches::predict::{
    capture_on, fit_op_extra, predict_ccl, published, published_ccl, CclRow, DecodePrediction,
    CALIBRATION_ROW, LLAMA_3_2_1B, PUBLISHED_DTYPE,
};
use ttmesh_models::DeviceDecodeConfig;
use ttmesh_profile::Calibration;

fn decode(batch: usize) -> DeviceDecodeConfig {
    DeviceDecodeConfig {
        batch,
        max_positions: 129,
        dtype: PUBLISHED_DTYPE,
    }
}

#[test]
fn the_fit_reproduces_its_row_and_ships_in_calibration_rs() {
    let (name, mesh, batch) = CALIBRATION_ROW;
    let row = published()
        .into_iter()
        .find(|r| (r.model.name, r.mesh, r.batch) == (name, mesh, batch))
        .expect("the calibration row is published");
    let (captured, arch) = capture_on(mesh, &row.model.config(131072), decode(batch)).unwrap();
    let fitted = fit_op_extra(&captured, &arch, batch, row.tokens_per_s_per_user).unwrap();
    let shipped = Calibration::for_arch(&ArchSpec::wormhole_b0()).predict_op_extra_ns;
    assert!(
        (fitted - shipped).abs() < 0.01 * shipped,
        "fitted {fitted} ns, calibration.rs ships {shipped} ns: update it"
    );
    let p = DecodePrediction::of(&captured, &arch, batch, 128).unwrap();
    let ratio = p.token.tokens_per_s_per_user() / row.tokens_per_s_per_user;
    assert!((ratio - 1.0).abs() < 0.01, "{ratio}");
}

#[test]
fn a_held_out_row_stays_within_25_percent() {
    // Llama-3.2-1B on an n300 at batch 1: 105.9 t/s/u published (tt_transformers PERF.md).
    let (captured, arch) = capture_on("n300", &LLAMA_3_2_1B.config(131072), decode(1)).unwrap();
    let p = DecodePrediction::of(&captured, &arch, 1, 128).unwrap();
    let ratio = p.token.tokens_per_s_per_user() / 105.9;
    assert!((0.75..=1.25).contains(&ratio), "{ratio}");
    assert!(p.token.collective_ns > 0.0);
}

#[test]
fn ccl_calibration_row_and_held_out_shape() {
    let rows = published_ccl();
    let ag4 = rows
        .iter()
        .find(|r| r.op == "all_gather" && r.chips == 4 && r.size == 1 << 20)
        .unwrap();
    let us = predict_ccl(ag4).unwrap();
    assert!((ag4.us / us - 1.0).abs() < 0.05, "{} vs {us}", ag4.us);
    // A larger message never takes less time, on every op of the table.
    for op in ["all_gather", "reduce_scatter", "all_reduce"] {
        let times: Vec<f64> = rows
            .iter()
            .filter(|r| r.op == op && r.chips == 4 && r.size <= 1 << 20)
            .map(|r| predict_ccl(r).unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{op}: {times:?}");
    }
}

#[test]
fn a_ring_sends_both_ways_and_an_all_reduce_is_a_reduce_scatter_then_an_all_gather() {
    let row = |op, ring, chips, size| CclRow {
        op,
        chips,
        ring,
        size,
        us: 0.0,
    };
    // 64 MiB on 8 chips is link-bound: a ring's busiest direction carries half a line's
    // bytes, with the same start-up and steps.
    let line = predict_ccl(&row("all_gather", false, 8, 64 << 20)).unwrap();
    let ring = predict_ccl(&row("all_gather", true, 8, 64 << 20)).unwrap();
    assert!((0.45..0.55).contains(&(ring / line)), "{ring} vs {line}");
    // Two phases: the start-ups, steps and bytes of both (packet rounding aside).
    for size in [32768, 1 << 20] {
        let all_reduce = predict_ccl(&row("all_reduce", false, 4, size)).unwrap();
        let parts = predict_ccl(&row("reduce_scatter", false, 4, size)).unwrap()
            + predict_ccl(&row("all_gather", false, 4, size)).unwrap();
        assert!(
            (all_reduce / parts - 1.0).abs() < 0.02,
            "{size}: {all_reduce} vs {parts}"
        );
    }
}

#[test]
fn the_quick_table_prints_every_row_it_covers() {
    let out = ttmesh_benches::predict::run(true);
    let llm = published()
        .iter()
        .filter(|r| r.model.hidden <= 2048)
        .count();
    let printed = out
        .lines()
        .filter(|l| l.starts_with(LLAMA_3_2_1B.name))
        .count();
    assert_eq!(printed, llm, "{out}");
    assert!(!out.contains("not predicted"), "{out}");
    assert!(out.contains("held out:"), "{out}");
}
