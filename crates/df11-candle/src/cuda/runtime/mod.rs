//! What every launch shares: grid sizing and argument checks, the kernels' modules,
//! programmatic dependent launches, and streams that wait for each other. Public for the
//! workspace's crates that launch kernels of their own on the same machinery (df11-llm's step
//! kernels): `launch` (the CUDA-only op traits, `cuda_only_op!`, `push_args!`, `alloc_out`),
//! `module` (`fatbin_module!`: a kernel file compiled by the calling crate's build script),
//! `pdl` (`launch_kernel!`).

#[cfg(feature = "cuda")]
pub mod launch;
#[cfg(feature = "cuda")]
pub mod module;
#[cfg(feature = "cuda")]
pub mod pdl;
#[cfg(feature = "cuda")]
pub mod streams;
