//! The command-line flags every model binary shares (a clap `Args` struct to flatten).

use std::path::PathBuf;

use clap::Parser;

pub use crate::device::ComputeDtype;
use crate::source::ModelSource;

/// Which model to load and how: shared by generation (`CommonArgs`) and the server.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct ModelArgs {
    /// Hugging Face Hub repo (owner/name).
    #[arg(long)]
    pub model_id: Option<String>,

    /// Hub revision: branch, tag or commit [default: main].
    #[arg(long)]
    pub revision: Option<String>,

    /// A local model folder (config.json, tokenizer.json, *.safetensors) instead of the Hub.
    #[arg(long, conflicts_with_all = ["model_id", "revision"])]
    pub model_dir: Option<PathBuf>,

    /// Use only the local Hugging Face cache; never touch the network (also set by
    /// HF_HUB_OFFLINE=1).
    #[arg(long)]
    pub offline: bool,

    /// Load a plain BF16 model instead of a DF11 one (for comparison).
    #[arg(long)]
    pub bf16: bool,

    /// Run on the CPU even when CUDA is available.
    #[arg(long, conflicts_with = "devices")]
    pub cpu: bool,

    /// CUDA devices to split the model's layers over, in order, e.g. `0,1` (the embedding on
    /// the first, the output projection on the last) [default: 0].
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    pub devices: Vec<usize>,

    /// How --devices share the layers: `auto` (balanced by each device's free memory) or a
    /// layer count per device, e.g. `20,16`.
    #[arg(long, default_value = "auto", requires = "devices")]
    pub device_map: crate::placement::LayerSplit,

    /// Keep the compressed units of the last N layers in host memory (pinned), copied to the
    /// GPU one layer ahead of use, and the embedding on the host (DF11 models).
    #[arg(long, value_name = "N", conflicts_with = "max_gpu_memory")]
    pub cpu_offload_layers: Option<usize>,

    /// Keep everything on the GPU (weights, staged layers, KV cache at --max-context,
    /// activations) within SIZE, e.g. `2.5GB`, `6GiB`: the embedding, then layers, then the
    /// output projection move to host memory as needed (DF11 models).
    #[arg(long, value_name = "SIZE", value_parser = crate::placement::parse_size)]
    pub max_gpu_memory: Option<u64>,

    /// Compute dtype [default: bf16 on CUDA, f32 on the CPU].
    #[arg(long, value_enum)]
    pub dtype: Option<ComputeDtype>,

    /// How linear layers multiply on CUDA: `fused` (DF11 decode fused into a matrix-vector
    /// kernel; BF16 weights through its twin, same summation order), `decode` (decode into a BF16
    /// buffer, then cuBLAS), or `auto` (fused up to the measured crossover batch size).
    /// [default: $DF11_MATMUL, else auto]
    #[arg(long)]
    pub matmul: Option<df11_candle::MatmulPath>,

    /// How DF11 units keep their exponents on CUDA: `packed` (re-packed at load into fixed 3-bit
    /// codes with an escape list), `huffman` (the file's stream plus a segment index), or `auto`
    /// (packed where it costs at most 3.52 bits per weight). [default: $DF11_EXPONENTS, else auto]
    #[arg(long)]
    pub exponents: Option<df11_candle::ExponentForm>,

    /// Positions a sequence may reach (prompt and generated tokens): the KV cache is allocated
    /// for this many at load. [default: the model's maximum, at most 4096]
    #[arg(long)]
    pub max_context: Option<usize>,

    /// Run each decode step as separate launches instead of replaying a captured CUDA graph
    /// (same tokens and logits, bit for bit). [default: $DF11_CUDA_GRAPH=0 turns graphs off]
    #[arg(long)]
    pub no_cuda_graph: bool,
}

impl ModelArgs {
    /// How decode steps run: the `DF11_*` variables of [`crate::model::DECODE_VARIABLES`] in
    /// `env`, then the flags.
    pub fn decode_options(&self, env: &Vars) -> crate::Result<crate::model::DecodeOptions> {
        let mut options = crate::model::DecodeOptions::from_vars(|name| env.get(name))
            .map_err(crate::LlmError::Usage)?;
        options.max_context = self.max_context;
        if self.no_cuda_graph {
            options.cuda_graph = false;
        }
        Ok(options)
    }

    /// How weights are laid out and multiplied on the GPU ([`weight_options`]).
    pub fn weight_options(&self, env: &Vars) -> crate::Result<df11_candle::Df11Options> {
        weight_options(self.matmul, self.exponents, env)
    }

    /// The model source the flags name (and `HF_HUB_OFFLINE` in `env`). `default_repo` is used
    /// when neither --model-id nor --model-dir is given.
    pub fn source(&self, default_repo: &str, env: &Vars) -> ModelSource {
        match &self.model_dir {
            Some(dir) => ModelSource::Local(dir.clone()),
            None => ModelSource::Hub {
                repo: self
                    .model_id
                    .clone()
                    .unwrap_or_else(|| default_repo.to_string()),
                revision: self.revision.clone(),
                offline: self.offline || env.offline(),
                cache_dir: None,
            },
        }
    }

    /// Everything [`crate::load`] needs, from the flags and the `DF11_*` variables in `env`;
    /// picks the device.
    pub fn load_options(
        &self,
        default_repo: &str,
        show_progress: bool,
        env: &Vars,
    ) -> crate::Result<crate::LoadOptions> {
        let (device, split) = match self.devices.as_slice() {
            [] => (crate::device::select_device(self.cpu)?, None),
            ordinals => {
                let devices = crate::device::cuda_devices(ordinals)?;
                let map = crate::placement::DeviceMap {
                    devices: devices.clone(),
                    split: self.device_map.clone(),
                };
                (devices[0].clone(), (devices.len() > 1).then_some(map))
            }
        };
        let dtype = crate::device::select_dtype(self.dtype, &device);
        let offload = match (self.cpu_offload_layers, self.max_gpu_memory) {
            (Some(n), _) => crate::placement::Offload::Layers(n),
            (None, Some(bytes)) => crate::placement::Offload::MaxDeviceBytes(bytes),
            (None, None) => crate::placement::Offload::None,
        };
        Ok(crate::LoadOptions {
            source: self.source(default_repo, env),
            bf16: self.bf16,
            device,
            split,
            offload,
            dtype,
            show_progress,
            weights: self.weight_options(env)?,
            decode: self.decode_options(env)?,
        })
    }
}

/// Flags shared by the model binaries (and `df11 run`).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct CommonArgs {
    /// The prompt (a single user message, wrapped in the chat template unless
    /// --no-chat-template). Repeat it to run several prompts as one batch.
    #[arg(long)]
    pub prompt: Vec<String>,

    /// A file of prompts run as one batch: one per line, or JSON lines (a string, or an object
    /// with a `prompt` field).
    #[arg(long)]
    pub prompts_file: Option<PathBuf>,

    /// A chat in the terminal: the conversation is kept, answers stream, each turn reports its
    /// speed. An empty line or end of input quits.
    #[arg(long, short = 'i')]
    pub interactive: bool,

    /// Which model, and how to run it.
    #[command(flatten)]
    pub model: ModelArgs,

    /// Encode the prompt as is (`tokenizer.encode(prompt, add_special_tokens=true)`).
    #[arg(long)]
    pub no_chat_template: bool,

    /// Let the model think first (sets the chat template's `enable_thinking`).
    #[arg(long)]
    pub thinking: bool,

    /// Sampling temperature; 0 = greedy [default: generation_config.json's, else greedy].
    #[arg(long)]
    pub temperature: Option<f64>,

    /// Nucleus sampling threshold [default: generation_config.json's].
    #[arg(long)]
    pub top_p: Option<f64>,

    /// Sample among the k most likely tokens [default: generation_config.json's].
    #[arg(long)]
    pub top_k: Option<usize>,

    /// Random seed for sampling.
    #[arg(long, default_value_t = 299_792_458)]
    pub seed: u64,

    /// Repetition penalty (1.0 = none).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,

    /// How many last tokens the repetition penalty looks at.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,

    /// Most tokens to generate.
    #[arg(short = 'n', long, default_value_t = 1024)]
    pub max_new_tokens: usize,

    /// Keep generating past end-of-sequence tokens, up to --max-new-tokens (benchmarks, soaks).
    #[arg(long)]
    pub ignore_eos: bool,

    /// Print JSON on stdout instead of the streamed text: one object, or one line per prompt
    /// for a batch.
    #[arg(long)]
    pub json: bool,
}

impl CommonArgs {
    /// The prompts of `--prompt` and `--prompts-file`, in that order.
    pub fn prompts(&self) -> crate::Result<Vec<String>> {
        let mut prompts = self.prompt.clone();
        if let Some(path) = &self.prompts_file {
            let text = std::fs::read_to_string(path).map_err(|e| crate::LlmError::io(path, e))?;
            for (i, line) in text.lines().enumerate() {
                let line = line.trim_end_matches('\r');
                if line.trim().is_empty() {
                    continue;
                }
                let prompt = if line.trim_start().starts_with(['{', '"']) {
                    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| {
                        crate::LlmError::Usage(format!("{}:{}: {e}", path.display(), i + 1))
                    })?;
                    match v
                        .as_str()
                        .or_else(|| v.get("prompt").and_then(|p| p.as_str()))
                    {
                        Some(p) => p.to_string(),
                        None => {
                            return Err(crate::LlmError::Usage(format!(
                                "{}:{}: a JSON line must be a string or have a `prompt` string",
                                path.display(),
                                i + 1
                            )))
                        }
                    }
                } else {
                    line.to_string()
                };
                prompts.push(prompt);
            }
        }
        Ok(prompts)
    }
}

/// How weights are laid out and multiplied on the GPU: the `DF11_*` variables of
/// [`df11_candle::options::VARIABLES`] in `env`, then the `--matmul` and `--exponents` flags.
pub fn weight_options(
    matmul: Option<df11_candle::MatmulPath>,
    exponents: Option<df11_candle::ExponentForm>,
    env: &Vars,
) -> crate::Result<df11_candle::Df11Options> {
    let mut options = df11_candle::Df11Options::from_vars(|name| env.get(name))
        .map_err(crate::LlmError::Usage)?;
    if let Some(path) = matmul {
        options.matmul = path;
    }
    if let Some(form) = exponents {
        options.exponents = form;
    }
    Ok(options)
}

/// The environment variables a program hands to the library: the binary reads its process
/// environment once in `main` ([`Vars::from_os`] over its variables) and passes it down, so the
/// library itself never reads the environment and tests can give any variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vars(std::collections::BTreeMap<String, String>);

impl Vars {
    /// The variables of `vars` whose names and values are Unicode (others cannot name a
    /// setting and are left out).
    pub fn from_os(
        vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Self {
        Self(
            vars.into_iter()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        )
    }

    /// The variable `name`, where set.
    pub fn get(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }

    /// Whether `HF_HUB_OFFLINE` asks for offline mode (as huggingface_hub reads it).
    pub fn offline(&self) -> bool {
        self.get("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "on" | "yes" | "true"
            )
        })
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Vars {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

/// Parses the command line into `A` (a parser that flattens [`CommonArgs`]), showing
/// `default_repo` as the default of --model-id in the help.
pub fn parse_args<A: Parser>(default_repo: &'static str) -> A {
    let command = A::command().mut_arg("model_id", |a| {
        a.help(format!(
            "Hugging Face Hub repo (owner/name) [default: {default_repo}]"
        ))
    });
    let matches = command.get_matches();
    A::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    #[test]
    fn flags_and_defaults() {
        let cli = Cli::try_parse_from([
            "x",
            "--prompt",
            "hi",
            "--model-dir",
            "/m",
            "-n",
            "12",
            "--temperature",
            "0",
            "--dtype",
            "f32",
            "--cpu",
            "--json",
            "--no-chat-template",
        ])
        .unwrap();
        let c = cli.common;
        assert_eq!(c.max_new_tokens, 12);
        assert_eq!(c.model.dtype, Some(ComputeDtype::F32));
        assert_eq!(c.repeat_penalty, 1.0);
        assert!(c.model.cpu && c.json && c.no_chat_template && !c.thinking);
        assert_eq!(
            c.model.source("a/b", &Vars::default()),
            ModelSource::Local("/m".into())
        );
        assert_eq!(c.prompts().unwrap(), vec!["hi".to_string()]);

        let hub = Cli::try_parse_from(["x", "--prompt", "p", "--offline", "--revision", "v1"])
            .unwrap()
            .common;
        assert_eq!(
            hub.model.source("org/name", &Vars::default()),
            ModelSource::Hub {
                repo: "org/name".into(),
                revision: Some("v1".into()),
                offline: true,
                cache_dir: None
            }
        );
        assert!(Cli::try_parse_from([
            "x",
            "--prompt",
            "p",
            "--model-dir",
            "d",
            "--model-id",
            "a/b"
        ])
        .is_err());
    }

    #[test]
    fn prompts_from_flags_and_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prompts.txt");
        std::fs::write(
            &file,
            "plain line\n\n\"a JSON string\"\n{\"prompt\": \"an object\", \"id\": 3}\r\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let c = Cli::try_parse_from(["x", "--prompt", "a", "--prompt", "b", "--prompts-file", f])
            .unwrap()
            .common;
        assert_eq!(
            c.prompts().unwrap(),
            ["a", "b", "plain line", "a JSON string", "an object"]
        );
        std::fs::write(&file, "{\"text\": 1}\n").unwrap();
        let e = c.prompts().unwrap_err().to_string();
        assert!(e.contains("prompts.txt:1"), "{e}");
        let missing = dir.path().join("none.txt");
        let c = Cli::try_parse_from(["x", "--prompts-file", missing.to_str().unwrap()])
            .unwrap()
            .common;
        assert!(c.prompts().unwrap_err().to_string().contains("none.txt"));
    }

    #[test]
    fn settings_come_from_the_vars_the_binary_hands_over() {
        let c = Cli::try_parse_from(["x", "--prompt", "p", "--matmul", "decode"])
            .unwrap()
            .common;
        let none = Vars::default();
        assert!(!none.offline());
        let offline: Vars = [("HF_HUB_OFFLINE", "True")].into_iter().collect();
        assert!(offline.offline());
        let ModelSource::Hub {
            offline: hub_offline,
            ..
        } = c.model.source("o/n", &offline)
        else {
            panic!("no --model-dir: a Hub source");
        };
        assert!(hub_offline);

        // The variables set the options, the flags override them.
        let vars: Vars = [("DF11_MATMUL", "fused"), ("DF11_EXPONENTS", "huffman")]
            .into_iter()
            .collect();
        let w = c.model.weight_options(&vars).unwrap();
        assert_eq!(w.matmul, df11_candle::MatmulPath::Decode);
        assert_eq!(w.exponents, df11_candle::ExponentForm::Huffman);
        assert_ne!(w, c.model.weight_options(&none).unwrap());
        let bad: Vars = [("DF11_EXPONENTS", "zip")].into_iter().collect();
        let e = c.model.weight_options(&bad).unwrap_err().to_string();
        assert!(e.contains("DF11_EXPONENTS"), "{e}");
        let e = c
            .model
            .decode_options(&[("DF11_CUDA_GRAPH", "maybe")].into_iter().collect());
        assert!(e.unwrap_err().to_string().contains("DF11_CUDA_GRAPH"));
    }

    #[cfg(unix)]
    #[test]
    fn vars_leave_out_what_is_not_unicode() {
        use std::os::unix::ffi::OsStringExt;
        let vars = Vars::from_os([
            ("DF11_MATMUL".into(), "decode".into()),
            ("BAD".into(), std::ffi::OsString::from_vec(vec![0xff, 0xfe])),
        ]);
        assert_eq!(vars.get("DF11_MATMUL").as_deref(), Some("decode"));
        assert_eq!(vars.get("BAD"), None);
    }
}
