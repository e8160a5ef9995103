//! Choosing the next token: greedy ([`greedy_tokens`], on the device where it can) or
//! candle-transformers' `LogitsProcessor` (temperature, top-k, top-p), after an optional
//! repetition penalty over the last tokens.

use candle_core::{DType, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};

use crate::error::Result;

/// The greedy token of each row of `logits` (`[..., vocab]`, any float dtype): the index of the
/// largest value, as `torch.argmax` picks it (NaN above every number, -0 equal to +0, the first
/// index among equal values). On CUDA in BF16 or F32, one kernel on the device and a copy of
/// the indices (`crate::ops::argmax_last_dim`); elsewhere the same rule on the host.
pub fn greedy_tokens(logits: &Tensor) -> Result<Vec<u32>> {
    #[cfg(feature = "cuda")]
    if logits.device().is_cuda() && matches!(logits.dtype(), DType::BF16 | DType::F32) {
        // A plain launch (no PDL): the host waits for its result at once.
        return Ok(crate::ops::argmax_last_dim(logits, false)?
            .flatten_all()?
            .to_vec1::<u32>()?);
    }
    let vocab = logits.dims().last().copied().unwrap_or(0);
    if vocab == 0 {
        return Err(candle_core::Error::Msg(format!(
            "greedy token of logits {:?}: no vocabulary",
            logits.dims()
        ))
        .into());
    }
    let values = logits
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    Ok(values.chunks(vocab).map(first_max).collect())
}

/// The index of the largest of `row` under [`greedy_tokens`]' rule.
fn first_max(row: &[f32]) -> u32 {
    // An integer key ordered as the values, NaN on top, -0 == +0 (the order of the kernel's
    // argmax_key, kernels/llm_ops.cu, written for signed keys).
    let key = |v: f32| -> i32 {
        if v.is_nan() {
            return i32::MAX;
        }
        let bits = if v == 0.0 { 0 } else { v.to_bits() as i32 };
        bits ^ (((bits >> 31) as u32) >> 1) as i32
    };
    let mut best = (i32::MIN, 0u32);
    for (i, &v) in row.iter().enumerate() {
        let k = key(v);
        if k > best.0 || i == 0 {
            best = (k, i as u32);
        }
    }
    best.1
}

/// How tokens are chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 (or less) means greedy (argmax).
    pub temperature: f64,
    /// Nucleus sampling threshold (ignored when ≥ 1).
    pub top_p: Option<f64>,
    /// Keep only the k most likely tokens (ignored when 0).
    pub top_k: Option<usize>,
    /// Random seed.
    pub seed: u64,
    /// Repetition penalty (1 = none), as in transformers.
    pub repeat_penalty: f32,
    /// How many of the last tokens (prompt included) the penalty looks at.
    pub repeat_last_n: usize,
}

impl SamplingParams {
    /// Greedy decoding with no penalty.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_p: None,
            top_k: None,
            seed: 0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
        }
    }

    /// Whether this is greedy decoding.
    pub fn is_greedy(&self) -> bool {
        self.temperature.is_nan() || self.temperature <= 0.0
    }

    /// The candle-transformers sampling strategy.
    pub fn sampling(&self) -> Sampling {
        if self.is_greedy() {
            return Sampling::ArgMax;
        }
        let temperature = self.temperature;
        let top_p = self.top_p.filter(|p| *p > 0.0 && *p < 1.0);
        let top_k = self.top_k.filter(|k| *k > 0);
        match (top_k, top_p) {
            (Some(k), Some(p)) => Sampling::TopKThenTopP { k, p, temperature },
            (Some(k), None) => Sampling::TopK { k, temperature },
            (None, Some(p)) => Sampling::TopP { p, temperature },
            (None, None) => Sampling::All { temperature },
        }
    }
}

/// Picks tokens one at a time.
pub struct Sampler {
    greedy: bool,
    processor: LogitsProcessor,
    repeat_penalty: f32,
    repeat_last_n: usize,
}

impl Sampler {
    /// A sampler for `params`.
    pub fn new(params: &SamplingParams) -> Self {
        Self {
            greedy: params.is_greedy(),
            processor: LogitsProcessor::from_sampling(params.seed, params.sampling()),
            repeat_penalty: params.repeat_penalty,
            repeat_last_n: params.repeat_last_n,
        }
    }

    /// The next token from `logits` (`[vocab]`, f32) given all tokens so far.
    pub fn next(&mut self, logits: &Tensor, tokens: &[u32]) -> Result<u32> {
        let logits = if self.repeat_penalty == 1.0 || self.repeat_last_n == 0 {
            logits.clone()
        } else {
            let start = tokens.len().saturating_sub(self.repeat_last_n);
            candle_transformers::utils::apply_repeat_penalty(
                logits,
                self.repeat_penalty,
                &tokens[start..],
            )?
        };
        if self.greedy {
            return greedy_tokens(&logits)?.first().copied().ok_or_else(|| {
                candle_core::Error::Msg("greedy token of empty logits".into()).into()
            });
        }
        Ok(self.processor.sample(&logits)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn strategies() {
        let mut p = SamplingParams::greedy();
        assert_eq!(p.sampling(), Sampling::ArgMax);
        p.temperature = 0.7;
        assert_eq!(p.sampling(), Sampling::All { temperature: 0.7 });
        p.top_p = Some(1.0);
        p.top_k = Some(0);
        assert_eq!(p.sampling(), Sampling::All { temperature: 0.7 });
        p.top_p = Some(0.9);
        p.top_k = Some(20);
        assert_eq!(
            p.sampling(),
            Sampling::TopKThenTopP {
                k: 20,
                p: 0.9,
                temperature: 0.7
            }
        );
    }

    #[test]
    fn greedy_takes_the_first_maximum_nan_on_top() {
        let nan = f32::NAN;
        let inf = f32::INFINITY;
        for (row, want) in [
            (vec![1.0f32, 3.0, 3.0, 2.0], 1),
            (vec![-0.0, 0.0, -1.0], 0),
            (vec![-1.0, 0.0, -0.0], 1),
            (vec![-inf, -inf], 0),
            (vec![1.0, inf, nan, inf, nan], 2),
            (vec![-nan, 5.0], 0),
            (vec![-3.0, -2.0, -2.5], 1),
            (vec![f32::MIN, -inf, f32::MAX], 2),
        ] {
            assert_eq!(first_max(&row), want, "{row:?}");
        }
        // Rows of a batch, BF16 logits (widened exactly).
        let logits = Tensor::new(&[[0.5f32, 0.25, 0.5], [-1.0, -2.0, 7.0]], &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        assert_eq!(greedy_tokens(&logits).unwrap(), vec![0, 2]);
        let empty = Tensor::zeros((2, 0), DType::F32, &Device::Cpu).unwrap();
        assert!(greedy_tokens(&empty).is_err());
    }

    #[test]
    fn greedy_and_penalty() {
        let logits = Tensor::new(&[0.1f32, 2.0, 1.9, -1.0], &Device::Cpu).unwrap();
        let mut s = Sampler::new(&SamplingParams::greedy());
        assert_eq!(s.next(&logits, &[1]).unwrap(), 1);
        let mut params = SamplingParams::greedy();
        params.repeat_penalty = 1.5;
        let mut s = Sampler::new(&params);
        // 2.0 / 1.5 < 1.9: the repeated token loses.
        assert_eq!(s.next(&logits, &[1]).unwrap(), 2);
        // Outside the window the penalty does not apply.
        params.repeat_last_n = 1;
        let mut s = Sampler::new(&params);
        assert_eq!(s.next(&logits, &[1, 3]).unwrap(), 1);
    }
}
