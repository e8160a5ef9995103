//! Offloading: which parts of a model keep their compressed units in host memory, from a count
//! of layers or a device-memory budget ([`Offload`] → [`OffloadPlan`]).
//!
//! Under a budget every piece the device holds is counted: the weights that stay, the two
//! offloaded units staged at a time (the next one copied while the current one runs), the KV
//! cache at the maximum context, a prompt chunk's activations and the largest weight a prompt
//! decodes into a BF16 buffer ([`Reserve`]). The embedding goes to the host first (a step needs
//! only its tokens' rows, decoded there), then layers from the last, then the output projection.

use std::ops::Range;

use super::ModelSizes;

/// Which layers' compressed units stay in host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Offload {
    /// None: every weight on its device.
    #[default]
    None,
    /// The last `n` layers (and the embedding, served from host memory, when `n > 0`).
    Layers(usize),
    /// As little as keeps everything the device holds within this many bytes: the weights that
    /// stay, two offloaded units staged, and the [`Reserve`].
    MaxDeviceBytes(u64),
}

/// What a running model holds on its device besides the weights, for a budget: an estimate
/// from its shapes ([`crate::DecoderModel::reserve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reserve {
    /// The KV caches of the sequences planned for, at the maximum context.
    pub kv_cache: u64,
    /// A prompt chunk's activations and the logits.
    pub activations: u64,
    /// The largest weight a prompt's products decode into a BF16 buffer.
    pub decoded_weight: u64,
}

impl Reserve {
    /// Every byte of it.
    pub fn total(&self) -> u64 {
        self.kv_cache + self.activations + self.decoded_weight
    }
}

/// Where an offloading model's pieces go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffloadPlan {
    /// The offloaded layers: a range at the end (possibly empty).
    pub layers: Range<usize>,
    /// The embedding table served from host memory: each step decodes the rows of its tokens
    /// there and copies them to the device.
    pub host_embedding: bool,
    /// The output projection offloaded: staged while the last layer runs, released after the
    /// logits.
    pub head: bool,
    /// Build the output projection's device form on the host: building it on the GPU (which
    /// decodes the unit whole first) would take more transient memory than the budget.
    pub head_built_on_host: bool,
    /// Likewise for the layers.
    pub layers_built_on_host: bool,
    /// Under a budget, what each piece takes on the device, in bytes (for the report).
    pub accounting: Vec<(String, u64)>,
}

/// Device memory the GPU build of a unit whose device form takes `bytes` may need at once (its
/// stream and `sign_mantissa` uploaded, the unit decoded whole into BF16, and the packed form:
/// up to ~5.4 bytes an element against the form's ~1.44).
fn gpu_build_bytes(bytes: u64) -> u64 {
    4 * bytes
}

impl OffloadPlan {
    /// Nothing offloaded in a model of `layers` layers.
    pub fn none(layers: usize) -> Self {
        Self {
            layers: layers..layers,
            ..Self::default()
        }
    }

    /// Whether anything is kept in host memory.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty() && !self.host_embedding && !self.head
    }

    /// `output projection 854.7 MiB, 2 resident layers 530.0 MiB, ...`: the budget's
    /// accounting in one line (empty without a budget).
    pub fn describe_accounting(&self) -> String {
        self.accounting
            .iter()
            .map(|(what, bytes)| format!("{what} {}", human(*bytes)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Offload {
    /// The plan for a model of `sizes` (bytes on the device of each piece) that needs
    /// `reserve` besides its weights. A budget too small even with everything offloaded is an
    /// error naming every size.
    pub fn plan(
        &self,
        sizes: &ModelSizes,
        reserve: &Reserve,
    ) -> std::result::Result<OffloadPlan, String> {
        let n = sizes.layers.len();
        match *self {
            Offload::None => Ok(OffloadPlan::none(n)),
            Offload::Layers(k) if k <= n => Ok(OffloadPlan {
                layers: n - k..n,
                host_embedding: k > 0,
                ..OffloadPlan::default()
            }),
            Offload::Layers(k) => Err(format!(
                "--cpu-offload-layers {k}: the model has {n} layers"
            )),
            Offload::MaxDeviceBytes(budget) => plan_budget(budget, sizes, reserve),
        }
    }
}

/// The first plan that fits `budget`: nothing offloaded; else the embedding on the host and
/// the fewest last layers offloaded; else the output projection offloaded too.
fn plan_budget(
    budget: u64,
    sizes: &ModelSizes,
    reserve: &Reserve,
) -> std::result::Result<OffloadPlan, String> {
    let n = sizes.layers.len();
    let reserve_lines = || {
        vec![
            ("KV cache".to_string(), reserve.kv_cache),
            ("activations".to_string(), reserve.activations),
            ("decoded weight".to_string(), reserve.decoded_weight),
        ]
    };
    if sizes.total() + reserve.total() <= budget {
        let mut accounting = vec![("weights".to_string(), sizes.total())];
        accounting.extend(reserve_lines());
        return Ok(OffloadPlan {
            accounting,
            ..OffloadPlan::none(n)
        });
    }
    // At load the output projection comes first, then the offloaded layers (each built and moved
    // to the host), then the resident ones: the last of those is built next to the others.
    let head_built_on_host = gpu_build_bytes(sizes.head) > budget;
    let largest = sizes.layers.iter().copied().max().unwrap_or(0);
    for head_offloaded in [false, true] {
        for k in 0..=n {
            let resident: u64 = sizes.layers[..n - k].iter().sum();
            let mut streamed: Vec<u64> = sizes.layers[n - k..].to_vec();
            if head_offloaded {
                streamed.push(sizes.head);
            }
            let staged = two_largest(&streamed);
            let head = if head_offloaded { 0 } else { sizes.head };
            let total = head + resident + staged + reserve.total();
            let before_last =
                resident.saturating_sub(if k < n { sizes.layers[n - k - 1] } else { 0 });
            let layers_built_on_host = head + before_last + gpu_build_bytes(largest) > budget;
            if total <= budget {
                let mut accounting = vec![
                    (
                        format!(
                            "output projection{}",
                            if head_offloaded { " (offloaded)" } else { "" }
                        ),
                        head,
                    ),
                    (format!("{} resident layers", n - k), resident),
                    ("2 staged units".to_string(), staged),
                ];
                accounting.extend(reserve_lines());
                accounting.push((format!("of {} budget", human(budget)), total));
                return Ok(OffloadPlan {
                    layers: n - k..n,
                    host_embedding: true,
                    head: head_offloaded,
                    head_built_on_host,
                    layers_built_on_host,
                    accounting,
                });
            }
        }
    }
    let mut all: Vec<u64> = sizes.layers.clone();
    all.push(sizes.head);
    let staged = two_largest(&all);
    Err(format!(
        "--max-gpu-memory {}: even with every weight offloaded the device needs {} (two units \
         staged {}, KV cache {}, activations {}, decoded weight {}); lower --max-context or \
         raise the budget",
        human(budget),
        human(staged + reserve.total()),
        human(staged),
        human(reserve.kv_cache),
        human(reserve.activations),
        human(reserve.decoded_weight),
    ))
}

/// The sum of the two largest of `sizes`.
fn two_largest(sizes: &[u64]) -> u64 {
    let mut s = sizes.to_vec();
    s.sort_unstable_by(|a, b| b.cmp(a));
    s.iter().take(2).sum()
}

fn human(bytes: u64) -> String {
    crate::report::human_bytes(bytes)
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

    fn layers(
        o: Offload,
        s: &ModelSizes,
        r: &Reserve,
    ) -> std::result::Result<Range<usize>, String> {
        o.plan(s, r).map(|p| p.layers)
    }

    #[test]
    fn offloaded_layers_are_the_last_ones_the_budget_needs() {
        let s = sizes(10, 100, 50, 50);
        let none = Reserve::default();
        assert_eq!(layers(Offload::None, &s, &none), Ok(10..10));
        assert_eq!(layers(Offload::Layers(3), &s, &none), Ok(7..10));
        assert_eq!(layers(Offload::Layers(10), &s, &none), Ok(0..10));
        assert!(layers(Offload::Layers(11), &s, &none)
            .unwrap_err()
            .contains("10 layers"));
        // A count puts the embedding on the host with the first offloaded layer.
        assert!(!Offload::Layers(0).plan(&s, &none).unwrap().host_embedding);
        assert!(Offload::Layers(1).plan(&s, &none).unwrap().host_embedding);
        // Everything fits: nothing offloaded, the embedding stays.
        let p = Offload::MaxDeviceBytes(1100).plan(&s, &none).unwrap();
        assert!(p.is_empty(), "{p:?}");
        // The embedding goes to the host first: 50 + 10 * 100 = 1050.
        let p = Offload::MaxDeviceBytes(1050).plan(&s, &none).unwrap();
        assert_eq!(
            (p.layers.clone(), p.host_embedding, p.head),
            (10..10, true, false)
        );
        // One layer offloaded costs its staging too: 50 + 9 * 100 + 100 = 1050, as two.
        assert_eq!(layers(Offload::MaxDeviceBytes(1049), &s, &none), Ok(7..10));
        // 50 + 7 * 100 + 2 * 100 = 950: three offloaded.
        assert_eq!(layers(Offload::MaxDeviceBytes(950), &s, &none), Ok(7..10));
        // 50 + 2 * 100 = 250: every layer offloaded, the head stays.
        let p = Offload::MaxDeviceBytes(250).plan(&s, &none).unwrap();
        assert_eq!((p.layers.clone(), p.head), (0..10, false));
        // Below, the head is streamed too (two units of 100 staged).
        let p = Offload::MaxDeviceBytes(249).plan(&s, &none).unwrap();
        assert_eq!((p.layers.clone(), p.head), (0..10, true));
        assert!(p
            .describe_accounting()
            .contains("output projection (offloaded)"));
        let e = Offload::MaxDeviceBytes(199).plan(&s, &none).unwrap_err();
        assert!(e.contains("every weight offloaded"), "{e}");
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
    fn the_reserve_counts_against_the_budget() {
        let s = sizes(10, 100, 50, 50);
        let r = Reserve {
            kv_cache: 30,
            activations: 20,
            decoded_weight: 50,
        };
        assert_eq!(r.total(), 100);
        // 50 + 7 * 100 + 200 + 100 = 1050.
        assert_eq!(layers(Offload::MaxDeviceBytes(1050), &s, &r), Ok(7..10));
        assert_eq!(layers(Offload::MaxDeviceBytes(1049), &s, &r), Ok(6..10));
        let p = Offload::MaxDeviceBytes(1050).plan(&s, &r).unwrap();
        let text = p.describe_accounting();
        for part in [
            "output projection",
            "7 resident layers",
            "2 staged units",
            "KV cache",
        ] {
            assert!(text.contains(part), "{text}");
        }
        let e = Offload::MaxDeviceBytes(299).plan(&s, &r).unwrap_err();
        assert!(e.contains("KV cache") && e.contains("--max-context"), "{e}");
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
