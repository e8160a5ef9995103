//! Where a load's time goes: wall time per phase of opening a folder and putting its units and
//! plain tensors on a device, summed over the process, for loads whose options ask for it
//! ([`crate::Df11Options::profile_load`]). A profiled phase that queues GPU work waits for it at
//! its end, so GPU time is charged to the phase that queued it (which serializes the load: the
//! total may grow a little); an unprofiled one costs nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A phase of a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `Df11Model::open` / the dense index: headers read, every unit's metadata validated.
    Open,
    /// The host checks of a unit before its upload (the stream's last block walked on the CPU).
    UnitCheck,
    /// `sign_mantissa` copied to the device.
    UploadSignMantissa,
    /// The Huffman form (codes, gaps, positions, tables) copied to the device.
    UploadExponents,
    /// The block kernel's decode of a unit and its status word.
    GpuDecode,
    /// The tile order's exponents and `sign_mantissa` (tiled members).
    GpuTile,
    /// The packed form built from the decoded exponents (histograms, codes, lanes, escapes).
    GpuPack,
    /// Units built on the host instead (no GPU build: the CPU path, `Df11Options::gpu_pack` off).
    HostBuild,
    /// Plain tensors (norms, dense weights of a BF16 folder) copied and converted.
    PlainTensors,
    /// An offloaded unit's device form, built on the GPU, copied back to the host.
    CopyBack,
    /// An offloaded unit's host arrays moved into pinned memory.
    Pin,
}

const PHASES: [Phase; 11] = [
    Phase::Open,
    Phase::UnitCheck,
    Phase::UploadSignMantissa,
    Phase::UploadExponents,
    Phase::GpuDecode,
    Phase::GpuTile,
    Phase::GpuPack,
    Phase::HostBuild,
    Phase::PlainTensors,
    Phase::CopyBack,
    Phase::Pin,
];

static NANOS: [AtomicU64; 11] = [const { AtomicU64::new(0) }; 11];
static CALLS: [AtomicU64; 11] = [const { AtomicU64::new(0) }; 11];
static BYTES: [AtomicU64; 11] = [const { AtomicU64::new(0) }; 11];

fn slot(phase: Phase) -> usize {
    PHASES.iter().position(|&p| p == phase).unwrap_or(0)
}

/// Runs `f` as `phase` moving `bytes` (0 where it does not count bytes); `settle` (waiting for
/// the device's queued work) runs after it when profiling, so its GPU time lands here.
pub(crate) fn timed<T>(
    profiled: bool,
    phase: Phase,
    bytes: usize,
    settle: impl FnOnce(),
    f: impl FnOnce() -> T,
) -> T {
    if !profiled {
        return f();
    }
    let t = Instant::now();
    let out = f();
    settle();
    let i = slot(phase);
    NANOS[i].fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    CALLS[i].fetch_add(1, Ordering::Relaxed);
    BYTES[i].fetch_add(bytes as u64, Ordering::Relaxed);
    out
}

/// The phases so far (seconds, calls, bytes), those that ran.
pub fn phases() -> Vec<(Phase, f64, u64, u64)> {
    PHASES
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let s = NANOS[i].load(Ordering::Relaxed) as f64 / 1e9;
            (
                p,
                s,
                CALLS[i].load(Ordering::Relaxed),
                BYTES[i].load(Ordering::Relaxed),
            )
        })
        .filter(|&(_, _, calls, _)| calls > 0)
        .collect()
}

/// The phases as lines (`phase  seconds  calls  GB  GB/s`), or `None` when no load was profiled.
pub fn report() -> Option<String> {
    if phases().is_empty() {
        return None;
    }
    let mut out = String::from("load profile: phase | s | calls | GB | GB/s\n");
    let mut total = 0.0;
    for (p, s, calls, bytes) in phases() {
        total += s;
        let gb = bytes as f64 / 1e9;
        let rate = if bytes > 0 && s > 0.0 { gb / s } else { 0.0 };
        out.push_str(&format!(
            "  {p:?} | {s:.3} | {calls} | {gb:.2} | {rate:.1}\n"
        ));
    }
    out.push_str(&format!("  sum of phases | {total:.3}\n"));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profiled_load_records_its_phases() {
        use candle_core::{DType, Device};
        let before = |phase| {
            phases()
                .into_iter()
                .find(|p| p.0 == phase)
                .map_or((0, 0), |p| (p.2, p.3))
        };
        let (open0, plain0) = (before(Phase::Open).0, before(Phase::PlainTensors));
        let dir = crate::fixtures::model_dir("qwen3-tiny", "bf16");
        let options = crate::Df11Options {
            profile_load: true,
            ..Default::default()
        };
        let format = crate::WeightFormat::Dense;
        let w = crate::ModelWeights::open_with(&dir, format, &Device::Cpu, DType::F32, options)
            .unwrap();
        w.tensor("model.norm.weight", &[128]).unwrap();
        let plain = before(Phase::PlainTensors);
        assert!(before(Phase::Open).0 > open0);
        assert!(plain.0 > plain0.0);
        // 128 BF16 values read from the file.
        assert!(plain.1 >= plain0.1 + 256);
        assert!(report().unwrap().contains("PlainTensors"));
    }

    #[test]
    fn phases_have_distinct_slots() {
        for (i, &p) in PHASES.iter().enumerate() {
            assert_eq!(slot(p), i);
        }
    }
}
