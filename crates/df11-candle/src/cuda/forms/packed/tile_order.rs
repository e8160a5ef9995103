//! The tile order: how a member matrix is laid out in a unit's device form so that the
//! tensor-core kernels (`kernels/df11_tc.cu`) read it in long runs.
//!
//! The tensor-core kernels cut a `[rows, cols]` matrix into row groups of 8 rows (`G`), chunks of
//! 2048 columns (`k`, the last one `W = cols - 2048 k` wide when `cols % 2048 != 0`) and eight
//! sub-steps `m` per chunk; in sub-step `(G, k, m)` lane `(g, t)` (`g = lane / 4`, `t = lane % 4`)
//! takes row `8G + g` and, in pass `i`, the eight columns `2048k + 8(4m + t) + 256i ..+ 8`. In row
//! order those 2048 weights are 8 rows x 32-byte pieces, scattered: DRAM sees sectors, not runs.
//! The tile order lists a member's elements in the order `(G, k, m, i, g, t, e)` (`e`: the
//! weight in its 8-group), so that one sub-step's weights are `W` consecutive elements and lane
//! `l = 4g + t` reads elements `256i + 8l ..+ 8` of them: the packed form's chunk lane `l` in pass
//! `i`. Codes, escapes and `sign_mantissa` of a sub-step are then one coalesced run each.
//!
//! Only the storage moves: every weight still meets the same input column in the same mma slot
//! in the same order, so the tensor-core summation contract, and with it the BF16 twin (which
//! reads the row-major BF16 matrix), are unchanged. The decode kernel writes each 8-group back to
//! its row-major place (`tile_original` in `kernels/df11_packed.cuh` is [`TileOrder::original`]).
//! A member is tiled when the caller gives its shape at load and the shape suits the kernels
//! ([`TileOrder::for_member`]); the others stay row-major.

use std::ops::Range;

use rayon::prelude::*;

pub use crate::options::TileMembers;

/// Most members a unit with a tiled member may have (`DP_MEMBERS` of `kernels/df11_packed.cu`:
/// the tiled decode keeps every member's bounds in shared memory). Larger units stay row-major.
pub const MAX_TILED_UNIT_MEMBERS: usize = 32;

/// A member stored in the tile order, with its matrix shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileOrder {
    /// Rows of the matrix (a multiple of 8).
    pub rows: usize,
    /// Columns (a multiple of 256, as the tensor-core kernels take).
    pub cols: usize,
}

impl TileOrder {
    /// The tile order of the member at `member` (unit elements) whose shape the caller says is
    /// `shape`, if the shape matches the member's size and suits the tensor-core kernels: rows a
    /// multiple of 8, columns they take ([`crate::cuda::matmul`]'s shape rule), the member
    /// starting on a 256-element boundary.
    pub fn for_member(shape: Option<(usize, usize)>, member: &Range<usize>) -> Option<Self> {
        let (rows, cols) = shape?;
        let fits = rows > 0
            && rows.is_multiple_of(8)
            && crate::cuda::limits::tc_shape(cols)
            && rows.checked_mul(cols) == Some(member.len())
            && member.start.is_multiple_of(256)
            && u32::try_from(member.end).is_ok();
        fits.then_some(Self { rows, cols })
    }

    /// The row-major index (`row * cols + col`) of the element at position `p` of the tile
    /// order (both relative to the member's start). `p` is below `rows * cols`.
    pub fn original(&self, p: usize) -> usize {
        let cols = self.cols;
        let (group, r) = (p / (8 * cols), p % (8 * cols));
        let (k, r) = (r / 16384, r % 16384);
        let width = (cols - 2048 * k).min(2048);
        let (m, r) = (r / width, r % width);
        let (i, r) = (r / 256, r % 256);
        let (g, t, e) = (r / 32, (r / 8) % 4, r % 8);
        (8 * group + g) * cols + 2048 * k + 8 * (4 * m + t) + 256 * i + e
    }

    /// `dst[p] = src[original(p)]` for every position of the member (`src` in row order, both
    /// `rows * cols` long).
    pub fn gather<T: Copy + Send + Sync>(&self, src: &[T], dst: &mut [T]) {
        assert_eq!(src.len(), self.rows * self.cols);
        assert_eq!(dst.len(), src.len());
        // 8-groups are whole in both orders.
        dst.par_chunks_mut(8).enumerate().for_each(|(q, out)| {
            let o = self.original(8 * q);
            out.copy_from_slice(&src[o..o + 8]);
        });
    }
}

/// The orders of a unit's members under `policy`: `shapes[i]` is member `i`'s shape where the
/// caller knows it (all row order for units of more than [`MAX_TILED_UNIT_MEMBERS`] members).
pub fn member_orders(
    policy: TileMembers,
    members: &[Range<usize>],
    shapes: &[Option<(usize, usize)>],
) -> Vec<Option<TileOrder>> {
    let on = members.len() <= MAX_TILED_UNIT_MEMBERS;
    members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let shape = shapes.get(i).copied().flatten();
            TileOrder::for_member(shape.filter(|&(_, cols)| on && policy.tiles(cols)), m)
        })
        .collect()
}

/// `orders` as one entry per member (missing entries: row order), if every tiled member's order
/// is the one [`TileOrder::for_member`] gives its shape (the kernels rely on it).
pub fn checked_orders(
    members: &[Range<usize>],
    orders: &[Option<TileOrder>],
) -> Option<Vec<Option<TileOrder>>> {
    let tiled = orders.iter().any(Option::is_some);
    if orders.len() > members.len() || (tiled && members.len() > MAX_TILED_UNIT_MEMBERS) {
        return None;
    }
    members
        .iter()
        .enumerate()
        .map(|(i, m)| match orders.get(i).copied().flatten() {
            None => Some(None),
            Some(o) => {
                (TileOrder::for_member(Some((o.rows, o.cols)), m) == Some(o)).then_some(Some(o))
            }
        })
        .collect()
}

/// Columns of a whole piece of a tiled member: one 2048-column chunk of 8 rows.
const PIECE_COLS: usize = 2048;
/// Elements of a whole piece (8 rows x [`PIECE_COLS`]).
const PIECE_ELEMENTS: usize = 8 * PIECE_COLS;

/// Whether `elements` is whole members that are all tiled with whole 2048-column chunks and
/// start on a [`PIECE_ELEMENTS`] boundary: every [`PIECE_ELEMENTS`] elements from its start are
/// then one whole piece of one member, what the pipelined decode (`df11_decode_packed_pieces`)
/// takes. `members` are the unit's member ranges, `orders` their orders.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn whole_pieces(
    members: &[Range<usize>],
    orders: &[Option<TileOrder>],
    elements: &Range<usize>,
) -> bool {
    let first = members.iter().position(|m| m.start == elements.start);
    let last = members.iter().position(|m| m.end == elements.end);
    let (Some(first), Some(last)) = (first, last) else {
        return false;
    };
    !elements.is_empty()
        && first <= last
        && (first..=last).all(|m| {
            orders
                .get(m)
                .copied()
                .flatten()
                .is_some_and(|o| o.cols.is_multiple_of(PIECE_COLS))
                && members[m].start.is_multiple_of(PIECE_ELEMENTS)
        })
}

/// `values` (one per unit element, row-major members) with the tiled members put in tile
/// order; `None` when no member is tiled.
pub fn tile_members<T: Copy + Send + Sync>(
    values: &[T],
    members: &[Range<usize>],
    orders: &[Option<TileOrder>],
) -> Option<Vec<T>> {
    if orders.iter().all(Option::is_none) {
        return None;
    }
    let mut out = values.to_vec();
    for (m, order) in members.iter().zip(orders) {
        if let Some(order) = order {
            order.gather(&values[m.clone()], &mut out[m.clone()]);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_pieces_are_whole_members_tiled_in_2048_column_chunks() {
        // Members: [16, 2048], [8, 4096] (both on 16384-element boundaries), [16, 3840] (a
        // partial chunk), [8, 2048] after it (off the boundary), [8, 2048] row order.
        let shapes = [(16, 2048), (8, 4096), (16, 3840), (8, 2048), (8, 2048)];
        let mut members = Vec::new();
        let mut at = 0;
        for (r, c) in shapes {
            members.push(at..at + r * c);
            at += r * c;
        }
        let mut orders: Vec<Option<TileOrder>> = shapes
            .iter()
            .zip(&members)
            .map(|(&s, m)| TileOrder::for_member(Some(s), m))
            .collect();
        orders[4] = None;
        assert!(orders[..4].iter().all(Option::is_some));
        let span = |a: usize, b: usize| members[a].start..members[b].end;
        assert!(whole_pieces(&members, &orders, &span(0, 0)));
        assert!(whole_pieces(&members, &orders, &span(1, 1)));
        assert!(
            whole_pieces(&members, &orders, &span(0, 1)),
            "stacked neighbours"
        );
        assert!(
            !whole_pieces(&members, &orders, &span(2, 2)),
            "a partial chunk"
        );
        assert!(!whole_pieces(&members, &orders, &span(1, 2)));
        assert!(
            !whole_pieces(&members, &orders, &span(3, 3)),
            "off the boundary"
        );
        assert!(!whole_pieces(&members, &orders, &span(4, 4)), "row order");
        assert!(!whole_pieces(&members, &orders, &span(0, 4)));
        let m0 = members[0].clone();
        assert!(
            !whole_pieces(&members, &orders, &(m0.start..m0.end - 8)),
            "cut"
        );
        assert!(
            !whole_pieces(&members, &orders, &(m0.start + 8..m0.end)),
            "cut"
        );
        assert!(!whole_pieces(&members, &orders, &(0..0)), "empty");
        assert!(!whole_pieces(&members, &[], &span(0, 0)), "no orders");
    }

    #[test]
    fn the_order_is_a_permutation_and_sub_steps_are_runs() {
        for (rows, cols) in [
            (8, 256),
            (16, 2048),
            (24, 4096),
            (8, 5120),
            (16, 3840),
            (8, 2304),
        ] {
            let o = TileOrder { rows, cols };
            let n = rows * cols;
            let mut seen = vec![false; n];
            for p in 0..n {
                let j = o.original(p);
                assert!(!seen[j], "[{rows}, {cols}]: {j} twice");
                seen[j] = true;
            }
            // Sub-step (G, k, m): lane l, pass i reads row 8G + l / 4, columns
            // 2048k + 8(4m + l % 4) + 256i ..+ 8, at positions start + 256i + 8l ..+ 8.
            let mut start = 0;
            for group in 0..rows / 8 {
                for k in 0..cols.div_ceil(2048) {
                    let width = (cols - 2048 * k).min(2048);
                    for m in 0..8 {
                        for i in 0..width / 256 {
                            for l in 0..32 {
                                let (g, t) = (l / 4, l % 4);
                                let col = 2048 * k + 8 * (4 * m + t) + 256 * i;
                                for e in 0..8 {
                                    let p = start + 256 * i + 8 * l + e;
                                    assert_eq!(o.original(p), (8 * group + g) * cols + col + e);
                                }
                            }
                        }
                        start += width;
                    }
                }
            }
            assert_eq!(start, n);
        }
    }

    #[test]
    fn only_shapes_the_kernels_take_are_tiled() {
        assert!(TileOrder::for_member(Some((8, 256)), &(0..2048)).is_some());
        assert!(TileOrder::for_member(Some((8, 256)), &(256..2304)).is_some());
        assert!(TileOrder::for_member(None, &(0..2048)).is_none());
        assert!(TileOrder::for_member(Some((4, 512)), &(0..2048)).is_none()); // rows % 8
        assert!(TileOrder::for_member(Some((16, 128)), &(0..2048)).is_none()); // cols % 256
        assert!(TileOrder::for_member(Some((8, 512)), &(0..2048)).is_none()); // size
        assert!(TileOrder::for_member(Some((8, 256)), &(8..2056)).is_none()); // start
    }

    #[test]
    fn tiling_moves_only_tiled_members() {
        let members = [0..2048, 2048..2100, 2100..2100 + 16 * 512];
        let n = members[2].end;
        let values: Vec<u32> = (0..n as u32).collect();
        // The third member starts at 2100, not a multiple of 256: it stays row-major.
        let shapes = [Some((8, 256)), None, Some((16, 512))];
        let orders = member_orders(TileMembers::All, &members, &shapes);
        // By default only whole 2048-column chunks are tiled.
        let chunked = member_orders(TileMembers::Chunked, &members, &shapes);
        assert_eq!(chunked, [None, None, None]);
        // Two 8 x 2048 members, whole chunks: both tiled.
        let two = [0..8 * 2048, 8 * 2048..16 * 2048];
        let wide = member_orders(TileMembers::Chunked, &two, &[Some((8, 2048)); 2]);
        assert_eq!(
            wide,
            [Some(TileOrder {
                rows: 8,
                cols: 2048
            }); 2]
        );
        assert_eq!(orders[0], Some(TileOrder { rows: 8, cols: 256 }));
        assert_eq!(orders[1..], [None, None]);
        let tiled = tile_members(&values, &members, &orders).unwrap();
        assert_eq!(tiled[2048..], values[2048..]);
        for (p, &v) in tiled[..2048].iter().enumerate() {
            assert_eq!(v as usize, orders[0].unwrap().original(p));
        }
        assert!(tile_members(&values, &members, &[None, None, None]).is_none());
        // Orders are checked against the members they claim.
        let ok = checked_orders(&members, &orders[..1]).unwrap();
        assert_eq!(ok, orders);
        let wrong = [None, Some(TileOrder { rows: 8, cols: 256 })];
        assert!(checked_orders(&members, &wrong).is_none());
        assert!(checked_orders(&members[..1], &orders).is_none());
        // Too many members for the tiled decode: none tiled, and such orders refused.
        let many: Vec<Range<usize>> = (0..33).map(|i| 2048 * i..2048 * (i + 1)).collect();
        let shapes = vec![Some((8, 256)); 33];
        let all = |m: &[Range<usize>]| member_orders(TileMembers::All, m, &shapes);
        assert!(all(&many).iter().all(Option::is_none));
        let forced = vec![Some(TileOrder { rows: 8, cols: 256 }); 33];
        assert!(checked_orders(&many, &forced).is_none());
        assert!(all(&many[..32]).iter().all(Option::is_some));
    }
}
