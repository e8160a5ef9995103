//! The GPU side: the device forms of a unit and every kernel's launch code, in three rooms.
//!
//! - `forms`: what a unit keeps on a device, every form a lossless re-arrangement of what the
//!   DF11 files hold: [`packed`] (fixed 3-bit exponent codes per member plus a lane-major escape
//!   list; the default where it fits), [`segments`] (the Huffman stream plus the bit offset of
//!   every 64th weight), [`tile_order`] (the order a member matrix may be stored in for the
//!   tensor-core kernels), `exponent_walk` (the checked CPU decode these are built from); with
//!   `cuda`: `unit` (device buffers, the block decode `df11_decode.cu`), `gpu_pack` (the packed
//!   form built on the GPU, `df11_pack.cu`), `upload` and `staged_copy` (host arrays to the
//!   device at load).
//! - `products`: a product's path and kernels: [`matmul`] (the plan: which path a product
//!   takes), `limits` (rows a launch and shapes the kernels take); with `cuda`: `fused`
//!   (CUDA-core fused GEMV over the Huffman form, `df11_fused.cu`), `twin` (their BF16 twins),
//!   `tc` (tensor-core products over packed exponents and their twin, `df11_tc.cu`,
//!   `df11_tc_stream.cu`; `tc/tiling.rs` fixes the summation order), `tc_panel` and `tc_wg`
//!   (panel and warpgroup kernels, off by default, with the `experimental-kernels` feature), `packed_kernels` (fused and decode kernels
//!   over packed exponents, `df11_packed.cu`).
//! - `runtime`: what every launch shares: `launch` (grid sizing, argument checks, the
//!   CUDA-only op wrapper, `push_args!`), `module` (our kernels' fatbins, loaded once per
//!   context), `pdl` (programmatic dependent launches, sm_90+), `streams` (one stream waiting
//!   for another's work). Public: df11-llm launches the models' step kernels (`df11_llm::ops`)
//!   on it.
//!
//! Each module keeps its plain path (`crate::cuda::launch`, `df11_candle::cuda::packed`) through
//! the re-exports below. The kernels' contracts are in `kernels/README.md`.

pub(crate) mod forms;
pub(crate) mod products;
pub(crate) mod runtime;

// The modules by their plain names (`crate::cuda::launch`, `df11_candle::cuda::packed`, ...):
// each keeps the visibility its room gives it.
pub use forms::*;
pub use products::*;
#[cfg(feature = "cuda")]
pub use runtime::*;
#[cfg(feature = "cuda")]
#[doc(hidden)]
pub use unit::build_on_gpu_to_host;
