//! The progress bar of a large transfer: on stderr when it is a terminal, unless `--quiet`.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Objects smaller than this transfer without a bar.
const LARGE: u64 = 8 << 20;

/// A bar for `len` bytes; hidden when `quiet`, for a small object, or when stderr is not a
/// terminal (indicatif's stderr target draws nothing then).
pub fn bar(len: u64, quiet: bool) -> ProgressBar {
    if quiet || len < LARGE {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template(
        "{bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {eta}",
    )
    .expect("the template is valid");
    ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr()).with_style(style)
}
