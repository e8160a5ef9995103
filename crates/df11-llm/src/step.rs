//! What a decode step needs besides the weights: each row's position and cache slot, as host
//! vectors and as device tensors, the full rotary tables, and the number of attention splits.
//! The step itself is [`crate::DecoderModel`]'s; its layers run `DecoderLayer::step`.

use candle_core::{Device, Module, Tensor};

use crate::error::{LlmError, Result};
use crate::norm::RmsNorm;

/// The rows of one decode step: row `r` decodes one token of the sequence in cache slot
/// `slots[r]`, at position `positions[r]` (the number of positions it already holds). Rows are
/// independent: a batch may be ragged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRows {
    /// Cache slot of each row.
    pub slots: Vec<usize>,
    /// Position of each row's token.
    pub positions: Vec<usize>,
}

impl StepRows {
    /// `rows` rows in slots `0..rows`, all at `position`.
    pub fn uniform(rows: usize, position: usize) -> Self {
        Self {
            slots: (0..rows).collect(),
            positions: vec![position; rows],
        }
    }

    /// Rows in the step.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the step has no row.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Checks the rows against a cache of `slots` slots and `capacity` positions: each row in
    /// range, no slot twice.
    pub fn check(&self, slots: usize, capacity: usize) -> Result<()> {
        if self.slots.len() != self.positions.len() || self.is_empty() {
            return Err(LlmError::Usage(format!(
                "a decode step of {} slots and {} positions",
                self.slots.len(),
                self.positions.len()
            )));
        }
        let mut seen = vec![false; slots];
        for (&slot, &pos) in self.slots.iter().zip(&self.positions) {
            if slot >= slots || std::mem::replace(&mut seen[slot], true) {
                return Err(LlmError::Usage(format!(
                    "cache slot {slot} is out of range ({slots} slots) or used twice"
                )));
            }
            if pos >= capacity {
                return Err(LlmError::Usage(format!(
                    "the sequence ({} positions) exceeds the context of {capacity} positions",
                    pos + 1
                )));
            }
        }
        Ok(())
    }

    /// The positions and slots as `[rows]` u32 tensors on `device`.
    pub fn to_device(&self, device: &Device) -> Result<(Tensor, Tensor)> {
        let u32s = |v: &[usize]| -> Result<Tensor> {
            let v: Vec<u32> = v.iter().map(|&x| x as u32).collect();
            Ok(Tensor::from_vec(v, self.len(), device)?)
        };
        Ok((u32s(&self.positions)?, u32s(&self.slots)?))
    }
}

/// One layer's view of a decode step on the device.
#[derive(Debug, Clone, Copy)]
pub struct StepCtx<'a> {
    /// `[rows]` u32 positions.
    pub positions: &'a Tensor,
    /// `[rows]` u32 cache slots.
    pub slots: &'a Tensor,
    /// The layer's full RoPE tables, `[capacity, rot/2]`.
    pub cos: &'a Tensor,
    /// See `cos`.
    pub sin: &'a Tensor,
    /// The layer's sliding window.
    pub window: Option<usize>,
    /// Pieces the attention splits each row's sequence into.
    pub splits: usize,
}

/// `(x + pending, norm(x + pending))`, the add fused with the norm in one launch (in place in
/// `x`) where it can be (CUDA, BF16, the weight-flavour norm); `pending` `None`: `(x, norm(x))`.
pub fn add_norm(x: Tensor, pending: Option<Tensor>, norm: &RmsNorm) -> Result<(Tensor, Tensor)> {
    let Some(h) = pending else {
        let normed = norm.forward(&x)?;
        return Ok((x, normed));
    };
    #[cfg(feature = "cuda")]
    if x.device().is_cuda()
        && x.dtype() == candle_core::DType::BF16
        && h.dtype() == x.dtype()
        && norm.kind() == crate::spec::NormKind::Weight
        && norm.weight().dtype() == x.dtype()
        && x.is_contiguous()
    {
        let normed = crate::ops::add_rms_norm_bf16(&x, &h, norm.weight(), norm.eps(), norm.pdl())?;
        return Ok((x, normed));
    }
    let x = (x + h)?;
    let normed = norm.forward(&x)?;
    Ok((x, normed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_checked() {
        assert!(StepRows::uniform(3, 5).check(3, 6).is_ok());
        assert!(StepRows::uniform(3, 6).check(3, 6).is_err());
        assert!(StepRows::uniform(4, 0).check(3, 6).is_err());
        let twice = StepRows {
            slots: vec![1, 1],
            positions: vec![0, 2],
        };
        assert!(twice.check(3, 6).is_err());
        assert!(StepRows::uniform(0, 0).check(3, 6).is_err());
    }

    #[test]
    fn add_norm_adds_then_norms() {
        let dev = Device::Cpu;
        let w = Tensor::new(&[1f32, 2.0, 0.5], &dev).unwrap();
        let norm = RmsNorm::new(w, 1e-6).unwrap();
        let x = Tensor::new(&[[1f32, 2.0, 3.0]], &dev).unwrap();
        let h = Tensor::new(&[[0.5f32, -1.0, 2.0]], &dev).unwrap();
        let (sum, normed) = add_norm(x.clone(), Some(h.clone()), &norm).unwrap();
        let want_sum = (&x + &h).unwrap();
        assert_eq!(
            sum.to_vec2::<f32>().unwrap(),
            want_sum.to_vec2::<f32>().unwrap()
        );
        let want = norm.forward(&want_sum).unwrap();
        assert_eq!(
            normed.to_vec2::<f32>().unwrap(),
            want.to_vec2::<f32>().unwrap()
        );
    }
}
