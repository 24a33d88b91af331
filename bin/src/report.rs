//! `ttmesh report import REPORT.json OUT_DIR [--svg]`: a graph-capture report turned into the
//! folder ttnn-visualizer opens (the work is in ttmesh-report).

use std::path::PathBuf;

use ttmesh_report::ImportOptions;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    #[command(subcommand)]
    pub command: ReportCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ReportCommand {
    /// Write db.sqlite, config.json and cluster_descriptor.yaml for ttnn-visualizer from a
    /// report file (`ttmesh run --graph DIR`, `ttmesh decode --graph DIR`, end_graph_capture_to_file).
    Import {
        /// The report file, e.g. DIR/report.json.
        report: PathBuf,
        /// The folder to create (it must not exist or be empty, unless --replace).
        out_dir: PathBuf,
        /// Also draw the call graph as OUT_DIR/call_graph.svg.
        #[arg(long)]
        svg: bool,
        /// Overwrite OUT_DIR if it holds something.
        #[arg(long)]
        replace: bool,
    },
}

pub fn run(args: &ReportArgs) -> Result<(), String> {
    match &args.command {
        ReportCommand::Import {
            report,
            out_dir,
            svg,
            replace,
        } => {
            let options = ImportOptions {
                svg: *svg,
                replace: *replace,
            };
            let s = ttmesh_report::import(report, out_dir, options).map_err(|e| e.to_string())?;
            println!(
                "{}: {} operations, {} tensors, {} errors; wrote {}",
                s.out_dir.display(),
                s.operations,
                s.tensors,
                s.errors,
                s.files.join(", ")
            );
            println!(
                "open it with ttnn-visualizer (pip install ttnn-visualizer), or see scripts/ttnn-visualizer-check.sh"
            );
            Ok(())
        }
    }
}
