//! What the FLUX tests share: the fixture (`tests/fixtures/models/flux-tiny`, found at run time
//! as the GPU suite's carried binaries need), its recorded references, and comparisons.
#![allow(dead_code)] // each test binary uses its own share

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

/// The devices a test runs on: the CPU, and CUDA device 0 with the `cuda` feature (the GPU
/// suite).
pub fn devices() -> Vec<Device> {
    #[cfg(feature = "cuda")]
    let cuda = Some(Device::new_cuda(0).expect("the cuda feature is on but no CUDA device opened"));
    #[cfg(not(feature = "cuda"))]
    let cuda = None;
    [Some(Device::Cpu), cuda].into_iter().flatten().collect()
}

/// The FLUX fixture's folder.
pub fn fixture() -> PathBuf {
    df11_candle::fixtures::fixtures().join("models/flux-tiny")
}

/// `reference.safetensors`: diffusers' recorded tensors (f32), on the CPU.
pub fn reference() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture().join("reference.safetensors"), &Device::Cpu).unwrap()
}

/// `reference.json`: the run's settings, ids and scalars.
pub fn reference_json() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture().join("reference.json")).unwrap())
        .unwrap()
}

/// The largest `|a - b|` (same shapes), in f32.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let a = a
        .to_dtype(DType::F32)
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap();
    let b = b
        .to_dtype(DType::F32)
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap();
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// The bits of `t` (any float dtype, widened to f32 exactly), for bitwise comparisons.
pub fn f32_bits(t: &Tensor) -> Vec<u32> {
    let t = t.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
    t.to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// The commit of the fake cache's DF11 repo.
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// The commit of the fake cache's base repo.
pub const BASE_COMMIT: &str = "89abcdef0123456789abcdef0123456789abcdef";
/// The fixture's DF11 transformer as a Hub repo; its base repo follows from the name.
pub const MODEL_ID: &str = "DFloat11/FLUX.1-tiny-DF11";
/// The fixture's base folder as a Hub repo.
pub const BASE_ID: &str = "black-forest-labs/FLUX.1-tiny";

/// Copies `from` (recursively) into the cache as `repo` at `commit`, with `refs/main` and
/// `refs/v1`; returns the snapshot folder.
pub fn cache_repo(cache: &Path, repo: &str, commit: &str, from: &Path) -> PathBuf {
    let folder = cache.join(format!("models--{}", repo.replace('/', "--")));
    let snapshot = folder.join("snapshots").join(commit);
    std::fs::create_dir_all(folder.join("refs")).unwrap();
    std::fs::create_dir_all(folder.join("blobs")).unwrap();
    std::fs::write(folder.join("refs/main"), commit).unwrap();
    std::fs::write(folder.join("refs/v1"), format!("{commit}\n")).unwrap();
    let mut n = 0;
    copy_tree(from, &snapshot, &folder.join("blobs"), &mut n);
    snapshot
}

fn copy_tree(from: &Path, to: &Path, blobs: &Path, n: &mut usize) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target, blobs, n);
            continue;
        }
        *n += 1;
        let blob = blobs.join(format!("{:040x}", *n));
        std::fs::copy(entry.path(), &blob).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&blob, &target).unwrap();
        #[cfg(not(unix))]
        std::fs::copy(&blob, &target).unwrap();
    }
}

/// A Hugging Face cache holding the fixture's `df11/` as `MODEL_ID` and `base/` as `BASE_ID`;
/// returns it and the two snapshot folders.
pub fn fake_cache() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let cache = tempfile::tempdir().unwrap();
    let f = fixture();
    let df11 = cache_repo(cache.path(), MODEL_ID, COMMIT, &f.join("df11"));
    let base = cache_repo(cache.path(), BASE_ID, BASE_COMMIT, &f.join("base"));
    (cache, df11, base)
}

/// Copies the folder `from` into `to`, recursively.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
