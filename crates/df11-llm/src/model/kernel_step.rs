//! The decode step through the step kernels (CUDA, BF16): per segment of the model's
//! placement, its layers' `DecoderLayer::step` over the preallocated caches, positions and
//! slots read from device tensors; the last segment ends with the final norm and the logits.
//! Unless turned off, each segment's step is captured as a CUDA graph per power-of-two bucket of
//! rows and replayed; between segments the residual stream and the pending layer output move
//! to the next device.

use candle_core::{Device, Tensor};

use super::DecoderModel;
use crate::decoder::DecoderLayer;
use crate::error::Result;
use crate::graph::StepGraph;
use crate::step::{add_norm, StepCtx, StepRows};
use crate::transfer::hand_over;

impl DecoderModel {
    /// Whether decode steps can take the step kernels: every segment on CUDA, BF16, head sizes
    /// the kernels take.
    pub(super) fn step_kernels_apply(&self) -> bool {
        self.options.step_kernels
            && self.placement.segments().iter().all(|s| s.device.is_cuda())
            && self.dtype == candle_core::DType::BF16
            && self.layers.iter().all(DecoderLayer::step_supported)
    }

    /// Pieces the flash-decoding kernel splits each of `rows` queries' sequence into on
    /// `device` (enough blocks to fill it; fixed by the rows, the device and the cache size).
    pub(super) fn attention_splits(
        &self,
        device: &candle_core::Device,
        rows: usize,
    ) -> Result<usize> {
        let caches = self.caches.as_ref().expect("caches are allocated first");
        let d = &self.spec.decoder;
        let groups = d.num_attention_heads / d.num_key_value_heads;
        Ok(crate::ops::flash_decode_splits(
            device.as_cuda_device()?,
            rows,
            d.num_key_value_heads,
            groups.div_ceil(groups.next_power_of_two().min(8)),
            caches.capacity,
        )?)
    }

    /// Segment `seg`'s part of a decode step. `inputs`: `[x]` (embedded tokens `[rows, 1,
    /// hidden]`) or `[x, pending]` (the residual stream and the last layer output not yet added
    /// to it), on the segment's device, with `positions`/`slots` `[rows]` u32 there. Returns
    /// `[x, pending]` for the next segment, or, from the last one, `[logits]` `[rows, vocab]`.
    fn segment_body(
        &self,
        seg: usize,
        inputs: &[Tensor],
        positions: &Tensor,
        slots: &Tensor,
    ) -> Result<Vec<Tensor>> {
        let caches = self.caches.as_ref().expect("caches are allocated first");
        let segment = &self.placement.segments()[seg];
        let splits = self.attention_splits(&segment.device, inputs[0].dim(0)?)?;
        // The residual stream is updated in place: work on a copy of the inputs.
        let mut x = inputs[0].copy()?;
        let mut pending = inputs.get(1).cloned();
        for i in segment.layers.clone() {
            let ls = &self.spec.layers[i];
            let (cos, sin) = &caches.tables[seg][ls.rope];
            let ctx = StepCtx {
                positions,
                slots,
                cos,
                sin,
                window: ls.window,
                splits,
            };
            let (next, h) =
                self.with_staging(i, || self.layers[i].step(x, pending, &ctx, &caches.kv[i]))?;
            x = next;
            pending = Some(h);
        }
        if seg + 1 < self.placement.segments().len() {
            return Ok(std::iter::once(x).chain(pending).collect());
        }
        let (_, normed) = add_norm(x, pending, &self.norm)?;
        Ok(vec![self.logits(&normed)?])
    }

    /// The step kernels over every segment, through a CUDA graph per segment and bucket of rows
    /// unless graphs are off. Returns logits `[rows, vocab]` on the last segment's device.
    pub(super) fn decode_kernels(&mut self, tokens: &[u32], rows: &StepRows) -> Result<Tensor> {
        let n = rows.len();
        // The ids stay on the host: the embedding reads them there (DF11) or copies them to its
        // table (dense); a DF11 table's rows are then decoded without a copy back.
        // Offloaded units are staged by the host around each use, and an embedding on the host
        // is decoded there: no graph.
        if !self.options.cuda_graph || self.placement.offloads() {
            let ids = Tensor::new(tokens, &Device::Cpu)?.unsqueeze(1)?;
            let mut carry = vec![self.embed(&ids)?.contiguous()?];
            for (s, seg) in self.placement.segments().iter().enumerate() {
                let inputs = hand_over(&carry, &seg.device, self.options.split_copy)?;
                let (positions, slots) = rows.to_device(&seg.device)?;
                carry = self.segment_body(s, &inputs, &positions, &slots)?;
            }
            return Ok(carry.remove(0));
        }
        // Pad to a power of two with free slots at position 0 (a new sequence overwrites it),
        // so a handful of graphs serve every batch size.
        let total = self.slots();
        let bucket = n.next_power_of_two().min(total);
        let mut padded = rows.clone();
        let mut tokens = tokens.to_vec();
        let mut free = (0..total).filter(|s| !rows.slots.contains(s));
        while padded.len() < bucket {
            padded
                .slots
                .push(free.next().expect("a bucket never exceeds the slots"));
            padded.positions.push(0);
            tokens.push(0);
        }
        let ids = Tensor::new(tokens.as_slice(), &Device::Cpu)?.unsqueeze(1)?;
        let mut carry = vec![self.embed(&ids)?.contiguous()?];
        let segments = self.placement.segments().len();
        for s in 0..segments {
            let device = self.placement.segments()[s].device.clone();
            let inputs = hand_over(&carry, &device, self.options.split_copy)?;
            let captured = self.graphs.get(&bucket).map_or(0, Vec::len);
            carry = if s < captured {
                self.graphs[&bucket][s].replay(&inputs, &padded.positions, &padded.slots)?
            } else {
                let dev = device.as_cuda_device()?.clone();
                let (graph, out) = StepGraph::capture(
                    &dev,
                    &inputs,
                    &padded.positions,
                    &padded.slots,
                    &|inputs, p, sl| self.segment_body(s, inputs, p, sl),
                )?;
                self.graphs.entry(bucket).or_default().push(graph);
                out
            };
        }
        let logits = carry.remove(0);
        Ok(if bucket > n {
            logits.narrow(0, 0, n)?
        } else {
            logits
        })
    }
}
