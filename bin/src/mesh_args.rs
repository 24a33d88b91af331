//! The flags every command that opens a mesh shares (`run`, `decode`, `plan`): which mesh,
//! which fabric, and JSON output, parsed in this one place.

use ttmesh::{FabricConfig, MeshConfig};

#[derive(clap::Args, Debug, Clone)]
pub struct MeshArgs {
    /// n150, n300, t3k, galaxy, p150, p300, line-N, ring-N, mesh-RxC, torus-RxC, a topology
    /// TOML file, or a tt-metal mesh graph descriptor (.textproto).
    #[arg(long, default_value = "t3k")]
    pub mesh: String,
    /// The fabric the collectives run on: 1d, 1d-ring, 2d, 2d-torus-x/-y/-xy (tt-metal's names,
    /// such as FABRIC_1D_RING, work too); auto: what a mesh graph descriptor's dim types imply,
    /// else 1d.
    #[arg(long, default_value = "auto")]
    pub fabric: String,
    /// Print one JSON object instead of text and tables.
    #[arg(long)]
    pub json: bool,
    /// Under mpirun: a TOML file saying which chips each rank opens (rank -> mesh rows and
    /// columns, or whole boards); without it the mesh's rows are split evenly over the ranks.
    #[arg(long, value_name = "FILE")]
    pub rank_bindings: Option<std::path::PathBuf>,
}

impl MeshArgs {
    /// `--fabric` as the library names it (`FabricConfig::from_name`, the one parser); `auto`
    /// is what the `--mesh` descriptor implies (`MeshConfig::described`).
    pub fn fabric_config(&self) -> Result<FabricConfig, String> {
        if self.fabric.trim().eq_ignore_ascii_case("auto") {
            return MeshConfig::described(&self.mesh)
                .map(|c| c.fabric_config)
                .map_err(|e| format!("--mesh {}: {e}", self.mesh));
        }
        FabricConfig::from_name(&self.fabric).map_err(|e| format!("--fabric {}: {e}", self.fabric))
    }

    /// The fabric's short name (`1d`, `2d`, ...) with `auto` resolved, for reports.
    pub fn fabric_name(&self) -> String {
        self.fabric_config()
            .map(|c| c.short_name().to_string())
            .unwrap_or_else(|_| self.fabric.clone())
    }

    /// An error from opening the mesh, naming the two flags it came from (the library refuses
    /// a fabric the topology cannot carry, with the configs that fit).
    pub fn open_error(&self, e: impl std::fmt::Display) -> String {
        format!("--mesh {} --fabric {}: {e}", self.mesh, self.fabric)
    }

    /// The mesh as `ttmesh run` / `ttmesh decode` open it (their trace region aside).
    pub fn config(&self) -> Result<MeshConfig, String> {
        Ok(MeshConfig {
            topology: self.mesh.clone(),
            fabric_config: self.fabric_config()?,
            rank_bindings: self.rank_bindings.clone(),
            ..Default::default()
        })
    }
}
