//! The GPU side: the device forms of a unit and every kernel's launch code, in three rooms.
//!
//! - `forms`: what a unit keeps on a device, one folder per device form, every form a lossless
//!   re-arrangement of what the DF11 files hold: `huffman` (the stream plus a segment index),
//!   `packed` (fixed 3-bit exponent codes plus an escape list, the default where it fits; its
//!   tensor-core products and tile order), `dense` (the BF16 twins of the fused products, same
//!   summation order), behind one trait (`forms::DeviceForm`: decode a range, multiply rows);
//!   `unit` holds a unit's form, `upload` and `staged_copy` put host arrays on the device.
//! - `plan`: the path choice above them ([`matmul`]: which kernel a product takes) and the
//!   kernels' limits.
//! - `runtime`: what every launch shares: `launch` (grid sizing, argument checks, the
//!   CUDA-only op wrapper, `push_args!`), `module` (our kernels' fatbins, loaded once per
//!   context), `pdl` (programmatic dependent launches, sm_90+), `streams` (one stream waiting
//!   for another's work). Public: df11-llm launches the models' step kernels (`df11_llm::ops`)
//!   on it.
//!
//! Each module keeps its plain path (`crate::cuda::launch`, `df11_candle::cuda::packed`) through
//! the re-exports below. The kernels' contracts are in `kernels/README.md`.

pub(crate) mod forms;
pub(crate) mod plan;
pub(crate) mod runtime;

// The modules by their plain names (`crate::cuda::launch`, `df11_candle::cuda::packed`, ...):
// each keeps the visibility its room gives it.
pub use forms::*;
pub use plan::*;
#[cfg(feature = "cuda")]
pub use runtime::*;
#[cfg(feature = "cuda")]
#[doc(hidden)]
pub use unit::build_on_gpu_to_host;
