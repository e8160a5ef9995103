//! Decode-ahead (CUDA): every member of a resident packed unit decoded on a second stream of
//! its GPU before it is used, so the decode runs beside the work queued before it on the
//! compute stream (a prompt's previous layer). The compute stream waits for the decodes only
//! where it takes a member ([`Df11Group::take_ahead`]); the one taking it orders the second
//! stream after its use before dropping it, since the buffer is freed on that stream.
//! Off unless asked for (`df11_llm`'s `DecodeOptions::decode_ahead`).

use std::ops::Range;

use candle_core::cuda_backend::CudaDevice;
use candle_core::op::BackpropOp;
use candle_core::{Device, Storage, Tensor};

use super::{Df11Group, Store};
use crate::cuda::streams::{queue, Marker};
use crate::error::Result;

/// A unit's members decoded on `side`, ready once `ready` is reached there.
pub(super) struct Ahead {
    side: CudaDevice,
    members: Vec<(Range<usize>, Tensor)>,
    ready: Marker,
}

impl Df11Group {
    /// Decodes every member of the unit now on `side`'s stream (a second stream of the unit's
    /// GPU, e.g. `df11_llm::open_cuda` of its ordinal), for [`Df11Group::take_ahead`]. Returns
    /// whether it did: only resident units with a device form the element kernels take (packed
    /// exponents, or a segment index) are decoded ahead. Members still kept from an earlier call
    /// are dropped (freed on their stream, which nothing else read).
    pub fn decode_ahead(&self, side: &CudaDevice) -> Result<bool> {
        if !self.device.is_cuda() || self.is_offloaded() {
            return Ok(false);
        }
        let on = self.on_device()?;
        let Store::Cuda(unit) = &on.store else {
            return Ok(false);
        };
        let Some(form) = unit.form() else {
            return Ok(false);
        };
        let (storage, layout) = on.sign_mantissa.storage_and_layout();
        let Storage::Cuda(sm) = &*storage else {
            return Ok(false);
        };
        let mut members = Vec::new();
        // Each member, or the stack of members a linear layer reads as one matrix.
        for range in self.product_ranges() {
            let (out, shape) = form.decode_range(sm, layout, range.clone(), side)?;
            let t = Tensor::from_storage(Storage::Cuda(out), shape, BackpropOp::none(), false);
            members.push((range, t));
        }
        drop(storage);
        let q = queue(side);
        let ready = Marker::record((&q.0, q.1))?;
        *self.ahead.lock().expect("decode-ahead lock") = Some(Ahead {
            side: side.clone(),
            members,
            ready,
        });
        Ok(true)
    }

    /// The member at unit elements `elements` if it was decoded ahead (flat BF16), with the
    /// compute stream now waiting for it, and the stream its buffer is freed on: order that
    /// stream after the work that reads the member (`cuda::streams::wait_for(side, device)`)
    /// before dropping it.
    pub(crate) fn take_ahead(
        &self,
        elements: &Range<usize>,
    ) -> Result<Option<(Tensor, CudaDevice)>> {
        let Device::Cuda(own) = &self.device else {
            return Ok(None);
        };
        let mut slot = self.ahead.lock().expect("decode-ahead lock");
        let Some(ahead) = slot.as_mut() else {
            return Ok(None);
        };
        let Some(i) = ahead.members.iter().position(|(r, _)| r == elements) else {
            return Ok(None);
        };
        let (_, t) = ahead.members.swap_remove(i);
        let q = queue(own);
        ahead.ready.wait((&q.0, q.1))?;
        let side = ahead.side.clone();
        if ahead.members.is_empty() {
            *slot = None;
        }
        Ok(Some((t, side)))
    }
}
