//! What a run reports on stderr: the image, the time of each phase, seconds per denoising step,
//! the total, and the peak GPU memory (df11-llm's [`df11_llm::PeakMemory`]; none on the CPU).

use std::fmt::Write;

/// The figures of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// Image width in pixels.
    pub width: usize,
    /// Image height in pixels.
    pub height: usize,
    /// Denoising steps.
    pub steps: usize,
    /// Seconds to load the text encoders and encode the prompt.
    pub encode_s: f64,
    /// Seconds to load the transformer.
    pub load_s: f64,
    /// Seconds of the denoising loop.
    pub denoise_s: f64,
    /// Seconds to load the VAE and decode the image.
    pub decode_s: f64,
    /// Seconds from the start of the run to the image (resolution of the sources included).
    pub total_s: f64,
    /// The peak GPU memory in bytes; `None` on the CPU.
    pub peak_gpu_bytes: Option<u64>,
}

impl RunReport {
    /// Seconds per denoising step.
    pub fn seconds_per_step(&self) -> f64 {
        self.denoise_s / self.steps.max(1) as f64
    }

    /// The report's lines.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "image:     {}x{}, {} steps",
            self.width, self.height, self.steps
        );
        let _ = writeln!(
            s,
            "time:      text {:.2} s, transformer loaded in {:.2} s, denoising {:.2} s, \
             VAE {:.2} s",
            self.encode_s, self.load_s, self.denoise_s, self.decode_s
        );
        let _ = writeln!(s, "speed:     {:.3} s/step", self.seconds_per_step());
        let _ = writeln!(s, "total:     {:.2} s", self.total_s);
        let memory = self
            .peak_gpu_bytes
            .map_or_else(|| "n/a (CPU)".to_string(), df11_llm::report::human_bytes);
        let _ = write!(s, "peak GPU memory: {memory}");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(peak: Option<u64>) -> RunReport {
        RunReport {
            width: 1024,
            height: 768,
            steps: 4,
            encode_s: 1.5,
            load_s: 2.25,
            denoise_s: 3.0,
            decode_s: 0.5,
            total_s: 7.25,
            peak_gpu_bytes: peak,
        }
    }

    #[test]
    fn lists_every_figure() {
        let r = run(Some(23 * (1 << 30) + (1 << 29))).render();
        for want in [
            "1024x768, 4 steps",
            "text 1.50 s",
            "loaded in 2.25 s",
            "denoising 3.00 s",
            "VAE 0.50 s",
            "0.750 s/step",
            "total:     7.25 s",
            "peak GPU memory: 23.50 GiB",
        ] {
            assert!(r.contains(want), "{want:?} not in\n{r}");
        }
        assert!(run(None).render().ends_with("peak GPU memory: n/a (CPU)"));
        assert!(run(Some(300 << 20)).render().ends_with("300.0 MiB"));
    }
}
