//! What a tensor is, independent of where it lives: shape, dtype, layout, memory config, and the
//! page arithmetic that follows from them (FACTS.md "Tiles").

use std::fmt;

use crate::allocator::{round_up, AllocationRequest, BufferType, PageMap, Placement};
use crate::arch::ArchSpec;
use crate::error::{ChipError, Result};
use crate::format::{BFP4_TILE_BYTES, BFP8_TILE_BYTES};

pub const TILE: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    BFloat16,
    Float32,
    BFloat8B,
    /// 4-bit block float (Wormhole and Blackhole; TILE layout only).
    BFloat4B,
    UInt32,
}

impl DataType {
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::BFloat16 => "BFLOAT16",
            DataType::Float32 => "FLOAT32",
            DataType::BFloat8B => "BFLOAT8_B",
            DataType::BFloat4B => "BFLOAT4_B",
            DataType::UInt32 => "UINT32",
        }
    }
    pub fn is_float(self) -> bool {
        !matches!(self, DataType::UInt32)
    }
    /// bfloat8_b and bfloat4_b: values share an exponent per block of 16 in a tile, so they
    /// exist only in TILE layout, and moving them between blocks re-quantizes them.
    pub fn is_block_float(self) -> bool {
        matches!(self, DataType::BFloat8B | DataType::BFloat4B)
    }
    /// Bytes of one element in ROW_MAJOR layout (block floats have no row-major form).
    pub fn row_major_elem_bytes(self) -> Option<u64> {
        match self {
            DataType::BFloat16 => Some(2),
            DataType::Float32 | DataType::UInt32 => Some(4),
            DataType::BFloat8B | DataType::BFloat4B => None,
        }
    }
    /// Bytes of one 32x32 tile.
    pub fn tile_bytes(self) -> u64 {
        match self {
            DataType::BFloat16 => 2048,
            DataType::Float32 | DataType::UInt32 => 4096,
            DataType::BFloat8B => BFP8_TILE_BYTES as u64,
            DataType::BFloat4B => BFP4_TILE_BYTES as u64,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    Tile,
    RowMajor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorMemoryLayout {
    Interleaved,
    HeightSharded,
    WidthSharded,
    BlockSharded,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ShardOrientation {
    #[default]
    RowMajor,
    ColMajor,
}

/// An inclusive rectangle of cores (x = column, y = row). For DRAM sharding x is the bank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoreRange {
    pub start: (u32, u32),
    pub end: (u32, u32),
}

impl CoreRange {
    pub fn new(start: (u32, u32), end: (u32, u32)) -> CoreRange {
        CoreRange { start, end }
    }
    /// The first `n` cores of a grid `cols` wide, as one or two ranges' worth of cores.
    pub fn grid(cols: u32, rows: u32) -> CoreRange {
        CoreRange {
            start: (0, 0),
            end: (cols.saturating_sub(1), rows.saturating_sub(1)),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShardSpec {
    pub grid: Vec<CoreRange>,
    /// Shard height and width in elements (after flattening all but the last dim into height).
    pub shape: [usize; 2],
    pub orientation: ShardOrientation,
}

impl ShardSpec {
    pub fn new(grid: CoreRange, shape: [usize; 2]) -> ShardSpec {
        ShardSpec {
            grid: vec![grid],
            shape,
            orientation: ShardOrientation::RowMajor,
        }
    }

    /// The cores in shard order.
    pub fn cores(&self) -> Vec<(u32, u32)> {
        let mut cores = Vec::new();
        for r in &self.grid {
            match self.orientation {
                ShardOrientation::RowMajor => {
                    for y in r.start.1..=r.end.1 {
                        for x in r.start.0..=r.end.0 {
                            cores.push((x, y));
                        }
                    }
                }
                ShardOrientation::ColMajor => {
                    for x in r.start.0..=r.end.0 {
                        for y in r.start.1..=r.end.1 {
                            cores.push((x, y));
                        }
                    }
                }
            }
        }
        cores
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemoryConfig {
    pub memory_layout: TensorMemoryLayout,
    pub buffer_type: BufferType,
    pub shard_spec: Option<ShardSpec>,
}

impl MemoryConfig {
    pub const DRAM: MemoryConfig = MemoryConfig {
        memory_layout: TensorMemoryLayout::Interleaved,
        buffer_type: BufferType::Dram,
        shard_spec: None,
    };
    pub const L1: MemoryConfig = MemoryConfig {
        memory_layout: TensorMemoryLayout::Interleaved,
        buffer_type: BufferType::L1,
        shard_spec: None,
    };

    pub fn sharded(
        layout: TensorMemoryLayout,
        buffer_type: BufferType,
        spec: ShardSpec,
    ) -> MemoryConfig {
        MemoryConfig {
            memory_layout: layout,
            buffer_type,
            shard_spec: Some(spec),
        }
    }
    pub fn is_sharded(&self) -> bool {
        self.memory_layout != TensorMemoryLayout::Interleaved
    }
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig::DRAM
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    pub shape: Vec<usize>,
    pub dtype: DataType,
    pub layout: Layout,
    pub memory_config: MemoryConfig,
}

impl fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mem = match self.memory_config.memory_layout {
            TensorMemoryLayout::Interleaved => "interleaved",
            TensorMemoryLayout::HeightSharded => "height-sharded",
            TensorMemoryLayout::WidthSharded => "width-sharded",
            TensorMemoryLayout::BlockSharded => "block-sharded",
        };
        write!(
            f,
            "{:?} {} {:?} {} {}",
            self.shape, self.dtype, self.layout, self.memory_config.buffer_type, mem
        )
    }
}

/// Page grid of a tensor: rows x cols of pages in logical (row-major) order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageGrid {
    pub rows: u64,
    pub cols: u64,
}

impl TensorSpec {
    pub fn new(
        shape: impl Into<Vec<usize>>,
        dtype: DataType,
        layout: Layout,
        memory_config: MemoryConfig,
    ) -> TensorSpec {
        TensorSpec {
            shape: shape.into(),
            dtype,
            layout,
            memory_config,
        }
    }

    pub fn volume(&self) -> usize {
        self.shape.iter().product()
    }
    /// Last dim (width) and the product of the others (height, with leading dims flattened).
    pub fn height_width(&self) -> (usize, usize) {
        let w = *self.shape.last().unwrap_or(&1);
        let h = if self.shape.len() >= 2 {
            self.shape[self.shape.len() - 2]
        } else {
            1
        };
        (h, w)
    }
    pub fn batch(&self) -> usize {
        if self.shape.len() <= 2 {
            1
        } else {
            self.shape[..self.shape.len() - 2].iter().product()
        }
    }
    /// Shape with the last two dims padded to tiles (TILE layout) or as is (ROW_MAJOR).
    pub fn padded_shape(&self) -> Vec<usize> {
        let mut s = if self.shape.len() < 2 {
            let mut v = vec![1; 2 - self.shape.len()];
            v.extend(&self.shape);
            v
        } else {
            self.shape.clone()
        };
        if self.layout == Layout::Tile {
            let n = s.len();
            s[n - 1] = s[n - 1].div_ceil(TILE) * TILE;
            s[n - 2] = s[n - 2].div_ceil(TILE) * TILE;
        }
        s
    }

    pub fn page_size(&self) -> u64 {
        match self.layout {
            Layout::Tile => self.dtype.tile_bytes(),
            Layout::RowMajor => {
                self.height_width().1 as u64 * self.dtype.row_major_elem_bytes().unwrap_or(1)
            }
        }
    }

    pub fn page_grid(&self) -> PageGrid {
        let (h, w) = self.height_width();
        match self.layout {
            Layout::Tile => PageGrid {
                rows: (self.batch() * h.div_ceil(TILE)) as u64,
                cols: w.div_ceil(TILE) as u64,
            },
            Layout::RowMajor => PageGrid {
                rows: (self.batch() * h) as u64,
                cols: 1,
            },
        }
    }

    pub fn num_pages(&self) -> u64 {
        let g = self.page_grid();
        g.rows * g.cols
    }

    /// Bytes of data the tensor holds (pages x page size).
    pub fn buffer_size(&self) -> u64 {
        self.num_pages() * self.page_size()
    }

    /// Checks everything that can be checked without a device; `name` is how errors refer to it.
    pub fn validate(&self, arch: &ArchSpec, name: &str) -> Result<()> {
        if self.shape.is_empty() || self.shape.contains(&0) {
            return Err(ChipError::ShapeMismatch {
                op: name.to_string(),
                detail: format!(
                    "shape {:?} has no elements; every dim must be at least 1",
                    self.shape
                ),
            });
        }
        if self.layout == Layout::RowMajor && self.dtype.is_block_float() {
            return Err(ChipError::Unsupported {
                op: name.to_string(),
                what: format!("{} in ROW_MAJOR layout", self.dtype),
                hint: format!(
                    "{} is a block format of tiles; use Layout::Tile",
                    self.dtype
                ),
            });
        }
        let mc = &self.memory_config;
        if mc.buffer_type == BufferType::Trace || mc.buffer_type == BufferType::SystemMemory {
            return Err(ChipError::InvalidConfig(format!(
                "{name}: tensors live in DRAM, L1 or L1_SMALL, not {}",
                mc.buffer_type
            )));
        }
        if mc.is_sharded() != mc.shard_spec.is_some() {
            return Err(ChipError::InvalidShardSpec {
                tensor: name.to_string(),
                reason: "a sharded memory layout needs a shard spec, and an interleaved one must not have one".into(),
            });
        }
        if mc.buffer_type == BufferType::L1Small && !mc.is_sharded() {
            return Err(ChipError::L1SmallInterleaved);
        }
        if mc.is_sharded() {
            self.shard_layout(arch, name)?;
        }
        Ok(())
    }

    /// For a sharded spec: the bank of every shard, pages per shard, and shard shape in pages.
    fn shard_layout(&self, arch: &ArchSpec, name: &str) -> Result<ShardLayout> {
        let bad = |reason: String| ChipError::InvalidShardSpec {
            tensor: name.to_string(),
            reason,
        };
        let spec = self
            .memory_config
            .shard_spec
            .as_ref()
            .ok_or_else(|| bad("missing shard spec".into()))?;
        let [sh, sw] = spec.shape;
        if sh == 0 || sw == 0 {
            return Err(bad(format!("shard shape {:?} is empty", spec.shape)));
        }
        let (h, w) = self.height_width();
        let total_h = self.batch()
            * if self.layout == Layout::Tile {
                h.div_ceil(TILE) * TILE
            } else {
                h
            };
        let total_w = if self.layout == Layout::Tile {
            w.div_ceil(TILE) * TILE
        } else {
            w
        };
        let (page_h, page_w) = match self.layout {
            Layout::Tile => {
                if sh % TILE != 0 || sw % TILE != 0 {
                    return Err(bad(format!(
                        "shard shape {:?} must be a multiple of the 32x32 tile",
                        spec.shape
                    )));
                }
                (sh / TILE, sw / TILE)
            }
            Layout::RowMajor => {
                if sw != total_w {
                    return Err(bad(format!(
                        "ROW_MAJOR tensors shard by whole rows: shard width {sw} must equal the tensor width {total_w}"
                    )));
                }
                (sh, 1)
            }
        };
        match self.memory_config.memory_layout {
            TensorMemoryLayout::HeightSharded if sw != total_w => {
                return Err(bad(format!(
                    "height sharding keeps whole rows: shard width {sw} != tensor width {total_w}"
                )))
            }
            TensorMemoryLayout::WidthSharded if sh != total_h => {
                return Err(bad(format!(
                "width sharding keeps whole columns: shard height {sh} != tensor height {total_h}"
            )))
            }
            _ => {}
        }
        let shards_h = total_h.div_ceil(sh);
        let shards_w = total_w.div_ceil(sw);
        let cores = spec.cores();
        let (grid_cols, grid_rows, space) = match self.memory_config.buffer_type {
            BufferType::Dram => (arch.num_dram_banks, 1, "DRAM banks"),
            _ => (arch.compute_grid.0, arch.compute_grid.1, "compute grid"),
        };
        if let Some(c) = cores
            .iter()
            .find(|(x, y)| *x >= grid_cols || *y >= grid_rows)
        {
            return Err(bad(format!(
                "core {c:?} is outside the {space} ({grid_cols}x{grid_rows})"
            )));
        }
        let num_shards = shards_h * shards_w;
        if num_shards > cores.len() {
            return Err(bad(format!(
                "{num_shards} shards ({shards_h}x{shards_w} of {sh}x{sw}) but the grid has only {} cores; use larger shards or more cores",
                cores.len()
            )));
        }
        let banks = cores[..num_shards]
            .iter()
            .map(|(x, y)| y * grid_cols + x)
            .collect();
        Ok(ShardLayout {
            banks,
            page_h: page_h as u64,
            page_w: page_w as u64,
            shards_w: shards_w as u64,
        })
    }

    /// What the allocator must reserve for this tensor.
    pub fn allocation_request(&self, arch: &ArchSpec) -> Result<AllocationRequest> {
        self.validate(arch, "tensor")?;
        let placement = if self.memory_config.is_sharded() {
            let l = self.shard_layout(arch, "tensor")?;
            Placement::Sharded {
                banks: l.banks,
                pages_per_shard: l.page_h * l.page_w,
            }
        } else {
            Placement::Interleaved
        };
        Ok(AllocationRequest {
            buffer_type: self.memory_config.buffer_type,
            page_size: self.page_size(),
            num_pages: self.num_pages(),
            placement,
        })
    }

    /// The page map of this tensor's buffer at `address`, computed from the spec alone.
    pub fn page_map(&self, arch: &ArchSpec, address: u64) -> Result<TensorPages> {
        let req = self.allocation_request(arch)?;
        let t = req.buffer_type;
        let align = match t.space() {
            crate::allocator::MemSpace::Dram => arch.dram_alignment,
            crate::allocator::MemSpace::L1 => arch.l1_alignment,
            crate::allocator::MemSpace::Host => arch.pcie_alignment,
        };
        let num_banks = match t.space() {
            crate::allocator::MemSpace::Dram => arch.num_dram_banks,
            _ => arch.num_l1_banks(),
        };
        let shard = if self.memory_config.is_sharded() {
            Some(self.shard_layout(arch, "tensor")?)
        } else {
            None
        };
        Ok(TensorPages {
            map: PageMap {
                space: t.space(),
                address,
                page_size: req.page_size,
                page_stride: round_up(req.page_size, align),
                num_pages: req.num_pages,
                num_banks,
                placement: req.placement,
            },
            grid: self.page_grid(),
            shard,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ShardLayout {
    banks: Vec<u32>,
    page_h: u64,
    page_w: u64,
    shards_w: u64,
}

/// Maps a tensor's logical pages (row-major over its page grid) to buffer pages and locations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPages {
    pub map: PageMap,
    pub grid: PageGrid,
    shard: Option<ShardLayout>,
}

impl TensorPages {
    /// Bank and address of logical page `p` (row-major over the page grid).
    pub fn location(&self, p: u64) -> (u32, u64) {
        match &self.shard {
            None => self.map.location(p),
            Some(s) => {
                let (r, c) = (p / self.grid.cols, p % self.grid.cols);
                let shard = (r / s.page_h) * s.shards_w + c / s.page_w;
                let within = (r % s.page_h) * s.page_w + c % s.page_w;
                self.map.location(shard * s.page_h * s.page_w + within)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes_match_facts() {
        let s = |dt| TensorSpec::new(vec![1, 1, 64, 64], dt, Layout::Tile, MemoryConfig::DRAM);
        assert_eq!(s(DataType::BFloat16).page_size(), 2048);
        assert_eq!(s(DataType::Float32).page_size(), 4096);
        assert_eq!(s(DataType::BFloat8B).page_size(), 1088);
        assert_eq!(s(DataType::BFloat4B).page_size(), 576);
        assert_eq!(s(DataType::BFloat16).num_pages(), 4);
        let rm = TensorSpec::new(
            vec![3, 5, 7],
            DataType::BFloat16,
            Layout::RowMajor,
            MemoryConfig::DRAM,
        );
        assert_eq!((rm.page_size(), rm.num_pages()), (14, 15));
        let odd = TensorSpec::new(
            vec![2, 33, 65],
            DataType::BFloat16,
            Layout::Tile,
            MemoryConfig::DRAM,
        );
        assert_eq!(odd.padded_shape(), vec![2, 64, 96]);
        assert_eq!(odd.num_pages(), 2 * 2 * 3);
    }

    #[test]
    fn shard_spec_errors_name_the_problem() {
        let wh = ArchSpec::wormhole_b0();
        let mc = |layout, shape| {
            MemoryConfig::sharded(
                layout,
                BufferType::L1,
                ShardSpec::new(CoreRange::grid(2, 1), shape),
            )
        };
        let t = TensorSpec::new(
            vec![1, 1, 128, 64],
            DataType::BFloat16,
            Layout::Tile,
            mc(TensorMemoryLayout::HeightSharded, [32, 64]),
        );
        let e = t.validate(&wh, "x").unwrap_err().to_string();
        assert!(e.contains("4 shards") && e.contains("only 2 cores"), "{e}");
        let t = TensorSpec::new(
            vec![1, 1, 64, 64],
            DataType::BFloat16,
            Layout::Tile,
            mc(TensorMemoryLayout::HeightSharded, [32, 32]),
        );
        assert!(t
            .validate(&wh, "x")
            .unwrap_err()
            .to_string()
            .contains("whole rows"));
        let far = MemoryConfig::sharded(
            TensorMemoryLayout::HeightSharded,
            BufferType::L1,
            ShardSpec::new(CoreRange::new((0, 0), (8, 0)), [32, 64]),
        );
        let t = TensorSpec::new(vec![1, 1, 64, 64], DataType::BFloat16, Layout::Tile, far);
        assert!(t
            .validate(&wh, "x")
            .unwrap_err()
            .to_string()
            .contains("outside the compute grid"));
    }

    #[test]
    fn block_sharded_page_locations() {
        let wh = ArchSpec::wormhole_b0();
        let mc = MemoryConfig::sharded(
            TensorMemoryLayout::BlockSharded,
            BufferType::L1,
            ShardSpec::new(CoreRange::grid(2, 2), [64, 64]),
        );
        let t = TensorSpec::new(vec![1, 1, 128, 128], DataType::BFloat16, Layout::Tile, mc);
        let pages = t.page_map(&wh, 1_000_000).unwrap();
        // Page grid 4x4 tiles, shards 2x2 tiles on cores (0,0),(1,0),(0,1),(1,1) = banks 0,1,8,9.
        assert_eq!(pages.location(0), (0, 1_000_000));
        assert_eq!(pages.location(1), (0, 1_000_000 + 2048));
        assert_eq!(pages.location(2), (1, 1_000_000));
        assert_eq!(pages.location(4), (0, 1_000_000 + 2 * 2048));
        assert_eq!(pages.location(15), (9, 1_000_000 + 3 * 2048));
    }
}
