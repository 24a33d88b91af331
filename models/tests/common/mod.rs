//! What the model tests share: a file path that cleans up after itself.

use std::path::{Path, PathBuf};

/// A path named `name` in a fresh directory of its own, removed with everything in it when
/// this is dropped: each `cargo test` run used to leave ~140 MB of GGUF files behind.
pub struct TempFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl TempFile {
    pub fn new(name: &str) -> TempFile {
        let dir = tempfile::Builder::new()
            .prefix("ttmesh-models-")
            .tempdir()
            .expect("a temporary directory");
        let path = dir.path().join(name);
        TempFile { _dir: dir, path }
    }
}

impl std::ops::Deref for TempFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempFile {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}
