//! Offloaded units: a unit whose device form is built once at load (the same checked decode and
//! packing as a resident unit's, on the GPU where a resident unit's is, then copied back) and
//! kept in host memory, pinned on CUDA, and put on its device only while staged. A model stages
//! the next offloaded layer while the current one computes and releases each after use, so at
//! most two offloaded layers take device memory at once; an operation on a unit nobody staged
//! stages it itself, so correctness never depends on the schedule. The kernels and the bytes they read are those of a resident unit: results are
//! bit-identical.
//!
//! On CUDA a staging is a copy on the device's copy stream ([`crate::cuda::upload`]); the
//! compute stream waits for it only where the unit is first used. On the CPU (where offloading
//! saves nothing; it is there so the schedule is tested everywhere) a staging copies the host
//! arrays into a fresh store.

use std::sync::{Arc, Mutex};

use candle_core::Device;

use crate::error::{Df11Error, Result};
use crate::format::unit::{UnitLayout, UnitTensors};
use crate::nn::device_form::OnDevice;

/// What an offloaded unit keeps on the host.
enum HostForm {
    /// The unit's tensors (CPU device).
    Cpu {
        sign_mantissa: Vec<u8>,
        encoded_exponent: Vec<u8>,
        luts: Vec<u8>,
        gaps: Vec<u8>,
    },
    /// The device form, pinned (CUDA device).
    #[cfg(feature = "cuda")]
    Cuda {
        sign_mantissa: crate::cuda::upload::HostArray<u8>,
        exponents: Box<crate::cuda::unit::HostExponents>,
    },
}

/// A unit on the device while staged.
struct Staged {
    on: Arc<OnDevice>,
    /// On CUDA, the copies the compute stream has not been told to wait for yet.
    #[cfg(feature = "cuda")]
    ready: Option<crate::cuda::upload::Ready>,
}

/// An offloaded unit: its host form and, while staged, its device form.
pub(crate) struct Offloaded {
    host: HostForm,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    n_elements: usize,
    staged: Mutex<Option<Staged>>,
}

impl Offloaded {
    /// Builds the device form of a validated unit for `device` and keeps it on the host.
    pub(crate) fn new(
        name: &str,
        t: &UnitTensors<'_>,
        layout: &UnitLayout,
        device: &Device,
        options: &crate::Df11Options,
        orders: &[Option<crate::cuda::packed::tile_order::TileOrder>],
    ) -> Result<Self> {
        #[cfg(not(feature = "cuda"))]
        let _ = (name, options, orders);
        let host = match device {
            Device::Cpu => HostForm::Cpu {
                sign_mantissa: t.sign_mantissa.to_vec(),
                encoded_exponent: t.encoded_exponent.to_vec(),
                luts: t.luts.to_vec(),
                gaps: t.gaps.to_vec(),
            },
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) => {
                let (mut exponents, tiled) =
                    crate::cuda::unit::offloaded_host_form(dev, name, t, layout, options, orders)?;
                let ctx = dev.cuda_stream().context().clone();
                let bytes = exponents.host_bytes() + t.sign_mantissa.len();
                let sign_mantissa = crate::load_profile::timed(
                    options.profile_load,
                    crate::load_profile::Phase::Pin,
                    bytes,
                    || {},
                    || -> Result<crate::cuda::upload::HostArray<u8>> {
                        exponents.pin(dev)?;
                        let mut sm = match tiled {
                            Some(sm) => sm,
                            None => {
                                crate::cuda::upload::HostArray::pinned_copy(&ctx, t.sign_mantissa)?
                            }
                        };
                        sm.pin(&ctx)?;
                        Ok(sm)
                    },
                )?;
                HostForm::Cuda {
                    sign_mantissa,
                    exponents: Box::new(exponents),
                }
            }
            other => {
                return Err(Df11Error::Usage(format!(
                    "DF11 decoding is implemented for the CPU and CUDA, not {other:?}"
                )))
            }
        };
        Ok(Self {
            host,
            n_elements: layout.n_elements,
            staged: Mutex::new(None),
        })
    }

    /// Puts the unit on `device` unless it is there.
    pub(crate) fn stage(&self, device: &Device) -> Result<()> {
        let mut staged = self.staged.lock().expect("staging lock");
        if staged.is_none() {
            *staged = Some(self.upload(device)?);
        }
        Ok(())
    }

    /// The device form, staged now if it was not; on CUDA the compute stream is made to wait
    /// for the copies (once per staging).
    pub(crate) fn acquire(&self, device: &Device) -> Result<Arc<OnDevice>> {
        let mut staged = self.staged.lock().expect("staging lock");
        if staged.is_none() {
            *staged = Some(self.upload(device)?);
        }
        let s = staged.as_mut().expect("staged above");
        #[cfg(feature = "cuda")]
        if let Some(ready) = s.ready.take() {
            ready.wait()?;
        }
        Ok(s.on.clone())
    }

    /// Whether the unit is on the device now.
    pub(crate) fn is_staged(&self) -> bool {
        self.staged.lock().expect("staging lock").is_some()
    }

    /// Drops the device form (operations holding it keep it until they end).
    pub(crate) fn release(&self) {
        *self.staged.lock().expect("staging lock") = None;
    }

    fn upload(&self, device: &Device) -> Result<Staged> {
        match (&self.host, device) {
            (
                HostForm::Cpu {
                    sign_mantissa,
                    encoded_exponent,
                    luts,
                    gaps,
                },
                Device::Cpu,
            ) => Ok(Staged {
                on: Arc::new(OnDevice::on_cpu(
                    sign_mantissa,
                    encoded_exponent,
                    luts,
                    gaps,
                )?),
                #[cfg(feature = "cuda")]
                ready: None,
            }),
            #[cfg(feature = "cuda")]
            (
                HostForm::Cuda {
                    sign_mantissa,
                    exponents,
                },
                Device::Cuda(dev),
            ) => {
                use crate::cuda::upload::{Staging, Uploader};
                let staging = Staging::begin(dev)?;
                let up = Uploader::Staged(&staging);
                let sm = up.put(sign_mantissa)?;
                let store = crate::nn::device_form::Store::Cuda(
                    crate::cuda::unit::CudaUnit::upload(&up, exponents)?,
                );
                let ready = staging.finish()?;
                let storage = candle_core::CudaStorage::wrap_cuda_slice(sm, dev.clone());
                let sign_mantissa = candle_core::Tensor::from_storage(
                    candle_core::Storage::Cuda(storage),
                    self.n_elements,
                    candle_core::op::BackpropOp::none(),
                    false,
                );
                Ok(Staged {
                    on: Arc::new(OnDevice {
                        sign_mantissa,
                        store,
                    }),
                    ready: Some(ready),
                })
            }
            #[allow(unreachable_patterns)]
            _ => Err(Df11Error::Usage(format!(
                "an offloaded unit staged on {device:?}, another device than it was built for"
            ))),
        }
    }

    /// Bytes the unit takes on the host.
    pub(crate) fn host_bytes(&self) -> usize {
        match &self.host {
            HostForm::Cpu {
                sign_mantissa,
                encoded_exponent,
                luts,
                gaps,
            } => sign_mantissa.len() + encoded_exponent.len() + luts.len() + gaps.len(),
            #[cfg(feature = "cuda")]
            HostForm::Cuda {
                sign_mantissa,
                exponents,
            } => sign_mantissa.bytes() + exponents.host_bytes(),
        }
    }

    /// Bytes the unit takes on the device while staged.
    pub(crate) fn device_bytes(&self) -> usize {
        // The device form is the host form's arrays, uploaded as they are.
        self.host_bytes()
    }

    /// Whether the device form is packed.
    pub(crate) fn is_packed(&self) -> bool {
        match &self.host {
            HostForm::Cpu { .. } => false,
            #[cfg(feature = "cuda")]
            HostForm::Cuda { exponents, .. } => exponents.is_packed(),
        }
    }

    /// Whether the device form has a segment index.
    pub(crate) fn has_segment_index(&self) -> bool {
        match &self.host {
            HostForm::Cpu { .. } => false,
            #[cfg(feature = "cuda")]
            HostForm::Cuda { exponents, .. } => exponents.has_segment_index(),
        }
    }
}
