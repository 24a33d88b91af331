//! TT-NN's `create_sharded_memory_config`: the L1 MemoryConfig TT-NN builds from a tensor shape,
//! a core grid and a sharding strategy.

use crate::allocator::BufferType;
use crate::error::{ChipError, Result};

use super::spec::{CoreRange, MemoryConfig, ShardOrientation, ShardSpec, TensorMemoryLayout};

/// TT-NN's `ShardStrategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShardStrategy {
    Height,
    Width,
    Block,
}

/// TT-NN's `CoreGrid(y, x)`: the `x` columns by `y` rows starting at core (0, 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoreGrid {
    pub x: u32,
    pub y: u32,
}

impl CoreGrid {
    pub fn new(x: u32, y: u32) -> CoreGrid {
        CoreGrid { x, y }
    }
    pub fn num_cores(&self) -> u32 {
        self.x * self.y
    }
}

/// Where the shards go: a [`CoreGrid`] (what TT-NN divides the tensor over), or explicit core
/// ranges (TT-NN accepts those only with `use_height_and_width_as_shard_shape`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardCores {
    Grid(CoreGrid),
    Ranges(Vec<CoreRange>),
}

impl From<CoreGrid> for ShardCores {
    fn from(g: CoreGrid) -> Self {
        ShardCores::Grid(g)
    }
}

impl From<Vec<CoreRange>> for ShardCores {
    fn from(r: Vec<CoreRange>) -> Self {
        ShardCores::Ranges(r)
    }
}

impl From<CoreRange> for ShardCores {
    fn from(r: CoreRange) -> Self {
        ShardCores::Ranges(vec![r])
    }
}

/// TT-NN's `create_sharded_memory_config(shape, core_grid, strategy, orientation,
/// use_height_and_width_as_shard_shape)`: an L1 MemoryConfig with a shard spec.
///
/// The tensor is seen as `[product of all dims but the last, last dim]`. HEIGHT divides the
/// height over all cores, WIDTH the width, BLOCK the height over the grid's rows and the width
/// over its columns (swapped for COL_MAJOR). Like TT-NN, the division must be exact: nothing is
/// rounded to tiles. With `use_height_and_width_as_shard_shape` the last two dims are the shard
/// shape (swapped for COL_MAJOR). `orientation` None means ROW_MAJOR.
pub fn create_sharded_memory_config(
    shape: &[usize],
    core_grid: impl Into<ShardCores>,
    strategy: ShardStrategy,
    orientation: Option<ShardOrientation>,
    use_height_and_width_as_shard_shape: bool,
) -> Result<MemoryConfig> {
    let orientation = orientation.unwrap_or_default();
    let core_grid = core_grid.into();
    let invalid = |reason: String| ChipError::InvalidShardSpec {
        tensor: format!("create_sharded_memory_config(shape {shape:?})"),
        reason,
    };
    let [batch @ .., height, width] = shape else {
        return Err(invalid(
            "the shape needs at least two dims (height and width)".into(),
        ));
    };
    let (height, width) = (*height, *width);
    let grid = match &core_grid {
        ShardCores::Grid(g) => {
            if g.x == 0 || g.y == 0 {
                return Err(invalid(format!("core grid {}x{} has no cores", g.x, g.y)));
            }
            vec![CoreRange::grid(g.x, g.y)]
        }
        ShardCores::Ranges(r) => {
            if !use_height_and_width_as_shard_shape {
                return Err(invalid(
                    "height and width must be shard shape with CoreRangeSet: pass use_height_and_width_as_shard_shape, or a CoreGrid".into(),
                ));
            }
            if r.is_empty() {
                return Err(invalid("no core ranges given".into()));
            }
            r.clone()
        }
    };
    let shard_shape = if use_height_and_width_as_shard_shape {
        match orientation {
            ShardOrientation::RowMajor => [height, width],
            ShardOrientation::ColMajor => [width, height],
        }
    } else {
        let ShardCores::Grid(g) = core_grid else {
            unreachable!("ranges were refused above without use_height_and_width_as_shard_shape")
        };
        let tensor_height = batch.iter().product::<usize>() * height;
        let split = |total: usize, parts: u32, what: &str| {
            if !total.is_multiple_of(parts as usize) {
                Err(invalid(format!(
                    "Invalid sharding core_grid: the tensor {what} {total} does not divide over {parts} cores; pick a grid that divides it"
                )))
            } else {
                Ok(total / parts as usize)
            }
        };
        match (strategy, orientation) {
            (ShardStrategy::Height, _) => [split(tensor_height, g.num_cores(), "height")?, width],
            (ShardStrategy::Width, _) => [tensor_height, split(width, g.num_cores(), "width")?],
            (ShardStrategy::Block, ShardOrientation::RowMajor) => [
                split(tensor_height, g.y, "height")?,
                split(width, g.x, "width")?,
            ],
            (ShardStrategy::Block, ShardOrientation::ColMajor) => [
                split(tensor_height, g.x, "height")?,
                split(width, g.y, "width")?,
            ],
        }
    };
    let layout = match strategy {
        ShardStrategy::Height => TensorMemoryLayout::HeightSharded,
        ShardStrategy::Width => TensorMemoryLayout::WidthSharded,
        ShardStrategy::Block => TensorMemoryLayout::BlockSharded,
    };
    Ok(MemoryConfig::sharded(
        layout,
        BufferType::L1,
        ShardSpec {
            grid,
            shape: shard_shape,
            orientation,
        },
    ))
}
