//! Civil dates as traces write them (`2017-10-09 07:01:55`, Philly's), to seconds since
//! the epoch, refusing dates that do not exist.

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Seconds since 1970 of a `YYYY-MM-DD HH:MM:SS` date, or what is wrong with it.
/// Years run 1970..=9999: earlier ones would put a job before the Unix epoch Philly's
/// clock counts from, later ones are typos.
pub(crate) fn parse_datetime(s: &str) -> Result<i64, String> {
    let bad = || format!("'{s}' is not a date YYYY-MM-DD HH:MM:SS");
    let [y, mo, da, h, mi, se] = match fixed_datetime(s.trim().as_bytes()) {
        Some(v) => v,
        None => loose_datetime(s).ok_or_else(bad)?,
    };
    if !(1970..=9999).contains(&y) {
        return Err(format!("'{s}': year {y} is outside 1970..=9999"));
    }
    if !(1..=12).contains(&mo) {
        return Err(format!("'{s}': month {mo} is outside 1..=12"));
    }
    if !(1..=days_in_month(y, mo)).contains(&da) {
        return Err(format!("'{s}': {y}-{mo:02} has no day {da}"));
    }
    if h > 23 || mi > 59 || se > 60 {
        return Err(format!(
            "'{s}': {h:02}:{mi:02}:{se:02} is not a time of day"
        ));
    }
    Ok(days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + se)
}

/// The six numbers of a date written exactly `YYYY-MM-DD HH:MM:SS` (as every Philly row
/// is), read without splitting; `None` sends other spellings to [`loose_datetime`].
fn fixed_datetime(b: &[u8]) -> Option<[i64; 6]> {
    if b.len() != 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b' '
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        b[r].iter().try_fold(0i64, |v, &c| {
            c.is_ascii_digit().then(|| v * 10 + i64::from(c - b'0'))
        })
    };
    Some([
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    ])
}

/// The six numbers of a date with any number of digits per part (`2017-1-9 7:01:55`).
fn loose_datetime(s: &str) -> Option<[i64; 6]> {
    let (date, time) = s.trim().split_once(' ')?;
    // Unsigned parses: a '-1' hour is not an hour.
    let num = |x: &str| {
        if x.is_empty() || !x.bytes().all(|b| b.is_ascii_digit()) {
            None
        } else {
            x.parse::<u32>().ok().map(i64::from)
        }
    };
    // Three numbers each, without allocating.
    let three = |s: &str, sep: char| -> Option<[i64; 3]> {
        let mut it = s.split(sep);
        let v = [num(it.next()?)?, num(it.next()?)?, num(it.next()?)?];
        it.next().is_none().then_some(v)
    };
    let ([y, mo, da], [h, mi, se]) = (three(date, '-')?, three(time.trim(), ':')?);
    Some([y, mo, da, h, mi, se])
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn civil_dates() {
        assert_eq!(parse_datetime("1970-01-01 00:00:00"), Ok(0));
        assert_eq!(parse_datetime("2017-10-09 07:01:55"), Ok(1_507_532_515));
        assert_eq!(parse_datetime("2016-02-29 00:00:00"), Ok(1_456_704_000));
        for bad in [
            "2017-13-09 07:01:55",
            "yesterday",
            "2017-02-30 00:00:00",
            "2017-02-29 00:00:00",
            "2017-04-31 00:00:00",
            "2017-03-01 -1:00:00",
            "2017-03-01 +1:00:00",
            "2017-03-01 24:00:00",
            "900000000-10-01 00:00:00",
            "1969-12-31 23:59:59",
            "2017-03-01 01:00",
            "2017-03-01 01:00:00:00",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
        assert!(
            parse_datetime("2017-02-30 00:00:00")
                .unwrap_err()
                .contains("has no day 30")
        );
    }
}
