//! Output of the processes an agent runs, sent to the server in bounded chunks with
//! each heartbeat, so that `apiary logs -f` can follow a running job. A chunk counts as
//! sent once the server acknowledged the heartbeat that carried it; a lost heartbeat's
//! chunks are read again and sent with the next one. An attempt that ended keeps
//! streaming until its last chunk, marked `eof`, has gone.

use apiary_api::{AttemptRef, Exit, OUTPUT_CHUNK_BYTES, OUTPUT_HEARTBEAT_BYTES, OutputChunk};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// How far each attempt's output has been sent.
#[derive(Debug, Default)]
pub struct Streams {
    sent: BTreeMap<AttemptRef, u64>,
    /// Attempts whose process ended and whose `eof` chunk has not gone yet.
    ended: BTreeSet<AttemptRef>,
    /// Attempts whose `eof` chunk went, while their exit is still being reported.
    finished: BTreeSet<AttemptRef>,
}

/// Bytes `from..` of `path`, at most `max`, as text: a UTF-8 sequence cut by the end of
/// the read waits for the next chunk; bytes that are not UTF-8 become U+FFFD. Returns
/// the text, the bytes it covers and the file's length.
fn read_from(path: &Path, from: u64, max: usize) -> Option<(String, u64, u64)> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    if from >= len || max == 0 {
        return Some((String::new(), 0, len));
    }
    f.seek(SeekFrom::Start(from)).ok()?;
    let mut buf = vec![0; ((len - from) as usize).min(max)];
    f.read_exact(&mut buf).ok()?;
    match std::str::from_utf8(&buf) {
        Ok(t) => Some((t.to_string(), buf.len() as u64, len)),
        Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => {
            let n = e.valid_up_to();
            Some((
                String::from_utf8_lossy(&buf[..n]).into_owned(),
                n as u64,
                len,
            ))
        }
        Err(_) => Some((
            String::from_utf8_lossy(&buf).into_owned(),
            buf.len() as u64,
            len,
        )),
    }
}

impl Streams {
    /// The chunks to send with this heartbeat: new output of each running attempt and
    /// of each ended one until its end, at most [`OUTPUT_HEARTBEAT_BYTES`] in all.
    pub fn chunks(
        &mut self,
        logs: &Path,
        running: impl Iterator<Item = AttemptRef>,
        exited: &[Exit],
    ) -> Vec<OutputChunk> {
        let reported: BTreeSet<AttemptRef> = exited
            .iter()
            .map(|e| AttemptRef {
                job: e.job,
                attempt: e.attempt,
            })
            .collect();
        self.finished.retain(|a| reported.contains(a));
        for a in &reported {
            if !self.finished.contains(a) {
                self.ended.insert(*a);
            }
        }
        let mut budget = OUTPUT_HEARTBEAT_BYTES;
        let mut out = Vec::new();
        let live: BTreeSet<AttemptRef> = running.collect();
        for a in live.iter().chain(self.ended.iter()) {
            let ended = self.ended.contains(a);
            if ended && live.contains(a) {
                continue;
            }
            let from = self.sent.get(a).copied().unwrap_or(0);
            let path = logs.join(format!("{}-{}.out", a.job, a.attempt));
            let Some((data, raw_len, len)) = read_from(&path, from, budget.min(OUTPUT_CHUNK_BYTES))
            else {
                if ended {
                    out.push(OutputChunk {
                        job: a.job,
                        attempt: a.attempt,
                        offset: from,
                        raw_len: 0,
                        data: String::new(),
                        eof: true,
                    });
                }
                continue;
            };
            let eof = ended && from + raw_len >= len;
            if raw_len == 0 && !eof {
                continue;
            }
            budget = budget.saturating_sub(raw_len as usize);
            out.push(OutputChunk {
                job: a.job,
                attempt: a.attempt,
                offset: from,
                raw_len,
                data,
                eof,
            });
        }
        out
    }

    /// The server took `chunks`: the next ones start after them.
    pub fn sent(&mut self, chunks: &[OutputChunk]) {
        for c in chunks {
            let a = AttemptRef {
                job: c.job,
                attempt: c.attempt,
            };
            if c.eof {
                self.ended.remove(&a);
                self.sent.remove(&a);
                self.finished.insert(a);
            } else {
                self.sent.insert(a, c.offset + c.raw_len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_resume_where_the_server_took_them_and_end_with_eof() {
        let dir = std::env::temp_dir().join(format!("apiary-stream-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = AttemptRef { job: 7, attempt: 1 };
        let file = dir.join("7-1.out");
        // "é" is two bytes: the first read ends inside it only if cut there.
        std::fs::write(&file, "hello é".as_bytes()).unwrap();
        let mut s = Streams::default();
        let c = s.chunks(&dir, [a].into_iter(), &[]);
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].offset, c[0].raw_len, c[0].data.as_str()),
            (0, 8, "hello é")
        );
        // Not acknowledged: the same chunk again.
        assert_eq!(s.chunks(&dir, [a].into_iter(), &[]), c);
        s.sent(&c);
        assert!(s.chunks(&dir, [a].into_iter(), &[]).is_empty());
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        std::io::Write::write_all(&mut f, b" and more\n\xc3").unwrap();
        let c = s.chunks(&dir, [a].into_iter(), &[]);
        // The cut sequence waits.
        assert_eq!((c[0].offset, c[0].data.as_str()), (8, " and more\n"));
        s.sent(&c);
        // The process ended: what is left goes, marked eof, and then nothing more.
        let exit = Exit {
            job: 7,
            attempt: 1,
            code: 0,
            lost: false,
            output_tail: String::new(),
        };
        let c = s.chunks(&dir, std::iter::empty(), std::slice::from_ref(&exit));
        assert_eq!(c.len(), 1);
        assert!(c[0].eof);
        assert_eq!(c[0].data, "\u{fffd}");
        s.sent(&c);
        // Its exit still being reported: nothing is sent again.
        assert!(
            s.chunks(&dir, std::iter::empty(), std::slice::from_ref(&exit))
                .is_empty()
        );
        assert!(s.chunks(&dir, std::iter::empty(), &[]).is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }
}
