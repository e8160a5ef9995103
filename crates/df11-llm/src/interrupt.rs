//! Ctrl-C in the terminal front ends (`run`, `chat -i`, batches). During a generation it stops
//! that generation: the front end drops the request (the scheduler cancels it) and says so, and
//! `chat` returns to its prompt. Anywhere else (loading, waiting at the prompt) it ends the process
//! with status 130, after a newline so that the shell's prompt starts on a line of its own. The
//! terminal is never put in raw mode, so nothing else needs restoring.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static GENERATING: AtomicBool = AtomicBool::new(false);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Installs the handler (once per process; later calls do nothing). A failure to install it is
/// reported and leaves Ctrl-C with its default effect (the process ends).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let handler = || {
            if GENERATING.load(Ordering::SeqCst) {
                INTERRUPTED.store(true, Ordering::SeqCst);
            } else {
                eprintln!();
                exit_now(130);
            }
        };
        if let Err(e) = ctrlc::set_handler(handler) {
            eprintln!("warning: Ctrl-C will end the process (no handler: {e})");
        }
    });
}

/// Ends the process at once with `code`, after flushing stdout and stderr, without running the
/// exit handlers of the C runtime and the libraries (`_exit`). For a second Ctrl-C, or one
/// outside a generation: another thread may be loading or running the model on CUDA at that
/// moment, and the CUDA libraries' exit handlers tearing down under it can crash the process
/// (a segfault instead of the status asked for). The operating system frees the device.
pub fn exit_now(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    #[cfg(unix)]
    // SAFETY: `_exit` takes any status and never returns; nothing is left to unwind.
    unsafe {
        libc::_exit(code)
    }
    #[cfg(not(unix))]
    std::process::exit(code)
}

/// Marks a generation in progress until dropped: Ctrl-C meanwhile sets [`interrupted`] instead
/// of ending the process.
#[derive(Debug)]
pub struct Generating(());

impl Generating {
    /// Starts a generation (clearing an earlier interruption).
    pub fn start() -> Self {
        INTERRUPTED.store(false, Ordering::SeqCst);
        GENERATING.store(true, Ordering::SeqCst);
        Self(())
    }
}

impl Drop for Generating {
    fn drop(&mut self) {
        GENERATING.store(false, Ordering::SeqCst);
    }
}

/// Whether Ctrl-C was pressed during the current generation.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// `Err(LlmError::Interrupted)` once Ctrl-C was pressed during the current generation.
pub fn check() -> crate::Result<()> {
    if interrupted() {
        Err(crate::LlmError::Interrupted)
    } else {
        Ok(())
    }
}
