//! The KV cache of one attention layer, allocated once for a maximum context: `[2, slots,
//! kv_heads, capacity, head_dim]` (keys, then values). A sequence owns a slot; its position `p`
//! lives at `[., slot, h, p, :]`. Nothing is copied or reallocated while a sequence grows: eager
//! passes write their new positions in place ([`KvCache::write`]) and read views
//! ([`KvCache::read`]); the CUDA decode step's kernels read and write the buffer directly
//! (`crate::ops::{qk_norm_rope_kv, flash_decode}`), at positions held on the device.

use candle_core::{CpuStorage, DType, Device, InplaceOp3, Layout, Tensor, WithDType};

use crate::error::{LlmError, Result};

/// One layer's preallocated keys and values.
#[derive(Debug, Clone)]
pub struct KvCache {
    kv: Tensor,
    slots: usize,
    capacity: usize,
}

impl KvCache {
    /// A cache of `slots` sequences of up to `capacity` positions (zeros).
    pub fn new(
        slots: usize,
        kv_heads: usize,
        capacity: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        if slots == 0 || capacity == 0 {
            return Err(LlmError::Usage(format!(
                "a KV cache of {slots} slots and {capacity} positions"
            )));
        }
        let kv = Tensor::zeros((2, slots, kv_heads, capacity, head_dim), dtype, device)?;
        Ok(Self {
            kv,
            slots,
            capacity,
        })
    }

    /// The whole buffer, `[2, slots, kv_heads, capacity, head_dim]`.
    pub fn tensor(&self) -> &Tensor {
        &self.kv
    }

    /// Positions a slot holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Sequences the cache holds.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Device bytes of the buffer.
    pub fn bytes(&self) -> usize {
        self.kv.elem_count() * self.kv.dtype().size_in_bytes()
    }

    /// Writes keys and values `[rows, kv_heads, len, head_dim]` of rows `first_slot..first_slot +
    /// rows` at positions `start..start + len`.
    pub fn write(&self, first_slot: usize, start: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let (rows, heads, len, d) = k.dims4()?;
        let (_, _, slots, kv_heads, cap, head_dim) = self.dims();
        if v.dims() != k.dims() || heads != kv_heads || d != head_dim {
            return Err(LlmError::Usage(format!(
                "KV write of {:?} / {:?} into a cache of {kv_heads} heads of {head_dim}",
                k.dims(),
                v.dims()
            )));
        }
        if first_slot + rows > slots || start + len > cap {
            return Err(LlmError::Usage(format!(
                "the sequence ({} positions) exceeds the context of {cap} positions",
                start + len
            )));
        }
        let k = k.to_dtype(self.kv.dtype())?.contiguous()?;
        let v = v.to_dtype(self.kv.dtype())?.contiguous()?;
        let op = KvWrite {
            first_slot,
            start,
            rows,
            len,
        };
        Ok(self.kv.inplace_op3(&k, &v, &op)?)
    }

    /// Keys and values of rows `first_slot..first_slot + rows`, positions `..len`: two views
    /// `[rows, kv_heads, len, head_dim]`.
    pub fn read(&self, first_slot: usize, rows: usize, len: usize) -> Result<(Tensor, Tensor)> {
        if first_slot + rows > self.slots || len > self.capacity {
            return Err(LlmError::Usage(format!(
                "KV read of slots {first_slot}..{} and {len} positions",
                first_slot + rows
            )));
        }
        let part = |i: usize| -> Result<Tensor> {
            Ok(self
                .kv
                .get(i)?
                .narrow(0, first_slot, rows)?
                .narrow(2, 0, len)?)
        };
        Ok((part(0)?, part(1)?))
    }

    fn dims(&self) -> (usize, usize, usize, usize, usize, usize) {
        let d = self.kv.dims();
        (d.len(), d[0], d[1], d[2], d[3], d[4])
    }
}

/// Copies k and v (`[rows, heads, len, d]`, contiguous) into the cache at rows `first_slot..`,
/// positions `start..start + len`: for each (row, head) one run of `len * d` values.
struct KvWrite {
    first_slot: usize,
    start: usize,
    rows: usize,
    len: usize,
}

impl KvWrite {
    /// `(source offset, cache offset, count)` of each contiguous run, for a cache laid out as
    /// `cache` (`[2, slots, heads, cap, d]`); `part` 0 for keys, 1 for values.
    fn runs(&self, cache: &Layout, part: usize) -> Vec<(usize, usize, usize)> {
        let dims = cache.dims();
        let (slots, heads, cap, d) = (dims[1], dims[2], dims[3], dims[4]);
        let n = self.len * d;
        let mut runs = Vec::with_capacity(self.rows * heads);
        for r in 0..self.rows {
            for h in 0..heads {
                let src = (r * heads + h) * n;
                let slot = self.first_slot + r;
                let dst = (((part * slots + slot) * heads + h) * cap + self.start) * d;
                runs.push((src, cache.start_offset() + dst, n));
            }
        }
        runs
    }

    fn copy_cpu<T: WithDType>(&self, cache: &mut [T], l: &Layout, k: &[T], v: &[T]) {
        for (part, src) in [(0, k), (1, v)] {
            for (s, d, n) in self.runs(l, part) {
                cache[d..d + n].copy_from_slice(&src[s..s + n]);
            }
        }
    }
}

impl InplaceOp3 for KvWrite {
    fn name(&self) -> &'static str {
        "kv-write"
    }

    fn cpu_fwd(
        &self,
        cache: &mut CpuStorage,
        cl: &Layout,
        k: &CpuStorage,
        kl: &Layout,
        v: &CpuStorage,
        vl: &Layout,
    ) -> candle_core::Result<()> {
        let (ko, vo) = (kl.start_offset(), vl.start_offset());
        match (cache, k, v) {
            (CpuStorage::F32(c), CpuStorage::F32(k), CpuStorage::F32(v)) => {
                self.copy_cpu(c, cl, &k[ko..], &v[vo..])
            }
            (CpuStorage::BF16(c), CpuStorage::BF16(k), CpuStorage::BF16(v)) => {
                self.copy_cpu(c, cl, &k[ko..], &v[vo..])
            }
            (CpuStorage::F16(c), CpuStorage::F16(k), CpuStorage::F16(v)) => {
                self.copy_cpu(c, cl, &k[ko..], &v[vo..])
            }
            _ => candle_core::bail!("kv-write: the cache, keys and values differ in dtype"),
        }
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        cache: &mut candle_core::CudaStorage,
        cl: &Layout,
        k: &candle_core::CudaStorage,
        kl: &Layout,
        v: &candle_core::CudaStorage,
        vl: &Layout,
    ) -> candle_core::Result<()> {
        use candle_core::backend::BackendStorage;
        use candle_core::cuda_backend::cudarc::driver::DeviceRepr;
        use candle_core::cuda_backend::CudaDType;

        fn copy<T: CudaDType + DeviceRepr>(
            op: &KvWrite,
            cache: &mut candle_core::CudaStorage,
            cl: &Layout,
            k: &candle_core::CudaStorage,
            kl: &Layout,
            v: &candle_core::CudaStorage,
            vl: &Layout,
        ) -> candle_core::Result<()> {
            let dev = cache.device().clone();
            let sources = [
                (k.as_cuda_slice::<T>()?, kl.start_offset()),
                (v.as_cuda_slice::<T>()?, vl.start_offset()),
            ];
            let runs = [op.runs(cl, 0), op.runs(cl, 1)];
            let dst = cache.as_cuda_slice_mut::<T>()?;
            for ((src, offset), runs) in sources.into_iter().zip(runs) {
                for (s, d, n) in runs {
                    let from = src.slice(offset + s..offset + s + n);
                    let mut to = dst.slice_mut(d..d + n);
                    dev.memcpy_dtod(&from, &mut to)?;
                }
            }
            Ok(())
        }
        match cache.dtype() {
            DType::F32 => copy::<f32>(self, cache, cl, k, kl, v, vl),
            DType::BF16 => copy::<half::bf16>(self, cache, cl, k, kl, v, vl),
            DType::F16 => copy::<half::f16>(self, cache, cl, k, kl, v, vl),
            other => candle_core::bail!("kv-write: unsupported dtype {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(n: usize, offset: f32) -> Tensor {
        Tensor::arange(0f32, (2 * 2 * n * 3) as f32, &Device::Cpu)
            .unwrap()
            .affine(1.0, offset as f64)
            .unwrap()
            .reshape((2, 2, n, 3))
            .unwrap()
    }

    #[test]
    fn writes_in_place_equal_concatenation() {
        let cache = KvCache::new(3, 2, 64, 3, DType::F32, &Device::Cpu).unwrap();
        let mut all_k: Vec<Tensor> = Vec::new();
        let mut at = 0;
        for (i, n) in [5usize, 1, 1, 30, 1].into_iter().enumerate() {
            let k = step(n, 100.0 * i as f32);
            let v = (&k * 2.0).unwrap();
            cache.write(1, at, &k, &v).unwrap();
            at += n;
            all_k.push(k);
            let (ks, vs) = cache.read(1, 2, at).unwrap();
            let want = Tensor::cat(&all_k, 2).unwrap();
            assert_eq!(ks.dims(), want.dims());
            let diff = (ks - &want).unwrap().abs().unwrap().max_all().unwrap();
            assert_eq!(diff.to_scalar::<f32>().unwrap(), 0.0);
            let diff = (vs - (want * 2.0).unwrap()).unwrap().abs().unwrap();
            assert_eq!(diff.max_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
        }
        // Slot 0 was never written.
        let (k0, _) = cache.read(0, 1, at).unwrap();
        assert_eq!(
            k0.abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap(),
            0.0
        );
    }

    #[test]
    fn capacity_and_slots_are_enforced() {
        let cache = KvCache::new(1, 2, 8, 3, DType::F32, &Device::Cpu).unwrap();
        let k = step(5, 0.0).narrow(0, 0, 1).unwrap();
        cache.write(0, 0, &k, &k).unwrap();
        let e = cache.write(0, 4, &k, &k).unwrap_err();
        assert!(e.to_string().contains("context of 8 positions"), "{e}");
        assert!(cache.write(1, 0, &k, &k).is_err());
        assert!(cache.read(0, 1, 9).is_err());
        assert!(KvCache::new(0, 2, 8, 3, DType::F32, &Device::Cpu).is_err());
    }
}
