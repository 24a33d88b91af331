//! Writing a graph back out: as a descriptor (`to_toml`) and as text for `ttmesh topo`.

use std::fmt::Write as _;

use crate::graph::ClusterGraph;

/// A TOML basic string with quotes and escapes, via the toml crate so every name round-trips.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

impl ClusterGraph {
    /// The graph as a descriptor in the documented schema (`[[chips]]` and `[[links]]` tables).
    /// `parse_str(&g.to_toml(), ..)` gives back a graph equal to `g`.
    pub fn to_toml(&self) -> String {
        let (rows, cols) = self.mesh_shape();
        let mut s = String::new();
        // Writing to a String cannot fail; the results are ignored on purpose.
        let _ = writeln!(s, "name = {}", quoted(self.name()));
        let _ = writeln!(s, "arch = {}", quoted(self.arch().as_str()));
        let _ = writeln!(s, "mesh_shape = [{rows}, {cols}]");
        for c in self.chips() {
            let _ = write!(
                s,
                "\n[[chips]]\nid = {}\ncoord = [{}, {}]\n",
                c.id, c.coord.0, c.coord.1
            );
            if let Some(b) = &c.board {
                let _ = writeln!(s, "board = {}", quoted(b));
            }
        }
        for l in self.links() {
            let _ = write!(
                s,
                "\n[[links]]\na = [{}, {}]\nb = [{}, {}]\n",
                l.a.0, l.a.1, l.b.0, l.b.1
            );
        }
        s
    }

    /// Human-readable description: arch, shape, the grid of chip ids, each chip with its
    /// coordinate, the links per neighbour pair with their ports, and the linearized order.
    pub fn summary(&self) -> String {
        let (rows, cols) = self.mesh_shape();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: {}, mesh {}x{}, {} chips, {} ethernet links ({} ports per chip)",
            self.name(),
            self.arch(),
            rows,
            cols,
            self.num_chips(),
            self.links().len(),
            self.arch().num_eth_ports()
        );
        if let Some([r, c]) = self.dim_kinds() {
            let _ = writeln!(
                s,
                "declared by a mesh graph descriptor: rows {}, cols {}",
                r.as_str(),
                c.as_str()
            );
        }
        let w = self.num_chips().saturating_sub(1).to_string().len().max(3) + 2;
        let _ = write!(s, "\nmesh (chip id per cell):\n{:>7}", "");
        for c in 0..cols {
            let _ = write!(s, "{:>w$}", format!("c{c}"));
        }
        s.push('\n');
        for r in 0..rows {
            let _ = write!(s, "{:>7}", format!("r{r}"));
            for c in 0..cols {
                let id = self
                    .chip_at(r, c)
                    .map_or("?".to_string(), |i| i.to_string());
                let _ = write!(s, "{id:>w$}");
            }
            s.push('\n');
        }
        let _ = writeln!(s, "\nchips:");
        for c in self.chips() {
            let board = c
                .board
                .as_deref()
                .map(|b| format!(", board {b}"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "  chip {:>3} at ({}, {}){}",
                c.id, c.coord.0, c.coord.1, board
            );
        }
        let _ = writeln!(s, "\nlinks (chip:port <-> chip:port):");
        if self.links().is_empty() {
            let _ = writeln!(s, "  none");
        }
        for c in self.chips() {
            for (n, count) in self.neighbours(c.id) {
                if n < c.id {
                    continue; // each pair once
                }
                let ports: Vec<String> = self
                    .ports_between(c.id, n)
                    .iter()
                    .map(|(pa, pb)| format!("{}:{pa}<->{n}:{pb}", c.id))
                    .collect();
                let links = format!("{count} link{}:", if count == 1 { "" } else { "s" });
                let _ = writeln!(s, "  {:>3} - {:<3} {links:<9} {}", c.id, n, ports.join(" "));
            }
        }
        match self.linearize() {
            Some(l) => {
                let ids: Vec<String> = l.chips.iter().map(|c| c.to_string()).collect();
                let kind = if l.is_ring { "ring" } else { "line" };
                let _ = writeln!(s, "\nlinearized ({kind}): {}", ids.join(" "));
            }
            None => {
                let _ = writeln!(
                    s,
                    "\nlinearized: none (no order visits every chip over links)"
                );
            }
        }
        s
    }
}
