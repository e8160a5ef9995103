//! Launch layout of the streaming tensor-core kernels (`kernels/df11_tc_stream.cu`): their
//! module, how many CTAs per SM and slots of partial sums a launch
//! takes ([`StreamPlan`]), and the launch configuration. The ops that launch them are in the
//! parent module.

use candle_core::cuda_backend::CudaDevice;

use super::tiling::{TcTiling, STREAM_TABLE_BYTES};
use crate::cuda::launch::{launch_config_in, resident_ctas, smem_per_block_optin};
use crate::cuda::module::{fatbin_module, Module};

const STREAM_MODULE: Module = fatbin_module!("df11_tc_stream");
/// A stage of the streaming kernels: `TS_STAGE` bytes (DF11) or `TS_TWIN_STAGE` (twin); each of
/// the 8 warps of a CTA has `TS_DEPTH` (2) of them (kernels/df11_tc_stream.cu).
const STREAM_STAGE_BYTES: usize = 3120;
const STREAM_TWIN_STAGE_BYTES: usize = 4096;
const STREAM_RING_STAGES: usize = 8 * 2;

/// Shared memory of one SM its CTAs may share (H100: 228 KiB, 1 KiB of it reserved per CTA).
const SM_SHARED_BYTES: usize = 228 * 1024;

/// The streaming kernels' module and the stages of a warp's ring (`STREAM_RING_STAGES / 8` for
/// the built one; for measurements, a PTX file's and its `TS_DEPTH`: `crate::tuning`).
pub(super) fn stream_module() -> (Module, usize) {
    match crate::tuning::get().and_then(|t| t.stream_ptx.as_ref()) {
        Some((ptx, depth)) => (Module::ptx("df11_tc_stream_override", ptx), *depth),
        None => (STREAM_MODULE, STREAM_RING_STAGES / 8),
    }
}

/// A streaming launch's layout ([`TcTiling::stream_plan`]): dynamic shared memory, slots of
/// partial sums, CTAs per SM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StreamPlan {
    smem: usize,
    pub(super) nslots: i32,
    per_sm: u32,
}

impl TcTiling {
    fn stream_kernel(&self, nb: usize, twin: bool) -> &'static str {
        match (twin, self.m_tiles) {
            (false, 1) if nb <= 8 => "df11_tc_stream_8",
            (false, 1) => "df11_tc_stream_1",
            (false, 2) => "df11_tc_stream_2",
            (false, _) => "df11_tc_stream_4",
            (true, 1) if nb <= 8 => "bf16_tc_stream_8",
            (true, 1) => "bf16_tc_stream_1",
            (true, 2) => "bf16_tc_stream_2",
            (true, _) => "bf16_tc_stream_4",
        }
    }

    /// The layout of a streaming launch on a device whose CTAs may take `optin` bytes of shared
    /// memory: 2 CTAs per SM where they fit, else 1 (the launch takes fewer where the kernel's
    /// registers hold fewer, [`stream_config`]; 3 measured slower, docs/PERFORMANCE.md) with as many slots of partial sums as fit (4, 2 or 1: measured 4 fastest,
    /// docs/PERFORMANCE.md); `None` above 32 rows of input (four m-tiles: measured slower than
    /// `df11_tc.cu`, 0.749 against 0.548 ms a Qwen3-8B layer at 64 rows) and where one CTA with
    /// one slot does not fit.
    pub(super) fn stream_plan(&self, nb: usize, twin: bool, optin: usize) -> Option<StreamPlan> {
        if self.m_tiles > 2 {
            return None;
        }
        let slots = crate::tuning::get().and_then(|t| t.tc_slots);
        let (table, stage) = if twin {
            (0, STREAM_TWIN_STAGE_BYTES)
        } else {
            (STREAM_TABLE_BYTES, STREAM_STAGE_BYTES)
        };
        let depth = stream_module().1;
        let ring = 8 * depth * stage;
        let partial = self.partial_bytes(nb).next_multiple_of(16);
        for per_sm in [2u32, 1] {
            for nslots in [4usize, 2, 1] {
                if slots.is_some_and(|n| n < nslots) {
                    continue;
                }
                let smem = nslots * partial + ring;
                if smem + table <= optin
                    && per_sm as usize * (smem + table + 1024) <= SM_SHARED_BYTES
                {
                    return Some(StreamPlan {
                        smem,
                        nslots: nslots as i32,
                        per_sm,
                    });
                }
            }
        }
        None
    }
}

/// The launch of `tiling`'s streaming kernel (`twin` or DF11) and its layout, or `None` where it
/// does not fit the device ([`TcTiling::stream_plan`]).
pub(super) fn stream_config(
    dev: &CudaDevice,
    tiling: &TcTiling,
    twin: bool,
    rows: usize,
    nb: usize,
) -> candle_core::Result<
    Option<(
        candle_core::cuda_backend::cudarc::driver::LaunchConfig,
        &'static str,
        StreamPlan,
    )>,
> {
    let Some(plan) = tiling.stream_plan(nb, twin, smem_per_block_optin(dev)?) else {
        return Ok(None);
    };
    let name = tiling.stream_kernel(nb, twin);
    let (module, _) = stream_module();
    // The grid is CTAs per SM x SMs: no more CTAs per SM than the kernel keeps resident (its
    // launch bounds, or a measurement build's: kernels/df11_tc_stream.cu `TS_LOW_CTAS`).
    let per_sm = plan
        .per_sm
        .min(resident_ctas(dev, &module, name, plan.smem)?);
    let plan = StreamPlan { per_sm, ..plan };
    let cfg = launch_config_in(dev, &module, name, plan.smem, tiling.tiles(rows), per_sm)?;
    Ok(Some((cfg, name, plan)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_layouts_fit_the_sm() {
        let optin = 227 * 1024;
        for (rows, cols) in [
            (4096, 4096),
            (1024, 4096),
            (12288, 4096),
            (4096, 12288),
            (8, 65536),
        ] {
            for nb in [1, 2, 3, 8, 16, 33, 64] {
                let t = TcTiling::new(
                    rows,
                    cols,
                    nb,
                    crate::cuda::packed::tile_order::TileMembers::Chunked,
                )
                .unwrap();
                for twin in [false, true] {
                    let Some(p) = t.stream_plan(nb, twin, optin) else {
                        // Above 32 rows, or where even one slot and one CTA do not fit.
                        assert!(
                            nb > 32 || t.partial_bytes(nb) + STREAM_RING_STAGES * 3120 > 150 * 1024
                        );
                        continue;
                    };
                    let table = if twin { 0 } else { STREAM_TABLE_BYTES };
                    assert!(p.smem + table <= optin);
                    assert!(p.per_sm as usize * (p.smem + table + 1024) <= SM_SHARED_BYTES);
                    // The decode step's batches keep 2 CTAs per SM and 4 slots.
                    if nb <= 8 && cols <= 12288 {
                        assert_eq!((p.per_sm, p.nslots), (2, 4), "[{rows}, {cols}] x {nb}");
                    }
                }
            }
        }
        assert!(TcTiling::new(
            8,
            256,
            65,
            crate::cuda::packed::tile_order::TileMembers::Chunked
        )
        .is_err());
    }
}
