//! Running `ttmesh` as a child process: one run to completion ([`ttmesh`]), or held open next
//! to `ttmesh monitor` ([`Guard`]). Shared by the command-line tests (each file uses what it
//! needs).
#![allow(dead_code)]

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_ttmesh");
/// Generous: a debug build on a busy 2-core machine opens a T3K and runs the block slowly.
pub const STARTUP: Duration = Duration::from_secs(120);

/// Runs `ttmesh args` to completion, publishing no monitor segment.
pub fn ttmesh(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("TTMESH_MONITOR", "0")
        .output()
        .expect("the ttmesh binary runs")
}

/// Kills the child (if still running) and removes the listed /dev/shm files when dropped.
pub struct Guard {
    pub child: Option<Child>,
    pub files: Vec<PathBuf>,
}

impl Guard {
    pub fn spawn(args: &[&str]) -> Guard {
        Self::spawn_with(args, None)
    }

    /// `monitor`: the value of TTMESH_MONITOR, or None to leave it unset (publishing on).
    pub fn spawn_with(args: &[&str], monitor: Option<&str>) -> Guard {
        let mut cmd = Command::new(BIN);
        match monitor {
            Some(v) => cmd.env("TTMESH_MONITOR", v),
            None => cmd.env_remove("TTMESH_MONITOR"),
        };
        let child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ttmesh");
        Guard {
            child: Some(child),
            files: Vec::new(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("child").id()
    }

    /// Waits for the child to exit (killing it after `limit`) and returns its output.
    pub fn wait(&mut self, limit: Duration) -> Output {
        let mut child = self.child.take().expect("child");
        let deadline = Instant::now() + limit;
        while child.try_wait().expect("try_wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let out = child.wait_with_output().expect("wait");
                panic!(
                    "ttmesh did not exit within {limit:?}; stderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            sleep(Duration::from_millis(50));
        }
        let mut out = Output {
            status: child.wait().expect("wait"),
            stdout: Vec::new(),
            stderr: Vec::new(),
        };
        // The child has exited: its pipes hold everything it wrote.
        if let Some(mut s) = child.stdout.take() {
            s.read_to_end(&mut out.stdout).expect("read stdout");
        }
        if let Some(mut s) = child.stderr.take() {
            s.read_to_end(&mut out.stderr).expect("read stderr");
        }
        out
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

pub fn monitor(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("monitor")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ttmesh monitor")
}

pub fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}); stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Polls until the child's segment is listed and initialised (its header written, so it reads
/// as a process); its name. A segment is listed from the moment its owner creates the name,
/// before its header exists: acting on it then (killing the owner, say) tests another case.
pub fn wait_for_segment(g: &mut Guard) -> String {
    let pid = g.pid();
    let deadline = Instant::now() + STARTUP;
    loop {
        let initialised = ttmesh_monitor::list_segments()
            .into_iter()
            .filter(|s| s.pid == Some(pid))
            .find(|s| ttmesh_monitor::read_segment(&s.name).is_ok());
        if let Some(s) = initialised {
            return s.name;
        }
        if let Some(c) = g.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                let out = g.wait(Duration::from_secs(1));
                panic!(
                    "ttmesh run exited ({status}) before publishing; stderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        assert!(
            Instant::now() < deadline,
            "no initialised segment for pid {pid} after {STARTUP:?}"
        );
        sleep(Duration::from_millis(20));
    }
}

/// The JSON report `ttmesh run|decode --json --hold` prints before it holds (stdout is
/// line-buffered), read while the child still runs; within STARTUP or the test fails.
pub fn report_before_hold(g: &mut Guard) -> Value {
    let stdout = g
        .child
        .as_mut()
        .expect("child")
        .stdout
        .take()
        .expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let first = serde_json::Deserializer::from_reader(stdout)
            .into_iter::<Value>()
            .next();
        let _ = tx.send(first);
    });
    match rx.recv_timeout(STARTUP) {
        Ok(Some(Ok(v))) => v,
        Ok(other) => panic!("ttmesh run printed no JSON report: {other:?}"),
        Err(_) => panic!("no report from ttmesh run within {STARTUP:?}"),
    }
}

/// Polls `ttmesh monitor --once --json --pid PID` until `ready(process)` holds (bounded by
/// STARTUP); the chips it lists then. Every poll must succeed with no error line: the process
/// is holding its mesh open while this runs.
pub fn monitor_until(pid: u32, ready: impl Fn(&Value) -> bool) -> Vec<Value> {
    let pid_arg = pid.to_string();
    let deadline = Instant::now() + STARTUP;
    loop {
        let out = monitor(&["--once", "--json", "--pid", &pid_arg]);
        assert!(
            out.status.success(),
            "the monitor lost process {pid} before it was ready: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json_of(&out);
        assert_eq!(v["errors"], Value::Array(vec![]), "{v}");
        let process = &v["processes"][0];
        if ready(process) {
            return process["chips"].as_array().cloned().unwrap_or_default();
        }
        assert!(Instant::now() < deadline, "never ready: {v}");
        sleep(Duration::from_millis(20));
    }
}
