//! A prompt's causal attention over the KV cache in place, flash-attention style
//! (`kernels/prefill_attention.cu`): the eager pass's attention on CUDA in BF16, one launch per
//! layer instead of candle's score matrix, mask, softmax and casts.
//!
//! Shapes, the cache and the slot and position ranges are checked before the launch.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::{DType, Tensor};
use half::bf16;

use super::decode_step::{bf16_from, cache_dims, cuda, wrap};
use df11_candle::cuda::launch::push_args;
use df11_candle::cuda::module::{fatbin_module, Module};

const MODULE: Module = fatbin_module!("prefill_attention");
/// Query rows (token x query head of one kv head) per CTA (`PA_BM`).
const BLOCK_ROWS: usize = 64;
const THREADS: u32 = 128;

/// Where a prompt's queries sit: `rows` sequences of `seq` tokens each, row `r` in cache slot
/// `first_slot + r`, positions `start..start + seq`.
#[derive(Debug, Clone, Copy)]
pub struct PromptAt {
    /// Sequences in the batch.
    pub rows: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Cache slot of the first sequence.
    pub first_slot: usize,
    /// Position of each sequence's first token.
    pub start: usize,
}

/// Whether [`prefill_attention`] takes a head size: a multiple of 8, at most 256.
pub fn prefill_attention_supports(head_dim: usize) -> bool {
    head_dim.is_multiple_of(8) && (8..=256).contains(&head_dim)
}

/// Causal attention of a prompt's queries `q` (`[rows * seq, heads, D]` BF16, contiguous, from
/// [`super::decode_step::qk_norm_rope_kv`], whose keys and values are already in the cache `kv`)
/// over their cached keys: the query at position `p` sees positions `[p + 1 - window, p]` (from
/// 0 without a window). Scores `bf16(bf16(q·k) * scale)` (then `cap * tanh(s / cap)` with a
/// softcap), softmax in f32, probabilities rounded to BF16 for the sum of values. Returns
/// `[rows * seq, heads * D]` BF16.
#[allow(clippy::too_many_arguments)]
pub fn prefill_attention(
    q: &Tensor,
    kv: &Tensor,
    at: PromptAt,
    scale: f32,
    softcap: Option<f32>,
    window: Option<usize>,
) -> candle_core::Result<Tensor> {
    let (tokens, heads, d) = q.dims3()?;
    let kv_heads = kv.dims().get(2).copied().unwrap_or(0);
    let (slots_n, cap) = cache_dims(kv, kv_heads, d)?;
    let PromptAt {
        rows,
        seq,
        first_slot,
        start,
    } = at;
    if !q.is_contiguous()
        || q.dtype() != DType::BF16
        || kv_heads == 0
        || !heads.is_multiple_of(kv_heads)
    {
        candle_core::bail!(
            "prefill_attention: q {:?} for {kv_heads} kv heads",
            q.dims()
        );
    }
    if !prefill_attention_supports(d) {
        candle_core::bail!("prefill_attention: head_dim {d} (a multiple of 8 up to 256)");
    }
    if rows == 0 || seq == 0 || tokens != rows * seq {
        candle_core::bail!("prefill_attention: {tokens} queries for {rows} x {seq} tokens");
    }
    if first_slot + rows > slots_n || start + seq > cap {
        candle_core::bail!(
            "prefill_attention: slots {first_slot}..{} and positions {start}..{} outside the \
             cache ({slots_n} slots of {cap})",
            first_slot + rows,
            start + seq
        );
    }
    let groups = heads / kv_heads;
    let m_blocks = (seq * groups).div_ceil(BLOCK_ROWS);
    if rows > 65_535 || kv_heads > 65_535 || m_blocks > i32::MAX as usize || cap > i32::MAX as usize
    {
        candle_core::bail!("prefill_attention: {rows} x {seq} tokens exceed the grid");
    }
    let (name, dp, bn) = match d {
        0..=64 => ("prefill_attention_bf16_64", 64, 64),
        65..=128 => ("prefill_attention_bf16_128", 128, 64),
        _ => ("prefill_attention_bf16_256", 256, 32),
    };
    let smem = (BLOCK_ROWS + 2 * bn) * dp * 2;
    let (q_s, q_l) = q.storage_and_layout();
    let q_s = cuda(&q_s, "q")?;
    let dev = q_s.device().clone();
    let (kv_s, kv_l) = kv.storage_and_layout();
    let qv = bf16_from(q_s, q_l, "q")?;
    let cache = bf16_from(cuda(&kv_s, "kv cache")?, kv_l, "kv cache")?;
    let out = unsafe { dev.alloc::<bf16>(tokens * heads * d) }?;
    let func = MODULE.func(&dev, name)?;
    if smem > 48 * 1024 {
        use candle_core::cuda_backend::cudarc::driver::sys::CUfunction_attribute_enum;
        func.set_attribute(
            CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem as i32,
        )
        .w()?;
    }
    let cfg = LaunchConfig {
        grid_dim: (m_blocks as u32, kv_heads as u32, rows as u32),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let as_i32 = |v: usize| v as i32;
    let (seq_, h_, kvh_, d_) = (as_i32(seq), as_i32(heads), as_i32(kv_heads), as_i32(d));
    let (sn_, cap_, fs_, st_) = (
        as_i32(slots_n),
        as_i32(cap),
        as_i32(first_slot),
        as_i32(start),
    );
    let cap_f = softcap.unwrap_or(0.0);
    let window_ = window.map_or(0, |w| w.min(i32::MAX as usize) as i32);
    let mut builder = func.builder();
    push_args!(builder; &qv, &cache, &out, &seq_, &h_, &kvh_, &d_);
    push_args!(builder; &sn_, &cap_, &fs_, &st_, &scale, &cap_f, &window_);
    // SAFETY: q holds rows * seq * heads * d values, out as many; the slots and positions read
    // lie inside the cache (checked above).
    unsafe { builder.launch(cfg) }.w()?;
    Ok(wrap(out, &dev, &[tokens, heads * d]))
}

/// Whether [`prefill_attention`] runs on `device` for heads of `head_dim`: a CUDA device of
/// compute capability 8.0 or newer (mma.sync BF16) and a head size it takes.
pub fn prefill_attention_runs(device: &candle_core::Device, head_dim: usize) -> bool {
    use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute;
    let candle_core::Device::Cuda(d) = device else {
        return false;
    };
    let major = d
        .cuda_stream()
        .context()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    prefill_attention_supports(head_dim) && major.is_ok_and(|m| m >= 8)
}
