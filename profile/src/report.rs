//! Writers of a modeled timeline: the ops report CSV (tt-metal's columns, for tt-perf-report),
//! the Chrome/Perfetto trace JSON, the SVG picture and the printed summary.

pub mod chrome;
pub mod csv;
pub mod summary;
pub mod svg;
