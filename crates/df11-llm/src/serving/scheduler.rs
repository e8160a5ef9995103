//! Continuous batching: one thread owns the model ([`Engine`]) and runs a loop: admit waiting
//! requests into free sequence slots (prefilling each prompt; while others decode, up to a
//! budget of prompt tokens per step), then one decode step for every
//! running sequence at once, sample each row with its request's own sampler, stream the text,
//! and free the slots of requests that finished or whose client went away. Requests join and
//! leave between steps; a full queue is refused at once.
//!
//! The thread owns every CUDA object of the model (device buffers, streams, graphs, cuBLAS and
//! curand handles) and drops them itself: [`Scheduler::shutdown`] (or dropping the last handle)
//! stops the loop and joins the thread, so the process never leaves `main` while the model is
//! being torn down on another thread (the CUDA libraries' exit handlers would race that
//! teardown).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use tokenizers::Tokenizer;

use super::batch_loop::{run, Message, Shared};
use super::metrics::Metrics;
use super::request::{ModelInfo, Request, SubmitError};
use crate::app::Loaded;
use crate::engine::Engine;
use crate::error::{LlmError, Result as LlmResult};

/// The HTTP side's handle on the scheduler. Clones share one thread; the last one dropped
/// stops and joins it ([`Scheduler::shutdown`]).
#[derive(Clone)]
pub struct Scheduler {
    queue: mpsc::SyncSender<Message>,
    queued: Arc<AtomicUsize>,
    thread: Arc<Worker>,
}

/// The scheduler thread: stopped and joined when the last handle goes.
struct Worker {
    stop: Arc<AtomicBool>,
    wake: mpsc::SyncSender<Message>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

impl Worker {
    /// Stops the loop and waits for the thread (idempotent). Requests still running or queued
    /// get [`Event::Failed`]; the engine, and every CUDA object in it, is dropped on the thread.
    fn stop_and_join(&self) {
        let handle = self
            .handle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(handle) = handle else { return };
        self.stop.store(true, Ordering::SeqCst);
        // A full queue means the loop is not blocked waiting for one: it sees the flag anyway.
        let _ = self.wake.try_send(Message::Stop);
        if handle.join().is_err() {
            eprintln!("warning: the scheduler thread panicked");
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

impl Scheduler {
    /// Starts the scheduler thread: it runs `load`, makes an engine of `max_batch` slots and
    /// serves requests from a queue of `max_queue`. Returns when the model is loaded.
    pub fn start(
        load: Box<dyn FnOnce() -> LlmResult<Loaded> + Send>,
        max_batch: usize,
        max_queue: usize,
        metrics: Arc<Metrics>,
    ) -> LlmResult<(Self, ModelInfo)> {
        let (queue, requests) = mpsc::sync_channel::<Message>(max_queue.max(1));
        let (ready, loaded) = mpsc::channel::<LlmResult<ModelInfo>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let queued_loop = queued.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_loop = stop.clone();
        let handle = std::thread::Builder::new()
            .name("df11-scheduler".into())
            .spawn(move || {
                let setup = (|| -> LlmResult<(Engine, Tokenizer, Vec<u32>)> {
                    let mut loaded = load()?;
                    let mut engine = Engine::new(loaded.model, max_batch)?;
                    engine.warm_up()?;
                    let info = ModelInfo {
                        arch: loaded.config.describe(),
                        tokenizer: loaded.tokenizer.clone(),
                        chat_template: loaded.chat_template.take(),
                        max_context: engine.max_context(),
                        max_batch,
                        defaults: loaded.defaults.clone(),
                    };
                    let eos = loaded.defaults.eos_token_ids.clone();
                    let _ = ready.send(Ok(info));
                    Ok((engine, loaded.tokenizer, eos))
                })();
                match setup {
                    Ok((engine, tokenizer, eos)) => {
                        let shared = Shared {
                            requests,
                            queued: &queued_loop,
                            stop: &stop_loop,
                            metrics: &metrics,
                        };
                        run(engine, &tokenizer, &eos, &shared)
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                    }
                }
            })
            .map_err(|e| LlmError::Usage(format!("scheduler thread: {e}")))?;
        let thread = Arc::new(Worker {
            stop,
            wake: queue.clone(),
            handle: Mutex::new(Some(handle)),
        });
        // A load that failed ends the thread: joining it (through `thread`'s drop) first
        // means its CUDA state is gone before the error reaches the caller.
        let info = loaded.recv().map_err(|_| {
            LlmError::Usage("the scheduler stopped while loading the model".into())
        })??;
        Ok((
            Self {
                queue,
                queued,
                thread,
            },
            info,
        ))
    }

    /// Queues a request, or refuses it at once when the queue is full.
    pub fn submit(&self, request: Request) -> Result<(), SubmitError> {
        if self.thread.stop.load(Ordering::SeqCst) {
            return Err(SubmitError::Stopped);
        }
        self.queued.fetch_add(1, Ordering::SeqCst);
        match self.queue.try_send(Message::Request(request)) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.queued.fetch_sub(1, Ordering::SeqCst);
                Err(match e {
                    mpsc::TrySendError::Full(_) => SubmitError::Full,
                    mpsc::TrySendError::Disconnected(_) => SubmitError::Stopped,
                })
            }
        }
    }

    /// Stops the scheduler and waits for its thread: requests running or queued get
    /// [`super::Event::Failed`], later submissions [`SubmitError::Stopped`], and the model (every CUDA
    /// object in it) is dropped on the thread before this returns. Idempotent; the last
    /// handle dropped does the same.
    pub fn shutdown(&self) {
        self.thread.stop_and_join();
    }

    /// Requests waiting for a slot.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }
}
