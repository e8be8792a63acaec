//! Opening a possibly compressed file as a buffered reader.

use crate::TraceError;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::rc::Rc;

pub(crate) fn open(path: &Path) -> Result<Box<dyn BufRead>, TraceError> {
    let io = |source| TraceError::Io {
        file: path.display().to_string(),
        source,
    };
    let mut f = BufReader::with_capacity(1 << 16, File::open(path).map_err(io)?);
    let magic = f.fill_buf().map_err(io)?;
    let r: Box<dyn BufRead> = if magic.starts_with(&[0x1f, 0x8b]) {
        Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::bufread::MultiGzDecoder::new(f),
        ))
    } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let d = zstd::stream::read::Decoder::with_buffer(f).map_err(io)?;
        Box::new(BufReader::with_capacity(1 << 16, d))
    } else {
        Box::new(f)
    };
    Ok(r)
}

/// Reads the first line (for format detection) without consuming the stream.
pub(crate) fn first_line(path: &Path) -> Result<String, TraceError> {
    let mut r = open(path)?;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while buf.len() < 4096 {
        match r.read(&mut byte) {
            Ok(0) => break,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => buf.push(byte[0]),
            Err(e) => {
                return Err(TraceError::Io {
                    file: path.display().to_string(),
                    source: e,
                });
            }
        }
    }
    Ok(String::from_utf8_lossy(&buf)
        .trim_start_matches('\u{feff}')
        .trim_end_matches('\r')
        .to_string())
}

/// Notes where every `\n` passes, so that a reader which buffers ahead can still name
/// the file line a record starts on: the CSV reader's own line count skips blank lines
/// (a row after one was reported a line early). Only the offsets not yet asked about
/// are kept, a buffer's worth.
pub(crate) struct LineCount<R> {
    inner: R,
    pos: u64,
    newlines: Rc<RefCell<VecDeque<u64>>>,
}

/// The other end of a [`LineCount`]: the line at a byte offset, asked in increasing
/// order.
pub(crate) struct LineIndex {
    newlines: Rc<RefCell<VecDeque<u64>>>,
    passed: u64,
}

impl<R: Read> LineCount<R> {
    pub(crate) fn new(inner: R) -> (LineCount<R>, LineIndex) {
        let newlines = Rc::new(RefCell::new(VecDeque::new()));
        (
            LineCount {
                inner,
                pos: 0,
                newlines: newlines.clone(),
            },
            LineIndex {
                newlines,
                passed: 0,
            },
        )
    }
}

impl<R: Read> Read for LineCount<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(out)?;
        let mut q = self.newlines.borrow_mut();
        q.extend(memchr::memchr_iter(b'\n', &out[..n]).map(|i| self.pos + i as u64));
        self.pos += n as u64;
        Ok(n)
    }
}

impl LineIndex {
    /// The 1-based line of the record the CSV reader says starts at byte `offset`
    /// (offsets must not decrease). Its offset is where the previous record ended, so
    /// the blank lines it skipped (a `\n` right at the offset, and right after that)
    /// are passed over.
    pub(crate) fn line_of(&mut self, mut offset: u64) -> u64 {
        let mut q = self.newlines.borrow_mut();
        while let Some(&o) = q.front() {
            if o < offset {
                q.pop_front();
                self.passed += 1;
            } else if o == offset {
                q.pop_front();
                self.passed += 1;
                offset += 1;
            } else {
                break;
            }
        }
        self.passed + 1
    }
}

/// Turns every `\r\n` into `\n` as it reads, so that the CSV reader counts the lines of a
/// file with Windows line endings as it counts any other's (it reports one too few on
/// such files otherwise). A lone `\r` is kept.
pub(crate) struct CrlfToLf<R> {
    inner: R,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    /// A `\r` read but not yet given out: it goes if a `\n` follows.
    cr: bool,
    eof: bool,
}

impl<R: Read> CrlfToLf<R> {
    pub(crate) fn new(inner: R) -> CrlfToLf<R> {
        CrlfToLf {
            inner,
            buf: vec![0; 1 << 16],
            pos: 0,
            len: 0,
            cr: false,
            eof: false,
        }
    }
}

impl<R: Read> Read for CrlfToLf<R> {
    // Copies runs between `\r`s whole (found with memchr): this sits under every CSV
    // reader, so a byte-at-a-time loop here would cost more than the parsing.
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let mut w = 0;
        while w < out.len() {
            if self.pos == self.len {
                if self.eof || w > 0 {
                    break;
                }
                let n = self.inner.read(&mut self.buf)?;
                self.pos = 0;
                self.len = n;
                if n == 0 {
                    self.eof = true;
                    if std::mem::take(&mut self.cr) {
                        out[w] = b'\r';
                        w += 1;
                    }
                    break;
                }
            }
            if std::mem::take(&mut self.cr) && self.buf[self.pos] != b'\n' {
                out[w] = b'\r';
                w += 1;
                continue;
            }
            let run = &self.buf[self.pos..self.len];
            let run = &run[..run.len().min(out.len() - w)];
            let (copy, skip) = match memchr::memchr(b'\r', run) {
                Some(i) => {
                    self.cr = true;
                    (i, i + 1)
                }
                None => (run.len(), run.len()),
            };
            out[w..w + copy].copy_from_slice(&run[..copy]);
            w += copy;
            self.pos += skip;
        }
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(input: &[u8], chunk: usize, out: usize) -> Vec<u8> {
        struct Trickle<'a>(&'a [u8], usize);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(self.1).min(out.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut r = CrlfToLf::new(Trickle(input, chunk));
        let mut got = Vec::new();
        let mut small = vec![0u8; out];
        loop {
            let n = r.read(&mut small).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&small[..n]);
        }
        got
    }

    #[test]
    fn crlf_becomes_lf_across_any_chunking_and_lone_cr_stays() {
        let input = b"a,b\r\n1,2\r\n\r\nx\ry\r\r\nend\r";
        for chunk in 1..8 {
            assert_eq!(
                through(input, chunk, 3),
                b"a,b\n1,2\n\nx\ry\r\nend\r",
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn long_runs_copy_as_a_byte_loop_would() {
        // Every mix of '\r', '\n' and text, read in every chunk and buffer size.
        let mut input = Vec::new();
        let mut x = 7u32;
        for _ in 0..5000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            input.push(match (x >> 16) % 6 {
                0 => b'\r',
                1 => b'\n',
                _ => b'a' + ((x >> 8) % 26) as u8,
            });
        }
        let mut want = Vec::new();
        let mut i = 0;
        while i < input.len() {
            if input[i] == b'\r' && input.get(i + 1) == Some(&b'\n') {
                i += 1;
            }
            want.push(input[i]);
            i += 1;
        }
        for (chunk, out) in [
            (1, 1),
            (2, 7),
            (64, 5),
            (4096, 3),
            (1 << 20, 1 << 16),
            (7, 1 << 16),
        ] {
            assert_eq!(
                through(&input, chunk, out),
                want,
                "chunk {chunk}, buffer {out}"
            );
        }
    }
}
