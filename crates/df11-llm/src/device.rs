//! Picking the device and the compute dtype.

use candle_core::{DType, Device};

use crate::error::{LlmError, Result};

/// The compute dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum ComputeDtype {
    /// bfloat16 (the default on CUDA).
    Bf16,
    /// float16.
    F16,
    /// float32 (the default on the CPU).
    F32,
}

impl From<ComputeDtype> for DType {
    fn from(d: ComputeDtype) -> Self {
        match d {
            ComputeDtype::Bf16 => DType::BF16,
            ComputeDtype::F16 => DType::F16,
            ComputeDtype::F32 => DType::F32,
        }
    }
}

/// The CPU when `cpu` is set or CUDA is not compiled in, else CUDA device 0.
pub fn select_device(cpu: bool) -> Result<Device> {
    if cpu || !cfg!(feature = "cuda") {
        return Ok(Device::Cpu);
    }
    open_cuda(0)
}

/// CUDA device `ordinal` on a stream of its own.
///
/// Why not the per-thread default stream: its handle (`CU_STREAM_PER_THREAD`) names the stream
/// of whichever context is current on whichever thread queues the work, so with several GPUs
/// anything that queues through a raw handle without binding the device's context first (a
/// cross-device event wait, cuBLAS, whose calls do not bind) lands on the wrong GPU's stream,
/// and work queued from two threads is not ordered. On two H100s (2026-11-26) a split model
/// left one GPU's tokens after 6-9 steps on the per-thread stream and matched on streams of
/// their own (`scripts/gpu-split-check.sh`). cudarc's event tracking is turned off: candle
/// queues every op of a device on its one stream, and our second streams order themselves
/// (`df11_candle::cuda::streams`).
pub fn open_cuda(ordinal: usize) -> Result<Device> {
    with_own_stream(ordinal)
}

/// A device object of GPU `ordinal` on a new stream, cudarc's event tracking off.
fn with_own_stream(ordinal: usize) -> Result<Device> {
    let device = Device::new_cuda_with_stream(ordinal)?;
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = &device {
        // SAFETY: every op of this device is queued on its one stream (see `open_cuda`), and
        // work between streams is ordered by our own events, so the per-buffer events cudarc
        // would record order nothing.
        unsafe { dev.cuda_stream().context().disable_event_tracking() };
    }
    Ok(device)
}

/// The CUDA devices of `ordinals`, each created once (a device index twice, or one this machine
/// does not have, is an error naming it).
pub fn cuda_devices(ordinals: &[usize]) -> Result<Vec<Device>> {
    for (i, o) in ordinals.iter().enumerate() {
        if ordinals[..i].contains(o) {
            return Err(LlmError::Usage(format!(
                "--devices: device {o} is named twice"
            )));
        }
    }
    let count = cuda_device_count();
    if let Some(&missing) = ordinals.iter().find(|&&o| o >= count) {
        return Err(LlmError::NoSuchDevice {
            index: missing,
            count,
        });
    }
    ordinals.iter().map(|&o| open_cuda(o)).collect()
}

/// A second stream of `device`'s GPU (one per GPU for the process, made on first use), for
/// work beside the device's own stream (decode-ahead).
#[cfg(feature = "cuda")]
pub(crate) fn side_stream(device: &Device) -> Result<candle_core::cuda_backend::CudaDevice> {
    static SIDE: std::sync::Mutex<Vec<(usize, Device)>> = std::sync::Mutex::new(Vec::new());
    let ordinal = device.as_cuda_device()?.cuda_stream().context().ordinal();
    let mut sides = SIDE.lock().expect("side stream lock");
    if let Some((_, d)) = sides.iter().find(|(o, _)| *o == ordinal) {
        return Ok(d.as_cuda_device()?.clone());
    }
    let d = with_own_stream(ordinal)?;
    sides.push((ordinal, d.clone()));
    Ok(d.as_cuda_device()?.clone())
}

/// Refuses CUDA devices of a split (several GPUs) that use the per-thread default stream
/// (candle's `Device::new_cuda`): its handle names the stream of whichever context is current,
/// and such a split left one GPU's tokens (see [`open_cuda`]). Devices of one GPU share its
/// context, hence the same stream, and are accepted.
pub fn check_split_streams(devices: &[Device]) -> Result<()> {
    #[cfg(feature = "cuda")]
    {
        let cuda: Vec<_> = devices
            .iter()
            .filter_map(|d| match d {
                Device::Cuda(c) => Some(c),
                _ => None,
            })
            .collect();
        let ordinal = |c: &&candle_core::CudaDevice| c.cuda_stream().context().ordinal();
        let several = cuda.iter().any(|c| ordinal(c) != ordinal(&cuda[0]));
        // CU_STREAM_PER_THREAD, the handle cudarc's `per_thread_stream` carries.
        let per_thread = |c: &&candle_core::CudaDevice| c.cuda_stream().cu_stream() as usize == 2;
        if let Some(c) = cuda.iter().find(|c| several && per_thread(c)) {
            return Err(LlmError::Usage(format!(
                "CUDA device {} is on the per-thread default stream (candle's \
                 Device::new_cuda); a model split over several GPUs needs devices with streams \
                 of their own: open them with df11_llm::open_cuda or cuda_devices",
                ordinal(c)
            )));
        }
    }
    #[cfg(not(feature = "cuda"))]
    let _ = devices;
    Ok(())
}

/// CUDA devices this machine has (0 without CUDA or without a driver).
pub fn cuda_device_count() -> usize {
    #[cfg(feature = "cuda")]
    {
        use candle_core::cuda_backend::cudarc::driver::result;
        if result::init().is_ok() {
            return result::device::get_count().map_or(0, |n| n.max(0) as usize);
        }
    }
    0
}

/// The requested dtype, or the default for `device`: BF16 on a GPU, F32 on the CPU (where
/// candle's BF16 matmul is emulated and slow).
pub fn select_dtype(requested: Option<ComputeDtype>, device: &Device) -> DType {
    match requested {
        Some(d) => d.into(),
        None if device.is_cpu() => DType::F32,
        None => DType::BF16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_checked() {
        let e = cuda_devices(&[0, 0]).unwrap_err().to_string();
        assert!(e.contains("device 0 is named twice"), "{e}");
        if cuda_device_count() < 8 {
            let e = cuda_devices(&[7]).unwrap_err();
            assert!(matches!(e, LlmError::NoSuchDevice { index: 7, .. }), "{e}");
            assert!(e.to_string().contains("CUDA device 7"), "{e}");
        }
    }

    /// On CUDA: streams of their own pass; per-thread default streams are refused across two
    /// GPUs (where the machine has two) and accepted on one GPU.
    #[cfg(feature = "cuda")]
    #[test]
    fn split_streams_are_checked() {
        let own = open_cuda(0).unwrap();
        let per_thread = Device::new_cuda(0).unwrap();
        assert!(check_split_streams(&[own.clone(), per_thread.clone()]).is_ok());
        assert!(check_split_streams(&[per_thread.clone(), Device::new_cuda(0).unwrap()]).is_ok());
        if cuda_device_count() >= 2 {
            let e = check_split_streams(&[per_thread, Device::new_cuda(1).unwrap()]).unwrap_err();
            assert!(e.to_string().contains("per-thread default stream"), "{e}");
            assert!(check_split_streams(&[own, open_cuda(1).unwrap()]).is_ok());
        } else {
            eprintln!("one GPU: the refusal across two GPUs is not exercised here");
        }
    }

    #[test]
    fn cpu_defaults_to_f32() {
        let dev = select_device(true).unwrap();
        assert!(dev.is_cpu());
        assert_eq!(select_dtype(None, &dev), DType::F32);
        assert_eq!(select_dtype(Some(ComputeDtype::Bf16), &dev), DType::BF16);
    }
}
