//! `ttmesh stress --soak`: placeholder.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

pub fn run(
    _args: &crate::stress::StressArgs,
    _duration: Option<Duration>,
    _timeout: Duration,
    _stop: Arc<AtomicBool>,
) -> Result<(), String> {
    Err("--soak is not built yet".into())
}
