//! Build plumbing, no code: see this crate's `Cargo.toml`. Its dependencies turn on, in every
//! program of the workspace, the features any program turns on in a shared dependency.
