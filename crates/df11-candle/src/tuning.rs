//! Launch parameters of the tensor-core kernels overridden for measurements (the benches'
//! probes, `scripts/gpu-tc-variants.sh`): sub-steps per item, row groups per tile, slots of
//! partial sums, and the streaming or warpgroup kernels loaded from a PTX file built with other
//! `-D` settings. Only with the `tuning` feature, and only once `install` is called: a library
//! user's process never loads GPU code from a path. Every override but `tc_steps` leaves the
//! outputs' bits as they are.

use std::sync::OnceLock;

/// The overrides (`None`: the built-in choice).
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    /// Sub-steps per tensor-core item: 1, 2, 4 or 8 (`DF11_TC_STEPS`). Changes the summation
    /// order of the DF11 kernel and its twin alike.
    pub tc_steps: Option<usize>,
    /// Row groups per tensor-core CTA tile: 1 to 32 (`DF11_TC_TILE_GROUPS`).
    pub tc_tile_groups: Option<usize>,
    /// Most slots of partial sums a streaming launch keeps: 1, 2 or 4 (`DF11_TC_SLOTS`).
    pub tc_slots: Option<usize>,
    /// The streaming kernels' PTX text and the `TS_DEPTH` (2 to 8) it was built with
    /// (`DF11_TC_STREAM_PTX`, `DF11_TC_STREAM_DEPTH`).
    pub stream_ptx: Option<(String, usize)>,
    /// The warpgroup kernels' PTX text (`DF11_TC_WG_PTX`).
    pub wg_ptx: Option<String>,
}

/// The variables [`Tuning::from_vars`] reads.
pub const VARIABLES: &[(&str, &str)] = &[
    ("DF11_TC_STEPS", "1, 2, 4, 8"),
    ("DF11_TC_TILE_GROUPS", "1-32"),
    ("DF11_TC_SLOTS", "1, 2, 4"),
    ("DF11_TC_STREAM_PTX", "a PTX file"),
    ("DF11_TC_STREAM_DEPTH", "2-8 (with DF11_TC_STREAM_PTX)"),
    ("DF11_TC_WG_PTX", "a PTX file"),
];

impl Tuning {
    /// The overrides `get` names (`get(name)`: variable `name`'s value, `None` where unset),
    /// reading the PTX files they name. A value out of range or a file that cannot be read is an
    /// error naming the variable.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let number = |name: &str, ok: &dyn Fn(usize) -> bool| -> Result<Option<usize>, String> {
            match get(name) {
                None => Ok(None),
                Some(v) => match v.trim().parse::<usize>() {
                    Ok(n) if ok(n) => Ok(Some(n)),
                    _ => Err(format!("{name}: `{v}` is out of range")),
                },
            }
        };
        let ptx = |name: &str| -> Result<Option<String>, String> {
            get(name)
                .map(|path| {
                    std::fs::read_to_string(&path).map_err(|e| format!("{name} {path}: {e}"))
                })
                .transpose()
        };
        let stream_ptx = match ptx("DF11_TC_STREAM_PTX")? {
            Some(text) => {
                let depth = number("DF11_TC_STREAM_DEPTH", &|d| (2..=8).contains(&d))?;
                Some((text, depth.unwrap_or(2)))
            }
            None => None,
        };
        Ok(Self {
            tc_steps: number("DF11_TC_STEPS", &|s| [1, 2, 4, 8].contains(&s))?,
            tc_tile_groups: number("DF11_TC_TILE_GROUPS", &|g| (1..=32).contains(&g))?,
            tc_slots: number("DF11_TC_SLOTS", &|s| [1, 2, 4].contains(&s))?,
            stream_ptx,
            wg_ptx: ptx("DF11_TC_WG_PTX")?,
        })
    }
}

static TUNING: OnceLock<Tuning> = OnceLock::new();

/// Puts `tuning` in force for the rest of the process (once: a second call returns its value
/// back). Call it before the first product.
#[cfg(feature = "tuning")]
pub fn install(tuning: Tuning) -> Result<(), Tuning> {
    TUNING.set(tuning)
}

/// The overrides in force (`None` without [`install`]).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn get() -> Option<&'static Tuning> {
    TUNING.get()
}
