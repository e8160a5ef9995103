//! The command-line program, written once for every architecture: load the model, then one
//! prompt (streamed text and a report, or one JSON object), a batch of prompts (`--prompt`
//! repeated, `--prompts-file`: run together through the continuous-batching scheduler), or a
//! chat in the terminal (`--interactive`).

use std::io::{BufRead, Write};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokenizers::Tokenizer;

use crate::app::{load_any, load_arch, ArchInfo, Loaded};
use crate::args::{CommonArgs, Vars};
use crate::chat::{ChatTemplate, Message};
use crate::config::GenerationDefaults;
use crate::error::{LlmError, Result};
use crate::generate::{generate, GenerationParams};
use crate::interrupt;
use crate::report::report;
use crate::sampling::SamplingParams;
use crate::serving::{Event, FinishReason, Metrics, Request, Scheduler};
use crate::tokenizer::encode;

/// The token ids of a conversation: the chat template applied to `messages` (encoded without
/// special tokens, as `apply_chat_template` does), or, without a template or with `use_template`
/// off, the last message encoded with them.
pub fn conversation_ids(
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
    messages: &[Message],
    use_template: bool,
    thinking: bool,
) -> Result<Vec<u32>> {
    match (template, use_template) {
        (Some(t), true) => {
            let text = t.render(messages, true, Some(thinking))?;
            encode(tokenizer, &text, false)
        }
        _ => {
            let last = messages.last().map_or("", |m| m.content.as_str());
            encode(tokenizer, last, true)
        }
    }
}

/// The prompt's token ids: [`conversation_ids`] of one user message.
pub fn prompt_ids(
    loaded: &Loaded,
    prompt: &str,
    use_template: bool,
    thinking: bool,
) -> Result<Vec<u32>> {
    conversation_ids(
        &loaded.tokenizer,
        loaded.chat_template.as_ref(),
        &[Message::user(prompt)],
        use_template,
        thinking,
    )
}

/// Sampling from the flags, falling back to generation_config.json where a flag is absent.
pub fn sampling_params(args: &CommonArgs, defaults: &GenerationDefaults) -> SamplingParams {
    let temperature = args.temperature.unwrap_or(if defaults.do_sample {
        defaults.temperature.unwrap_or(1.0)
    } else {
        0.0
    });
    SamplingParams {
        temperature,
        top_p: args.top_p.or(defaults.top_p),
        top_k: args.top_k.or(defaults.top_k),
        seed: args.seed,
        repeat_penalty: args.repeat_penalty,
        repeat_last_n: args.repeat_last_n,
    }
}

fn stdout_write(piece: &str) -> Result<()> {
    let io = |source| LlmError::io("<stdout>", source);
    let mut out = std::io::stdout();
    out.write_all(piece.as_bytes()).map_err(io)?;
    out.flush().map_err(io)
}

/// Runs the program for architecture `A`, with the flags `args` and the environment `env` the
/// binary read.
pub fn run<A: crate::Architecture>(args: &CommonArgs, env: &Vars) -> Result<()> {
    run_archs(&[ArchInfo::of::<A>()], args, env)
}

/// Runs the program for whichever of `archs` the model's `config.json` names (the first one's
/// default repo when no model is given).
pub fn run_archs(archs: &[ArchInfo], args: &CommonArgs, env: &Vars) -> Result<()> {
    let prompts = args.prompts()?;
    match (prompts.len(), args.interactive) {
        (0, false) => Err(LlmError::Usage(
            "give a prompt: --prompt TEXT (repeatable), --prompts-file FILE or --interactive"
                .into(),
        )),
        (n, true) if n > 0 => Err(LlmError::Usage(
            "--interactive takes its prompts from the terminal, not from --prompt".into(),
        )),
        (1, false) => run_one(archs, args, env, &prompts[0]),
        (_, false) => run_batch(archs, args, env, prompts),
        (_, true) => run_chat(archs, args, env),
    }
}

/// Loads the model of `args` with `archs`, reporting on stderr.
fn load(
    archs: &[ArchInfo],
    args: &CommonArgs,
    env: &Vars,
    show_progress: bool,
) -> Result<(ArchInfo, Loaded)> {
    let opts = args
        .model
        .load_options(archs[0].default_repo, show_progress, env)?;
    let started = Instant::now();
    let (arch, loaded) = if archs.len() == 1 {
        (archs[0], load_arch(&archs[0], &opts)?)
    } else {
        load_any(archs, &opts)?
    };
    let format = if opts.bf16 { "BF16" } else { "DF11" };
    let placement = loaded.model.placement();
    let on = if placement.is_single() && !placement.offloads() {
        format!("{:?}", opts.device)
    } else {
        placement.describe()
    };
    let budget = placement.offload().describe_accounting();
    if !budget.is_empty() {
        eprintln!("device memory planned: {budget}");
    }
    eprintln!(
        "{} ({format}) from {} on {on} in {:?}, loaded in {:.2} s",
        arch.name,
        loaded.dir.display(),
        opts.dtype,
        started.elapsed().as_secs_f64()
    );
    if !args.no_chat_template && loaded.chat_template.is_none() {
        eprintln!("the model has no chat template: encoding the prompt as is");
    }
    Ok((arch, loaded))
}

/// One prompt: streamed text and a report, or one JSON object.
fn run_one(archs: &[ArchInfo], args: &CommonArgs, env: &Vars, prompt: &str) -> Result<()> {
    interrupt::install();
    let (_, mut loaded) = load(archs, args, env, !args.json)?;
    let prompt = prompt_ids(&loaded, prompt, !args.no_chat_template, args.thinking)?;
    let params = GenerationParams {
        max_new_tokens: args.max_new_tokens,
        eos_token_ids: eos_ids(args, &loaded.defaults),
        sampling: sampling_params(args, &loaded.defaults),
    };
    let stream = !args.json;
    let mut on_text = |piece: &str| {
        interrupt::check()?;
        if stream {
            stdout_write(piece)
        } else {
            Ok(())
        }
    };
    let generating = interrupt::Generating::start();
    let generation = generate(
        &mut loaded.model,
        &loaded.tokenizer,
        &prompt,
        &params,
        &mut on_text,
    );
    drop(generating);
    if let Err(LlmError::Interrupted) = generation {
        println!();
    }
    let generation = generation?;
    if args.json {
        let json =
            serde_json::to_string(&generation).map_err(|e| LlmError::Usage(e.to_string()))?;
        println!("{json}");
    } else {
        println!();
        eprintln!("{}", report(&generation));
    }
    Ok(())
}

/// The end-of-sequence tokens a generation stops at: the model's, none with `--ignore-eos`.
fn eos_ids(args: &CommonArgs, defaults: &GenerationDefaults) -> Vec<u32> {
    if args.ignore_eos {
        Vec::new()
    } else {
        defaults.eos_token_ids.clone()
    }
}

/// Starts the scheduler on the model of `args` (loaded on its thread) with `max_batch` slots.
fn start_scheduler(
    archs: &[ArchInfo],
    args: &CommonArgs,
    env: &Vars,
    max_batch: usize,
    max_queue: usize,
) -> Result<(Scheduler, crate::serving::ModelInfo)> {
    interrupt::install();
    let archs = archs.to_vec();
    let loader_args = args.clone();
    let env = env.clone();
    Scheduler::start(
        Box::new(move || {
            let (_, mut loaded) = load(&archs, &loader_args, &env, !loader_args.json)?;
            loaded.defaults.eos_token_ids = eos_ids(&loader_args, &loaded.defaults);
            Ok(loaded)
        }),
        max_batch,
        max_queue,
        Arc::new(Metrics::default()),
    )
}

/// One request through the scheduler; its events arrive on the returned channel.
fn submit(
    scheduler: &Scheduler,
    prompt: Vec<u32>,
    args: &CommonArgs,
    defaults: &GenerationDefaults,
) -> Result<mpsc::Receiver<Event>> {
    let (tx, rx) = mpsc::channel();
    let request = Request {
        prompt,
        max_tokens: Some(args.max_new_tokens),
        sampling: sampling_params(args, defaults),
        stop: Vec::new(),
        events: Box::new(tx),
        received: Instant::now(),
    };
    scheduler
        .submit(request)
        .map_err(|e| LlmError::Usage(format!("the scheduler refused a prompt: {e:?}")))?;
    Ok(rx)
}

/// One prompt's result in a batch (`--json`: one line each).
#[derive(Debug, Serialize)]
struct BatchResult {
    prompt: String,
    prompt_tokens: usize,
    generated_tokens: Vec<u32>,
    text: String,
    finish_reason: &'static str,
}

/// Waits for a request's end, collecting its text (and passing each piece to `on_text`).
/// `Err(Interrupted)` on Ctrl-C (the caller drops `rx`, which cancels the request).
fn collect(
    rx: &mpsc::Receiver<Event>,
    on_text: &mut dyn FnMut(&str) -> Result<()>,
) -> Result<(String, FinishReason, usize, Vec<u32>)> {
    let mut text = String::new();
    loop {
        interrupt::check()?;
        match rx.recv_timeout(Duration::from_millis(50)) {
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Ok(Event::Text(t)) => {
                on_text(&t)?;
                text.push_str(&t);
            }
            Ok(Event::Done {
                reason,
                prompt_tokens,
                tokens,
                ..
            }) => return Ok((text, reason, prompt_tokens, tokens)),
            Ok(Event::Failed(e)) => return Err(LlmError::Usage(e)),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(LlmError::Usage("the scheduler stopped".into()))
            }
        }
    }
}

/// Several prompts run together (continuous batching, up to 64 at once).
fn run_batch(
    archs: &[ArchInfo],
    args: &CommonArgs,
    env: &Vars,
    prompts: Vec<String>,
) -> Result<()> {
    let (scheduler, info) =
        start_scheduler(archs, args, env, prompts.len().min(64), prompts.len())?;
    let started = Instant::now();
    let mut pending = Vec::with_capacity(prompts.len());
    for p in &prompts {
        let ids = conversation_ids(
            &info.tokenizer,
            info.chat_template.as_ref(),
            &[Message::user(p.as_str())],
            !args.no_chat_template,
            args.thinking,
        )?;
        pending.push(submit(&scheduler, ids, args, &info.defaults)?);
    }
    let mut generated = 0;
    let _generating = interrupt::Generating::start();
    for (i, (prompt, rx)) in prompts.into_iter().zip(pending).enumerate() {
        let (text, reason, prompt_tokens, tokens) = collect(&rx, &mut |_| Ok(()))?;
        generated += tokens.len();
        if args.json {
            let line = serde_json::to_string(&BatchResult {
                prompt,
                prompt_tokens,
                generated_tokens: tokens,
                text,
                finish_reason: reason.as_str(),
            })
            .map_err(|e| LlmError::Usage(e.to_string()))?;
            println!("{line}");
        } else {
            println!("### prompt {}: {prompt}\n{text}\n", i + 1);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "batch: {generated} tokens generated in {secs:.2} s ({:.1} tok/s over all prompts)",
        generated as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// A chat in the terminal: the conversation is kept; each answer streams, then its speed.
fn run_chat(archs: &[ArchInfo], args: &CommonArgs, env: &Vars) -> Result<()> {
    let (scheduler, info) = start_scheduler(archs, args, env, 1, 1)?;
    let mut messages: Vec<Message> = Vec::new();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        eprint!("> ");
        let _ = std::io::stderr().flush();
        let Some(line) = lines.next() else { break };
        let line = line.map_err(|e| LlmError::io("<stdin>", e))?;
        if line.trim().is_empty() {
            break;
        }
        messages.push(Message::user(line));
        // A conversation that outgrows the context loses its oldest exchanges (and only
        // those): the prompt must leave a position to answer in.
        let ids = loop {
            let ids = conversation_ids(
                &info.tokenizer,
                info.chat_template.as_ref(),
                &messages,
                !args.no_chat_template,
                args.thinking,
            )?;
            if ids.len() < info.max_context || messages.len() == 1 {
                break ids;
            }
            messages.remove(0);
            if messages.first().is_some_and(|m| m.role == "assistant") {
                messages.remove(0);
            }
            eprintln!(
                "[the conversation outgrew the context of {} positions: its oldest exchange is \
                 dropped]",
                info.max_context
            );
        };
        if ids.len() >= info.max_context {
            eprintln!(
                "[this message alone takes {} tokens, more than the context of {} positions \
                 leaves room for (--max-context): it is dropped]",
                ids.len(),
                info.max_context
            );
            messages.pop();
            continue;
        }
        let started = Instant::now();
        let mut first: Option<Instant> = None;
        let rx = submit(&scheduler, ids, args, &info.defaults)?;
        let generating = interrupt::Generating::start();
        let answer = collect(&rx, &mut |piece| {
            first.get_or_insert_with(Instant::now);
            stdout_write(piece)
        });
        drop((generating, rx));
        println!();
        let (text, _, prompt_tokens, tokens) = match answer {
            Err(LlmError::Interrupted) => {
                // The question goes too: the conversation stays as it was before it.
                messages.pop();
                eprintln!("[interrupted: this answer is dropped]");
                continue;
            }
            other => other?,
        };
        let secs = started.elapsed().as_secs_f64();
        let ttft = first.map_or(secs, |f| (f - started).as_secs_f64());
        eprintln!(
            "[{prompt_tokens} prompt tokens, {} generated in {secs:.2} s: {:.1} tok/s, first text \
             after {:.0} ms]",
            tokens.len(),
            tokens.len() as f64 / secs.max(1e-9),
            ttft * 1e3
        );
        messages.push(Message {
            role: "assistant".into(),
            content: text,
        });
    }
    Ok(())
}
