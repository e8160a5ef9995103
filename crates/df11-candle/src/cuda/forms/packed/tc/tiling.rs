//! How the tensor-core kernels (`kernels/df11_tc.cu`, the streaming, panel and warpgroup
//! kernels) cut a product into items and CTA tiles ([`TcTiling`]), which fixes their summation
//! order, and the exponent table's size they share. Below every tensor-core launch module.

use crate::cuda::limits::{tc_shape, TC_LIMIT_ROWS};
use crate::cuda::packed::tile_order::TileMembers;

/// The streaming DF11 kernel's escape table (`TS_TABLE_BYTES` of kernels/df11_escape_table.cuh:
/// 4096 + 16 words, static shared memory).
pub(crate) const STREAM_TABLE_BYTES: usize = 4 * (4096 + 16);

/// Partial-sum bytes a CTA tile may take.
pub(crate) const MAX_PARTIAL_BYTES: usize = 64 * 1024;

/// How both tensor-core kernels split a `[rows, cols]` product with `nb` rows of input: items of
/// 8 weight rows x one 2048-column chunk x `steps` of its 8 sub-steps (the summation order depends
/// on `steps`), `tile_groups` row groups per CTA tile (it does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TcTiling {
    pub(crate) steps: usize,
    pub(crate) tile_groups: usize,
    pub(crate) items_per_group: usize,
    pub(crate) m_tiles: usize,
}

impl TcTiling {
    /// The tiling of a `[rows, cols]` product with `nb` rows of input, members tiled by `tiles`.
    pub(crate) fn new(
        rows: usize,
        cols: usize,
        nb: usize,
        tiles: TileMembers,
    ) -> candle_core::Result<Self> {
        if !tc_shape(cols) || rows == 0 || nb == 0 || nb > TC_LIMIT_ROWS {
            candle_core::bail!("df11: tensor-core kernel called with {nb} x [{rows}, {cols}]");
        }
        let m_tiles = match nb {
            0..=16 => 1,
            17..=32 => 2,
            _ => 4,
        };
        // Two sub-steps per item measured fastest at every batch for `df11_tc.cu` (1 to 512
        // rows, docs/PERFORMANCE.md: 32-64 rows 35% faster than 8); eight (a whole chunk an
        // item) for the streaming kernels at 1 to 16 rows (H200, tc_probe layer, DF11 ms a
        // Qwen3-8B layer, 8 against 2 or 4 sub-steps: 0.114 / 0.122 at 1 row, 0.135 / 0.145 at
        // 8, 0.186 / 0.193 at 16; the twin 0.111 / 0.111, 0.122 / 0.122, 0.153 / 0.181); more
        // where a row group's partial sums would pass the budget (very wide rows). Depends on
        // (cols, nb) and the options only, never on the weight format.
        let chunks = cols.div_ceil(2048);
        let first = if streams_whole_chunk_items(cols, nb, tiles) {
            8
        } else {
            2
        };
        let tuning = crate::tuning::get();
        let steps = tuning.and_then(|t| t.tc_steps).unwrap_or_else(|| {
            [2, 4, 8]
                .into_iter()
                .filter(|&s| s >= first)
                .find(|&s| chunks * (8 / s) * nb * 32 <= MAX_PARTIAL_BYTES)
                .unwrap_or(8)
        });
        let items_per_group = chunks * (8 / steps);
        // Enough items per tile for the 8 warps, within the partial-sum budget.
        let per_group = items_per_group * nb * 32;
        let tile_groups = tuning
            .and_then(|t| t.tc_tile_groups)
            .unwrap_or_else(|| 8usize.div_ceil(items_per_group))
            .min((MAX_PARTIAL_BYTES / per_group).max(1))
            .min(rows.div_ceil(8));
        Ok(Self {
            steps,
            tile_groups,
            items_per_group,
            m_tiles,
        })
    }

    /// Items of a row group: its chunks times the items of a chunk.
    #[cfg(feature = "experimental-kernels")]
    pub(crate) fn items_per_group(&self) -> usize {
        self.items_per_group
    }

    pub(crate) fn tiles(&self, rows: usize) -> usize {
        rows.div_ceil(8).div_ceil(self.tile_groups)
    }

    pub(crate) fn partial_bytes(&self, nb: usize) -> usize {
        self.tile_groups * self.items_per_group * nb * 32
    }

    pub(crate) fn kernel(&self, twin: bool) -> &'static str {
        match (twin, self.m_tiles) {
            (false, 1) => "df11_tc_packed_1",
            (false, 2) => "df11_tc_packed_2",
            (false, _) => "df11_tc_packed_4",
            (true, 1) => "bf16_tc_1",
            (true, 2) => "bf16_tc_2",
            (true, _) => "bf16_tc_4",
        }
    }

    /// `TC_MIN_CTAS(MT)` of kernels/df11_tc.cu: the CTAs per SM the kernel is compiled for.
    pub(crate) fn ctas_per_sm(&self) -> u32 {
        if self.m_tiles == 1 {
            3
        } else {
            2
        }
    }
}

/// Whether a product over `cols` columns with `nb` rows of input takes eight sub-steps per item
/// (a whole chunk): 1 to 16 rows on widths whose members are tiled in whole chunks (the products
/// the streaming kernels take, in DF11 and BF16 alike). Not whether streaming is on:
/// [`crate::Df11Options::streaming`] changes speed, never a bit, so `df11_tc.cu` sums such
/// products in eight sub-steps too.
pub(crate) fn streams_whole_chunk_items(cols: usize, nb: usize, tiles: TileMembers) -> bool {
    (1..=16).contains(&nb) && tiles.tiles_whole_chunks(cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiling_fits_the_budget_and_covers_the_rows() {
        for (rows, cols) in [
            (8, 256),
            (1024, 4096),
            (12288, 4096),
            (4096, 12288),
            (5, 5120),
            (64, 28672),
        ] {
            for nb in [1, 7, 16, 17, 33, 64] {
                let t = TcTiling::new(rows, cols, nb, TileMembers::Chunked).unwrap();
                assert!(t.partial_bytes(nb) <= MAX_PARTIAL_BYTES.max(t.items_per_group * nb * 32));
                assert!(t.tiles(rows) * t.tile_groups * 8 >= rows);
                assert_eq!(8 % t.steps, 0);
                // Two sub-steps per item wherever the partial sums fit (eight for the streaming
                // kernels' 1 to 16 rows on tiled widths).
                let first = if streams_whole_chunk_items(cols, nb, TileMembers::Chunked) {
                    8
                } else {
                    2
                };
                if cols.div_ceil(2048) * (8 / first) * nb * 32 <= MAX_PARTIAL_BYTES {
                    assert_eq!(t.steps, first, "[{rows}, {cols}] x {nb}");
                }
            }
        }
        assert!(TcTiling::new(8, 264, 1, TileMembers::Chunked).is_err());
    }
}
