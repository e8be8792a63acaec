//! The quick way through a trace's bytes. Nearly every trace file is delimited text
//! with no quotes, no lone `\r` and valid UTF-8; in such a file a line is a record and
//! a delimiter a field boundary, so splitting on bytes yields exactly the records the
//! CSV reader yields, at a fraction of its cost (its state machine and the copy into a
//! record were two fifths of reading Philly). Any other file goes through the CSV
//! reader, so quoting, odd line endings and encoding errors keep its behaviour and its
//! messages.

use csv::StringRecord;

/// One record's fields, from either path: `text[spans[i].0..spans[i].1]` is field `i`.
pub(crate) struct Fields<'a> {
    text: &'a str,
    spans: &'a [(usize, usize)],
}

impl<'a> Fields<'a> {
    /// Field `i`, untrimmed; `None` past the last field.
    pub(crate) fn get(&self, i: usize) -> Option<&'a str> {
        let &(start, end) = self.spans.get(i)?;
        self.text.get(start..end)
    }

    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// Every field is whitespace (or there are none): a row to pass over, as a blank
    /// line is. Stops at the first field with text, which is nearly always the first.
    pub(crate) fn is_blank(&self) -> bool {
        (0..self.len()).all(|i| self.get(i).is_none_or(|f| trim(f).is_empty()))
    }

    /// The fields of a record the CSV reader produced (its text holds the fields back to
    /// back, without delimiters).
    pub(crate) fn of_record(rec: &'a StringRecord, spans: &'a mut Vec<(usize, usize)>) -> Self {
        spans.clear();
        spans.extend((0..rec.len()).filter_map(|i| rec.range(i).map(|r| (r.start, r.end))));
        Fields {
            text: rec.as_slice(),
            spans,
        }
    }
}

/// The header the CSV reader would have built from these fields.
pub(crate) fn header(f: &Fields<'_>) -> StringRecord {
    (0..f.len()).filter_map(|i| f.get(i)).collect()
}

/// `data` as text when splitting it on bytes gives what the CSV reader gives: valid
/// UTF-8, no `"` when quotes are special, and every `\r` right before a `\n` (the
/// reader's input turns `\r\n` into `\n`; a lone `\r` would end a record there). A
/// leading byte-order mark is dropped, as the CSV reader drops it.
pub(crate) fn plain_text(data: &[u8], quoting: bool) -> Option<&str> {
    let data = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data);
    if quoting && memchr::memchr(b'"', data).is_some() {
        return None;
    }
    if memchr::memchr_iter(b'\r', data).any(|i| data.get(i + 1) != Some(&b'\n')) {
        return None;
    }
    std::str::from_utf8(data).ok()
}

/// The first record of a plain text: its line number, and the offset just past its
/// line (where the next record's text starts). `None` when every line is empty.
pub(crate) fn first_record(text: &str) -> Option<(u64, usize)> {
    let bytes = text.as_bytes();
    let (mut line, mut start) = (1u64, 0usize);
    while start < bytes.len() {
        let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |i| start + i);
        let content = if end > start && bytes[end - 1] == b'\r' {
            end - 1
        } else {
            end
        };
        if content > start {
            return Some((line, (end + 1).min(bytes.len())));
        }
        line += 1;
        start = end + 1;
    }
    None
}

/// Calls `row` with each record of a plain text (see [`plain_text`]): each non-empty
/// line (the CSV reader skips empty ones; a line of spaces is a record), its 1-based
/// number (the text's first line being `first_line`) and its fields split at
/// `delimiter`. One pass finds every delimiter and line end, which costs less than
/// finding lines and then fields in each.
pub(crate) fn for_each_record<E>(
    text: &str,
    first_line: u64,
    delimiter: u8,
    spans: &mut Vec<(usize, usize)>,
    mut row: impl FnMut(u64, &Fields<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let bytes = text.as_bytes();
    let (mut line, mut line_start, mut field_start) = (first_line, 0usize, 0usize);
    spans.clear();
    let ends = Boundaries::new(bytes, delimiter, b'\n').chain(std::iter::once(bytes.len()));
    for at in ends {
        if bytes.get(at) == Some(&delimiter) {
            spans.push((field_start, at));
            field_start = at + 1;
            continue;
        }
        let end = if at > line_start && bytes[at - 1] == b'\r' {
            at - 1
        } else {
            at
        };
        if end > line_start {
            spans.push((field_start.min(end), end));
            row(line, &Fields { text, spans })?;
        }
        spans.clear();
        line += 1;
        line_start = at + 1;
        field_start = at + 1;
    }
    Ok(())
}

/// The positions of two bytes in a text, in order, found eight bytes at a time with
/// word arithmetic. `memchr2` per field cost more: the fields are a few bytes apart and
/// each call pays its setup.
struct Boundaries<'a> {
    bytes: &'a [u8],
    /// Each byte of the two, repeated across a word.
    a: u64,
    b: u64,
    /// Where the word `mask` describes starts.
    at: usize,
    /// The high bit of each byte of that word still to report.
    mask: u64,
    /// Where the next word starts.
    next: usize,
}

const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// The high bit of every zero byte of `v`, and no other bit (exact, unlike the
/// shorter test that only says whether there is one).
fn zero_bytes(v: u64) -> u64 {
    !(((v & LOW7) + LOW7) | v | LOW7)
}

impl<'a> Boundaries<'a> {
    fn new(bytes: &'a [u8], a: u8, b: u8) -> Self {
        Boundaries {
            bytes,
            a: u64::from(a) * 0x0101_0101_0101_0101,
            b: u64::from(b) * 0x0101_0101_0101_0101,
            at: 0,
            mask: 0,
            next: 0,
        }
    }
}

impl Iterator for Boundaries<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.mask == 0 {
            let rest = self.bytes.get(self.next..).filter(|r| !r.is_empty())?;
            self.at = self.next;
            let word = match rest.first_chunk::<8>() {
                Some(w) => {
                    self.next += 8;
                    u64::from_le_bytes(*w)
                }
                None => {
                    // The tail, padded with a byte that is neither of the two.
                    self.next = self.bytes.len();
                    let pad = (0u8..3)
                        .find(|&p| u64::from(p) != self.a & 0xff && u64::from(p) != self.b & 0xff)
                        .unwrap_or(0);
                    let mut w = [pad; 8];
                    w[..rest.len()].copy_from_slice(rest);
                    u64::from_le_bytes(w)
                }
            };
            self.mask = zero_bytes(word ^ self.a) | zero_bytes(word ^ self.b);
        }
        let i = (self.mask.trailing_zeros() / 8) as usize;
        self.mask &= self.mask - 1;
        Some(self.at + i)
    }
}

/// `s.trim()`, without the Unicode scan when `s` is empty or both its ends are printable
/// ASCII (which is never whitespace): nearly every field of every row.
pub(crate) fn trim(s: &str) -> &str {
    // Empty fields are most fields of the canonical CSV.
    if s.is_empty() {
        return s;
    }
    let printable = |b: Option<&u8>| b.is_some_and(|&b| b > b' ' && b < 0x7f);
    if printable(s.as_bytes().first()) && printable(s.as_bytes().last()) {
        s
    } else {
        s.trim()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_is_str_trim() {
        for s in [
            "",
            " ",
            "a",
            " a",
            "a ",
            "\ta\u{a0}",
            "\u{2003}x",
            "x\u{85}",
            "a b",
            "~",
            "\u{7f}",
        ] {
            assert_eq!(trim(s), s.trim(), "{s:?}");
        }
    }

    /// Records as (line, fields).
    type Records = Vec<(u64, Vec<String>)>;

    /// Both paths, record by record (the quick one only on a plain text).
    fn both(data: &[u8]) -> (Records, Option<Records>) {
        let (counted, mut idx) = crate::open::LineCount::new(crate::open::CrlfToLf::new(data));
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(counted);
        let mut slow = Vec::new();
        let mut rec = StringRecord::new();
        let mut spans = Vec::new();
        while rdr.read_record(&mut rec).unwrap() {
            let line = idx.line_of(rec.position().unwrap().byte());
            let f = Fields::of_record(&rec, &mut spans);
            slow.push((
                line,
                (0..f.len())
                    .map(|i| f.get(i).unwrap().to_string())
                    .collect(),
            ));
        }
        let fast = plain_text(data, true).map(|text| {
            let mut v = Vec::new();
            for_each_record(text, 1, b',', &mut spans, |n, f| {
                v.push((
                    n,
                    (0..f.len())
                        .map(|i| f.get(i).unwrap().to_string())
                        .collect(),
                ));
                Ok::<_, ()>(())
            })
            .unwrap();
            v
        });
        (slow, fast)
    }

    #[test]
    fn plain_files_split_as_the_csv_reader_reads_them() {
        for data in [
            &b"a,b,c\n1,2,3\n"[..],
            b"a,b\r\n1,2\r\n\r\n3,4",
            b"\xef\xbb\xbfa,b\n\n\n1,,\n ,\n,\n",
            b"x\n  \n\t,\n1,2,3,4\n",
            b"a,b\n\xc3\xa9t\xc3\xa9,2\n",
            b"",
            b"\n\n",
            b"only",
        ] {
            let (slow, fast) = both(data);
            assert_eq!(Some(slow), fast, "{:?}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn anything_else_is_left_to_the_csv_reader() {
        for data in [
            &b"a,b\n\"1,2\",3\n"[..],
            b"a,b\r1,2\n",
            b"a,b\n1,2\r",
            b"a,b\n\xff,2\n",
        ] {
            assert_eq!(
                plain_text(data, true),
                None,
                "{:?}",
                String::from_utf8_lossy(data)
            );
        }
        // Without quoting (Gavel's tab-separated traces) a quote is an ordinary byte.
        assert!(plain_text(b"a\t\"b\n", false).is_some());
    }

    #[test]
    fn boundaries_are_memchr2s() {
        let mut x = 7u64;
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 100, 1000] {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    b"ab,\n"[(x >> 60) as usize % 4]
                })
                .collect();
            let want: Vec<usize> = memchr::memchr2_iter(b',', b'\n', &bytes).collect();
            assert_eq!(
                Boundaries::new(&bytes, b',', b'\n').collect::<Vec<_>>(),
                want
            );
        }
    }

    #[test]
    fn blank_rows_are_those_of_whitespace_only() {
        let mut blank = Vec::new();
        for_each_record(" , \t,\n ,x,\n", 1, b',', &mut Vec::new(), |_, f| {
            blank.push(f.is_blank());
            Ok::<_, ()>(())
        })
        .unwrap();
        assert_eq!(blank, [true, false]);
    }
}
