//! A short soak (its own process: a sampled thread count must not see other tests' threads):
//! replays are checked, samples are taken, nothing grows.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use ttmesh_stress::{run_soak, SoakOptions, TopologyChoice};

#[test]
fn a_short_soak_checks_replays_and_does_not_grow() {
    let opts = SoakOptions {
        topology: TopologyChoice::Ring(4),
        duration: Duration::from_millis(2500),
        check_every: 10,
        sample_every: Duration::from_millis(500),
        timeout: Duration::from_secs(2),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let r = run_soak(&opts, &|_| {}).unwrap();
    assert_eq!(r.failure, None, "{r:?}");
    assert!(
        r.checks >= 2 && r.replays >= 20 && r.samples.len() >= 2,
        "{r:?}"
    );
}
