//! The decode step's kernels (`kernels/decode_step.cu`): q/k norm + RoPE + KV-cache write in one
//! launch, flash-decoding attention over the cache in place, and the residual add fused with the
//! next RMSNorm. Positions and cache slots are read by the kernels from device tensors, so a
//! CUDA graph captured once serves every step; every launch here is graph-capturable (no host
//! copy, no synchronisation).
//!
//! Shapes and dtypes are checked before any launch; the kernels clamp each position and slot
//! they read to the cache, so a bad value cannot reach memory outside it. `pdl` arguments are
//! as in [`super::llm_ops`].

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::op::BackpropOp;
use candle_core::{CudaStorage, DType, Layout, Storage, Tensor};
use half::bf16;

use df11_candle::cuda::module::{fatbin_module, Module};
use df11_candle::cuda::pdl::launch_kernel;

const MODULE: Module = fatbin_module!("decode_step");
const FD_THREADS: usize = 128;

/// The CUDA storage of a storage guard, or an error naming `what`.
pub(super) fn cuda<'a>(s: &'a Storage, what: &str) -> candle_core::Result<&'a CudaStorage> {
    match s {
        Storage::Cuda(c) => Ok(c),
        _ => candle_core::bail!("decode step: {what} is not on a CUDA device"),
    }
}

/// A BF16 view of `s` from the layout's start (elements must be laid out as the caller says).
pub(super) fn bf16_from<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<CudaView<'a, bf16>> {
    if s.dtype() != DType::BF16 {
        candle_core::bail!("decode step: {what} must be BF16, not {:?}", s.dtype());
    }
    Ok(s.as_cuda_slice::<bf16>()?.slice(l.start_offset()..))
}

/// A contiguous view of a u32 tensor of `n` elements.
fn u32_view<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    n: usize,
    what: &str,
) -> candle_core::Result<CudaView<'a, u32>> {
    if s.dtype() != DType::U32 || l.shape().elem_count() != n {
        candle_core::bail!("decode step: {what} must be {n} u32 values");
    }
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(s.as_cuda_slice::<u32>()?.slice(a..b)),
        None => candle_core::bail!("decode step: {what} must be contiguous"),
    }
}

/// A tensor over a fresh device buffer.
pub(super) fn wrap<T: candle_core::cuda_backend::CudaDType>(
    slice: CudaSlice<T>,
    dev: &CudaDevice,
    shape: &[usize],
) -> Tensor {
    let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev.clone()));
    Tensor::from_storage(storage, shape, BackpropOp::none(), false)
}

/// `[rows, width]` rows of `t` (shape `[rows, width]`, or `[a, b, width]` with `a * b == rows`
/// whose rows are evenly spaced, e.g. `[rows, 1, width]` or a prompt's `[batch, seq, width]`;
/// last dimension contiguous): the row stride in elements.
fn row_stride(t: &Tensor, rows: usize, width: usize, what: &str) -> candle_core::Result<usize> {
    let dims = t.dims();
    let strides = t.stride();
    let ok = match (dims, strides) {
        ([r, w], _) => *r == rows && *w == width,
        ([a, b, w], [sa, sb, _]) => {
            a * b == rows && *w == width && (*a == 1 || *b == 1 || *sa == b * sb)
        }
        _ => false,
    };
    if !ok || strides.last() != Some(&1) {
        candle_core::bail!("decode step: {what} is {dims:?}, expected [{rows}, {width}] rows");
    }
    // The stride between consecutive rows: of the outer dimension when the inner one is 1.
    Ok(match (dims, strides) {
        ([_, 1, _], [sa, _, _]) => *sa,
        ([_, _, _], [_, sb, _]) => *sb,
        _ => strides[0],
    })
}

/// The KV cache of one layer: `[2, slots, kv_heads, cap, head_dim]` BF16, contiguous. Returns
/// `(slots, cap)`.
pub(super) fn cache_dims(
    kv: &Tensor,
    kv_heads: usize,
    head_dim: usize,
) -> candle_core::Result<(usize, usize)> {
    match kv.dims() {
        [2, s, h, c, d] if *h == kv_heads && *d == head_dim && *s > 0 && *c > 0 => {
            if !kv.is_contiguous() || kv.dtype() != DType::BF16 {
                candle_core::bail!("decode step: the KV cache must be contiguous BF16");
            }
            Ok((*s, *c))
        }
        dims => candle_core::bail!(
            "decode step: KV cache {dims:?}, expected [2, slots, {kv_heads}, cap, {head_dim}]"
        ),
    }
}

/// Per-head RMSNorm of queries or keys, for [`qk_norm_rope_kv`].
#[derive(Debug, Clone, Copy)]
pub struct HeadNorm<'a> {
    /// `[head_dim]` f32: the weight (`one_plus` false) or `1 + weight` (true).
    pub weight: &'a Tensor,
    /// Gemma's flavour: normalise and scale in f32, round once.
    pub one_plus: bool,
}

/// One layer's new queries, keys and values at the step's positions: each head of `q` and `k`
/// normed (when a norm is given, with `eps`) and rotated by RoPE (`cos`/`sin`: the full tables,
/// `[rows, rot/2]` BF16, indexed by each row's position), `k` and `v` written into the cache `kv`
/// at each row's `(slot, position)`. `q`, `k`, `v`: `[B, heads*D]` / `[B, kv_heads*D]` rows
/// (views into one fused qkv output allowed); `positions`, `slots`: `[B]` u32 on the device.
/// Returns the queries, `[B, heads, D]`. `pdl`: see [`super::llm_ops`].
#[allow(clippy::too_many_arguments)]
pub fn qk_norm_rope_kv(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    norms: Option<(HeadNorm<'_>, HeadNorm<'_>)>,
    eps: f32,
    cos: &Tensor,
    sin: &Tensor,
    positions: &Tensor,
    slots: &Tensor,
    kv: &Tensor,
    heads: usize,
    pdl: bool,
) -> candle_core::Result<Tensor> {
    let (kv_heads, d) = match kv.dims() {
        [2, _, h, _, d] => (*h, *d),
        dims => candle_core::bail!("decode step: KV cache {dims:?}"),
    };
    let (slots_n, cap) = cache_dims(kv, kv_heads, d)?;
    let rows = positions.elem_count();
    let q_stride = row_stride(q, rows, heads * d, "q")?;
    let k_stride = row_stride(k, rows, kv_heads * d, "k")?;
    let v_stride = row_stride(v, rows, kv_heads * d, "v")?;
    let (table_rows, half) = cos.dims2()?;
    if sin.dims() != cos.dims() || 2 * half > d || half == 0 || !cos.is_contiguous() {
        candle_core::bail!(
            "decode step: rotary tables {:?} for head_dim {d}",
            cos.dims()
        );
    }
    if let Some((qn, kn)) = &norms {
        for n in [qn.weight, kn.weight] {
            if n.dims() != [d] || n.dtype() != DType::F32 || !n.is_contiguous() {
                candle_core::bail!("decode step: head norms must be [{d}] contiguous f32");
            }
        }
        if qn.one_plus != kn.one_plus {
            candle_core::bail!("decode step: q and k norms of two flavours");
        }
    }
    if rows == 0 {
        candle_core::bail!("decode step: no rows");
    }
    let (q_s, q_l) = q.storage_and_layout();
    let q_s = cuda(&q_s, "q")?;
    let dev = q_s.device().clone();
    let (k_s, k_l) = k.storage_and_layout();
    let (v_s, v_l) = v.storage_and_layout();
    let (c_s, c_l) = cos.storage_and_layout();
    let (s_s, s_l) = sin.storage_and_layout();
    let (p_s, p_l) = positions.storage_and_layout();
    let (sl_s, sl_l) = slots.storage_and_layout();
    let (kv_s, kv_l) = kv.storage_and_layout();
    let qv = bf16_from(q_s, q_l, "q")?;
    let kv_ = bf16_from(cuda(&k_s, "k")?, k_l, "k")?;
    let vv = bf16_from(cuda(&v_s, "v")?, v_l, "v")?;
    let cv = bf16_from(cuda(&c_s, "cos")?, c_l, "cos")?;
    let sv = bf16_from(cuda(&s_s, "sin")?, s_l, "sin")?;
    let pv = u32_view(cuda(&p_s, "positions")?, p_l, rows, "positions")?;
    let slv = u32_view(cuda(&sl_s, "slots")?, sl_l, rows, "slots")?;
    let cache = bf16_from(cuda(&kv_s, "kv cache")?, kv_l, "kv cache")?;
    let q_out = unsafe { dev.alloc::<bf16>(rows * heads * d) }?;
    let norm_guards = norms.map(|(qn, kn)| {
        (
            qn.weight.storage_and_layout(),
            kn.weight.storage_and_layout(),
        )
    });
    let norm_views = match &norm_guards {
        Some(((qw_s, qw_l), (kw_s, kw_l))) => {
            let qw = cuda(qw_s, "q norm")?.as_cuda_slice::<f32>()?;
            let kw = cuda(kw_s, "k norm")?.as_cuda_slice::<f32>()?;
            Some((
                qw.slice(qw_l.start_offset()..),
                kw.slice(kw_l.start_offset()..),
            ))
        }
        None => None,
    };
    let kind = i32::from(norms.is_some_and(|(qn, _)| qn.one_plus));
    let null: u64 = 0;
    let func = MODULE.func(&dev, "qk_norm_rope_kv_bf16")?;
    let cfg = LaunchConfig {
        grid_dim: (rows as u32, (heads + 2 * kv_heads) as u32, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: (4 * d) as u32,
    };
    let (qs, ks, vs) = (q_stride as i64, k_stride as i64, v_stride as i64);
    let (tr, rot) = (table_rows as i32, (2 * half) as i32);
    let (h_, kvh_, d_, sn_, cap_) = (
        heads as i32,
        kv_heads as i32,
        d as i32,
        slots_n as i32,
        cap as i32,
    );
    // SAFETY: every buffer was checked against the shapes above; positions and slots are clamped
    // by the kernel to the cache and the tables; it waits (pdl_begin) before any access.
    match &norm_views {
        Some((qw, kw)) => unsafe {
            launch_kernel!(dev, pdl, func, cfg; &qv, &kv_, &vv, &qs, &ks, &vs, qw, kw, &kind, &eps,
                &cv, &sv, &tr, &rot, &pv, &slv, &q_out, &cache, &h_, &kvh_, &d_, &sn_, &cap_)
        }?,
        None => unsafe {
            launch_kernel!(dev, pdl, func, cfg; &qv, &kv_, &vv, &qs, &ks, &vs, &null, &null, &kind,
                &eps, &cv, &sv, &tr, &rot, &pv, &slv, &q_out, &cache, &h_, &kvh_, &d_, &sn_,
                &cap_)
        }?,
    }
    Ok(wrap(q_out, &dev, &[rows, heads, d]))
}

/// The fewest cache positions a split of [`flash_decode`] takes. A CTA walks its split 8 keys at
/// a time, each round a memory latency: at batch 1 and a 640-position cache, 64 positions a split
/// (72 CTAs for 8 KV heads) took 18.5 µs a layer under ncu, 11% of a Qwen3-8B-shaped decode step
/// (H100); 16 gives 4x the CTAs at a quarter of the rounds. Long contexts are capped by the
/// 8-CTAs-an-SM rule first.
pub const MIN_SPLIT_POSITIONS: usize = 16;

/// How many splits of the sequence [`flash_decode`] uses for `rows` rows of `kv_heads` heads over
/// a cache of `cap` positions: about 8 CTAs per SM (each CTA has 4 warps; fewer leave too few
/// loads in flight to reach the memory's bandwidth at long contexts), at least
/// [`MIN_SPLIT_POSITIONS`] positions a split. Fixed by the capacity (not the current length), so a
/// captured graph fits every step.
pub fn flash_decode_splits(
    dev: &CudaDevice,
    rows: usize,
    kv_heads: usize,
    groups: usize,
    cap: usize,
) -> candle_core::Result<usize> {
    use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute;
    let sms = dev
        .cuda_stream()
        .context()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .w()? as usize;
    let ctas = (rows * kv_heads * groups).max(1);
    Ok((8 * sms)
        .div_ceil(ctas)
        .clamp(1, cap.div_ceil(MIN_SPLIT_POSITIONS).max(1)))
}

/// Attention of one query per row over its cached keys and values, in place (flash-decoding):
/// `q` `[B, heads, D]` BF16 (from [`qk_norm_rope_kv`]), the layer's cache `kv`, each row's
/// position and slot on the device; keys `[len - window, len)` with `len = position + 1` (all
/// from 0 without a window), scores `bf16(bf16(q·k) * scale)` (soft-capped when `softcap` is
/// set), softmax and values in f32, `splits` pieces of the sequence merged in order. Returns
/// `[B, heads * D]` BF16.
#[allow(clippy::too_many_arguments)]
pub fn flash_decode(
    q: &Tensor,
    kv: &Tensor,
    positions: &Tensor,
    slots: &Tensor,
    scale: f32,
    softcap: Option<f32>,
    window: Option<usize>,
    splits: usize,
    pdl: bool,
) -> candle_core::Result<Tensor> {
    let (rows, heads, d) = q.dims3()?;
    let kv_heads = kv.dims().get(2).copied().unwrap_or(0);
    let (slots_n, cap) = cache_dims(kv, kv_heads, d)?;
    if !q.is_contiguous()
        || q.dtype() != DType::BF16
        || kv_heads == 0
        || !heads.is_multiple_of(kv_heads)
    {
        candle_core::bail!("flash_decode: q {:?} for {kv_heads} kv heads", q.dims());
    }
    let vec = if d.is_multiple_of(8) { 8 } else { 2 };
    if !d.is_multiple_of(2) || d.div_ceil(vec).next_power_of_two() > 32 {
        candle_core::bail!("flash_decode: head_dim {d} is not supported (even, at most 256)");
    }
    if splits == 0 || splits > 65_535 {
        candle_core::bail!("flash_decode: {splits} splits");
    }
    let groups = heads / kv_heads;
    let gt = groups.next_power_of_two().min(8);
    let gchunks = groups.div_ceil(gt);
    let tpk = d.div_ceil(vec).next_power_of_two();
    let kpi = FD_THREADS / tpk;
    let (q_s, q_l) = q.storage_and_layout();
    let q_s = cuda(&q_s, "q")?;
    let dev = q_s.device().clone();
    let (kv_s, kv_l) = kv.storage_and_layout();
    let (p_s, p_l) = positions.storage_and_layout();
    let (sl_s, sl_l) = slots.storage_and_layout();
    let qv = bf16_from(q_s, q_l, "q")?;
    let cache = bf16_from(cuda(&kv_s, "kv cache")?, kv_l, "kv cache")?;
    let pv = u32_view(cuda(&p_s, "positions")?, p_l, rows, "positions")?;
    let slv = u32_view(cuda(&sl_s, "slots")?, sl_l, rows, "slots")?;
    let partial_o = unsafe { dev.alloc::<f32>(rows * heads * splits * d) }?;
    let partial_ml = unsafe { dev.alloc::<f32>(rows * heads * splits * 2) }?;
    let out = unsafe { dev.alloc::<bf16>(rows * heads * d) }?;
    let name = match (vec, gt) {
        (8, 1) => "flash_decode_bf16_8_1",
        (8, 2) => "flash_decode_bf16_8_2",
        (8, 4) => "flash_decode_bf16_8_4",
        (8, _) => "flash_decode_bf16_8_8",
        (_, 1) => "flash_decode_bf16_2_1",
        (_, 2) => "flash_decode_bf16_2_2",
        (_, 4) => "flash_decode_bf16_2_4",
        _ => "flash_decode_bf16_2_8",
    };
    let func = MODULE.func(&dev, name)?;
    let cfg = LaunchConfig {
        grid_dim: ((rows * kv_heads * gchunks) as u32, splits as u32, 1),
        block_dim: (FD_THREADS as u32, 1, 1),
        shared_mem_bytes: (4 * kpi * gt * d) as u32,
    };
    let (h_, kvh_, d_, sn_, cap_, gc_) = (
        heads as i32,
        kv_heads as i32,
        d as i32,
        slots_n as i32,
        cap as i32,
        gchunks as i32,
    );
    let cap_f = softcap.unwrap_or(0.0);
    let window_ = window.map_or(0, |w| w.min(i32::MAX as usize) as i32);
    // SAFETY: shapes checked above; positions and slots are clamped by the kernel, which waits
    // (pdl_begin) before any access.
    unsafe {
        launch_kernel!(dev, pdl, func, cfg; &qv, &cache, &pv, &slv, &h_, &kvh_, &d_, &sn_, &cap_, &gc_,
            &scale, &cap_f, &window_, &partial_o, &partial_ml)
    }?;
    let func = MODULE.func(&dev, "flash_combine_bf16")?;
    // (row, head) x 32-feature slices; 8 warps share the splits (COMBINE_THREADS).
    let cfg = LaunchConfig {
        grid_dim: ((rows * heads) as u32, d.div_ceil(32) as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let splits_ = splits as i32;
    // SAFETY: partials hold rows * heads * splits entries, out rows * heads * d; the kernel
    // waits (pdl_begin) before any access.
    unsafe { launch_kernel!(dev, pdl, func, cfg; &partial_o, &partial_ml, &splits_, &d_, &out) }?;
    Ok(wrap(out, &dev, &[rows, heads * d]))
}

/// The residual add and the next RMSNorm in one launch: `residual = bf16(residual + h)` in place,
/// then returns `w * bf16(residual * rsqrt(mean(residual²) + eps))` (the arithmetic of
/// [`super::llm_ops::rms_norm_bf16`], bit for bit). `residual` must be a contiguous BF16 CUDA
/// tensor that nothing else reads; `h` of its shape; `w` of its last dimension.
pub fn add_rms_norm_bf16(
    residual: &Tensor,
    h: &Tensor,
    w: &Tensor,
    eps: f32,
    pdl: bool,
) -> candle_core::Result<Tensor> {
    let n = w.elem_count();
    if residual.dims() != h.dims()
        || residual.dims().last() != Some(&n)
        || n == 0
        || !residual.is_contiguous()
        || !w.is_contiguous()
    {
        candle_core::bail!(
            "add_rms_norm_bf16: residual {:?}, h {:?}, weight {:?}",
            residual.dims(),
            h.dims(),
            w.dims()
        );
    }
    let h = h.contiguous()?;
    let rows = residual.elem_count() / n;
    let (r_s, r_l) = residual.storage_and_layout();
    let r_s = cuda(&r_s, "residual")?;
    let dev = r_s.device().clone();
    let (h_s, h_l) = h.storage_and_layout();
    let (w_s, w_l) = w.storage_and_layout();
    let rv = bf16_from(r_s, r_l, "residual")?;
    let hv = bf16_from(cuda(&h_s, "h")?, h_l, "h")?;
    let wv = bf16_from(cuda(&w_s, "weight")?, w_l, "weight")?;
    let out = unsafe { dev.alloc::<bf16>(rows * n) }?;
    let func = MODULE.func(&dev, "add_rms_norm_bf16")?;
    let cfg = LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let n_ = n as i32;
    // SAFETY: residual and h hold rows * n contiguous values, w holds n; the kernel waits
    // (pdl_begin) before any access.
    unsafe { launch_kernel!(dev, pdl, func, cfg; &rv, &hv, &wv, &out, &n_, &eps) }?;
    Ok(wrap(out, &dev, residual.dims()))
}
