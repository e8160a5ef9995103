//! `df11`: compress BF16 models into DFloat11, inspect DF11 folders, verify them bit for bit;
//! run, chat with and serve any architecture we ship (chosen by the model's `config.json`).

mod serve;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use df11_candle::{compress_model, verify_model, CompressOptions, Df11Model, PatternDict};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(
    name = "df11",
    version,
    about = "DFloat11: lossless BF16 model compression"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compress a BF16 model folder into the DF11 layout of the official releases.
    Compress {
        /// Folder with config.json and BF16 *.safetensors.
        src: PathBuf,
        /// Output folder (created; must not hold safetensors files).
        dst: PathBuf,
        /// A JSON file holding a `pattern_dict` object, instead of the built-in one.
        #[arg(long)]
        pattern_dict: Option<PathBuf>,
        /// Units encoded at once (memory grows with it).
        #[arg(long, default_value_t = 2)]
        units_in_flight: usize,
    },
    /// Show a DF11 folder's units, sizes and code statistics.
    Inspect {
        /// DF11 model folder.
        dir: PathBuf,
        /// Also decode every unit to count how many weights have each code length.
        #[arg(long)]
        decode: bool,
    },
    /// Decode every unit and compare it byte for byte with the BF16 original.
    Verify {
        /// DF11 model folder.
        df11: PathBuf,
        /// The BF16 original.
        bf16: PathBuf,
    },
    /// Generate from a model of any architecture we ship: one prompt, a batch (--prompt
    /// repeated, --prompts-file) or a chat (--interactive).
    Run(Box<df11_llm::CommonArgs>),
    /// Chat with a model in the terminal (`run --interactive`).
    Chat(Box<df11_llm::CommonArgs>),
    /// Serve a model over an OpenAI-compatible HTTP API, with continuous batching.
    Serve(Box<serve::ServeArgs>),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    // Where the output is a report on stdout, a reader that stops early (`df11 inspect DIR |
    // head`) ends the process quietly, as it ends any Unix tool, instead of a panic on the
    // failed write. Not for `serve`, whose writes to a client that went away must fail as
    // errors.
    if !matches!(cli.command, Command::Serve(_)) {
        // SAFETY: restoring a signal's default action before any thread is started.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // The one place `df11` reads its environment (the `DF11_*` settings, `HF_HUB_OFFLINE`).
    let env = df11_llm::args::Vars::from_os(std::env::vars_os());
    match cli.command {
        Command::Compress {
            src,
            dst,
            pattern_dict,
            units_in_flight,
        } => compress(src, dst, pattern_dict, units_in_flight),
        Command::Inspect { dir, decode } => inspect(dir, decode),
        Command::Verify { df11, bf16 } => verify(df11, bf16),
        Command::Run(args) => Ok(df11_llm::run_archs(&serve::architectures(), &args, &env)?),
        Command::Chat(mut args) => {
            args.interactive = true;
            Ok(df11_llm::run_archs(&serve::architectures(), &args, &env)?)
        }
        Command::Serve(args) => serve::serve(*args, &env),
    }
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{what} [{{elapsed_precise}}] {{bar:40}} {{pos}}/{{len}} {{msg}}"
        ))
        .expect("valid template"),
    );
    pb
}

fn compress(
    src: PathBuf,
    dst: PathBuf,
    pattern_dict: Option<PathBuf>,
    units_in_flight: usize,
) -> Result<()> {
    let pattern_dict = match pattern_dict {
        None => None,
        Some(p) => {
            let text = std::fs::read_to_string(&p).with_context(|| format!("{}", p.display()))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("{}", p.display()))?;
            Some(PatternDict::from_json(&v).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?)
        }
    };
    let options = CompressOptions {
        pattern_dict,
        units_in_flight,
    };
    let mut pb: Option<ProgressBar> = None;
    let report = compress_model(&src, &dst, &options, |p| {
        let b = pb.get_or_insert_with(|| bar(p.units_total as u64, "compress"));
        b.set_position(p.units_done as u64);
        b.set_message(format!("{:.0} M weights", p.weights_done as f64 / 1e6));
    })?;
    if let Some(b) = pb {
        b.finish();
    }
    println!(
        "{} units, {} weights: {:.1} MB BF16 -> {:.1} MB DF11 ({:.2}%), {:.1} s, {:.1} M weights/s",
        report.units,
        report.weights,
        report.bf16_bytes as f64 / 1e6,
        report.df11_bytes as f64 / 1e6,
        100.0 * report.df11_bytes as f64 / report.bf16_bytes.max(1) as f64,
        report.seconds,
        report.weights as f64 / report.seconds / 1e6
    );
    Ok(())
}

fn inspect(dir: PathBuf, decode: bool) -> Result<()> {
    let model = Df11Model::open(&dir)?;
    for w in model.warnings() {
        eprintln!("warning: {w}");
    }
    let cfg = model.df11_config();
    println!("{}", dir.display());
    println!("  format version  {}", cfg.version);
    println!("  architecture    {}", architecture(&model));
    println!("  pattern_dict");
    for p in cfg.pattern_dict.patterns() {
        println!("    {:<36} {:?}", p.key, p.members);
    }
    println!(
        "  {:<40} {:>12} {:>8} {:>6} {:>5} {:>7}  members",
        "unit", "weights", "bits/w", "ratio", "K", "maxlen"
    );
    let mut total_w = 0u64;
    let mut total_b = 0u64;
    let mut by_length = [0u64; 33];
    for unit in model.units() {
        let bytes = model.unit_bytes(unit);
        let n = unit.layout.n_elements;
        total_w += n as u64;
        total_b += bytes as u64;
        println!(
            "  {:<40} {:>12} {:>8.3} {:>5.1}% {:>5} {:>7}  {}",
            unit.name,
            n,
            unit.bits_per_weight(bytes),
            100.0 * bytes as f64 / (2 * n.max(1)) as f64,
            unit.layout.lut_rows,
            unit.layout.max_code_length,
            unit.members.len()
        );
        let lengths = &model.unit_tensors(unit)?.luts[(unit.layout.lut_rows - 1) * 256..];
        if decode {
            let w = model.decode_unit(unit)?;
            for v in w {
                let e = (v.to_bits() >> 7) & 0xFF;
                by_length[lengths[e as usize] as usize] += 1;
            }
        } else {
            for &l in lengths.iter().filter(|&&l| l > 0) {
                by_length[l as usize] += 1;
            }
        }
    }
    println!(
        "  total: {} units, {} compressed weights, {:.1} MB BF16 -> {:.1} MB DF11 ({:.2}%, {:.3} bits/weight)",
        model.units().len(),
        total_w,
        total_w as f64 * 2.0 / 1e6,
        total_b as f64 / 1e6,
        100.0 * total_b as f64 / (2 * total_w.max(1)) as f64,
        total_b as f64 * 8.0 / total_w.max(1) as f64
    );
    println!("  plain tensors: {}", model.plain_tensors().len());
    println!(
        "  code-length histogram ({}):",
        if decode {
            "weights per code length"
        } else {
            "code words per length, summed over units; --decode counts weights"
        }
    );
    let max = *by_length.iter().max().unwrap_or(&1);
    for (len, &c) in by_length.iter().enumerate().filter(|(_, &c)| c > 0) {
        let bar = "#".repeat(((c as f64 / max as f64) * 50.0).ceil() as usize);
        println!("    {len:>2} bits {c:>14} {bar}");
    }
    Ok(())
}

fn verify(df11: PathBuf, bf16: PathBuf) -> Result<()> {
    let n_units = Df11Model::open(&df11)?.units().len();
    let pb = bar(n_units as u64, "verify");
    let report = verify_model(&df11, &bf16, |name| {
        pb.inc(1);
        pb.set_message(name.to_string());
    })?;
    pb.finish_and_clear();
    match &report.difference {
        None => {
            println!(
                "OK: {} units ({} weights) and {} plain tensors identical to {}",
                report.units,
                report.weights,
                report.plain_tensors,
                bf16.display()
            );
            Ok(())
        }
        Some(d) => bail!("DIFFERENT: {d}"),
    }
}

/// What the folder holds: `architectures` of its config.json, else diffusers' `_class_name`,
/// else (a DFloat11 diffusers repo's config.json holds the DF11 block alone) the built-in
/// pattern_dict it was compressed with, else `?`.
fn architecture(model: &df11_candle::Df11Model) -> String {
    let config = model.config_json();
    if let Some(a) = config.get("architectures") {
        return a.to_string();
    }
    if let Some(class) = df11_candle::patterns::diffusers_class(config) {
        return class.to_string();
    }
    let flux = serde_json::json!({ "_class_name": "FluxTransformer2DModel" });
    let same = |d: &df11_candle::PatternDict| {
        let keys = |d: &df11_candle::PatternDict| -> Vec<(String, Vec<String>)> {
            d.patterns()
                .iter()
                .map(|p| (p.key.clone(), p.members.clone()))
                .collect()
        };
        df11_candle::builtin_pattern_dict(&flux).is_ok_and(|f| keys(&f) == keys(d))
    };
    if same(&model.df11_config().pattern_dict) {
        return "FluxTransformer2DModel (diffusers; by its pattern_dict)".into();
    }
    "?".into()
}
