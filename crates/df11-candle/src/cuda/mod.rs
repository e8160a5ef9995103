//! The GPU side: the device forms of a unit and every kernel's launch code.
//!
//! A unit's weights reach a CUDA device in one of two forms, both lossless re-arrangements of
//! what the DF11 files hold, built on the host at load from a checked CPU decode:
//! - [`packed`]: fixed 3-bit exponent codes per member plus a lane-major escape list (the default
//!   where it fits);
//! - [`segments`]: the Huffman stream as in the file plus the bit offset of every 64th weight.
//!
//! [`tile_order`]: the order a member matrix may be stored in for the tensor-core kernels.
//! These builders (the packed form from `exponent_walk`'s checked CPU decode), and [`matmul`] (which path a product takes), are plain host code, compiled
//! and tested everywhere (`setting`: how the matmul path and the exponent form are set and read
//! from the environment). With the `cuda` feature the launch code comes in (`kernels/*.cu`,
//! compiled by the build script to fatbins: SASS for `CUDA_COMPUTE_CAP` and its PTX; their contracts are in `kernels/README.md`):
//! - `unit`: a unit's device buffers and the block decode kernel (`df11_decode.cu`);
//! - `fused`: the fused decode + matrix-vector kernel over the Huffman form and the segment
//!   decode kernel (`df11_fused.cu`);
//! - `twin`: the BF16 twins of the fused kernels (same summation order) for dense weights;
//! - `tc`: the tensor-core fused products, over packed exponents and their twin (`df11_tc.cu`);
//! - `tc_panel`: the panel tensor-core products (`df11_tc_panel.cu`): 8 warps of a CTA on the
//!   same columns of 8 row groups, columns split over CTAs (9 to 64 rows of input);
//! - `tc_wg`: the warpgroup tensor-core products (`df11_tc_wg.cu`, Hopper): weights decoded into
//!   wgmma A registers, x from shared memory in contract order (9 to 64 rows of input);
//! - `packed_kernels`: the fused kernel and the decode over packed exponents (`df11_packed.cu`);
//! - `llm_ops`: small fused ops of the models' forward pass (`llm_ops.cu`);
//! - `decode_step`: the graph-capturable decode step's kernels: q/k norm + RoPE + KV write,
//!   flash-decoding attention over the cache in place, residual add + RMSNorm
//!   (`decode_step.cu`);
//! - `prefill_attention`: a prompt's causal attention over the cache in place, flash-attention
//!   style (`prefill_attention.cu`);
//! - `gpu_pack`: the packed form built on the GPU at load from the stream (`df11_pack.cu`);
//! - `pdl`: programmatic dependent launches of the decode step's kernels (sm_90+);
//! - `upload`: host arrays to the device, at once or on a copy stream (offloaded units);
//! - `staged_copy`: large copies at load through pinned buffers filled by several threads;
//! - [`streams`]: one stream waiting for another's work (copy stream, another GPU);
//! - `module`: our kernels' modules, loaded once per CUDA context from the build's fatbins (SASS
//!   for `CUDA_COMPUTE_CAP` and its PTX);
//! - `launch`: what every launch shares (grid sizing, tiling, argument checks, the CUDA-only
//!   op wrapper, `push_args!`).

pub(crate) mod forms;
#[cfg(feature = "cuda")]
pub(crate) mod llm;
pub(crate) mod products;
pub(crate) mod runtime;

// The modules by their plain names (`crate::cuda::launch`, `df11_candle::cuda::packed`, ...).
pub(crate) use forms::exponent_walk;
#[cfg(feature = "cuda")]
pub(crate) use forms::gpu_pack;
pub use forms::packed;
pub use forms::segments;
#[cfg(feature = "cuda")]
pub(crate) use forms::staged_copy;
pub use forms::tile_order;
#[cfg(feature = "cuda")]
pub(crate) use forms::unit;
#[cfg(feature = "cuda")]
pub(crate) use forms::upload;
#[cfg(feature = "cuda")]
pub use llm::decode_step;
#[cfg(feature = "cuda")]
pub use llm::llm_ops;
#[cfg(feature = "cuda")]
pub use llm::prefill_attention;
#[cfg(feature = "cuda")]
pub(crate) use products::fused;
pub(crate) use products::limits;
pub use products::matmul;
#[cfg(feature = "cuda")]
pub(crate) use products::packed_kernels;
#[cfg(feature = "cuda")]
pub(crate) use products::tc;
#[cfg(feature = "cuda")]
pub(crate) use products::tc_panel;
#[cfg(feature = "cuda")]
pub(crate) use products::tc_wg;
#[cfg(feature = "cuda")]
pub(crate) use products::twin;
#[cfg(feature = "cuda")]
pub(crate) use runtime::launch;
#[cfg(feature = "cuda")]
pub(crate) use runtime::module;
#[cfg(feature = "cuda")]
pub(crate) use runtime::pdl;
pub(crate) use runtime::setting;
#[cfg(feature = "cuda")]
pub use runtime::streams;

#[cfg(feature = "cuda")]
pub use pdl::set_pdl;
#[cfg(feature = "cuda")]
#[doc(hidden)]
pub use unit::build_on_gpu_to_host;
