//! What `apiary llm compare -o DIR` writes: `summary.json` (the record and every
//! policy's summary), `POLICY-requests.csv` per policy, and `report.html`. An earlier
//! comparison's files in the folder are replaced, and the run says so: a report is
//! never overwritten without a word.

use anyhow::{Context, Result};
use apiary_llm::engine::LlmOutcome;
use apiary_llm::metrics::LlmSummary;
use std::path::Path;

/// Writes the comparison's files into `dir`.
pub fn write(
    dir: &Path,
    name: &str,
    record: &apiary_report::Record,
    runs: &[(LlmSummary, &LlmOutcome)],
    quiet: bool,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let report = dir.join("report.html");
    // Said even with --quiet: replacing results is never silent.
    let mut replaced = Vec::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        if matches!(file.as_str(), "report.html" | "summary.json")
            || file.ends_with("-requests.csv")
        {
            std::fs::remove_file(e.path())
                .with_context(|| format!("removing {}", e.path().display()))?;
            replaced.push(file);
        }
    }
    if !replaced.is_empty() {
        replaced.sort();
        eprintln!(
            "note: replacing an earlier comparison in {} ({})",
            dir.display(),
            replaced.join(", ")
        );
    }
    let summaries: Vec<serde_json::Value> = runs.iter().map(|(s, _)| s.to_json()).collect();
    let json = serde_json::json!({ "record": record, "runs": summaries });
    let path = dir.join("summary.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    for (s, o) in runs {
        let path = dir.join(format!("{}-requests.csv", s.policy.replace('/', "_")));
        let f =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        apiary_llm::outputs::write_requests_csv(o, std::io::BufWriter::new(f))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let page = apiary_llm::html::report(
        &format!("apiary llm compare: {name}"),
        runs,
        Some((record, &[])),
    );
    std::fs::write(&report, page).with_context(|| format!("writing {}", report.display()))?;
    if !quiet {
        eprintln!(
            "wrote {} (summary.json, report.html, a requests CSV per policy)",
            dir.display()
        );
    }
    Ok(())
}
