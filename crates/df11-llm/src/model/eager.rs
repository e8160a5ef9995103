//! The eager pass of the model: prompts (and decode steps off the kernel path) through candle's
//! ops with host positions, segment by segment, the cache written in place.

use candle_core::Tensor;

use super::DecoderModel;
use crate::attention::decoder_mask;
use crate::decoder::EagerAt;
use crate::error::Result;
use crate::model::PromptAttention;
use crate::step::StepCtx;
use crate::transfer::{hand_over, to_device};

impl DecoderModel {
    /// The eager pass: `ids` `[rows, seq]` at positions `start..`, row `r` in slot
    /// `first_slot + r`. Logits come out on the last segment's device.
    pub(super) fn forward_eager(
        &self,
        ids: &Tensor,
        first_slot: usize,
        start: usize,
    ) -> Result<Tensor> {
        let caches = self.caches.as_ref().expect("caches are allocated first");
        let seq = ids.dim(1)?;
        // The embedding takes ids on any device (a DF11 table reads them on the host).
        let mut x = self.embed(ids)?;
        let attention = self.prompt_attention();
        for (s, seg) in self.placement.segments().iter().enumerate() {
            if seg.layers.is_empty() {
                continue;
            }
            x = hand_over(
                std::slice::from_ref(&x),
                &seg.device,
                self.options.split_copy,
            )?
            .remove(0);
            let in_place =
                self.prompt_rows(attention, ids.dim(0)?, seq, first_slot, start, &seg.device)?;
            let tables = caches.tables[s]
                .iter()
                .map(|(cos, sin)| Ok((cos.narrow(0, start, seq)?, sin.narrow(0, start, seq)?)))
                .collect::<Result<Vec<_>>>()?;
            // One mask per distinct window, only where a step needs one (several queries, or
            // keys beyond the window).
            let mut masks: Vec<(Option<usize>, Option<Tensor>)> = Vec::new();
            for layer in &self.spec.layers[seg.layers.clone()] {
                if in_place.is_none() && !masks.iter().any(|(w, _)| *w == layer.window) {
                    let mask = decoder_mask(seq, start, layer.window, &seg.device)?;
                    masks.push((layer.window, mask));
                }
            }
            let ahead = self.decode_ahead_stream(&seg.device, ids.dim(0)? * seq)?;
            if let Some(side) = &ahead {
                self.decode_layer_ahead(seg.layers.start, side)?;
            }
            for i in seg.layers.clone() {
                if let Some(side) = &ahead {
                    if i + 1 < seg.layers.end {
                        self.decode_layer_ahead(i + 1, side)?;
                    }
                }
                let ls = &self.spec.layers[i];
                let (cos, sin) = &tables[ls.rope];
                let mask = masks
                    .iter()
                    .find(|(w, _)| *w == ls.window)
                    .and_then(|(_, m)| m.as_ref());
                let at = EagerAt {
                    cos,
                    sin,
                    mask,
                    kv: &caches.kv[i],
                    first_slot,
                    start,
                    flash: attention == PromptAttention::Flash,
                    in_place: in_place.as_ref().map(|(positions, slots, splits)| {
                        let (cos, sin) = &caches.tables[s][ls.rope];
                        StepCtx {
                            positions,
                            slots,
                            cos,
                            sin,
                            window: ls.window,
                            splits: *splits,
                        }
                    }),
                };
                x = self.with_staging(i, || self.layers[i].forward(&x, &at))?;
                if ahead.is_some() {
                    // Members decoded ahead and not taken (a product that took a fused kernel).
                    self.layers[i].units().iter().for_each(|u| u.clear_ahead());
                }
            }
        }
        self.head(&to_device(&x, self.placement.last_device())?)
    }

    /// The second stream of `device`'s GPU that units are decoded ahead on, when
    /// [`crate::DecodeOptions::decode_ahead`] is set and products of `rows` rows take decode +
    /// cuBLAS there.
    #[cfg(feature = "cuda")]
    fn decode_ahead_stream(
        &self,
        device: &candle_core::Device,
        rows: usize,
    ) -> Result<Option<candle_core::cuda_backend::CudaDevice>> {
        if !self.options.decode_ahead
            || !device.is_cuda()
            || df11_candle::matmul::use_fused(rows, device, &self.weight_options)
        {
            return Ok(None);
        }
        Ok(Some(crate::device::side_stream(device)?))
    }

    #[cfg(not(feature = "cuda"))]
    fn decode_ahead_stream(&self, _: &candle_core::Device, _: usize) -> Result<Option<()>> {
        Ok(None)
    }

    /// Decodes layer `layer`'s resident units ahead on `side`.
    #[cfg(feature = "cuda")]
    fn decode_layer_ahead(
        &self,
        layer: usize,
        side: &candle_core::cuda_backend::CudaDevice,
    ) -> Result<()> {
        for unit in self.layers[layer].units() {
            if unit.decode_ahead(side)? {
                self.decoded_ahead
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        Ok(())
    }

    #[cfg(not(feature = "cuda"))]
    fn decode_layer_ahead(&self, _: usize, _: &()) -> Result<()> {
        Ok(())
    }

    /// How prompts' attention runs on this model as placed and set
    /// ([`crate::DecodeOptions::prompt_attention`] where the step kernels apply and, for
    /// [`PromptAttention::Flash`], the kernel takes the head size and the GPUs have tensor
    /// cores; else [`PromptAttention::Matmul`]).
    pub fn prompt_attention(&self) -> PromptAttention {
        #[cfg(feature = "cuda")]
        if self.step_kernels_apply() {
            let d = self.spec.decoder.head_dim;
            return match self.options.prompt_attention {
                PromptAttention::Flash
                    if self
                        .placement
                        .segments()
                        .iter()
                        .all(|s| crate::ops::prefill_attention_runs(&s.device, d)) =>
                {
                    PromptAttention::Flash
                }
                PromptAttention::FlashDecoding => PromptAttention::FlashDecoding,
                _ => PromptAttention::Matmul,
            };
        }
        PromptAttention::Matmul
    }

    /// Whether prompts' attention runs in place over the cache (not candle's matmul attention;
    /// see [`DecoderModel::prompt_attention`]).
    pub fn prompt_attention_in_place(&self) -> bool {
        self.prompt_attention() != PromptAttention::Matmul
    }

    /// With prompt attention in place (`attention`, from [`DecoderModel::prompt_attention`]): one query per
    /// token of `rows` sequences of `seq` tokens (row `r` in slot `first_slot + r`, positions
    /// `start..start + seq`) as `[rows * seq]` u32 positions and slots on `device`, and the
    /// attention splits for that many queries.
    fn prompt_rows(
        &self,
        attention: PromptAttention,
        rows: usize,
        seq: usize,
        first_slot: usize,
        start: usize,
        device: &candle_core::Device,
    ) -> Result<Option<(Tensor, Tensor, usize)>> {
        #[cfg(feature = "cuda")]
        if attention != PromptAttention::Matmul {
            let queries = crate::step::StepRows {
                slots: (0..rows)
                    .flat_map(|r| std::iter::repeat_n(first_slot + r, seq))
                    .collect(),
                positions: (0..rows).flat_map(|_| start..start + seq).collect(),
            };
            let (positions, slots) = queries.to_device(device)?;
            let splits = self.attention_splits(device, rows * seq)?;
            return Ok(Some((positions, slots, splits)));
        }
        let _ = (attention, rows, seq, first_slot, start, device);
        Ok(None)
    }
}
