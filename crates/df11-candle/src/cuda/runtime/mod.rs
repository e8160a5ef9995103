//! What every launch shares: grid sizing and argument checks, the kernels' modules, programmatic dependent launches, streams that wait for each other, and the process-wide settings.

#[cfg(feature = "cuda")]
pub(crate) mod launch;
#[cfg(feature = "cuda")]
pub(crate) mod module;
#[cfg(feature = "cuda")]
pub(crate) mod pdl;
pub(crate) mod setting;
#[cfg(feature = "cuda")]
pub mod streams;
