//! Opening a possibly compressed file as a buffered reader.

use crate::TraceError;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

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
