//! The crate's one error type. Every variant that comes from a descriptor names the source
//! (file path or built-in name) and the 1-based line, so a message reads like a compiler's:
//! `t3k-custom.toml:42: port 3 of chip 5 is used by two links (also at line 17); ...`.

use std::path::PathBuf;

/// Everything that can go wrong while loading or checking a cluster descriptor.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// Not valid TOML, or a value of the wrong type or an unknown key (the toml parser's message).
    #[error("{source_name}:{line}: {message}")]
    Syntax {
        source_name: String,
        line: usize,
        message: String,
    },

    /// A required field is absent.
    #[error("{source_name}:{line}: {context} has no `{field}`; add `{example}`")]
    MissingField {
        source_name: String,
        line: usize,
        field: &'static str,
        context: String,
        example: &'static str,
    },

    /// A field is present but its value is unusable (wrong length, negative, zero, empty).
    #[error("{source_name}:{line}: {message}")]
    InvalidValue {
        source_name: String,
        line: usize,
        message: String,
    },

    /// `arch` names an architecture ttmesh does not know.
    #[error("{source_name}:{line}: unknown arch \"{arch}\"; known archs: {known}")]
    UnknownArch {
        source_name: String,
        line: usize,
        arch: String,
        /// The spellings this kind of descriptor takes, e.g. "wormhole_b0, blackhole".
        known: String,
    },

    /// A mesh graph descriptor names a field its message does not have (a typo, or a field
    /// of another message).
    #[error("{source_name}:{line}: unknown field `{field}` in {message}; it takes {known} (check the spelling and the braces it sits in)")]
    UnknownField {
        source_name: String,
        line: usize,
        field: String,
        /// Where the field sits, e.g. "mesh_descriptors \"M0\"".
        message: String,
        known: String,
    },

    /// Two `[[chips]]` entries share an id.
    #[error("{source_name}:{line}: chip id {id} is defined twice (also at line {first_line}); each chip needs its own id")]
    DuplicateChipId {
        source_name: String,
        line: usize,
        id: u32,
        first_line: usize,
    },

    /// A chip id is not below the number of chips; ids must be 0..N-1 because they double as
    /// device ids.
    #[error("{source_name}:{line}: chip id {id} is out of range; a mesh of {num_chips} chips numbers them 0..={max}", max = num_chips - 1)]
    ChipIdOutOfRange {
        source_name: String,
        line: usize,
        id: u32,
        num_chips: usize,
    },

    /// A chip's coordinate lies outside `mesh_shape`.
    #[error("{source_name}:{line}: chip {chip} has coord [{row}, {col}], outside mesh_shape [{rows}, {cols}] (rows 0..={max_r}, cols 0..={max_c})", max_r = rows - 1, max_c = cols - 1)]
    CoordOutOfMesh {
        source_name: String,
        line: usize,
        chip: u32,
        row: usize,
        col: usize,
        rows: usize,
        cols: usize,
    },

    /// Two chips sit at the same coordinate.
    #[error("{source_name}:{line}: chip {chip} has coord [{row}, {col}], already taken by chip {other} (line {first_line}); each mesh cell holds one chip")]
    DuplicateCoord {
        source_name: String,
        line: usize,
        chip: u32,
        other: u32,
        row: usize,
        col: usize,
        first_line: usize,
    },

    /// The chips do not fill every cell of `mesh_shape`.
    #[error("{source_name}:{line}: mesh_shape [{rows}, {cols}] has {cells} cells and the chips fill {num_chips} of them{missing}; every cell needs exactly one chip", cells = rows * cols)]
    MeshNotFilled {
        source_name: String,
        line: usize,
        rows: usize,
        cols: usize,
        num_chips: usize,
        /// Text such as ` (no chip at [1, 3], [1, 4])`, or empty.
        missing: String,
    },

    /// A link names a chip that no `[[chips]]` entry defines.
    #[error("{source_name}:{line}: link names chip {chip}, which is not in [[chips]]; add that chip or fix the id")]
    UnknownChip {
        source_name: String,
        line: usize,
        chip: u32,
    },

    /// A link port is beyond the architecture's ethernet port count.
    #[error("{source_name}:{line}: port {port} of chip {chip} does not exist; {arch} chips have {num_ports} ethernet ports (0..={max})", max = num_ports - 1)]
    PortOutOfRange {
        source_name: String,
        line: usize,
        chip: u32,
        port: u32,
        arch: &'static str,
        num_ports: u32,
    },

    /// One (chip, port) is an end of two links.
    #[error("{source_name}:{line}: port {port} of chip {chip} is used by two links (also at line {first_line}); each (chip, port) may carry one link")]
    PortReused {
        source_name: String,
        line: usize,
        chip: u32,
        port: u32,
        first_line: usize,
    },

    /// A link lacks one of its ends, or joins a chip to itself.
    #[error("{source_name}:{line}: {problem}")]
    OneSidedLink {
        source_name: String,
        line: usize,
        problem: String,
    },

    /// `load` got a name that is neither built in, generated, nor an existing file.
    #[error("unknown topology \"{name}\": not a built-in name ({known}), not {families}, and no file exists at that path")]
    UnknownTopology {
        name: String,
        known: String,
        families: String,
    },

    /// `load` got the path of a folder.
    #[error("topology path {} is a folder, not a descriptor file; name a .toml file in it (see topologies/descriptors/) or a built-in name ({known})", path.display())]
    IsAFolder { path: PathBuf, known: String },

    /// `load` got a path that exists but is neither a file nor a folder (a device such as
    /// /dev/null, a FIFO, a socket).
    #[error("topology path {} exists but is not a cluster descriptor: it is {kind}, not a TOML file; name a descriptor file (see topologies/descriptors/) or a built-in name ({known})", path.display())]
    NotADescriptor {
        path: PathBuf,
        kind: &'static str,
        known: String,
    },

    /// A `line-N` / `ring-N` name with a bad N.
    #[error("bad topology name \"{name}\": {problem}")]
    BadGeneratedName { name: String, problem: String },

    /// The descriptor file exists (or was named) but could not be read.
    #[error("cannot read topology file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl TopologyError {
    /// The 1-based line in the descriptor the error points at, if it comes from one.
    pub fn line(&self) -> Option<usize> {
        use TopologyError::*;
        match self {
            Syntax { line, .. }
            | MissingField { line, .. }
            | InvalidValue { line, .. }
            | UnknownArch { line, .. }
            | UnknownField { line, .. }
            | DuplicateChipId { line, .. }
            | ChipIdOutOfRange { line, .. }
            | CoordOutOfMesh { line, .. }
            | DuplicateCoord { line, .. }
            | MeshNotFilled { line, .. }
            | UnknownChip { line, .. }
            | PortOutOfRange { line, .. }
            | PortReused { line, .. }
            | OneSidedLink { line, .. } => Some(*line),
            UnknownTopology { .. }
            | IsAFolder { .. }
            | NotADescriptor { .. }
            | BadGeneratedName { .. }
            | Io { .. } => None,
        }
    }
}
