//! TOML text -> checked [`ClusterGraph`]. Serde reads the text into loosely typed, spanned raw
//! structs; every rule is then checked here by hand so each error can name its line and say
//! what to write instead.

use std::collections::HashMap;

use serde::Deserialize;
use toml::Spanned;

use crate::graph::{ArchName, Chip, ChipId, ClusterGraph, Link};
use crate::TopologyError;

/// Above this many chips a descriptor is refused: it bounds what a hostile file can make us
/// allocate, and is far beyond any Tenstorrent system.
pub const MAX_CHIPS: usize = 4096;

type SpannedInts = Spanned<Vec<Spanned<i64>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    name: Option<Spanned<String>>,
    arch: Option<Spanned<String>>,
    mesh_shape: Option<SpannedInts>,
    chips: Option<Vec<Spanned<RawChip>>>,
    links: Option<Vec<Spanned<RawLink>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChip {
    id: Option<Spanned<i64>>,
    coord: Option<SpannedInts>,
    board: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    a: Option<SpannedInts>,
    b: Option<SpannedInts>,
}

/// Maps byte offsets to 1-based line numbers and builds errors that carry the source name.
struct Ctx<'a> {
    source_name: &'a str,
    /// Byte offset of every '\n', so a line lookup is a binary search (a descriptor has a
    /// line-numbered span for every chip and link end).
    newlines: Vec<usize>,
}

impl Ctx<'_> {
    fn new<'a>(text: &str, source_name: &'a str) -> Ctx<'a> {
        let newlines = text
            .bytes()
            .enumerate()
            .filter(|&(_, b)| b == b'\n')
            .map(|(i, _)| i)
            .collect();
        Ctx {
            source_name,
            newlines,
        }
    }

    fn line(&self, offset: usize) -> usize {
        // Newlines strictly before `offset`, plus one.
        self.newlines.partition_point(|&nl| nl < offset) + 1
    }

    fn line_of<T>(&self, s: &Spanned<T>) -> usize {
        self.line(s.span().start)
    }

    fn src(&self) -> String {
        self.source_name.to_string()
    }

    fn invalid(&self, line: usize, message: String) -> TopologyError {
        TopologyError::InvalidValue {
            source_name: self.src(),
            line,
            message,
        }
    }

    fn missing(
        &self,
        line: usize,
        field: &'static str,
        context: &str,
        example: &'static str,
    ) -> TopologyError {
        TopologyError::MissingField {
            source_name: self.src(),
            line,
            field,
            context: context.to_string(),
            example,
        }
    }

    /// `[a, b]` of integers; `accept` names each number and its accepted range (inclusive),
    /// which is what an error quotes. Numbers below the range or beyond `u32` are refused here;
    /// the callers check the upper bounds they know better (a coord outside the mesh, ...).
    fn pair(
        &self,
        v: &SpannedInts,
        what: &str,
        form: &str,
        accept: [Accept; 2],
    ) -> Result<(u32, u32), TopologyError> {
        let line = self.line_of(v);
        let items = v.get_ref();
        if items.len() != 2 {
            return Err(self.invalid(
                line,
                format!("{what} has {} numbers; write {what} = {form}", items.len()),
            ));
        }
        let mut out = [0u32; 2];
        for ((slot, item), acc) in out.iter_mut().zip(items).zip(accept) {
            let n = *item.get_ref();
            *slot = u32::try_from(n)
                .ok()
                .filter(|&x| x >= acc.min)
                .ok_or_else(|| {
                    self.invalid(
                        self.line_of(item),
                        format!(
                            "{what} holds {n}; {} must be from {} to {}: write {what} = {form}",
                            acc.name, acc.min, acc.max
                        ),
                    )
                })?;
        }
        Ok((out[0], out[1]))
    }
}

/// One number of a pair: its name and the range a descriptor may use (inclusive).
#[derive(Clone, Copy)]
struct Accept {
    name: &'static str,
    min: u32,
    max: u32,
}

impl Accept {
    /// `0..=count-1`, the range of something of which there are `count` (at least 1 here).
    fn below(name: &'static str, count: usize) -> Accept {
        let max = u32::try_from(count.saturating_sub(1)).unwrap_or(u32::MAX);
        Accept { name, min: 0, max }
    }
}

/// The text toml's "duplicate key" error points at, as the key's name.
fn duplicated_key(text: &str, span: Option<std::ops::Range<usize>>) -> Option<String> {
    let at = text.get(span?)?;
    let key = at.split('=').next()?.trim().trim_matches(['"', '\'']);
    (!key.is_empty() && key.len() <= 64 && !key.contains(char::is_control)).then(|| key.to_string())
}

/// Parses and checks one descriptor. `source_name` is what errors print before `:line:`.
pub fn parse_str(text: &str, source_name: &str) -> Result<ClusterGraph, TopologyError> {
    let cx = Ctx::new(text, source_name);
    let raw: RawDescriptor = toml::from_str(text).map_err(|e| {
        let mut message = e.message().trim().to_string();
        if message == "duplicate key" {
            message = match duplicated_key(text, e.span()) {
                Some(key) => format!(
                    "duplicate key `{key}`: it is already set in this table; keep one `{key} = ...`"
                ),
                None => "duplicate key: a key is set twice in one table; keep one".to_string(),
            };
        }
        // The classic TOML trap: a top-level key written after a [[chips]] / [[links]] header
        // lands inside that table.
        let top_level = ["name", "arch", "mesh_shape", "chips", "links"];
        if top_level
            .iter()
            .any(|k| message.starts_with(&format!("unknown field `{k}`")))
        {
            message.push_str(
                "; keys after a [[chips]] or [[links]] header belong to that table: move \
                 top-level keys above the first header",
            );
        }
        TopologyError::Syntax {
            source_name: cx.src(),
            line: e.span().map_or(1, |s| cx.line(s.start)),
            message,
        }
    })?;

    // Top-level fields: a missing one is reported at line 1 (there is no better place).
    let name = raw
        .name
        .ok_or_else(|| cx.missing(1, "name", "the descriptor", "name = \"my-cluster\""))?;
    if name.get_ref().trim().is_empty() {
        return Err(cx.invalid(
            cx.line_of(&name),
            "name is empty; write name = \"my-cluster\"".into(),
        ));
    }
    let arch_s = raw
        .arch
        .ok_or_else(|| cx.missing(1, "arch", "the descriptor", "arch = \"wormhole_b0\""))?;
    let arch = ArchName::from_name(arch_s.get_ref()).ok_or_else(|| TopologyError::UnknownArch {
        source_name: cx.src(),
        line: cx.line_of(&arch_s),
        arch: arch_s.get_ref().clone(),
        known: ArchName::ALL_NAMES.join(", "),
    })?;
    let shape_s = raw.mesh_shape.ok_or_else(|| {
        cx.missing(
            1,
            "mesh_shape",
            "the descriptor",
            "mesh_shape = [rows, cols]",
        )
    })?;
    let shape_line = cx.line_of(&shape_s);
    let side = |name| Accept {
        name,
        min: 1,
        max: MAX_CHIPS as u32,
    };
    let (rows, cols) = cx.pair(
        &shape_s,
        "mesh_shape",
        "[rows, cols]",
        [side("rows"), side("cols")],
    )?;
    let (rows, cols) = (rows as usize, cols as usize);
    let cells = rows.saturating_mul(cols);
    if rows == 0 || cols == 0 || cells > MAX_CHIPS {
        return Err(cx.invalid(
            shape_line,
            format!("mesh_shape [{rows}, {cols}] is not usable; each side must be at least 1 and rows * cols at most {MAX_CHIPS}"),
        ));
    }
    let raw_chips = raw.chips.ok_or_else(|| {
        cx.missing(
            1,
            "chips",
            "the descriptor",
            "[[chips]] entries with id = N and coord = [row, col]",
        )
    })?;

    let chips = check_chips(&cx, &raw_chips, rows, cols, shape_line)?;
    let links = check_links(&cx, raw.links.as_deref().unwrap_or(&[]), arch, &chips)?;
    Ok(ClusterGraph::from_checked(
        name.into_inner(),
        arch,
        (rows, cols),
        chips,
        links,
    ))
}

/// Ids unique and 0..N-1, coords inside the mesh, one chip per cell, every cell filled.
fn check_chips(
    cx: &Ctx,
    raw: &[Spanned<RawChip>],
    rows: usize,
    cols: usize,
    shape_line: usize,
) -> Result<Vec<Chip>, TopologyError> {
    let mut by_id: HashMap<ChipId, usize> = HashMap::new(); // id -> line
    let mut by_coord: HashMap<(usize, usize), (ChipId, usize)> = HashMap::new();
    let mut chips = Vec::with_capacity(raw.len());
    let mut id_lines = Vec::with_capacity(raw.len());
    for entry in raw {
        let entry_line = cx.line_of(entry);
        let c = entry.get_ref();
        let id_s =
            c.id.as_ref()
                .ok_or_else(|| cx.missing(entry_line, "id", "this chip", "id = N"))?;
        let id_line = cx.line_of(id_s);
        let id = ChipId::try_from(*id_s.get_ref()).map_err(|_| {
            let n = *id_s.get_ref();
            let cells = rows * cols;
            let why = if n < 0 {
                "is not a non-negative integer"
            } else {
                "is out of range"
            };
            cx.invalid(
                id_line,
                format!(
                    "chip id {n} {why}; a mesh of {cells} chips numbers them 0..={}: write id = N with N in that range",
                    cells - 1
                ),
            )
        })?;
        if let Some(&first_line) = by_id.get(&id) {
            return Err(TopologyError::DuplicateChipId {
                source_name: cx.src(),
                line: id_line,
                id,
                first_line,
            });
        }
        by_id.insert(id, id_line);
        let coord_s = c.coord.as_ref().ok_or_else(|| {
            cx.missing(
                entry_line,
                "coord",
                &format!("chip {id}"),
                "coord = [row, col]",
            )
        })?;
        let coord_line = cx.line_of(coord_s);
        let (r, col) = cx.pair(
            coord_s,
            "coord",
            "[row, col]",
            [Accept::below("row", rows), Accept::below("col", cols)],
        )?;
        let (r, col) = (r as usize, col as usize);
        if r >= rows || col >= cols {
            return Err(TopologyError::CoordOutOfMesh {
                source_name: cx.src(),
                line: coord_line,
                chip: id,
                row: r,
                col,
                rows,
                cols,
            });
        }
        if let Some(&(other, first_line)) = by_coord.get(&(r, col)) {
            return Err(TopologyError::DuplicateCoord {
                source_name: cx.src(),
                line: coord_line,
                chip: id,
                other,
                row: r,
                col,
                first_line,
            });
        }
        by_coord.insert((r, col), (id, coord_line));
        chips.push(Chip {
            id,
            coord: (r, col),
            board: c.board.clone(),
        });
        id_lines.push(id_line);
    }

    let cells = rows * cols;
    if chips.len() != cells {
        // Coords are distinct and inside the mesh, so here chips.len() < cells: name a few holes.
        let holes: Vec<String> = (0..rows)
            .flat_map(|r| (0..cols).map(move |c| (r, c)))
            .filter(|rc| !by_coord.contains_key(rc))
            .take(6)
            .map(|(r, c)| format!("[{r}, {c}]"))
            .collect();
        let more = if cells - chips.len() > holes.len() {
            ", ..."
        } else {
            ""
        };
        return Err(TopologyError::MeshNotFilled {
            source_name: cx.src(),
            line: shape_line,
            rows,
            cols,
            num_chips: chips.len(),
            missing: format!(" (no chip at {}{more})", holes.join(", ")),
        });
    }
    // Ids double as device ids, so they must be exactly 0..N-1; with N distinct ids that holds
    // as soon as each is below N.
    for (chip, &line) in chips.iter().zip(&id_lines) {
        if chip.id as usize >= cells {
            return Err(TopologyError::ChipIdOutOfRange {
                source_name: cx.src(),
                line,
                id: chip.id,
                num_chips: cells,
            });
        }
    }
    Ok(chips)
}

/// Both ends present, two different known chips, ports in range, each (chip, port) used once.
fn check_links(
    cx: &Ctx,
    raw: &[Spanned<RawLink>],
    arch: ArchName,
    chips: &[Chip],
) -> Result<Vec<Link>, TopologyError> {
    let known: std::collections::HashSet<ChipId> = chips.iter().map(|c| c.id).collect();
    let mut used: HashMap<(ChipId, u32), usize> = HashMap::new(); // (chip, port) -> line
    let mut links = Vec::with_capacity(raw.len());
    for entry in raw {
        let entry_line = cx.line_of(entry);
        let l = entry.get_ref();
        let (a_s, b_s) = match (&l.a, &l.b) {
            (Some(a), Some(b)) => (a, b),
            (a, b) => {
                let which = match (a, b) {
                    (None, None) => "neither end (`a` nor `b`)",
                    (None, _) => "no `a` end",
                    _ => "no `b` end",
                };
                return Err(TopologyError::OneSidedLink {
                    source_name: cx.src(),
                    line: entry_line,
                    problem: format!(
                        "link has {which}; a link joins two chips: write a = [chip, port] and b = [chip, port]"
                    ),
                });
            }
        };
        let end = [
            Accept::below("chip", chips.len()),
            Accept::below("port", arch.num_eth_ports() as usize),
        ];
        let a = cx.pair(a_s, "a", "[chip, port]", end)?;
        let b = cx.pair(b_s, "b", "[chip, port]", end)?;
        if a.0 == b.0 {
            return Err(TopologyError::OneSidedLink {
                source_name: cx.src(),
                line: cx.line_of(b_s),
                problem: format!(
                    "link joins chip {} to itself (ports {} and {}); a link must join two different chips",
                    a.0, a.1, b.1
                ),
            });
        }
        for (end, end_s) in [(a, a_s), (b, b_s)] {
            let line = cx.line_of(end_s);
            let (chip, port) = end;
            if !known.contains(&chip) {
                return Err(TopologyError::UnknownChip {
                    source_name: cx.src(),
                    line,
                    chip,
                });
            }
            if port >= arch.num_eth_ports() {
                return Err(TopologyError::PortOutOfRange {
                    source_name: cx.src(),
                    line,
                    chip,
                    port,
                    arch: arch.as_str(),
                    num_ports: arch.num_eth_ports(),
                });
            }
            if let Some(&first_line) = used.get(&end) {
                return Err(TopologyError::PortReused {
                    source_name: cx.src(),
                    line,
                    chip,
                    port,
                    first_line,
                });
            }
            used.insert(end, line);
        }
        links.push(Link { a, b });
    }
    Ok(links)
}
