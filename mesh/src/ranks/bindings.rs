//! Rank bindings: which chips of a big mesh each MPI rank opens, from a file in the spirit of
//! tt-run's rank bindings, or split evenly by rows (by columns when only they divide). Every check runs before any chip opens.
//!
//! The file (TOML):
//!
//! ```toml
//! mesh = "galaxy"          # optional: the mesh this file is for (checked)
//! [[ranks]]
//! rank = 0
//! rows = [0, 1]            # mesh rows; every column unless `cols` is given
//! [[ranks]]
//! rank = 1
//! rows = [2, 3]
//! cols = [0, 1, 2, 3, 4, 5, 6, 7]
//! # or whole boxes, by the descriptor's board names: boards = ["t3k-1"]
//! ```

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use ttmesh_topologies::ClusterGraph;

/// Which rank holds each chip of a mesh.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankBindings {
    /// Rank of each chip, by chip id.
    owner: Vec<u32>,
    ranks: u32,
    /// Where the split came from, for messages: the file, or "the even split of galaxy's 4 rows".
    source: String,
}

/// A bindings file or split that cannot be used; each message names the file (or the split),
/// the rank, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BindingsError(pub String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    mesh: Option<String>,
    #[serde(default)]
    ranks: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    rank: u32,
    rows: Option<Vec<usize>>,
    cols: Option<Vec<usize>>,
    boards: Option<Vec<String>>,
}

impl RankBindings {
    /// One rank holding every chip (a process not launched by MPI).
    pub fn single(g: &ClusterGraph) -> RankBindings {
        RankBindings {
            owner: vec![0; g.num_chips()],
            ranks: 1,
            source: "one process".into(),
        }
    }

    /// The default: the mesh's rows split evenly over `ranks`, in order (rank 0 the first
    /// rows); a mesh whose rows do not split but whose columns do (a line of one row, say) is
    /// split by columns the same way.
    pub fn split_evenly(g: &ClusterGraph, ranks: u32) -> Result<RankBindings, BindingsError> {
        let (rows, cols) = g.mesh_shape();
        let n = ranks as usize;
        let divides = |len: usize| n != 0 && len % n == 0;
        let (by_rows, along) = if divides(rows) {
            (true, rows)
        } else if divides(cols) {
            (false, cols)
        } else {
            let counts =
                |len: usize| -> Vec<usize> { (1..=len).filter(|k| len % k == 0).collect() };
            let mut fits = counts(rows);
            fits.extend(counts(cols));
            fits.sort_unstable();
            fits.dedup();
            let fits: Vec<String> = fits.iter().map(|k| k.to_string()).collect();
            return Err(BindingsError(format!(
                "the mesh {} has {rows} rows and {cols} columns, neither of which splits evenly \
                 over {ranks} ranks: run with -np {} instead, or give a rank-bindings file \
                 (--rank-bindings) that says which chips each rank opens",
                g.name(),
                fits.join(", -np ")
            )));
        };
        let per = along / n;
        let mut owner = vec![0; g.num_chips()];
        for r in 0..rows {
            for c in 0..cols {
                if let Some(id) = g.chip_at(r, c) {
                    owner[id as usize] = ((if by_rows { r } else { c }) / per) as u32;
                }
            }
        }
        let what = if by_rows { "rows" } else { "columns" };
        Ok(RankBindings {
            owner,
            ranks,
            source: format!("the even split of {}'s {along} {what}", g.name()),
        })
    }

    /// Reads a bindings file for `ranks` ranks of mesh `g`.
    pub fn from_file(
        path: &Path,
        g: &ClusterGraph,
        ranks: u32,
    ) -> Result<RankBindings, BindingsError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            BindingsError(format!(
                "rank bindings {}: cannot read it ({e}); give the path of a TOML file",
                path.display()
            ))
        })?;
        Self::parse_str(&text, &path.display().to_string(), g, ranks)
    }

    /// Parses bindings text; `name` is what messages call it (the file's path).
    pub fn parse_str(
        text: &str,
        name: &str,
        g: &ClusterGraph,
        ranks: u32,
    ) -> Result<RankBindings, BindingsError> {
        let fail = |m: String| BindingsError(format!("rank bindings {name}: {m}"));
        let file: File = toml::from_str(text).map_err(|e| fail(e.to_string()))?;
        if let Some(m) = file.mesh.as_deref().filter(|m| *m != g.name()) {
            return Err(fail(format!(
                "written for mesh {m:?}, but the mesh opened is {:?}: open --mesh {m} or use \
                 bindings for {:?}",
                g.name(),
                g.name()
            )));
        }
        let (rows, cols) = g.mesh_shape();
        let mut owner: Vec<Option<u32>> = vec![None; g.num_chips()];
        let mut seen = BTreeMap::new();
        for (i, e) in file.ranks.iter().enumerate() {
            let r = e.rank;
            if r >= ranks {
                return Err(fail(format!(
                    "names rank {r}, but {ranks} ranks run (0 to {}): run with -np {} or \
                     remove rank {r}'s entry",
                    ranks - 1,
                    r + 1
                )));
            }
            if let Some(first) = seen.insert(r, i) {
                return Err(fail(format!(
                    "rank {r} has two entries (the {} and the {}): give each rank one entry",
                    ordinal(first),
                    ordinal(i)
                )));
            }
            let chips =
                entry_chips(e, g, rows, cols).map_err(|m| fail(format!("rank {r}: {m}")))?;
            if chips.is_empty() {
                return Err(fail(format!(
                    "rank {r} names no chips: give it rows, or boards"
                )));
            }
            for id in chips {
                if let Some(other) = owner[id as usize] {
                    let (cr, cc) = g.coord_of(id).unwrap_or((0, 0));
                    return Err(fail(format!(
                        "chip {id} (row {cr}, column {cc}) is bound to rank {other} and to rank \
                         {r}: the ranks' chips overlap; give the chip to one of them"
                    )));
                }
                owner[id as usize] = Some(r);
            }
        }
        if let Some(r) = (0..ranks).find(|r| !seen.contains_key(r)) {
            return Err(fail(format!(
                "rank {r} has no entry, but {ranks} ranks run: every rank opens some chips; add \
                 an entry for rank {r} or run with -np {}",
                seen.len()
            )));
        }
        let unbound: Vec<String> = owner
            .iter()
            .enumerate()
            .filter(|(_, o)| o.is_none())
            .map(|(id, _)| {
                let (r, c) = g.coord_of(id as u32).unwrap_or((0, 0));
                format!("{id} (row {r}, column {c})")
            })
            .collect();
        if !unbound.is_empty() {
            return Err(fail(format!(
                "does not cover the mesh {}: no rank holds chip{} {}; bind every chip to one rank",
                g.name(),
                if unbound.len() > 1 { "s" } else { "" },
                unbound.join(", ")
            )));
        }
        Ok(RankBindings {
            owner: owner.into_iter().map(|o| o.unwrap_or(0)).collect(),
            ranks,
            source: format!("rank bindings {name}"),
        })
    }

    /// The rank that holds `chip`.
    pub fn owner(&self, chip: u32) -> u32 {
        self.owner.get(chip as usize).copied().unwrap_or(0)
    }
    /// The chips `rank` holds, by id.
    pub fn chips_of(&self, rank: u32) -> Vec<u32> {
        (0..self.owner.len() as u32)
            .filter(|&c| self.owner(c) == rank)
            .collect()
    }
    pub fn ranks(&self) -> u32 {
        self.ranks
    }
    /// Where this split came from (a file's path, or the default).
    pub fn source(&self) -> &str {
        &self.source
    }
}

fn ordinal(i: usize) -> String {
    format!("entry {}", i + 1)
}

/// The chips one entry names: rows x cols, or whole boards.
fn entry_chips(e: &Entry, g: &ClusterGraph, rows: usize, cols: usize) -> Result<Vec<u32>, String> {
    match (&e.rows, &e.boards) {
        (Some(_), Some(_)) => Err("give rows (and cols) or boards, not both".into()),
        (None, None) => Err("give rows (and optionally cols) or boards".into()),
        (None, Some(boards)) => {
            if e.cols.is_some() {
                return Err("cols go with rows, not with boards".into());
            }
            let mut out = Vec::new();
            for b in boards {
                let on: Vec<u32> = g
                    .chips()
                    .iter()
                    .filter(|c| c.board.as_deref() == Some(b))
                    .map(|c| c.id)
                    .collect();
                if on.is_empty() {
                    let mut known: Vec<&str> = g
                        .chips()
                        .iter()
                        .filter_map(|c| c.board.as_deref())
                        .collect();
                    known.dedup();
                    return Err(format!(
                        "no chip of mesh {} is on board {b:?}; its boards are {}",
                        g.name(),
                        known.join(", ")
                    ));
                }
                out.extend(on);
            }
            Ok(out)
        }
        (Some(rs), None) => {
            let all: Vec<usize> = (0..cols).collect();
            let cs = e.cols.as_ref().unwrap_or(&all);
            let bad = |what: &str, v: usize, n: usize| {
                format!(
                    "{what} {v} is outside the mesh ({n} {what}s, 0 to {})",
                    n - 1
                )
            };
            let mut out = Vec::new();
            for &r in rs {
                if r >= rows {
                    return Err(bad("row", r, rows));
                }
                for &c in cs {
                    if c >= cols {
                        return Err(bad("column", c, cols));
                    }
                    out.extend(g.chip_at(r, c));
                }
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn galaxy() -> ClusterGraph {
        ttmesh_topologies::load("galaxy").unwrap()
    }

    #[test]
    fn the_default_splits_rows_in_order() {
        let g = galaxy();
        let b = RankBindings::split_evenly(&g, 2).unwrap();
        assert_eq!(b.chips_of(0), (0..16).collect::<Vec<_>>());
        assert_eq!(b.chips_of(1), (16..32).collect::<Vec<_>>());
        let b4 = RankBindings::split_evenly(&g, 4).unwrap();
        assert_eq!(b4.chips_of(3), (24..32).collect::<Vec<_>>());
    }

    #[test]
    fn a_mesh_that_cannot_split_names_the_rank_counts_that_can() {
        let e = RankBindings::split_evenly(&galaxy(), 3).unwrap_err().0;
        assert!(
            e.contains("4 rows and 8 columns") && e.contains("3 ranks"),
            "{e}"
        );
        assert!(
            e.contains("-np 1, -np 2, -np 4, -np 8") && e.contains("--rank-bindings"),
            "{e}"
        );
        assert!(RankBindings::split_evenly(&galaxy(), 16).is_err());
    }

    #[test]
    fn rows_that_do_not_split_fall_back_to_columns_in_order() {
        // A Galaxy's 4 rows do not split over 8 ranks; its 8 columns do: rank c holds column c.
        let g = galaxy();
        let b = RankBindings::split_evenly(&g, 8).unwrap();
        for c in 0..8u32 {
            let want: Vec<u32> = (0..4).filter_map(|r| g.chip_at(r, c as usize)).collect();
            assert_eq!(b.chips_of(c), want, "rank {c}");
        }
        // A line of one row splits along its length.
        let line = ttmesh_topologies::load("line-8").unwrap();
        let b = RankBindings::split_evenly(&line, 2).unwrap();
        assert_eq!(b.chips_of(0).len(), 4);
        assert_eq!(b.chips_of(1).len(), 4);
    }

    #[test]
    fn a_file_binds_rows_and_columns() {
        let text =
            "mesh = \"galaxy\"\n[[ranks]]\nrank = 1\nrows = [0, 1, 2, 3]\ncols = [4, 5, 6, 7]\n\
                    [[ranks]]\nrank = 0\nrows = [0, 1, 2, 3]\ncols = [0, 1, 2, 3]\n";
        let b = RankBindings::parse_str(text, "b.toml", &galaxy(), 2).unwrap();
        assert_eq!(b.owner(0), 0);
        assert_eq!(b.owner(4), 1);
        assert_eq!(b.owner(27), 0);
        assert_eq!(b.chips_of(1).len(), 16);
    }

    #[test]
    fn whole_boards_bind_by_name() {
        let text = "[[ranks]]\nrank = 0\nboards = [\"galaxy\"]\n";
        let b = RankBindings::parse_str(text, "b.toml", &galaxy(), 1).unwrap();
        assert_eq!(b.chips_of(0).len(), 32);
        let bad = "[[ranks]]\nrank = 0\nboards = [\"t3k-9\"]\n";
        let e = RankBindings::parse_str(bad, "b.toml", &galaxy(), 1)
            .unwrap_err()
            .0;
        assert!(
            e.contains("t3k-9") && e.contains("galaxy") && e.contains("rank 0"),
            "{e}"
        );
    }

    /// Every bad file is refused naming the file, the rank and the fix.
    #[test]
    fn bad_files_name_file_rank_and_fix() {
        let g = galaxy();
        let half = |r: u32, rows: &str| format!("[[ranks]]\nrank = {r}\nrows = [{rows}]\n");
        let cases = [
            // Does not cover the mesh.
            (
                half(0, "0, 1"),
                1,
                "no rank holds chips 16 (row 2, column 0)",
            ),
            // Overlaps.
            (
                half(0, "0, 1, 2") + &half(1, "2, 3"),
                2,
                "chip 16 (row 2, column 0) is bound to rank 0 and to rank 1",
            ),
            // More ranks than run.
            (
                half(0, "0, 1") + &half(2, "2, 3"),
                2,
                "names rank 2, but 2 ranks run",
            ),
            // A rank that runs but has no chips.
            (half(0, "0, 1, 2, 3"), 2, "rank 1 has no entry"),
            (
                half(0, "0, 1") + &half(0, "2, 3"),
                1,
                "rank 0 has two entries",
            ),
            (half(0, "0, 9"), 1, "rank 0: row 9 is outside the mesh"),
            (
                "mesh = \"t3k\"\n".to_string() + &half(0, "0"),
                1,
                "written for mesh \"t3k\"",
            ),
            ("[[ranks]]\nrank = 0\n".to_string(), 1, "rank 0: give rows"),
            (
                "[[ranks]]\nrank = 0\nrow = [1]\n".to_string(),
                1,
                "unknown field `row`",
            ),
        ];
        for (text, ranks, want) in cases {
            let e = RankBindings::parse_str(&text, "big.toml", &g, ranks)
                .unwrap_err()
                .0;
            assert!(e.starts_with("rank bindings big.toml: "), "{e}");
            assert!(e.contains(want), "want {want:?} in: {e}");
        }
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = RankBindings::from_file(Path::new("/nonexistent/b.toml"), &galaxy(), 2)
            .unwrap_err()
            .0;
        assert!(
            e.contains("/nonexistent/b.toml") && e.contains("cannot read"),
            "{e}"
        );
    }
}
