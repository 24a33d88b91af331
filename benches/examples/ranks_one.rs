//! One all_reduce across 2 MPI ranks in a loop, for profilers (an n300, one chip per rank),
//! then MPI_Allreduce of the same size between the same processes:
//! `mpirun -np 2 target/release/examples/ranks_one 16777216 10` (bytes per chip, iterations).
//! Build it with the MPI feature: `cargo build --release -p ttmesh-benches --example ranks_one
//! --features mpi`.

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let get = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let bytes: usize = get(0, "16777216").parse().expect("bytes per chip");
    let iters: usize = get(1, "10").parse().expect("iterations");
    // Rows of 1024 bf16 (2 KiB) for large sizes, 576 (a decode layer's width) for small.
    let cols = if bytes >= 1 << 20 { 1024 } else { 576 };
    let rows = (bytes / (cols * 2)).max(32) / 32 * 32;
    let run = || -> Result<(f64, Option<f64>), String> {
        let mesh = ttmesh_benches::ranks::speed_mesh()?;
        let us = ttmesh_benches::ranks::time_all_reduce(&mesh, rows, cols, iters);
        mesh.close().map_err(|e| e.to_string())?;
        let us = us?;
        let mpi = ttmesh_benches::ranks::mpi_allreduce_us(rows * cols * 2, iters)?;
        Ok((us, mpi))
    };
    let result = run();
    let rank = ttmesh_settings::settings()
        .mpi_launch
        .as_ref()
        .map_or(0, |l| l.rank);
    match &result {
        Ok((us, mpi)) if rank == 0 => println!(
            "all_reduce {} B across 2 ranks: {us:.1} us; MPI_Allreduce: {}",
            rows * cols * 2,
            mpi.map_or("-".into(), |m| format!("{m:.1} us ({:.2}x)", us / m))
        ),
        Ok(_) => {}
        Err(e) => eprintln!("rank {rank}: error: {e}"),
    }
    // Finalises MPI once every rank got here, or ends the whole job after an error.
    ttmesh::ranks::end_of_job(&result.map(|_| ()));
}
