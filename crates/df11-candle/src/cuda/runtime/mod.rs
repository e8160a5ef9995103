//! What every launch shares: grid sizing and argument checks, the kernels' modules,
//! programmatic dependent launches, and streams that wait for each other.

#[cfg(feature = "cuda")]
pub(crate) mod launch;
#[cfg(feature = "cuda")]
pub(crate) mod module;
#[cfg(feature = "cuda")]
pub(crate) mod pdl;
#[cfg(feature = "cuda")]
pub mod streams;
