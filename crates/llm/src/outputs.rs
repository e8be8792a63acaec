//! The per-request file of a run (`POLICY-requests.csv` of `apiary llm compare -o DIR`):
//! one row per trace request, in trace order, with where it ran and what it saw.

use crate::engine::LlmOutcome;
use crate::replica::Phase;
use std::io::Write;

/// Writes `o`'s requests as CSV: `request, arrival_s, prompt_tokens, output_tokens,
/// state` (`done`, `refused` or `unfinished`), then for served requests `instance,
/// ttft_s, tpot_s, end_s` (empty otherwise, and `tpot_s` for a one-token output), and
/// `migrations, preemptions`.
pub fn write_requests_csv(o: &LlmOutcome, mut w: impl Write) -> std::io::Result<()> {
    writeln!(
        w,
        "request,arrival_s,prompt_tokens,output_tokens,state,instance,ttft_s,tpot_s,end_s,migrations,preemptions"
    )?;
    for (i, q) in o.requests.iter().enumerate() {
        let arrival = q.req.arrival as f64 / 1e6;
        write!(w, "{i},{arrival:.6},{},{},", q.req.input, q.req.output)?;
        match q.phase {
            Phase::Done => {
                let tpot = q.tpot_s().map_or(String::new(), |t| format!("{t:.6}"));
                write!(
                    w,
                    "done,{},{:.6},{tpot},{:.6},",
                    q.inst,
                    q.ttft_s(),
                    q.done as f64 / 1e6
                )?;
            }
            Phase::Refused => write!(w, "refused,,,,,")?,
            _ => write!(w, "unfinished,,,,,")?,
        }
        writeln!(w, "{},{}", q.migrations, q.preemptions)?;
    }
    w.flush()
}
