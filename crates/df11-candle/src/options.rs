//! [`Df11Options`]: how weights are laid out and multiplied on a GPU. One value is given at load
//! ([`crate::ModelWeights::open_with`], [`crate::Df11Group::load`]) and every weight made from it
//! carries it, so two models in one process may run with different settings. The defaults are
//! the measured best (docs/PERFORMANCE.md); every other value gives the same bits, except where
//! a field says otherwise.
//!
//! The library never reads the environment. A program that wants the `DF11_*` variables reads
//! its environment once in `main` and passes a lookup over it to [`Df11Options::from_vars`].

/// `FromStr` for an option enum by its names (later names of a value are aliases), refusing
/// others with [`pick`]'s error.
macro_rules! from_names {
    ($t:ty, $what:literal, [$(($name:literal, $v:ident)),+ $(,)?]) => {
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                pick($what, s, &[$(($name, Self::$v)),+])
            }
        }
    };
}

/// How linear layers multiply on CUDA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulPath {
    /// Fused kernel up to [`FUSED_MAX_ROWS`](crate::cuda::matmul::FUSED_MAX_ROWS) rows, decode + cuBLAS above.
    Auto,
    /// Fused kernel (twin for dense weights) at every batch size it supports (up to
    /// [`FUSED_LIMIT_ROWS`](crate::cuda::matmul::FUSED_LIMIT_ROWS) rows per launch; larger batches are split into launches).
    Fused,
    /// Always decode into a BF16 buffer (dense weights: as they are) and call cuBLAS.
    Decode,
}

from_names!(
    MatmulPath,
    "matmul path",
    [
        ("auto", Auto),
        ("fused", Fused),
        ("decode", Decode),
        ("cublas", Decode)
    ]
);

/// How a unit's exponents are kept on a CUDA device (the CPU path always keeps the DF11 stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExponentForm {
    /// Packed where it [fits](crate::PackedExponents::fits) and the members allow it, else Huffman.
    Auto,
    /// Packed wherever the members allow it, whatever its size.
    Packed,
    /// The DF11 Huffman stream with its segment index.
    Huffman,
}

from_names!(
    ExponentForm,
    "exponent form",
    [("auto", Auto), ("packed", Packed), ("huffman", Huffman)]
);

/// Which members units store in the tile order, of those whose shapes they are given
/// ([`crate::Df11Options::tiles`]; `on`, the default, `all` or `off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileMembers {
    /// Members whose columns are whole 2048-column chunks (`on`): the shapes the streaming
    /// kernels (`kernels/df11_tc_stream.cu`) take, the fastest DF11 products from 1 to 16 rows
    /// (docs/PERFORMANCE.md); the products of those widths take the tensor-core kernels from 1
    /// row. Other members stay in row order, where 1-2 rows take the CUDA-core kernels.
    Chunked,
    /// Every shape the tensor-core kernels take (`all`; tests and measurements): members wider
    /// than whole chunks then take `df11_tc.cu` from 1 row, slower at 1-2 rows than the
    /// CUDA-core kernels on row order.
    All,
    /// None (`off`): every member in row order.
    Off,
}

from_names!(
    TileMembers,
    "tile setting",
    [("on", Chunked), ("all", All), ("off", Off)]
);

impl TileMembers {
    /// Whether this policy tiles members `cols` wide (their other conditions aside:
    /// [`crate::TileOrder::for_member`]).
    pub fn tiles(self, cols: usize) -> bool {
        match self {
            Self::Chunked => cols > 0 && cols.is_multiple_of(2048),
            Self::All => true,
            Self::Off => false,
        }
    }

    /// [`Self::tiles`] for widths of whole 2048-column chunks only: the products the streaming
    /// kernels take (stacked projections, their item split). A product over such a width plans
    /// for tiled members (the tensor-core kernels from 1 row), DF11 and BF16 alike.
    pub fn tiles_whole_chunks(self, cols: usize) -> bool {
        cols > 0 && cols.is_multiple_of(2048) && self.tiles(cols)
    }
}

/// When the warpgroup (wgmma) tensor-core kernels take a product (`kernels/df11_tc_wg.cu`,
/// `sm_90a` builds on compute capability 9.0 GPUs; measured slower than decode + cuBLAS above
/// 16 rows, hence off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WgUse {
    /// Never.
    Off,
    /// From 9 rows, where they apply.
    On,
    /// At every batch size they apply to (measurements).
    All,
}

/// When the warp-specialized kernels take a product (`kernels/df11_ws_gemm.cu`, `sm_90a` builds
/// on compute capability 9.0 GPUs, widths of whole 2048-column chunks). They sum in their own
/// order, so a DF11 model and its BF16 original take them alike; measured against the default
/// path on an H200 (docs/PERFORMANCE.md), DF11 gains from 17 rows (they beat decode + cuBLAS)
/// and BF16 loses there (their twin is below cuBLAS), hence off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsUse {
    /// Never.
    Off,
    /// From 17 to 64 rows.
    On,
    /// From 9 to 64 rows (measurements: at 9-16 rows the streaming kernels are faster for DF11).
    All,
}

/// Extra synchronisation points for looking for a race: results must not change; if they do, a
/// race is in the part they order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DebugSync {
    /// Wait for each unit's device form after its upload or GPU build (before its host arrays
    /// are dropped).
    pub load: bool,
    /// Wait for each layer's work after it is queued (outside graph captures).
    pub layer: bool,
}

/// How weights are laid out and multiplied on a CUDA device (the CPU ignores all but
/// [`Df11Options::profile_load`]). See the module documentation.
///
/// A DF11 model and its BF16 original are bit-identical when both are loaded with the same
/// options: the product plan depends on the options and the shapes, never on the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Df11Options {
    /// Which path products take (`DF11_MATMUL`): [`MatmulPath::Auto`] picks by rows and shape.
    pub matmul: MatmulPath,
    /// Whether fused products may use the tensor-core kernels (`DF11_FUSED_KERNEL=cuda-core`
    /// turns them off).
    pub tensor_cores: bool,
    /// The device form of a unit's exponents (`DF11_EXPONENTS`).
    pub exponents: ExponentForm,
    /// Which members are stored in the tensor-core tile order (`DF11_TILE`). Part of the
    /// summation contract: it changes which kernel takes a product, for DF11 and BF16 alike.
    pub tiles: TileMembers,
    /// q/k/v and gate/up loaded as one stacked layer where the streaming kernels multiply them
    /// in one launch (`DF11_STACK`).
    pub stack_projections: bool,
    /// The streaming tensor-core kernels (`kernels/df11_tc_stream.cu`, `DF11_TC_STREAM`).
    pub streaming: bool,
    /// The panel tensor-core kernels (`kernels/df11_tc_panel.cu`, `DF11_TC_PANEL`): measured
    /// slower than the streaming kernels at every batch size, hence off. Needs the
    /// `experimental-kernels` feature ([`Df11Options::check`]).
    pub panel: bool,
    /// When the warpgroup kernels take a product (`DF11_TC_WG`). Needs the
    /// `experimental-kernels` feature.
    pub warpgroup: WgUse,
    /// When the warp-specialized kernels take a product (`DF11_TC_WS`). Needs the
    /// `experimental-kernels` feature.
    pub warp_specialized: WsUse,
    /// Programmatic dependent launches on sm_90+ (`DF11_PDL`), for the kernels that wait for
    /// their predecessor with `griddepcontrol`.
    pub pdl: bool,
    /// Build the packed exponents on the GPU from the file's stream (`DF11_GPU_PACK`); off,
    /// on the CPU.
    pub gpu_pack: bool,
    /// Large load copies through pinned staging buffers (`DF11_STAGED_COPY`); off, through the
    /// driver's pageable copy.
    pub staged_copy: bool,
    /// Embedding lookups decode their rows in one launch (`DF11_EMBED_ROWS`); off, row by row
    /// or by table chunks.
    pub embedding_rows: bool,
    /// Member decodes of the Huffman form use the segment kernel (`DF11_DECODE_KERNEL`); off,
    /// the block kernel.
    pub segment_decode: bool,
    /// Extra waits to locate a race (`DF11_DEBUG_SYNC`: `load`, `layer`, `all`).
    pub debug_sync: DebugSync,
    /// Record the wall time of each load phase ([`crate::load_profile`], `DF11_LOAD_PROFILE`).
    pub profile_load: bool,
}

impl Default for Df11Options {
    fn default() -> Self {
        Self {
            matmul: MatmulPath::Auto,
            tensor_cores: true,
            exponents: ExponentForm::Auto,
            tiles: TileMembers::Chunked,
            stack_projections: true,
            streaming: true,
            panel: false,
            warpgroup: WgUse::Off,
            warp_specialized: WsUse::Off,
            pdl: true,
            gpu_pack: true,
            staged_copy: true,
            embedding_rows: true,
            segment_decode: true,
            debug_sync: DebugSync::default(),
            profile_load: false,
        }
    }
}

/// The variables [`Df11Options::from_vars`] reads, with their values (the default first).
pub const VARIABLES: &[(&str, &str)] = &[
    ("DF11_MATMUL", "auto, fused, decode (= cublas)"),
    ("DF11_FUSED_KERNEL", "auto (= tc), cuda-core"),
    ("DF11_EXPONENTS", "auto, packed, huffman"),
    ("DF11_TILE", "on, all, off"),
    ("DF11_STACK", "on, off"),
    ("DF11_TC_STREAM", "on, off"),
    ("DF11_TC_PANEL", "off, on"),
    ("DF11_TC_WG", "off, on, all"),
    ("DF11_TC_WS", "off, on, all"),
    ("DF11_PDL", "on, off"),
    ("DF11_GPU_PACK", "on, off"),
    ("DF11_STAGED_COPY", "on, off"),
    ("DF11_EMBED_ROWS", "on, off"),
    ("DF11_DECODE_KERNEL", "segments, blocks"),
    ("DF11_DEBUG_SYNC", "off, load, layer, all"),
    ("DF11_LOAD_PROFILE", "off, on"),
];

impl Df11Options {
    /// The defaults with the variables of [`VARIABLES`] that `get` has applied: `get(name)` is
    /// the value of variable `name`, or `None` where it is unset (a program passes a lookup over
    /// the environment it read in `main`). An unknown value is an error naming the variable and
    /// the values it takes. `on`/`off` switches also take `1`/`0` and `true`/`false`.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut o = Self::default();
        for &(name, _) in VARIABLES {
            if let Some(value) = get(name) {
                o.set(name, value.trim())?;
            }
        }
        o.check()?;
        Ok(o)
    }

    /// An error where the options ask for what this build lacks: the panel and warpgroup
    /// kernels without the `experimental-kernels` feature. Loads check it
    /// ([`crate::ModelWeights::open_with`], [`crate::Df11Group::new`]).
    pub fn check(&self) -> Result<(), String> {
        let experimental =
            self.panel || self.warpgroup != WgUse::Off || self.warp_specialized != WsUse::Off;
        if experimental && !cfg!(feature = "experimental-kernels") {
            return Err(
                "the panel, warpgroup and warp-specialized kernels (DF11_TC_PANEL, DF11_TC_WG, \
                        DF11_TC_WS) need df11-candle's `experimental-kernels` feature"
                    .into(),
            );
        }
        Ok(())
    }

    /// Sets the field variable `name` stands for from `value` (see [`VARIABLES`]).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let switch = |v: &str| parse_switch(name, v);
        match name {
            "DF11_MATMUL" => self.matmul = value.parse().map_err(|e| format!("{name}: {e}"))?,
            "DF11_FUSED_KERNEL" => {
                self.tensor_cores = pick(
                    name,
                    value,
                    &[("auto", true), ("tc", true), ("cuda-core", false)],
                )?
            }
            "DF11_EXPONENTS" => {
                self.exponents = value.parse().map_err(|e| format!("{name}: {e}"))?
            }
            "DF11_TILE" => self.tiles = value.parse().map_err(|e| format!("{name}: {e}"))?,
            "DF11_STACK" => self.stack_projections = switch(value)?,
            "DF11_TC_STREAM" => self.streaming = switch(value)?,
            "DF11_TC_PANEL" => self.panel = switch(value)?,
            "DF11_TC_WG" => {
                self.warpgroup = pick(
                    name,
                    value,
                    &[("off", WgUse::Off), ("on", WgUse::On), ("all", WgUse::All)],
                )?
            }
            "DF11_TC_WS" => {
                self.warp_specialized = pick(
                    name,
                    value,
                    &[("off", WsUse::Off), ("on", WsUse::On), ("all", WsUse::All)],
                )?
            }
            "DF11_PDL" => self.pdl = switch(value)?,
            "DF11_GPU_PACK" => self.gpu_pack = switch(value)?,
            "DF11_STAGED_COPY" => self.staged_copy = switch(value)?,
            "DF11_EMBED_ROWS" => self.embedding_rows = switch(value)?,
            "DF11_DECODE_KERNEL" => {
                self.segment_decode = pick(name, value, &[("segments", true), ("blocks", false)])?
            }
            "DF11_DEBUG_SYNC" => {
                let (load, layer) = pick(
                    name,
                    value,
                    &[
                        ("off", (false, false)),
                        ("load", (true, false)),
                        ("layer", (false, true)),
                        ("all", (true, true)),
                    ],
                )?;
                self.debug_sync = DebugSync { load, layer };
            }
            "DF11_LOAD_PROFILE" => self.profile_load = switch(value)?,
            _ => return Err(format!("{name}: not a DF11 option")),
        }
        Ok(())
    }
}

/// `value` among `names`, or an error listing them: "unknown {what} `{value}` (expected a, b or
/// c)".
pub(crate) fn pick<T: Copy>(what: &str, value: &str, names: &[(&str, T)]) -> Result<T, String> {
    if let Some(&(_, v)) = names.iter().find(|(n, _)| *n == value) {
        return Ok(v);
    }
    let listed: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
    let expected = match listed.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => listed.concat(),
    };
    Err(format!("unknown {what} `{value}` (expected {expected})"))
}

fn parse_switch(what: &str, value: &str) -> Result<bool, String> {
    pick(
        what,
        value,
        &[
            ("on", true),
            ("off", false),
            ("1", true),
            ("0", false),
            ("true", true),
            ("false", false),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn no_variables_are_the_defaults() {
        assert_eq!(Df11Options::from_vars(|_| None), Ok(Df11Options::default()));
    }

    #[test]
    fn every_variable_sets_its_field() {
        let mut o = Df11Options::default();
        for (name, value) in [
            ("DF11_MATMUL", "cublas"),
            ("DF11_FUSED_KERNEL", "cuda-core"),
            ("DF11_EXPONENTS", "huffman"),
            ("DF11_TILE", "all"),
            ("DF11_STACK", "off"),
            ("DF11_TC_STREAM", "0"),
            ("DF11_TC_PANEL", "on"),
            ("DF11_TC_WG", "all"),
            ("DF11_TC_WS", "on"),
            ("DF11_PDL", "false"),
            ("DF11_GPU_PACK", "0"),
            ("DF11_STAGED_COPY", "0"),
            ("DF11_EMBED_ROWS", "off"),
            ("DF11_DECODE_KERNEL", "blocks"),
            ("DF11_DEBUG_SYNC", "layer"),
            ("DF11_LOAD_PROFILE", "1"),
        ] {
            o.set(name, value).unwrap();
        }
        let expected = Df11Options {
            matmul: MatmulPath::Decode,
            tensor_cores: false,
            exponents: ExponentForm::Huffman,
            tiles: TileMembers::All,
            stack_projections: false,
            streaming: false,
            panel: true,
            warpgroup: WgUse::All,
            warp_specialized: WsUse::On,
            pdl: false,
            gpu_pack: false,
            staged_copy: false,
            embedding_rows: false,
            segment_decode: false,
            debug_sync: DebugSync {
                load: false,
                layer: true,
            },
            profile_load: true,
        };
        assert_eq!(o, expected);
    }

    #[test]
    fn the_experimental_kernels_need_their_feature() {
        let panel = Df11Options::from_vars(vars(&[("DF11_TC_PANEL", "on")]));
        let wg = Df11Options::from_vars(vars(&[("DF11_TC_WG", "all")]));
        let ws = Df11Options::from_vars(vars(&[("DF11_TC_WS", "all")]));
        if cfg!(feature = "experimental-kernels") {
            assert!(panel.unwrap().panel);
            assert_eq!(wg.unwrap().warpgroup, WgUse::All);
            assert_eq!(ws.unwrap().warp_specialized, WsUse::All);
        } else {
            assert!(panel.unwrap_err().contains("experimental-kernels"));
            assert!(wg.unwrap_err().contains("experimental-kernels"));
            assert!(ws.unwrap_err().contains("experimental-kernels"));
        }
    }

    #[test]
    fn a_bad_value_names_the_variable_and_the_values() {
        let e = Df11Options::from_vars(vars(&[("DF11_TILE", "sometimes")])).unwrap_err();
        assert!(
            e.contains("DF11_TILE") && e.contains("sometimes") && e.contains("off"),
            "{e}"
        );
        let e = Df11Options::from_vars(vars(&[("DF11_PDL", "yes")])).unwrap_err();
        assert!(e.contains("DF11_PDL") && e.contains("on, off"), "{e}");
    }
}
