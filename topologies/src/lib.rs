//! ttmesh-topologies: cluster descriptors (which chips, where in the mesh, which ethernet
//! ports link them) as TOML or as tt-metal's mesh graph descriptor (MGD 2.0 textproto), and
//! the parsers that turn one into a checked [`ClusterGraph`].
//!
//! This crate owns the descriptor schema, the shipped descriptors (compiled into the binary,
//! no files needed at run time) and graph queries (neighbours, hop distances, rows, columns,
//! a ring or line through all chips). It is pure data: it must not know about chips' memory,
//! the fabric, threads, or the mesh API that consumes it.
//!
//! # Names [`load`] accepts
//!
//! * built in ([`known_names`]): `n150` (1 Wormhole, 1x1), `n300` (2 Wormhole, 1x2, 2 links),
//!   `t3k` (8 Wormhole, 2x4, 2 links per neighbour pair, from tt-metal's mock T3K descriptor),
//!   `galaxy` (32 Wormhole, 4x8, 4 links per neighbour pair, no wraparound), `p150`
//!   (1 Blackhole), `p300` (2 Blackhole, 1x2, 2 links: ttmesh's assumption);
//! * generated: `line-N` and `ring-N`, N in 2..=64 (see [`generate`]: 1xN Wormhole, one link
//!   per neighbour pair, the ring closes N-1 -> 0);
//! * anything else is taken as the path of a descriptor file: a mesh graph descriptor when
//!   its name ends in `.textproto` (`.txtpb`, `.pbtxt`, `.prototxt`), or when a file not named
//!   `.toml` starts with an MGD top-level field; TOML otherwise.
//!
//! # Mesh graph descriptors
//!
//! tt-metal's MGD 2.0 (see [`parse_mgd_str`] and `src/mgd.rs`): the mesh that
//! `top_level_instance` names (directly, or as the one mesh of a graph) becomes a grid of
//! `device_topology` `dims` (`[rows, cols]`, or `[n]` for 1 x n), chip ids row-major,
//! `channels` `count` links between grid neighbours, and wrap links closing each dimension
//! whose `dim_types` entry is `RING`. [`ClusterGraph::dim_kinds`] keeps the declared kinds, from
//! which the mesh picks the fabric config (`FABRIC_2D`, a torus, `FABRIC_1D_RING`, ...).
//! Errors name the line, the field and the fix, as for TOML; unknown fields are refused.
//!
//! # Descriptor schema
//!
//! ```toml
//! name = "my-cluster"        # required: shown by `ttmesh topo` and in reports
//! arch = "wormhole_b0"       # required: "wormhole_b0" (16 eth ports) or "blackhole" (14)
//! mesh_shape = [2, 4]        # required: [rows, cols], each >= 1, rows * cols <= 4096
//!
//! [[chips]]                  # required: exactly one chip per mesh cell
//! id = 0                     #   required: ids are 0..rows*cols-1, each once; they are the
//!                            #   device ids
//! coord = [0, 1]             #   required: [row, col] inside mesh_shape
//! board = "n300"             #   optional: a label, e.g. the board type
//!
//! [[links]]                  # optional: one entry per ethernet link (cable or board trace)
//! a = [0, 6]                 #   required: [chip, port] of one end
//! b = [2, 6]                 #   required: [chip, port] of the other end, another chip
//! ```
//!
//! Ports are `0..16` on Wormhole and `0..14` on Blackhole; each (chip, port) carries at most one
//! link. Several links between one pair of chips are normal (2 per pair on T3K). Arrays of
//! inline tables (`chips = [{ id = 0, coord = [0, 0] }, ...]`) are the same thing in TOML and
//! are accepted too. Unknown keys are errors, so a typo is not silently ignored.
//!
//! Mesh coordinates are `(row, col)`. TT-NN's `cluster_axis = 0` runs along the columns
//! (chips that differ in row) and `cluster_axis = 1` along the rows; see
//! [`ClusterGraph::lines_along_axis`].
//!
//! Every error names the source (file path or built-in name), the line and the fix:
//! `t3k-custom.toml:42: port 3 of chip 5 is used by two links (also at line 17); ...`.

#![forbid(unsafe_code)]

mod error;
pub mod generate;
mod graph;
mod mgd;
mod parse;
mod textproto;
mod write;

use std::path::Path;

pub use error::TopologyError;
pub use generate::GENERATED_FAMILIES;
pub use graph::{ArchName, Chip, ChipId, ClusterGraph, DimKind, Line, Link};
pub use mgd::{parse_mgd_str, MGD_EXTENSIONS};
pub use parse::{parse_str, MAX_CHIPS};

/// The shipped descriptors: (name, TOML text).
const BUILTIN: [(&str, &str); 6] = [
    ("n150", include_str!("../descriptors/n150.toml")),
    ("n300", include_str!("../descriptors/n300.toml")),
    ("t3k", include_str!("../descriptors/t3k.toml")),
    ("galaxy", include_str!("../descriptors/galaxy.toml")),
    ("p150", include_str!("../descriptors/p150.toml")),
    ("p300", include_str!("../descriptors/p300.toml")),
];

/// The built-in descriptor names. The generated families ([`GENERATED_FAMILIES`]: `line-N`,
/// `ring-N` for N in 2..=64) are accepted by [`load`] but not listed here.
pub fn known_names() -> Vec<String> {
    BUILTIN.iter().map(|(n, _)| n.to_string()).collect()
}

/// The TOML text of a built-in descriptor, e.g. as a starting point for a custom file.
pub fn builtin_descriptor(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// "a character device", "a FIFO", ... for a path that is neither a file nor a folder.
fn special_file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// A descriptor file's text: a mesh graph descriptor when its name ends in one of
/// [`MGD_EXTENSIONS`] (or, with another ending than `.toml`, when its first field is an MGD
/// top-level field), else TOML.
fn parse_file_text(text: &str, path: &str) -> Result<ClusterGraph, TopologyError> {
    let ext = Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let is_mgd =
        MGD_EXTENSIONS.contains(&ext.as_str()) || (ext != "toml" && mgd::looks_like_mgd(text));
    if is_mgd {
        parse_mgd_str(text, path)
    } else {
        parse_str(text, path)
    }
}

/// Loads a topology by name or path. Order: a built-in name, then a well-formed `line-N` /
/// `ring-N`, then an existing file at `name_or_path`; a `line-`/`ring-` name with a bad N
/// reports that N, a path that exists but is no file is [`TopologyError::NotADescriptor`], and
/// anything else is [`TopologyError::UnknownTopology`].
pub fn load(name_or_path: &str) -> Result<ClusterGraph, TopologyError> {
    if let Some(text) = builtin_descriptor(name_or_path) {
        return parse_str(text, &format!("{name_or_path}.toml"));
    }
    let generated = generate::try_generate(name_or_path);
    if let Some(Ok(g)) = generated {
        return Ok(g);
    }
    let path = Path::new(name_or_path);
    if path.is_file() {
        let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        return parse_file_text(&text, name_or_path);
    }
    if let Some(Err(e)) = generated {
        return Err(e);
    }
    if path.is_dir() {
        return Err(TopologyError::IsAFolder {
            path: path.to_path_buf(),
            known: known_names().join(", "),
        });
    }
    // Exists, but neither a file nor a folder: reading it could block (a FIFO) or give
    // nothing (/dev/null); say what it is rather than that nothing is there.
    if let Ok(meta) = std::fs::metadata(path) {
        return Err(TopologyError::NotADescriptor {
            path: path.to_path_buf(),
            kind: special_file_kind(&meta.file_type()),
            known: known_names().join(", "),
        });
    }
    Err(TopologyError::UnknownTopology {
        name: name_or_path.to_string(),
        known: known_names().join(", "),
        families: GENERATED_FAMILIES.to_string(),
    })
}
