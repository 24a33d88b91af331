//! `db.sqlite`: the tables a TT-NN report database has, the ones ttnn-visualizer reads,
//! filled from the [`ReportModel`]. One transaction, so the file holds all of it or nothing.

use std::path::Path;

use rusqlite::{params, Connection};
use serde_json::Value;
use ttmesh::graph::Report;

use crate::model::ReportModel;

/// The schema, table by table, with the column names and types TT-NN's report writer uses.
/// The two comparison tables stay empty (TT-NN fills them only in comparison mode against a
/// golden model); ttnn-visualizer reads them on every tensor listing.
const SCHEMA: &str = "
CREATE TABLE devices (device_id int, num_y_cores int, num_x_cores int, num_y_compute_cores int,
    num_x_compute_cores int, worker_l1_size int, l1_num_banks int, l1_bank_size int,
    address_at_first_l1_bank int, address_at_first_l1_cb_buffer int,
    num_banks_per_storage_core int, num_compute_cores int, num_storage_cores int,
    total_l1_memory int, total_l1_for_tensors int, total_l1_for_interleaved_buffers int,
    total_l1_for_sharded_buffers int, cb_limit int);
CREATE TABLE tensors (tensor_id int UNIQUE, shape text, dtype text, layout text,
    memory_config text, device_id int, address int, buffer_type int);
CREATE TABLE device_tensors (tensor_id int, device_id int, address int);
CREATE TABLE operations (operation_id int UNIQUE, name text, duration float);
CREATE TABLE operation_arguments (operation_id int, name text, value text);
CREATE TABLE input_tensors (operation_id int, input_index int, tensor_id int);
CREATE TABLE output_tensors (operation_id int, output_index int, tensor_id int);
CREATE TABLE buffers (operation_id int, device_id int, address int, max_size_per_bank int,
    buffer_type int);
CREATE TABLE buffer_pages (operation_id int, device_id int, address int, core_y int,
    core_x int, bank_id int, page_index int, page_address int, page_size int, buffer_type int);
CREATE TABLE nodes (operation_id int, unique_id int, node_operation_id int, name text);
CREATE TABLE edges (operation_id int, source_unique_id int, sink_unique_id int,
    source_output_index int, sink_input_index int, key int);
CREATE TABLE captured_graph (operation_id int, captured_graph text);
CREATE TABLE stack_traces (operation_id int, stack_trace text);
CREATE TABLE errors (operation_id int, operation_name text, error_type text,
    error_message text, stack_trace text, timestamp text);
CREATE TABLE report_metadata (key text UNIQUE, value text);
CREATE TABLE local_tensor_comparison_records (tensor_id int UNIQUE, golden_tensor_id int,
    matches bool, desired_pcc bool, actual_pcc float);
CREATE TABLE global_tensor_comparison_records (tensor_id int UNIQUE, golden_tensor_id int,
    matches bool, desired_pcc bool, actual_pcc float);
";

fn u(v: &Value, k: &str) -> i64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0) as i64
}

/// Writes the database at `path` (which must not exist).
pub fn write_database(path: &Path, report: &Report, model: &ReportModel) -> rusqlite::Result<()> {
    let mut db = Connection::open(path)?;
    db.execute_batch(SCHEMA)?;
    let tx = db.transaction()?;
    for d in &report.devices {
        tx.execute(
            "INSERT INTO devices VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18)",
            params![
                u(d, "device_id"),
                u(d, "num_y_cores"),
                u(d, "num_x_cores"),
                u(d, "num_y_compute_cores"),
                u(d, "num_x_compute_cores"),
                u(d, "worker_l1_size"),
                u(d, "l1_num_banks"),
                u(d, "l1_bank_size"),
                u(d, "address_at_first_l1_bank"),
                u(d, "address_at_first_l1_cb_buffer"),
                u(d, "num_banks_per_storage_core"),
                u(d, "num_compute_cores"),
                u(d, "num_storage_cores"),
                u(d, "total_l1_memory"),
                u(d, "total_l1_for_tensors"),
                u(d, "total_l1_for_interleaved_buffers"),
                u(d, "total_l1_for_sharded_buffers"),
                u(d, "cb_limit"),
            ],
        )?;
    }
    for t in model.tensors.values() {
        let (device, address) = t
            .device_addresses
            .first()
            .map(|&(d, a)| (Some(d as i64), Some(a as i64)))
            .unwrap_or((None, None));
        tx.execute(
            "INSERT INTO tensors VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
            params![
                t.id as i64,
                t.shape,
                t.dtype,
                t.layout,
                t.memory_config,
                device,
                address,
                t.buffer_type.map(|b| b as i64)
            ],
        )?;
        for &(d, a) in &t.device_addresses {
            tx.execute(
                "INSERT INTO device_tensors VALUES (?1,?2,?3)",
                params![t.id as i64, d as i64, a as i64],
            )?;
        }
    }
    for op in &model.operations {
        let id = op.id as i64;
        // TT-NN stores durations in seconds.
        let seconds = op.duration_ns.map(|ns| ns as f64 / 1e9);
        tx.execute(
            "INSERT INTO operations VALUES (?1,?2,?3)",
            params![id, op.name, seconds],
        )?;
        for (i, a) in op.arguments.iter().enumerate() {
            tx.execute(
                "INSERT INTO operation_arguments VALUES (?1,?2,?3)",
                params![id, format!("arg_{i}"), a],
            )?;
        }
        for (i, t) in op.inputs.iter().enumerate() {
            tx.execute(
                "INSERT INTO input_tensors VALUES (?1,?2,?3)",
                params![id, i as i64, *t as i64],
            )?;
        }
        for (i, t) in op.outputs.iter().enumerate() {
            tx.execute(
                "INSERT INTO output_tensors VALUES (?1,?2,?3)",
                params![id, i as i64, *t as i64],
            )?;
        }
        for b in &op.live_buffers {
            tx.execute(
                "INSERT INTO buffers VALUES (?1,?2,?3,?4,?5)",
                params![
                    id,
                    b.device_id as i64,
                    b.address as i64,
                    b.max_size_per_bank as i64,
                    b.buffer_type as i64
                ],
            )?;
        }
        // The operation's own graph: itself and the device operations it ran.
        tx.execute(
            "INSERT INTO nodes VALUES (?1,?2,?3,?4)",
            params![id, op.nodes.start as i64, id, op.name],
        )?;
        for (k, (node, name)) in op.device_operations.iter().enumerate() {
            tx.execute(
                "INSERT INTO nodes VALUES (?1,?2,?3,?4)",
                params![id, *node as i64, id, name],
            )?;
            tx.execute(
                "INSERT INTO edges VALUES (?1,?2,?3,?4,?5,?6)",
                params![id, op.nodes.start as i64, *node as i64, 0, k as i64, 0],
            )?;
        }
        let sub: Vec<&ttmesh::graph::Node> = report.graph[op.nodes.clone()].iter().collect();
        tx.execute(
            "INSERT INTO captured_graph VALUES (?1,?2)",
            params![id, serde_json::to_string(&sub).unwrap_or_default()],
        )?;
        if let Some(st) = &op.stack_trace {
            tx.execute(
                "INSERT INTO stack_traces VALUES (?1,?2)",
                params![id, st.join("\n")],
            )?;
        }
        if let Some(e) = &op.error {
            tx.execute(
                "INSERT INTO errors VALUES (?1,?2,?3,?4,?5,?6)",
                params![
                    id,
                    e.operation,
                    e.error_type,
                    e.message,
                    op.stack_trace.as_ref().map(|s| s.join("\n")),
                    Option::<String>::None
                ],
            )?;
        }
    }
    // Pages are recorded when the capture enabled them; they belong to the last operation.
    if let Some(last) = model.operations.last() {
        for p in &report.buffer_pages {
            tx.execute(
                "INSERT INTO buffer_pages VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)",
                params![
                    last.id as i64,
                    u(p, "device_id"),
                    u(p, "address"),
                    u(p, "core_y"),
                    u(p, "core_x"),
                    u(p, "bank_id"),
                    u(p, "page_index"),
                    u(p, "page_address"),
                    u(p, "page_size"),
                    u(p, "buffer_type")
                ],
            )?;
        }
    }
    let producer = report
        .metadata
        .get("producer")
        .and_then(Value::as_str)
        .unwrap_or("ttmesh")
        .to_string();
    for (k, v) in [
        ("producer", producer),
        ("report_version", report.version.to_string()),
        (
            "capture_timestamp",
            u(&report.metadata, "capture_timestamp").to_string(),
        ),
    ] {
        tx.execute("INSERT INTO report_metadata VALUES (?1,?2)", params![k, v])?;
    }
    tx.commit()
}
