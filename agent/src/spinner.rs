//! Activity while the model has not said anything yet: a slow local server can read a long
//! prompt for a minute before its first token. Shown on stderr, on a terminal only, and
//! wiped before anything else is written.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

pub struct Spinner {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Spinner {
    /// Starts drawing `⠋ waiting for the model · 3s` on stderr, updated ten times a second.
    pub fn start() -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut frame = 0;
            // A short answer should not flash a spinner.
            std::thread::sleep(Duration::from_millis(300));
            while !flag.load(Ordering::SeqCst) {
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\r\x1b[2K{} waiting for the model · {}s",
                    FRAMES[frame % FRAMES.len()],
                    started.elapsed().as_secs()
                );
                let _ = err.flush();
                drop(err);
                frame += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Spinner {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Spinner {
    /// Stops and wipes the spinner line, so what comes next starts on a clean line.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}
