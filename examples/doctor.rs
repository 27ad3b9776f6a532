//! Diagnoses the RDMA stack layer by layer — library, kernel and device nodes, link,
//! addressing, resources, extras — and says what to fix (see `rdma_verbs::diag`).
//!
//! ```text
//! doctor          # findings grouped by layer; exit status 1 when a check FAILs
//! doctor --json   # the same as one JSON object, one finding per line
//! ```

use std::fmt::Write;
use std::process::ExitCode;

use clap::Parser;
use rdma_verbs::diag::{self, Layer, ProviderProbe, Report, Status};

/// Diagnose the RDMA stack: which layer is broken, and what to do.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Print the findings as JSON
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    // First thing: started as the provider probe, this loads one provider and exits.
    diag::provider_probe_main();
    let args = Args::parse();
    let report = diag::run(ProviderProbe::CurrentExe);
    print!("{}", if args.json { json(&report) } else { text(&report) });
    if report.has_failures() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The findings grouped by layer, a fix under each WARN and FAIL, and a summary.
fn text(report: &Report) -> String {
    let mut s = String::new();
    for layer in Layer::ALL {
        let findings: Vec<_> = report.findings().iter().filter(|f| f.layer == layer).collect();
        let width = findings.iter().map(|f| f.check.len()).max().unwrap_or(0);
        let _ = writeln!(s, "{}", layer.title());
        for f in findings {
            let _ = writeln!(s, "  {}  {:width$}  {}", f.status, f.check, f.detail);
            if let Some(remedy) = &f.remedy {
                let _ = writeln!(s, "  {:4}  {:width$}  fix: {remedy}", "", "");
            }
        }
        s.push('\n');
    }
    let count = |status| report.count(status);
    let _ = writeln!(
        s,
        "{} PASS, {} WARN, {} FAIL, {} SKIP",
        count(Status::Pass),
        count(Status::Warn),
        count(Status::Fail),
        count(Status::Skip)
    );
    if report.has_failures() {
        s.push_str("Fix the first FAIL first: later layers often fail because of it.\n");
    }
    s
}

/// `{"ok":…,"findings":[…]}` with one finding per line.
fn json(report: &Report) -> String {
    let findings: Vec<String> = report
        .findings()
        .iter()
        .map(|f| {
            format!(
                "{{\"layer\":{},\"check\":{},\"status\":{},\"detail\":{},\"remedy\":{}}}",
                quote(f.layer.key()),
                quote(&f.check),
                quote(f.status.as_str()),
                quote(&f.detail),
                f.remedy.as_deref().map_or("null".into(), quote)
            )
        })
        .collect();
    format!("{{\"ok\":{},\"findings\":[\n{}\n]}}\n", !report.has_failures(), findings.join(",\n"))
}

/// A JSON string literal.
fn quote(text: &str) -> String {
    let mut q = String::with_capacity(text.len() + 2);
    q.push('"');
    for c in text.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(q, "\\u{:04x}", u32::from(c));
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}
