//! Writers of a modeled timeline: the ops report CSV (tt-metal's columns, for tt-perf-report),
//! the device log beside it (so ttnn-visualizer opens the folder as a performance report), the
//! Chrome/Perfetto trace JSON, the SVG picture and the printed summary.

pub mod chrome;
pub mod csv;
pub mod device_log;
pub mod summary;
pub mod svg;
