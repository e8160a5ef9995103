//! Offloaded layers: which of a model's layers keep their compressed units in host memory,
//! from a count or a device-memory budget.

use std::ops::Range;

use super::ModelSizes;

/// Which layers' compressed units stay in host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Offload {
    /// None: every weight on its device.
    #[default]
    None,
    /// The last `n` layers.
    Layers(usize),
    /// As few last layers as keep the weights on the device within this many bytes (two
    /// offloaded layers, staged, counted in).
    MaxDeviceBytes(u64),
}

impl Offload {
    /// The offloaded layers of a model of `sizes`: a range at the end. A budget too small
    /// even with every layer offloaded is an error naming both sizes.
    pub fn layers(&self, sizes: &ModelSizes) -> std::result::Result<Range<usize>, String> {
        let n = sizes.layers.len();
        match *self {
            Offload::None => Ok(n..n),
            Offload::Layers(k) if k <= n => Ok(n - k..n),
            Offload::Layers(k) => Err(format!(
                "--cpu-offload-layers {k}: the model has {n} layers"
            )),
            Offload::MaxDeviceBytes(budget) => {
                for k in 0..=n {
                    let resident: u64 = sizes.layers[..n - k].iter().sum();
                    let staged: u64 = {
                        let mut off: Vec<u64> = sizes.layers[n - k..].to_vec();
                        off.sort_unstable_by(|a, b| b.cmp(a));
                        off.iter().take(2).sum()
                    };
                    if sizes.embedding + sizes.head + resident + staged <= budget {
                        return Ok(n - k..n);
                    }
                }
                let largest = sizes.layers.iter().copied().max().unwrap_or(0);
                Err(format!(
                    "--max-gpu-memory {:.2} GiB: even with every layer offloaded the device needs \
                     {:.2} GiB (embedding and output projection, and two layers staged)",
                    gib(budget),
                    gib(sizes.embedding + sizes.head + 2 * largest),
                ))
            }
        }
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// `6GB`, `6GiB`, `512MiB`, `6000000000`: bytes (decimal units are powers of 1000, binary
/// ones of 1024).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("`{s}`: expected a size such as 6GB, 6GiB or 512MiB"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    Ok((number * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::sizes;
    use super::super::Placement;
    use super::*;
    use candle_core::Device;

    #[test]
    fn offloaded_layers_are_the_last_ones_the_budget_needs() {
        let s = sizes(10, 100, 50, 50);
        assert_eq!(Offload::None.layers(&s), Ok(10..10));
        assert_eq!(Offload::Layers(3).layers(&s), Ok(7..10));
        assert_eq!(Offload::Layers(10).layers(&s), Ok(0..10));
        assert!(Offload::Layers(11)
            .layers(&s)
            .unwrap_err()
            .contains("10 layers"));
        // Everything fits: nothing offloaded.
        assert_eq!(Offload::MaxDeviceBytes(1100).layers(&s), Ok(10..10));
        // 100 + 7 * 100 + 2 * 100 = 1000: three offloaded.
        assert_eq!(Offload::MaxDeviceBytes(1000).layers(&s), Ok(7..10));
        // 100 + 2 * 100 = 300: everything offloaded.
        assert_eq!(Offload::MaxDeviceBytes(300).layers(&s), Ok(0..10));
        let e = Offload::MaxDeviceBytes(299).layers(&s).unwrap_err();
        assert!(e.contains("every layer offloaded"), "{e}");
        let p = Placement::single(&Device::Cpu, 10)
            .with_offloaded(7..10)
            .unwrap();
        assert!(p.is_offloaded(7) && !p.is_offloaded(6));
        assert_eq!(p.describe(), "cpu layers 0..10, layers 7..10 offloaded");
        assert!(Placement::single(&Device::Cpu, 10)
            .with_offloaded(3..9)
            .is_err());
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("6GB"), Ok(6_000_000_000));
        assert_eq!(parse_size("6 GiB"), Ok(6 << 30));
        assert_eq!(parse_size("1.5gib"), Ok(3 << 29));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1234"), Ok(1234));
        assert!(parse_size("six").is_err());
        assert!(parse_size("6 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
    }
}
