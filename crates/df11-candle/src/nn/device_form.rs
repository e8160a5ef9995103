//! A unit's device form: `sign_mantissa` and the exponents as an operation reads them
//! ([`OnDevice`]), how validated tensors are put on a device ([`upload`]), and the borrow an
//! operation holds while it runs ([`Held`]).

use std::sync::Arc;

use candle_core::{Device, Tensor};

use crate::codec::decode::DecodeTable;
use crate::error::{Df11Error, Result};
use crate::format::unit::{UnitLayout, UnitTensors};

/// Where the unit's exponents live.
pub(crate) enum Store {
    /// Host copies (the op's argument tensor holds `sign_mantissa`).
    Cpu {
        encoded_exponent: Vec<u8>,
        luts: Vec<u8>,
        gaps: Vec<u8>,
        table: DecodeTable,
    },
    /// Device buffers for the kernel.
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::unit::CudaUnit),
}

/// A unit's bytes on its device: `sign_mantissa` (the ops' argument tensor) and the exponents.
pub(crate) struct OnDevice {
    pub(crate) sign_mantissa: Tensor,
    pub(crate) store: Store,
}

/// The unit's device form while an operation uses it.
pub(crate) enum Held<'a> {
    Resident(&'a OnDevice),
    Staged(Arc<OnDevice>),
}

impl std::ops::Deref for Held<'_> {
    type Target = OnDevice;

    fn deref(&self) -> &OnDevice {
        match self {
            Held::Resident(r) => r,
            Held::Staged(s) => s,
        }
    }
}

impl OnDevice {
    /// Device bytes of a unit of `n_elements` in this form.
    pub(crate) fn device_bytes(&self, n_elements: usize) -> usize {
        match &self.store {
            Store::Cpu {
                encoded_exponent,
                luts,
                gaps,
                ..
            } => n_elements + encoded_exponent.len() + luts.len() + gaps.len(),
            #[cfg(feature = "cuda")]
            Store::Cuda(c) => n_elements + c.device_bytes(),
        }
    }

    pub(crate) fn is_packed(&self) -> bool {
        match &self.store {
            Store::Cpu { .. } => false,
            #[cfg(feature = "cuda")]
            Store::Cuda(c) => c.packed().is_some(),
        }
    }

    pub(crate) fn has_segment_index(&self) -> bool {
        match &self.store {
            Store::Cpu { .. } => false,
            #[cfg(feature = "cuda")]
            Store::Cuda(c) => c.segment_args().is_some(),
        }
    }
}

impl OnDevice {
    /// A unit's arrays on the CPU device (copied; the CPU decoder's table built).
    pub(crate) fn on_cpu(
        sign_mantissa: &[u8],
        encoded_exponent: &[u8],
        luts: &[u8],
        gaps: &[u8],
    ) -> Result<Self> {
        Ok(Self {
            sign_mantissa: Tensor::from_slice(sign_mantissa, sign_mantissa.len(), &Device::Cpu)?,
            store: Store::Cpu {
                encoded_exponent: encoded_exponent.to_vec(),
                luts: luts.to_vec(),
                gaps: gaps.to_vec(),
                table: DecodeTable::new(luts),
            },
        })
    }
}

/// Puts validated unit tensors on `device` (exponents in `options.exponents` on CUDA; a packed
/// form stores the members `orders` tiles in the tile order, `sign_mantissa` too).
pub(crate) fn upload(
    name: &str,
    t: &UnitTensors<'_>,
    layout: &UnitLayout,
    device: &Device,
    options: &crate::Df11Options,
    orders: &[Option<crate::cuda::packed::tile_order::TileOrder>],
) -> Result<OnDevice> {
    #[cfg(not(feature = "cuda"))]
    let _ = (name, layout, options, orders);
    match device {
        Device::Cpu => OnDevice::on_cpu(t.sign_mantissa, t.encoded_exponent, t.luts, t.gaps),
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => {
            let sign_mantissa = crate::load_profile::timed(
                options.profile_load,
                crate::load_profile::Phase::UploadSignMantissa,
                t.sign_mantissa.len(),
                || {
                    let _ = dev.cuda_stream().synchronize();
                },
                || -> candle_core::Result<Tensor> {
                    let sm = crate::cuda::staged_copy::upload(
                        dev,
                        t.sign_mantissa,
                        options.staged_copy,
                    )?;
                    Ok(Tensor::from_storage(
                        candle_core::Storage::Cuda(candle_core::CudaStorage::wrap_cuda_slice(
                            sm,
                            dev.clone(),
                        )),
                        t.sign_mantissa.len(),
                        candle_core::op::BackpropOp::none(),
                        false,
                    ))
                },
            )?;
            let (storage, sm_layout) = sign_mantissa.storage_and_layout();
            let candle_core::Storage::Cuda(sm) = &*storage else {
                return Err(Df11Error::Usage(
                    "sign_mantissa is not on the CUDA device".into(),
                ));
            };
            let (unit, tiled) = crate::cuda::unit::CudaUnit::new(
                dev,
                name,
                t,
                layout,
                options,
                orders,
                (sm, sm_layout),
            )?;
            drop(storage);
            let sign_mantissa = match tiled {
                Some(s) => Tensor::from_storage(
                    candle_core::Storage::Cuda(candle_core::CudaStorage::wrap_cuda_slice(
                        s,
                        dev.clone(),
                    )),
                    t.sign_mantissa.len(),
                    candle_core::op::BackpropOp::none(),
                    false,
                ),
                None => sign_mantissa,
            };
            Ok(OnDevice {
                sign_mantissa,
                store: Store::Cuda(unit),
            })
        }
        other => Err(Df11Error::Usage(format!(
            "DF11 decoding is implemented for the CPU and CUDA, not {other:?}"
        ))),
    }
}
