//! `df11 serve`, and the architectures `df11 run|chat|serve` choose from.

use anyhow::Result;
use df11_llm::{load_any, ArchInfo, ModelArgs};
use df11_server::ServerConfig;

/// Every architecture we ship; the model's `config.json` picks one (the first one's default
/// repo is used when no model is given).
pub fn architectures() -> Vec<ArchInfo> {
    vec![
        ArchInfo::of::<qwen3_df11::Qwen3Arch>(),
        ArchInfo::of::<gemma3_df11::Gemma3Arch>(),
        ArchInfo::of::<phi4_df11::Phi4Arch>(),
        ArchInfo::of::<mistral_nemo_df11::MistralArch>(),
        ArchInfo::of::<qwen2_df11::Qwen2Arch>(),
        ArchInfo::of::<llama_df11::LlamaArch>(),
    ]
}

/// The flags of `df11 serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Which model, and how to run it.
    #[command(flatten)]
    model: ModelArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free one; the one taken is printed).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Sequences decoded together (their KV caches are allocated at load).
    #[arg(long, default_value_t = 8)]
    max_batch: usize,
    /// Requests waiting for a slot; more get 429.
    #[arg(long, default_value_t = 64)]
    max_queue: usize,
    /// The model name clients use [default: the --model-id, or the folder's name].
    #[arg(long)]
    served_model_name: Option<String>,
    /// Require `Authorization: Bearer <KEY>` on /v1/* (also $DF11_API_KEY).
    #[arg(long)]
    api_key: Option<String>,
    /// Largest request body in bytes (413 above).
    #[arg(long, default_value_t = 1 << 20)]
    max_body_bytes: usize,
}

/// Runs the server until the process ends (`env`: the process environment, for the model's
/// settings and `DF11_API_KEY`).
pub fn serve(args: ServeArgs, env: &df11_llm::args::Vars) -> Result<()> {
    anyhow::ensure!(args.max_batch > 0, "--max-batch must be at least 1");
    let archs = architectures();
    let mut opts = args.model.load_options(archs[0].default_repo, true, env)?;
    // A device budget plans for a full batch.
    opts.decode.sequences = args.max_batch;
    let name = args.served_model_name.clone().unwrap_or_else(|| {
        match (&args.model.model_dir, &args.model.model_id) {
            (Some(dir), _) => dir
                .file_name()
                .map_or("model".into(), |n| n.to_string_lossy().into_owned()),
            (None, Some(id)) => id.clone(),
            (None, None) => archs[0].default_repo.to_string(),
        }
    });
    let config = ServerConfig {
        host: args.host,
        port: args.port,
        api_key: args
            .api_key
            .or_else(|| env.get("DF11_API_KEY").filter(|k| !k.is_empty())),
        served_model_name: name,
        max_batch: args.max_batch,
        max_queue: args.max_queue,
        max_body_bytes: args.max_body_bytes,
    };
    df11_server::serve(
        config,
        Box::new(move || load_any(&archs, &opts).map(|(_, loaded)| loaded)),
    )?;
    Ok(())
}
