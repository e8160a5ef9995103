//! The eager pass of the model: prompts (and decode steps off the kernel path) through candle's
//! ops with host positions, segment by segment, the cache written in place.

use candle_core::Tensor;

use super::DecoderModel;
use crate::attention::decoder_mask;
use crate::decoder::EagerAt;
use crate::error::Result;
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
        let mut x = self.embed(&to_device(ids, self.placement.first_device())?)?;
        for (s, seg) in self.placement.segments().iter().enumerate() {
            if seg.layers.is_empty() {
                continue;
            }
            x = hand_over(std::slice::from_ref(&x), &seg.device)?.remove(0);
            let tables = caches.tables[s]
                .iter()
                .map(|(cos, sin)| Ok((cos.narrow(0, start, seq)?, sin.narrow(0, start, seq)?)))
                .collect::<Result<Vec<_>>>()?;
            // One mask per distinct window, only where a step needs one (several queries, or
            // keys beyond the window).
            let mut masks: Vec<(Option<usize>, Option<Tensor>)> = Vec::new();
            for layer in &self.spec.layers[seg.layers.clone()] {
                if !masks.iter().any(|(w, _)| *w == layer.window) {
                    let mask = decoder_mask(seq, start, layer.window, &seg.device)?;
                    masks.push((layer.window, mask));
                }
            }
            for i in seg.layers.clone() {
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
                };
                x = self.with_staging(i, || self.layers[i].forward(&x, &at))?;
            }
        }
        self.head(&to_device(&x, self.placement.last_device())?)
    }
}
