//! The fused products: which path a product takes (the plan), what the kernels take, the CUDA-core, tensor-core, streaming, panel and warpgroup kernels' launch code, their BF16 twins, and the decode kernels over packed exponents.

#[cfg(feature = "cuda")]
pub(crate) mod fused;
pub(crate) mod limits;
pub mod matmul;
#[cfg(feature = "cuda")]
pub(crate) mod packed_kernels;
#[cfg(feature = "cuda")]
pub(crate) mod tc;
#[cfg(feature = "cuda")]
pub(crate) mod tc_panel;
#[cfg(feature = "cuda")]
pub(crate) mod tc_wg;
#[cfg(feature = "cuda")]
pub(crate) mod twin;
