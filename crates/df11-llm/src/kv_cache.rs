//! A key/value cache that writes new positions in place (`slice_set`) into a buffer grown in
//! chunks, so a decode step costs only its own keys and values, not a copy of the whole cache.

use candle_core::Tensor;

use crate::error::{LlmError, Result};

/// Buffers grow to at least this many more positions at a time.
const GROW_CHUNK: usize = 256;

/// One buffer (keys or values) of shape `[batch, kv_heads, capacity, head_dim]`.
#[derive(Debug, Clone, Default)]
struct Buffer {
    data: Option<Tensor>,
}

impl Buffer {
    fn capacity(&self) -> usize {
        self.data.as_ref().map_or(0, |t| t.dims()[2])
    }

    /// Reallocates to `capacity` positions, keeping the first `len`.
    fn grow(&mut self, like: &Tensor, len: usize, capacity: usize) -> Result<()> {
        let (b, h, _, d) = like.dims4()?;
        let fresh = Tensor::zeros((b, h, capacity, d), like.dtype(), like.device())?;
        if let (Some(old), true) = (&self.data, len > 0) {
            fresh.slice_set(&old.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
        }
        self.data = Some(fresh);
        Ok(())
    }

    /// Writes `x` at position `at` and returns positions `..at + x.len`.
    fn write(&mut self, x: &Tensor, at: usize) -> Result<Tensor> {
        let data = self
            .data
            .as_ref()
            .ok_or_else(|| LlmError::Usage("kv cache not allocated".into()))?;
        let seq = x.dims()[2];
        data.slice_set(&x.contiguous()?, 2, at)?;
        Ok(data.narrow(2, 0, at + seq)?)
    }
}

/// The cache of one attention layer.
#[derive(Debug, Clone)]
pub struct KvCache {
    k: Buffer,
    v: Buffer,
    len: usize,
    max_len: usize,
    reserved: usize,
}

impl KvCache {
    /// An empty cache holding at most `max_len` positions.
    pub fn new(max_len: usize) -> Self {
        Self {
            k: Buffer::default(),
            v: Buffer::default(),
            len: 0,
            max_len,
            reserved: 0,
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the buffers can hold before growing.
    pub fn capacity(&self) -> usize {
        self.k.capacity()
    }

    /// Asks for room for `positions` positions at the next allocation (e.g. prompt + new tokens),
    /// so generation never has to grow the buffers.
    pub fn reserve(&mut self, positions: usize) {
        self.reserved = positions.min(self.max_len);
    }

    /// Empties the cache (the buffers are kept for reuse).
    pub fn reset(&mut self) {
        self.len = 0;
    }

    /// Appends keys and values `[batch, kv_heads, seq, head_dim]`; returns all keys and values
    /// so far (views of the buffers, `[batch, kv_heads, len, head_dim]`).
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let seq = k.dims4()?.2;
        let end = self.len + seq;
        if end > self.max_len {
            return Err(LlmError::Usage(format!(
                "the sequence ({end} positions) exceeds the model's context of {} positions",
                self.max_len
            )));
        }
        let stale = self
            .k
            .data
            .as_ref()
            .is_some_and(|d| d.dims()[0] != k.dims()[0] || d.dtype() != k.dtype());
        if end > self.k.capacity() || stale {
            let keep = if stale { 0 } else { self.len };
            let grown = (self.k.capacity() * 2).max(end + GROW_CHUNK);
            let capacity = grown.max(self.reserved).min(self.max_len);
            self.k.grow(k, keep, capacity)?;
            self.v.grow(v, keep, capacity)?;
        }
        let keys = self.k.write(k, self.len)?;
        let values = self.v.write(v, self.len)?;
        self.len = end;
        Ok((keys, values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn step(n: usize, offset: f32) -> Tensor {
        Tensor::arange(0f32, (2 * n * 3) as f32, &Device::Cpu)
            .unwrap()
            .affine(1.0, offset as f64)
            .unwrap()
            .reshape((1, 2, n, 3))
            .unwrap()
    }

    #[test]
    fn appends_equal_concatenation_and_grow_in_chunks() {
        let mut cache = KvCache::new(10_000);
        let mut all_k: Vec<Tensor> = Vec::new();
        for (i, n) in [5usize, 1, 1, 300, 1].into_iter().enumerate() {
            let k = step(n, 100.0 * i as f32);
            let v = (&k * 2.0).unwrap();
            all_k.push(k.clone());
            let (ks, vs) = cache.append(&k, &v).unwrap();
            let want = Tensor::cat(&all_k, 2).unwrap();
            assert_eq!(ks.dims(), want.dims());
            let diff = (ks - &want).unwrap().abs().unwrap().max_all().unwrap();
            assert_eq!(diff.to_scalar::<f32>().unwrap(), 0.0);
            let diff = (vs - (want * 2.0).unwrap()).unwrap().abs().unwrap();
            assert_eq!(diff.max_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
        }
        assert_eq!(cache.len(), 308);
        assert_eq!(cache.capacity(), 307 + GROW_CHUNK);
    }

    #[test]
    fn reserve_preallocates_and_max_len_is_enforced() {
        let mut cache = KvCache::new(1000);
        cache.reserve(700);
        cache.append(&step(4, 0.0), &step(4, 0.0)).unwrap();
        assert_eq!(cache.capacity(), 700);
        assert!(cache.append(&step(997, 0.0), &step(997, 0.0)).is_err());
        cache.reset();
        assert!(cache.is_empty());
        let k = Tensor::zeros((1, 2, 1000, 3), DType::F32, &Device::Cpu).unwrap();
        cache.append(&k, &k).unwrap();
        assert_eq!(cache.capacity(), 1000);
    }
}
