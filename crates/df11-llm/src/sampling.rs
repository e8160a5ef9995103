//! Choosing the next token: candle-transformers' `LogitsProcessor` (greedy, temperature, top-k,
//! top-p) after an optional repetition penalty over the last tokens.

use candle_core::Tensor;
use candle_transformers::generation::{LogitsProcessor, Sampling};

use crate::error::Result;

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
    processor: LogitsProcessor,
    repeat_penalty: f32,
    repeat_last_n: usize,
}

impl Sampler {
    /// A sampler for `params`.
    pub fn new(params: &SamplingParams) -> Self {
        Self {
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
