//! The README and ARCHITECTURE.md stay true: every environment variable, CLI flag, file path
//! and code name they mention exists, and every environment variable the code reads is in the
//! README's table. A rename that forgets the docs fails here.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every tracked-looking source file: .rs, .sh, .py under the workspace, not under target/.
fn sources(exts: &[&str]) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if !(name.starts_with('.') || name == "target" || name == "node_modules") {
                    stack.push(path);
                }
            } else if exts.iter().any(|e| name.ends_with(e)) {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    out.push((path, text));
                }
            }
        }
    }
    out
}

/// Words that start with `prefix` in `text`: the prefix and the word characters after it
/// (at least one), not preceded by a word character.
fn words_with_prefix(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices(prefix) {
        if i > 0 && is_word(text.as_bytes()[i - 1]) {
            continue;
        }
        let start = i + prefix.len();
        let end = text[start..]
            .bytes()
            .position(|b| !is_word(b) && b != b'-')
            .map_or(text.len(), |p| start + p);
        let rest = text[start..end].trim_end_matches('-');
        if !rest.is_empty() {
            out.insert(format!("{prefix}{rest}"));
        }
    }
    out
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The text between backticks, in order.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

#[test]
fn environment_variables_are_one_table_both_ways() {
    let table: BTreeSet<String> = ttmesh_settings::VARIABLES
        .iter()
        .map(|v| v.name.to_string())
        .collect();
    let readme = read("README.md");
    let in_readme_table: BTreeSet<String> = readme
        .lines()
        .filter(|l| l.starts_with("| `TTMESH_"))
        .flat_map(|l| words_with_prefix(l, "TTMESH_").into_iter().take(1))
        .collect();
    assert_eq!(
        in_readme_table, table,
        "README's table of environment variables vs ttmesh_settings::VARIABLES"
    );
    for doc in ["README.md", "ARCHITECTURE.md"] {
        for name in words_with_prefix(&read(doc), "TTMESH_") {
            assert!(
                table.contains(&name),
                "{doc} mentions {name}, which ttmesh does not read"
            );
        }
    }
    for (path, text) in sources(&[".rs", ".sh", ".py"]) {
        for name in words_with_prefix(&text, "TTMESH_") {
            assert!(
                table.contains(&name),
                "{} uses {name}, which is not in ttmesh_settings::VARIABLES (nor the README's table): add it there",
                path.display()
            );
        }
    }
    // Only the settings crate reads the environment from Rust.
    for (path, text) in sources(&[".rs"]) {
        if path.starts_with(root().join("settings"))
            || path.ends_with(file!().rsplit('/').next().unwrap())
        {
            continue;
        }
        for line in text.lines() {
            if line.contains("env::var") && line.contains("TTMESH_") {
                panic!(
                    "{} reads a TTMESH_ variable itself: read it through ttmesh_settings",
                    path.display()
                );
            }
        }
    }
}

/// `--flag` words in `text`.
fn flags(text: &str) -> BTreeSet<String> {
    words_with_prefix(text, "--")
        .into_iter()
        .filter(|f| f.len() > 3 && !f.starts_with("---"))
        .collect()
}

#[test]
fn every_cli_flag_the_readme_shows_exists() {
    let readme = read("README.md");
    let mut help: HashMap<String, String> = HashMap::new();
    let mut help_of = |words: &[&str]| -> Option<String> {
        let key = words.join(" ");
        if let Some(h) = help.get(&key) {
            return Some(h.clone());
        }
        let mut args = words.to_vec();
        args.push("--help");
        let out = common::ttmesh(&args);
        let text = out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).to_string())?;
        help.insert(key, text.clone());
        Some(text)
    };
    let mut all_help = String::new();
    for sub in [
        "run", "plan", "decode", "topo", "monitor", "bench", "stress", "report",
    ] {
        all_help += &help_of(&[sub]).unwrap_or_else(|| panic!("ttmesh {sub} --help failed"));
    }
    for extra in [["plan", "decode"], ["report", "import"]] {
        all_help += &help_of(&extra).unwrap_or_default();
    }
    // A command line: its flags must be in its subcommand's help.
    for line in readme.lines() {
        let Some(rest) = line.trim().strip_prefix("cargo run --release -- ") else {
            continue;
        };
        let command = rest.split('#').next().unwrap();
        let words: Vec<&str> = command.split_whitespace().collect();
        let mut text =
            help_of(&words[..1]).unwrap_or_else(|| panic!("README: `{line}`: no such subcommand"));
        if words.len() > 1 && !words[1].starts_with('-') {
            text += &help_of(&words[..2]).unwrap_or_default();
        }
        for f in flags(command) {
            assert!(
                text.contains(&f),
                "README: `{}` uses {f}, which `ttmesh {} --help` does not list",
                line.trim(),
                words[0]
            );
        }
    }
    // Prose: a flag named anywhere must exist in some subcommand (the Python section's
    // flags are `python -m ttmesh`'s and pytest's, checked by the Python tests).
    let python = readme.find("\n## Python").map(|a| {
        let b = readme[a + 1..]
            .find("\n## ")
            .map_or(readme.len(), |b| a + 1 + b);
        a..b
    });
    let prose = match python {
        Some(r) => format!("{}{}", &readme[..r.start], &readme[r.end..]),
        None => readme.clone(),
    };
    for f in flags(&prose) {
        if f.starts_with("--release")
            || [
                "--workspace",
                "--features",
                "--example",
                "--ignored",
                "--nocapture",
                "--no-fail-fast",
                "--profiler-path",
                "--test",
                // mpirun's
                "--allow-run-as-root",
                "--oversubscribe",
                "--hostfile",
                "--map-by",
                "--mca",
            ]
            .contains(&f.as_str())
        {
            continue; // cargo's, mpirun's and other tools' flags
        }
        assert!(
            all_help.contains(&f),
            "README mentions {f}, which no ttmesh subcommand takes"
        );
    }
}

#[test]
fn every_path_and_code_name_the_docs_give_exists() {
    let rust: String = sources(&[".rs"])
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join("\n");
    let idents: BTreeSet<&str> = rust
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    for doc in ["README.md", "ARCHITECTURE.md"] {
        let text = read(doc);
        // What is planned and not built yet is named in its own section.
        let built = text.split("\n## Where the next floors go").next().unwrap();
        for tick in backticked(built) {
            let t = tick.trim();
            // Repository paths.
            let looks_like_path = !t.contains(' ')
                && !t.contains('*')
                && t.contains('/')
                && !t.starts_with('/')
                && !t.starts_with("target/")
                && !t.contains("://")
                && [".rs", ".sh", ".toml", ".md", ".py", "/"]
                    .iter()
                    .any(|e| t.ends_with(e));
            if looks_like_path {
                // A path is the repository's, or a crate's (`allocator/` in chip's section).
                let p = t.split("::").next().unwrap();
                let exists = root().join(p).exists()
                    || std::fs::read_dir(root()).unwrap().flatten().any(|c| {
                        c.path().join(p).exists() || c.path().join("src").join(p).exists()
                    });
                assert!(exists, "{doc} names `{t}`, which does not exist");
                continue;
            }
            // Code paths like `chip::device::default_operation_timeout` or `Type::method`:
            // every segment must be an identifier somewhere in the Rust sources.
            let code = t.trim_end_matches("()");
            if code.contains("::")
                && !code.contains(' ')
                && code
                    .split("::")
                    .all(|s| !s.is_empty() && s.bytes().all(is_word))
            {
                for seg in code.split("::") {
                    assert!(
                        idents.contains(seg),
                        "{doc} names `{t}`, but no Rust source has `{seg}`"
                    );
                }
            }
        }
    }
}
