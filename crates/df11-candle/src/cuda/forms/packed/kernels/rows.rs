//! An embedding's rows for a step's tokens in one launch (`df11_decode_packed_rows`).

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaStorage, Layout, Shape};

use super::{PackedBuffers, DECODE_MODULE};
use crate::cuda::launch::{launch_config, push_args};

/// Most rows one launch of `df11_decode_packed_rows` takes (a grid's y dimension).
pub(crate) const ROWS_A_LAUNCH: usize = 65_535;

/// Rows `[start, start + row_len)` of the unit for each `start`, one after another in one buffer
/// (`df11_decode_packed_rows`: one launch for every row, e.g. a step's embedding rows). The unit
/// must have no member in the tile order, and at most [`ROWS_A_LAUNCH`] rows.
pub(crate) fn decode_packed_rows(
    unit: &PackedBuffers,
    sm: &CudaStorage,
    sm_l: &Layout,
    starts: &[usize],
    row_len: usize,
) -> candle_core::Result<(CudaStorage, Shape)> {
    if unit.has_tiled_member() || starts.len() > ROWS_A_LAUNCH {
        candle_core::bail!(
            "df11: the rows kernel takes at most {ROWS_A_LAUNCH} rows of a unit in row order"
        );
    }
    if sm_l.start_offset() != 0
        || !sm_l.is_contiguous()
        || sm_l.shape().elem_count() != unit.n_elements
    {
        candle_core::bail!("df11: sign_mantissa must be the unit's whole contiguous buffer");
    }
    if let Some(&s) = starts
        .iter()
        .find(|&&s| s.checked_add(row_len).is_none_or(|e| e > unit.n_elements))
    {
        candle_core::bail!("df11: row [{s}, +{row_len}) outside the unit");
    }
    let dev = sm.device().clone();
    let len = starts.len() * row_len;
    let out = crate::cuda::launch::alloc_out(&dev, len)?;
    if len > 0 {
        let name = "df11_decode_packed_rows";
        let begins: Vec<i64> = starts.iter().map(|&s| s as i64).collect();
        let begins = dev.clone_htod(&begins)?;
        // A row's chunks (one more where it starts mid-chunk), 8 warps a CTA.
        let chunks = row_len.div_ceil(2048) + 1;
        let mut cfg = launch_config(&dev, name, 0, chunks.div_ceil(8))?;
        cfg.grid_dim = (chunks.div_ceil(8) as u32, starts.len() as u32, 1);
        let func = DECODE_MODULE.func(&dev, name)?;
        let sm = sm.as_cuda_slice::<u8>()?;
        let n_members = unit.members.len() as i32;
        let (n_elements, row_len_) = (unit.n_elements as i64, row_len as i64);
        let mut b = func.builder();
        unit.push_packed(&mut b);
        push_args!(b; &unit.tables, &unit.member_ends, &n_members, sm, &n_elements);
        push_args!(b; &out, &begins, &row_len_);
        // SAFETY: no member is tiled (storage order is row order); every row lies inside the
        // unit (checked above); out holds starts.len() * row_len values, row y written at
        // y * row_len + (o - start) for its elements o only; the packed buffers cover the unit.
        unsafe { b.launch(cfg) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from(len)))
}
