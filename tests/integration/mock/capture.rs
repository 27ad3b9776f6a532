//! A `log` logger that keeps what each thread logged, so a test can assert what `Drop`
//! reported; records of other threads (other tests) never mix in.

use std::cell::RefCell;
use std::sync::Once;

use log::{Level, LevelFilter, Log, Metadata, Record};

thread_local! {
    static RECORDS: RefCell<Vec<(Level, String)>> = const { RefCell::new(Vec::new()) };
}

struct Capture;

impl Log for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &Record<'_>) {
        RECORDS.with_borrow_mut(|r| r.push((record.level(), record.args().to_string())));
    }

    fn flush(&self) {}
}

/// Installs the logger (once per process) and forgets what this thread logged before.
pub fn start() {
    static INSTALL: Once = Once::new();
    static CAPTURE: Capture = Capture;
    INSTALL.call_once(|| {
        log::set_logger(&CAPTURE).expect("no other logger in the test binary");
        log::set_max_level(LevelFilter::Trace);
    });
    RECORDS.with_borrow_mut(Vec::clear);
}

/// What this thread logged since [`start`] or the last call, oldest first.
pub fn take() -> Vec<(Level, String)> {
    RECORDS.with_borrow_mut(std::mem::take)
}
