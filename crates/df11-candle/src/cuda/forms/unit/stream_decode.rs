//! The unit's stream decoded on the GPU by the block kernel, from the file's bytes: what the GPU
//! build of the packed form starts from (`crate::cuda::packed::gpu_pack`), and that build copied back to
//! the host for the GPU suite.

use candle_core::cuda_backend::CudaDevice;
use candle_core::{CudaStorage, Layout};

use super::{CudaUnit, HostExponents};
use crate::cuda::packed::gpu_pack::DevicePacked;
use crate::cuda::packed::tile_order::TileOrder;
use crate::cuda::packed::ExponentForm;
use crate::cuda::upload::HostArray;
use crate::error::Result;
use crate::format::unit::{UnitLayout, UnitTensors};

/// A validated unit's whole stream decoded on `device` by the block kernel (its Huffman form
/// uploaded straight from the file's bytes), the kernel's status word read: what the GPU build
/// of the packed form ([`crate::cuda::packed::gpu_pack::build`]) starts from.
pub(super) fn decode_stream(
    device: &CudaDevice,
    name: &str,
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    sign_mantissa: (&CudaStorage, &Layout),
    options: &crate::Df11Options,
) -> Result<CudaStorage> {
    use crate::load_profile::{timed, Phase};
    let profiled = options.profile_load;
    let settle = || {
        let _ = device.cuda_stream().synchronize();
    };
    let bytes = t.encoded_exponent.len() + t.gaps.len() + t.output_positions.len();
    let huffman = timed(profiled, Phase::UploadExponents, bytes, settle, || {
        CudaUnit::huffman_without_index(device, t, layout, options.staged_copy)
    })?;
    timed(
        profiled,
        Phase::GpuDecode,
        2 * layout.n_elements,
        settle,
        || {
            let (storage, _) =
                huffman.decode(sign_mantissa.0, sign_mantissa.1, layout, 0..layout.n_blocks)?;
            huffman
                .check_status()
                .map_err(|defect| crate::cuda::packed::gpu_pack::refused(name, defect))?;
            Ok(storage)
        },
    )
}

/// The GPU build of a validated unit's packed form (members `orders` tiles in the tile order),
/// copied back to the host with its `sign_mantissa` where a member is tiled: `Ok(None)` where
/// there is none. For the GPU suite's comparison with [`crate::cuda::packed::PackedExponents::build`].
#[doc(hidden)]
pub fn build_on_gpu_to_host(
    device: &CudaDevice,
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    orders: &[Option<TileOrder>],
) -> Result<Option<(crate::cuda::packed::PackedExponents, Option<Vec<u8>>)>> {
    let sm = device.clone_htod(t.sign_mantissa)?;
    let storage = CudaStorage::wrap_cuda_slice(sm, device.clone());
    let sm_layout = Layout::contiguous(t.sign_mantissa.len());
    let options = crate::Df11Options::default();
    let decode = || {
        decode_stream(
            device,
            "<unit>",
            t,
            layout,
            (&storage, &sm_layout),
            &options,
        )
    };
    match crate::cuda::packed::gpu_pack::build(device, "<unit>", t, layout, orders, &decode, false)?
    {
        Some(p) => {
            let sm = match &p.sign_mantissa {
                Some(s) => Some(device.clone_dtoh(s)?),
                None => None,
            };
            Ok(Some((p.to_host(device)?, sm)))
        }
        None => Ok(None),
    }
}

/// What the GPU build of a unit's packed form gave ([`gpu_packed`]).
pub(super) enum GpuPacked {
    /// The packed form, to keep.
    Packed(Box<DevicePacked>),
    /// No packed form, or one too large for `auto`: the Huffman form instead, built on the CPU.
    Huffman,
    /// `options` build on the CPU (`gpu_pack` off, or the Huffman form asked for).
    NotAsked,
}

/// The packed form of a validated unit built on `device` from its stream (`sign_mantissa`
/// already there), where `options` ask for a GPU build: the one decision resident and offloaded
/// units share.
pub(super) fn gpu_packed(
    device: &CudaDevice,
    name: &str,
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    options: &crate::Df11Options,
    orders: &[Option<TileOrder>],
    sign_mantissa: (&CudaStorage, &Layout),
) -> Result<GpuPacked> {
    let form = options.exponents;
    if form == ExponentForm::Huffman || !options.gpu_pack {
        return Ok(GpuPacked::NotAsked);
    }
    super::keep_pool_memory(device);
    let decode = || decode_stream(device, name, t, layout, sign_mantissa, options);
    let built = crate::cuda::packed::gpu_pack::build(
        device,
        name,
        t,
        layout,
        orders,
        &decode,
        options.profile_load,
    )?;
    Ok(match built {
        Some(p) if form == ExponentForm::Packed || p.fits() => GpuPacked::Packed(Box::new(p)),
        _ => GpuPacked::Huffman,
    })
}

/// The host form of a validated unit that is to be offloaded, built as a resident unit's is
/// ([`gpu_packed`], then copied back into pinned memory; else [`HostExponents::build`] on the
/// CPU). The device memory the build takes is freed before this returns. `sign_mantissa` comes
/// back in storage order where a member is tiled.
pub(crate) fn offloaded_host_form(
    device: &CudaDevice,
    name: &str,
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    options: &crate::Df11Options,
    orders: &[Option<TileOrder>],
) -> Result<(HostExponents, Option<HostArray<u8>>)> {
    let sm = crate::cuda::staged_copy::upload(device, t.sign_mantissa, options.staged_copy)?;
    let storage = CudaStorage::wrap_cuda_slice(sm, device.clone());
    let sm_layout = Layout::contiguous(t.sign_mantissa.len());
    let form = options.exponents;
    match gpu_packed(
        device,
        name,
        t,
        layout,
        options,
        orders,
        (&storage, &sm_layout),
    )? {
        GpuPacked::Packed(p) => {
            let settle = || {
                let _ = device.cuda_stream().synchronize();
            };
            let (host, sm) = crate::load_profile::timed(
                options.profile_load,
                crate::load_profile::Phase::CopyBack,
                p.device_bytes(),
                settle,
                || p.into_pinned_host(device),
            )?;
            Ok((HostExponents::Packed(host), sm))
        }
        GpuPacked::Huffman => {
            let (host, _) = HostExponents::build(name, t, layout, ExponentForm::Huffman, &[])?;
            Ok((host, None))
        }
        GpuPacked::NotAsked => crate::load_profile::timed(
            options.profile_load,
            crate::load_profile::Phase::HostBuild,
            t.sign_mantissa.len(),
            || {},
            || {
                let (host, sm) = HostExponents::build(name, t, layout, form, orders)?;
                Ok((host, sm.map(HostArray::from)))
            },
        ),
    }
}
