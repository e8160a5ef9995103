//! Rotary position embeddings (the "rotate half" form of HF Llama/Qwen/Mistral/Gemma).
//!
//! The cos/sin tables are computed in f32, as transformers does (position × inverse frequency,
//! both f32), then converted to the compute dtype. They grow on demand in chunks, so a model with
//! a huge `max_position_embeddings` does not pay for positions it never reaches.

use candle_core::{DType, Device, Tensor};

use crate::error::{LlmError, Result};

/// Positions are added to the tables this many at a time.
const TABLE_CHUNK: usize = 1024;

/// The standard inverse frequencies `1 / base^(2i/dim)` for `i < dim/2`, computed in f32 like
/// transformers' default RoPE initialisation.
pub fn default_inv_freq(base: f64, dim: usize) -> Vec<f32> {
    let base = base as f32;
    (0..dim)
        .step_by(2)
        .map(|i| 1.0 / base.powf(i as f32 / dim as f32))
        .collect()
}

/// cos/sin tables for one set of inverse frequencies, grown on demand.
#[derive(Debug, Clone)]
pub struct RotaryEmbedding {
    inv_freq: Vec<f32>,
    /// Multiplies cos and sin (HF's `attention_scaling`; 1 for plain RoPE).
    scaling: f32,
    max_positions: usize,
    dtype: DType,
    device: Device,
    cos: Option<Tensor>,
    sin: Option<Tensor>,
}

impl RotaryEmbedding {
    /// Tables for `inv_freq` (length `rotary_dim / 2`), positions up to `max_positions`
    /// (exclusive), in `dtype` on `device`.
    pub fn new(inv_freq: Vec<f32>, max_positions: usize, dtype: DType, device: &Device) -> Self {
        Self {
            inv_freq,
            scaling: 1.0,
            max_positions,
            dtype,
            device: device.clone(),
            cos: None,
            sin: None,
        }
    }

    /// The same tables with cos and sin multiplied by `scaling` (e.g. YaRN/longrope factors).
    pub fn with_scaling(mut self, scaling: f32) -> Self {
        self.scaling = scaling;
        self.cos = None;
        self.sin = None;
        self
    }

    /// Rows in the tables now.
    fn rows(&self) -> usize {
        self.cos.as_ref().map_or(0, |t| t.dims()[0])
    }

    /// Makes sure the tables cover positions `< end`.
    fn ensure(&mut self, end: usize) -> Result<()> {
        if end > self.max_positions {
            return Err(LlmError::Usage(format!(
                "position {} is beyond the model's {} positions",
                end - 1,
                self.max_positions
            )));
        }
        if end <= self.rows() {
            return Ok(());
        }
        let rows = end
            .div_ceil(TABLE_CHUNK)
            .saturating_mul(TABLE_CHUNK)
            .min(self.max_positions);
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(rows * half);
        let mut sin = Vec::with_capacity(rows * half);
        for p in 0..rows {
            for &f in &self.inv_freq {
                let angle = p as f32 * f;
                cos.push(angle.cos() * self.scaling);
                sin.push(angle.sin() * self.scaling);
            }
        }
        let to = |v: Vec<f32>| -> Result<Tensor> {
            Ok(Tensor::from_vec(v, (rows, half), &self.device)?.to_dtype(self.dtype)?)
        };
        self.cos = Some(to(cos)?);
        self.sin = Some(to(sin)?);
        Ok(())
    }

    /// The cos and sin rows of positions `start..start + len`: two `[len, rotary_dim/2]` tensors.
    pub fn tables(&mut self, start: usize, len: usize) -> Result<(Tensor, Tensor)> {
        self.ensure(start + len)?;
        let (cos, sin) = (self.cos.as_ref(), self.sin.as_ref());
        let (Some(cos), Some(sin)) = (cos, sin) else {
            return Err(LlmError::Usage("empty rotary table".into()));
        };
        Ok((cos.narrow(0, start, len)?, sin.narrow(0, start, len)?))
    }
}

/// Applies RoPE to `x` of shape `[batch, heads, seq, head_dim]` with tables from
/// [`RotaryEmbedding::tables`] (`[seq, head_dim/2]`).
pub fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    Ok(candle_nn::rotary_emb::rope(&x.contiguous()?, cos, sin)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_match_direct_formula_and_grow() {
        let inv = default_inv_freq(10_000.0, 8);
        assert_eq!(inv.len(), 4);
        assert_eq!(inv[0], 1.0);
        let mut rope = RotaryEmbedding::new(inv.clone(), 5000, DType::F32, &Device::Cpu);
        let (cos, sin) = rope.tables(3, 2).unwrap();
        assert_eq!(cos.dims(), &[2, 4]);
        let cos = cos.to_vec2::<f32>().unwrap();
        let sin = sin.to_vec2::<f32>().unwrap();
        assert_eq!(cos[1][2], (4.0 * inv[2]).cos());
        assert_eq!(sin[0][1], (3.0 * inv[1]).sin());
        assert_eq!(rope.rows(), TABLE_CHUNK);
        let (cos, _) = rope.tables(2000, 1).unwrap();
        assert_eq!(cos.to_vec2::<f32>().unwrap()[0][3], (2000.0 * inv[3]).cos());
        assert_eq!(rope.rows(), 2 * TABLE_CHUNK);
        assert!(rope.tables(4999, 2).is_err());
        assert!(rope.tables(4999, 1).is_ok());
        assert_eq!(rope.rows(), 5000);
    }

    #[test]
    fn rope_rotates_halves() {
        // One head of dim 4 at position 1, frequencies [1, 0.01]: x' = x*cos + rotate_half(x)*sin.
        let mut rope = RotaryEmbedding::new(vec![1.0, 0.01], 16, DType::F32, &Device::Cpu);
        let (cos, sin) = rope.tables(1, 1).unwrap();
        let x = Tensor::new(&[1f32, 2., 3., 4.], &Device::Cpu)
            .unwrap()
            .reshape((1, 1, 1, 4))
            .unwrap();
        let y = apply_rope(&x, &cos, &sin).unwrap().flatten_all().unwrap();
        let y = y.to_vec1::<f32>().unwrap();
        let (c0, s0, c1, s1) = (1f32.cos(), 1f32.sin(), 0.01f32.cos(), 0.01f32.sin());
        let want = [
            1. * c0 - 3. * s0,
            2. * c1 - 4. * s1,
            3. * c0 + 1. * s0,
            4. * c1 + 2. * s1,
        ];
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{y:?} vs {want:?}");
        }
    }
}
